/* libringd: collectives for training processes, served by the node's ringd daemon.
 *
 * A process opens a session with the local daemon (ringd_open), gets its rank and the job's size,
 * allocates tensors in a shared-memory arena (ringd_alloc) and runs named collectives on them.
 * Buffers outside the arena work too: the library copies them in and out.
 *
 * Threads: a ringd_t and its requests may be used by one thread at a time. Processes: a ringd_t
 * belongs to the process that opened it; in a child forked after that, every call on it that
 * would reach the daemon, its queues or its arena fails with RINGD_E_INVALID (NULL from the
 * allocators) and ringd_close frees only the child's view (docs/c-api.md says which calls).
 * The library never prints; errors come back as a ringd_result_t plus ringd_errmsg().
 *
 * Membership changes. A job may lose ranks and gain them while it runs; every change starts a
 * new generation and renumbers the ranks (ring order of the nodes, then local rank). The answer
 * to every collective tells the library the job as it is now, so when a call returns,
 * ringd_rank(), ringd_size(), ringd_local_rank(), ringd_local_size() and ringd_generation()
 * already give the new values, on success and on failure alike (one exception: a collective
 * already moving data in a one-node job when a process joins it succeeds with the job as it was,
 * and the next call fails as below).
 *  - Loss (a daemon, host, link or client process gone): every collective in flight fails with
 *    RINGD_E_MEMBERSHIP, ringd_errmsg() naming the lost node or rank.
 *  - Join (a node or process joins): collectives every old member had agreed on finish; the
 *    rest fail with RINGD_E_MEMBERSHIP. The newcomer's ringd_open returns in the new generation.
 *  - Graceful leave (ringctl drain, SIGTERM to a daemon): the leaving node's collectives already
 *    submitted finish and its later ones fail with RINGD_E_CLOSED (close the session; open a new
 *    one to join again); on the other nodes nothing fails, collectives go on among the remaining
 *    ranks and return with the new size (a sum then covers the remaining ranks only), except
 *    those of per-rank counts (reducescatter, allgatherv), whose counts are for the old size:
 *    they fail with RINGD_E_MEMBERSHIP.
 * After a loss or a join, a collective submitted before the library heard of the change fails
 * the same way, once; the calls after it run in the new generation. The survivors restore their
 * last committed state and everyone, a newcomer right after ringd_open, takes rank 0's copy
 * under a name of this generation before going on at the new size:
 *
 *     rc = train_step(r, &state);                 // the step's collectives
 *     while (rc == RINGD_E_MEMBERSHIP) {          // again if it changes once more
 *         state = committed;
 *         snprintf(name, sizeof(name), "state.%" PRIu64, ringd_generation(r));
 *         rc = ringd_broadcast(r, name, &state, sizeof(state), RINGD_U8, 0);
 *     }
 *
 * The job keeps running while it has at least min_size ranks (ringd_options_t); below that,
 * collectives wait for ranks to come back and fail with RINGD_E_TIMEOUT if none come in time.
 * A collective some ranks submitted and others never did fails with RINGD_E_STALLED after the
 * daemon's --stall-abort deadline (ringd_errmsg() names the missing ranks), on every rank alike:
 * a rank that submits it after that gets RINGD_E_STALLED too, never a result; `ringctl status`
 * lists such tensors earlier, from --stall-warn on. */
#ifndef RINGD_H
#define RINGD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the library's exported functions: libringd is built with hidden visibility by default
 * (client/meson.build), so a declaration without it is not part of libringd.so. */
#if defined(__GNUC__) || defined(__clang__)
#define RINGD_API __attribute__((visibility("default")))
#else
#define RINGD_API
#endif

/* The version of this header; ringd_version() gives the library's. */
#define RINGD_VERSION_MAJOR 0
#define RINGD_VERSION_MINOR 4

typedef struct ringd ringd_t;                 /* one session with the daemon */
typedef struct ringd_request ringd_request_t; /* one asynchronous collective */

typedef enum {
    RINGD_OK = 0,
    RINGD_E_INVALID = 1,  /* a bad argument: fix the call */
    RINGD_E_CONNECT = 2,  /* the daemon is not reachable: is ringd running, is the socket right? */
    RINGD_E_PROTOCOL = 3, /* the daemon or the library sent something the other did not accept */
    RINGD_E_TIMEOUT = 4,  /* a deadline passed */
    RINGD_E_MISMATCH = 5, /* ranks submitted the same name with different parameters */
    RINGD_E_MEMBERSHIP = 6, /* ranks joined or left: restore state, broadcast it, go on */
    RINGD_E_NOMEM = 7,      /* out of memory, or the arena is full */
    RINGD_E_STALLED = 8,    /* some ranks never submitted the tensor (see ringd_errmsg) */
    RINGD_E_CLOSED = 9,     /* the session is closed or broken */
    RINGD_E_SYSTEM = 10,    /* a system call failed; see ringd_errmsg */
    RINGD_E_REFUSED = 11,   /* the daemon refused: job full or inconsistent sizes */
    RINGD_RESULT_COUNT
} ringd_result_t;

typedef enum {
    RINGD_F32 = 0,
    RINGD_F64 = 1,
    RINGD_F16 = 2,  /* IEEE binary16; reduced in float, rounded to nearest even */
    RINGD_BF16 = 3, /* bfloat16; reduced in float, rounded to nearest even */
    RINGD_I32 = 4,
    RINGD_I64 = 5,
    RINGD_U8 = 6,
} ringd_dtype_t;

typedef enum {
    RINGD_SUM = 0,
    RINGD_AVG = 1, /* sum divided by the job's size (integers: truncated toward zero) */
    RINGD_MIN = 2,
    RINGD_MAX = 3,
    RINGD_PROD = 4,
} ringd_redop_t;

/* Session options. Start from ringd_options_init() or RINGD_OPTIONS_INIT (the same values);
 * fields left 0/NULL take their environment variable (shown) or the default. struct_size, which
 * both set, lets the struct grow without breaking callers: the library reads only the fields the
 * caller's header had, and ringd_open refuses a size no ringd.h ever had (RINGD_E_INVALID). */
typedef struct {
    size_t struct_size;
    const char *socket_path;  /* RINGD_SOCKET, else /run/ringd/ringd.sock */
    const char *job;          /* RINGD_JOB, else "default" */
    int world_size;           /* RINGD_WORLD_SIZE, else local_size */
    int local_size;           /* RINGD_LOCAL_SIZE, else 1 */
    int open_timeout_ms;      /* how long ringd_open waits for the job to assemble; 0: 30000 */
    int op_timeout_ms;        /* how long ringd_wait waits for one collective; 0: forever, the
                                 daemon's own deadlines still apply */
    size_t arena_size;        /* shared-memory arena bytes; 0: the daemon's default */
    int poll_us;              /* RINGD_POLL_US: how long a wait polls shared memory (yielding the
                                 CPU) before it sleeps on the socket; 0: 100, -1: never poll */
    int reserved;             /* unused: fields added after it lie beyond the first version's
                                 struct_size (its tail padding), so old callers never pass them */
    int min_size;             /* RINGD_MIN_SIZE: once the job has started, it keeps running while
                                 it has at least this many ranks (at most world_size); 0: 1 */
    int ask_local_rank;       /* 1: this process asks for local_rank (a launcher's LOCAL_RANK,
                                 so that pinning a GPU by local rank holds); 0: RINGD_LOCAL_RANK
                                 when set, else the lowest free local rank */
    int local_rank;           /* the local rank asked for. ringd_open fails with RINGD_E_REFUSED
                                 when another process of the job on this node asked for it first,
                                 RINGD_E_INVALID when it is not below local_size. A process that did
                                 not ask gives its rank up to one that does. When the job's local
                                 ranks change while it runs (elastic), each process keeps the rank
                                 it asked for while that is below the new local size; the others
                                 are numbered in order in the ranks left (ringd_local_rank). */
    int ask_device;           /* 1: this process asks for CUDA device `device`; 0: RINGD_DEVICE
                                 when set, else the daemon gives the local rank's share of the
                                 devices it serves (--devices): device[local_rank % count] */
    int device;               /* the CUDA device index asked for. ringd_open fails with
                                 RINGD_E_INVALID when the daemon does not serve it (a daemon
                                 without GPUs serves none) */
    size_t device_arena_size; /* RINGD_DEVICE_ARENA: bytes of device memory on the session's
                                GPU that the daemon allocates and both map (ringd_alloc_device);
                                0: none. ringd_open fails with RINGD_E_INVALID when the daemon
                                serves no GPU, when the size is above its --device-arena-max,
                                or when this process cannot see the GPU it was given (matched
                                by UUID); RINGD_E_NOMEM when the GPU has not that much;
                                RINGD_E_SYSTEM when the driver fails to allocate or map it;
                                RINGD_E_PROTOCOL with a ringd too old to give one */
    void *cuda_stream;        /* the CUstream (cudaStream_t) that orders this session's device
                                 tensors; NULL: the legacy default stream. See "Device memory" */
} ringd_options_t;

#define RINGD_OPTIONS_INIT                                                                         \
    {                                                                                              \
        sizeof(ringd_options_t), NULL, NULL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, NULL           \
    }

/* Fills the size bytes at o (the caller's struct: sizeof(ringd_options_t) of the header it was
 * built with) with what RINGD_OPTIONS_INIT gives: every field 0 or NULL, and struct_size = the
 * smaller of size and this library's struct, so that a caller built against an older header,
 * or a binding (Python ctypes) with its own copy of the struct, is never written past its end.
 * NULL, or a size that does not hold struct_size, is a no-op. Any thread may call it. */
RINGD_API void ringd_options_init(ringd_options_t *o, size_t size);

/* Connects to the daemon and joins the job; returns once the job's local clients have all
 * joined, or fails at open_timeout_ms. opts may be NULL (every default); it is read only during
 * the call. On return *r is set even on failure (NULL only when no memory could be had), so
 * ringd_errmsg(*r) can explain; release it with ringd_close. */
RINGD_API ringd_result_t ringd_open(const ringd_options_t *opts, ringd_t **r);

/* Leaves the job, unmaps the arena and frees r and its requests. ringd_close(NULL) is a no-op.
 * In a child forked after r opened, r is the parent's: this only unmaps the child's view of the
 * arena (see "A session belongs to the process that opened it" in docs/c-api.md). */
RINGD_API void ringd_close(ringd_t *r);

/* The session's place in the job as of the last answer from the daemon: they change after a
 * membership change (see above), never in between two calls on r. */
RINGD_API int ringd_rank(const ringd_t *r);
RINGD_API int ringd_size(const ringd_t *r);
RINGD_API int ringd_local_rank(const ringd_t *r);
RINGD_API int ringd_local_size(const ringd_t *r);
RINGD_API uint64_t ringd_generation(const ringd_t *r);

/* The CUDA device the daemon gave this session (see ringd_options_t.device), fixed for its
 * lifetime; -1 when it has none: the daemon serves no GPU, and tensors live in host memory. */
RINGD_API int ringd_device(const ringd_t *r);
/* That device's UUID, "GPU-" (or, a MIG instance, "MIG-") and 36 characters as nvidia-smi
 * prints it: the same device in every
 * container, where ringd_device's index is the daemon's (a pod that sees one GPU calls it 0).
 * "" when the session has none. Owned by r, valid until ringd_close. */
RINGD_API const char *ringd_device_uuid(const ringd_t *r);

/* Detail of the last failure on r (which call, which tensor, which ranks); "" when none.
 * Owned by r, valid until its next call. */
RINGD_API const char *ringd_errmsg(const ringd_t *r);

/* A fixed description of a result and what to do about it. */
RINGD_API const char *ringd_strerror(ringd_result_t rc);

/* The version of the libringd the process runs with, "MAJOR.MINOR.PATCH" (the project's version
 * when it was built): it may be newer than the RINGD_VERSION_MAJOR/MINOR of the header a program
 * was compiled with. A static string owned by the library; any thread may call it, before
 * ringd_open too. */
RINGD_API const char *ringd_version(void);

/* Bytes of one element of dtype; 0 for an unknown dtype. */
RINGD_API size_t ringd_dtype_size(ringd_dtype_t dtype);

/* Allocates bytes (64-byte aligned) in the shared arena: collectives on it copy nothing through
 * the library. Returns NULL when the arena is full, or in a child forked after r opened
 * (ringd_errmsg says so). Owned by r until ringd_free or ringd_close. */
RINGD_API void *ringd_alloc(ringd_t *r, size_t bytes);
RINGD_API void ringd_free(ringd_t *r, void *p);

/* Device memory (CUDA). A session opened with device_arena_size > 0 on a ringd that serves GPUs
 * gets a device arena on its GPU (ringd_device): device memory the daemon allocates with CUDA's
 * virtual memory API and passes to the library as a file descriptor over the socket, so it
 * crosses containers without a shared IPC or PID namespace. ringd_alloc_device hands out
 * pieces of it (64-byte aligned; NULL when full or when the session has none); ringd_free
 * releases them. The library loads the CUDA driver itself (libcuda.so.1): link no CUDA.
 *
 * Every collective takes device pointers as it takes host pointers, and tells them apart
 * itself:
 * - both buffers in the device arena: the daemon reduces the node's ranks on the GPU with CUDA
 *   kernels (every dtype and op, f16/bf16 accumulated in f32, rounding as the CPU kernels), no
 *   copy through the library or the host; a job that spans nodes then crosses them from local
 *   rank 0's output on NCCL (one rank per node; f16/bf16 sums rounded at each NCCL step) when
 *   the ring agreed on it (ringd --gpu-transport), else through host memory in the daemon and
 *   the TCP ring (reducescatter, allgatherv and alltoall always cross through host memory
 *   and the TCP ring; MPI's in-place reducescatter whose block would overlap where it is read
 *   from is refused in a device arena: RINGD_E_INVALID). Every node of the job must pass a
 *   tensor the same way, alltoall and allgatherv that move data aside (RINGD_E_MISMATCH naming
 *   the nodes otherwise: give every rank a device arena, or none);
 * - other device memory (cudaMalloc, PyTorch's caching allocator): copied device to device
 *   into the device arena and the result back, one copy each way, then as above;
 * - a session without a device arena: the device buffers are staged through the host arena
 *   (device to host and back), and the collective runs as on host memory.
 * The local ranks of one node must take the same path for a collective: all in device arenas
 * (on any of the node's GPUs: the result is reduced on local rank 0's, the others' inputs
 * copied there, peer to peer where the GPUs allow it, through the host by the driver where
 * not), or all through host memory (RINGD_E_MISMATCH otherwise: open every rank's session with
 * a device arena, or none), and at most 16 of them in device arenas. A rank that moves no bytes
 * (its buffers empty, passed as host memory) matches the others whatever they pass.
 *
 * Stream order in this version: before it submits, the library waits on the host for the work
 * queued so far on the session's stream (cuda_stream; the legacy default stream when NULL,
 * which PyTorch's default current stream is), so the daemon reads finished inputs. A request
 * that completed (ringd_wait, or ringd_test saying done) has its result in device memory,
 * visible to any work queued after that on any stream. Before completion, the buffers must
 * stay untouched, as for host memory (the device path reduces into local rank 0's output and
 * copies from there, so a rank that writes it early spoils every rank's result, as the memory
 * policy below says). Nothing is enqueued on the caller's stream, and the library leaves the
 * calling thread's current CUDA context as it found it. */
RINGD_API void *ringd_alloc_device(ringd_t *r, size_t bytes);

/* Where a tensor's memory is, as the daemon reaches it. Values match MemoryKind in ringd.proto. */
typedef enum {
    RINGD_MEM_ARENA = 0,  /* the session's shared arena (ringd_alloc): no copy */
    RINGD_MEM_DEVICE = 1, /* the session's device arena (ringd_alloc_device): no copy */
} ringd_memory_t;

/* A tensor descriptor: what every Submit tells the daemon of its input and output. */
typedef struct {
    ringd_memory_t kind;
    int device;      /* RINGD_MEM_DEVICE: the device; else 0 */
    uint64_t handle; /* RINGD_MEM_DEVICE: 1, the device arena; else 0 */
    uint64_t offset; /* into the arena, or into the device arena */
} ringd_tensor_t;

/* Describes the nbytes at ptr into *t, for bindings that want to know whether a buffer goes to
 * the daemon without a copy. Returns RINGD_OK when they lie in r's arena or device arena;
 * RINGD_E_INVALID when they do not (memory elsewhere, which the collectives copy), or straddle
 * an edge, with ringd_errmsg saying which. Any thread that owns r. */
RINGD_API ringd_result_t ringd_tensor_locate(ringd_t *r, const void *ptr, size_t nbytes,
                                             ringd_tensor_t *t);

/* Collectives. Every call may be made by the thread that owns r; it returns RINGD_OK or an error
 * with its detail in ringd_errmsg(r). name identifies the tensor across ranks (NULL: an automatic
 * name from a per-session counter, which matches only when every rank calls in the same order).
 * Buffers may be in the arena or anywhere else, and may work in place as each call says; other
 * overlaps of sendbuf and recvbuf are refused (RINGD_E_INVALID). The _async forms return a request
 * that must be finished with ringd_wait, or ringd_test until it reports done; the buffers must stay
 * untouched until then.
 *
 * Memory policy, the same on every path: while a collective runs, the daemon reads sendbuf
 * (arena buffers in place, others from their staged copy) as often and as late as its algorithm
 * needs, and writes recvbuf. A rank that writes either of them before its call returns or its
 * request completes makes the result undefined for every rank of that collective, as in MPI and
 * NCCL; the daemon itself never fails or leaks data of another job because of it.
 *
 * A collective one rank cannot run (a bad argument, a buffer outside the arena, no room to stage
 * it, --max-pending reached, a generation the job has left) fails on that rank at once and on every
 * other rank of the op as soon as they submit it or, if they already have, within milliseconds:
 * all of them get that rank's result code, and ringd_errmsg() names the rank, its node and why. */
/* Reduces every rank's count elements of sendbuf with op into every rank's recvbuf. In place:
 * recvbuf == sendbuf. */
RINGD_API ringd_result_t ringd_allreduce(ringd_t *r, const char *name, const void *sendbuf,
                                         void *recvbuf, size_t count, ringd_dtype_t dtype,
                                         ringd_redop_t op);
RINGD_API ringd_result_t ringd_allreduce_async(ringd_t *r, const char *name, const void *sendbuf,
                                               void *recvbuf, size_t count, ringd_dtype_t dtype,
                                               ringd_redop_t op, ringd_request_t **req);

/* Allreduce with scaling: each input is multiplied by prescale before the reduction, the result
 * by postscale after it (floating dtypes only). */
RINGD_API ringd_result_t ringd_allreduce_scaled(ringd_t *r, const char *name, const void *sendbuf,
                                                void *recvbuf, size_t count, ringd_dtype_t dtype,
                                                ringd_redop_t op, double prescale,
                                                double postscale);
RINGD_API ringd_result_t ringd_allreduce_scaled_async(ringd_t *r, const char *name,
                                                      const void *sendbuf, void *recvbuf,
                                                      size_t count, ringd_dtype_t dtype,
                                                      ringd_redop_t op, double prescale,
                                                      double postscale, ringd_request_t **req);

/* Copies root's buf to every rank's buf (one buffer: always in place). */
RINGD_API ringd_result_t ringd_broadcast(ringd_t *r, const char *name, void *buf, size_t count,
                                         ringd_dtype_t dtype, int root);
RINGD_API ringd_result_t ringd_broadcast_async(ringd_t *r, const char *name, void *buf,
                                               size_t count, ringd_dtype_t dtype, int root,
                                               ringd_request_t **req);

/* Every rank contributes count elements; recvbuf receives size * count, in rank order. recvbuf
 * holds ringd_size() * count as of the call; after a rank left, ringd_size() once the call
 * returns says how many of them hold the result. Two in-place forms, in the arena or not:
 * sendbuf == recvbuf (the contribution is the first count elements of recvbuf), and MPI's
 * sendbuf == recvbuf + ringd_rank() * count (it already sits in this rank's slot). */
RINGD_API ringd_result_t ringd_allgather(ringd_t *r, const char *name, const void *sendbuf,
                                         void *recvbuf, size_t count, ringd_dtype_t dtype);
RINGD_API ringd_result_t ringd_allgather_async(ringd_t *r, const char *name, const void *sendbuf,
                                               void *recvbuf, size_t count, ringd_dtype_t dtype,
                                               ringd_request_t **req);

/* Reduces every rank's ringd_size() * recvcount elements of sendbuf with op; rank i receives
 * block i of the result, elements [i * recvcount, (i + 1) * recvcount), in recvbuf (recvcount
 * elements; MPI_Reduce_scatter_block, ncclReduceScatter). RINGD_AVG divides by the job's size.
 * In place: recvbuf == sendbuf (MPI's form: the block lands at the start of the buffer) or
 * recvbuf == sendbuf + ringd_rank() * recvcount (NCCL's: it lands where it lies). recvcount 0
 * is legal: the op completes and moves nothing. */
RINGD_API ringd_result_t ringd_reducescatter(ringd_t *r, const char *name, const void *sendbuf,
                                             void *recvbuf, size_t recvcount, ringd_dtype_t dtype,
                                             ringd_redop_t op);
RINGD_API ringd_result_t ringd_reducescatter_async(ringd_t *r, const char *name,
                                                   const void *sendbuf, void *recvbuf,
                                                   size_t recvcount, ringd_dtype_t dtype,
                                                   ringd_redop_t op, ringd_request_t **req);

/* Reducescatter of per-rank counts (MPI_Reduce_scatter), with the scaling of
 * ringd_allreduce_scaled: recvcounts[0..ringd_size()) is the same on every rank (the daemon
 * checks it: RINGD_E_MISMATCH on every rank otherwise), sendbuf holds their sum, and rank i
 * receives recvcounts[i] elements, from element recvcounts[0] + ... + recvcounts[i-1] of the
 * result. Any entry may be 0. In place as ringd_reducescatter, with that offset. */
RINGD_API ringd_result_t ringd_reducescatterv(ringd_t *r, const char *name, const void *sendbuf,
                                              void *recvbuf, const size_t *recvcounts,
                                              ringd_dtype_t dtype, ringd_redop_t op,
                                              double prescale, double postscale);
RINGD_API ringd_result_t ringd_reducescatterv_async(ringd_t *r, const char *name,
                                                    const void *sendbuf, void *recvbuf,
                                                    const size_t *recvcounts, ringd_dtype_t dtype,
                                                    ringd_redop_t op, double prescale,
                                                    double postscale, ringd_request_t **req);

/* Allgather of per-rank counts (MPI_Allgatherv, the displacements the prefix sums): rank i
 * contributes recvcounts[i] elements (sendcount, which must equal this rank's entry); recvbuf
 * receives every rank's in rank order, their sum. recvcounts is the same on every rank (checked
 * as above); any entry may be 0. In place: sendbuf == recvbuf + recvcounts[0] + ... +
 * recvcounts[ringd_rank() - 1] (MPI's form). */
RINGD_API ringd_result_t ringd_allgatherv(ringd_t *r, const char *name, const void *sendbuf,
                                          size_t sendcount, void *recvbuf, const size_t *recvcounts,
                                          ringd_dtype_t dtype);
RINGD_API ringd_result_t ringd_allgatherv_async(ringd_t *r, const char *name, const void *sendbuf,
                                                size_t sendcount, void *recvbuf,
                                                const size_t *recvcounts, ringd_dtype_t dtype,
                                                ringd_request_t **req);

/* Where a collective whose receive counts the ranks learn from each other puts its result:
 * called by the library, on the thread in ringd_wait, ringd_test or the synchronous call, once
 * every rank's count is known (counts[0..size), total their sum, in elements of the op's dtype).
 * Returns a buffer of total elements (host or device memory, in the arena or not: as any
 * recvbuf), or NULL to fail the op on every rank with RINGD_E_NOMEM (NULL is fine when total is
 * 0). It must not call libringd. */
typedef void *(*ringd_recv_fn)(void *ctx, const size_t *counts, int size, size_t total);

/* Allgatherv of counts each rank knows only of itself (Horovod's allgather of differing first
 * dimensions): every rank contributes sendcount elements, and once the ranks have learnt each
 * other's counts, recv(ctx, ...) gives the buffer that receives every rank's in rank order.
 * layout is any value the ranks must agree on (a hash of the trailing dimensions, say): ranks
 * that pass different ones fail with RINGD_E_MISMATCH, every one of them, naming the ranks.
 * recvcounts, when not NULL, receives every rank's count (ringd_size() entries as of the call).
 * One call, two steps in the daemon: an allgather of the counts, then the allgatherv; the
 * second goes when the first completes, from whichever libringd call of this session handles
 * it (ringd_wait or ringd_test of any request), so ranks may wait for such requests in any
 * order. */
RINGD_API ringd_result_t ringd_allgatherv_into(ringd_t *r, const char *name, const void *sendbuf,
                                               size_t sendcount, uint64_t layout,
                                               ringd_dtype_t dtype, ringd_recv_fn recv, void *ctx,
                                               size_t *recvcounts);
RINGD_API ringd_result_t ringd_allgatherv_into_async(ringd_t *r, const char *name,
                                                     const void *sendbuf, size_t sendcount,
                                                     uint64_t layout, ringd_dtype_t dtype,
                                                     ringd_recv_fn recv, void *ctx,
                                                     size_t *recvcounts, ringd_request_t **req);

/* Alltoall: every rank sends count elements to every rank, block j of sendbuf (elements
 * [j * count, (j + 1) * count)) to rank j, and receives block i of recvbuf from rank i
 * (MPI_Alltoall). sendbuf and recvbuf hold ringd_size() * count elements each, apart (no in-place
 * form). */
RINGD_API ringd_result_t ringd_alltoall(ringd_t *r, const char *name, const void *sendbuf,
                                        void *recvbuf, size_t count, ringd_dtype_t dtype);
RINGD_API ringd_result_t ringd_alltoall_async(ringd_t *r, const char *name, const void *sendbuf,
                                              void *recvbuf, size_t count, ringd_dtype_t dtype,
                                              ringd_request_t **req);

/* Alltoall of per-rank counts (MPI_Alltoallv, the displacements the prefix sums): this rank
 * sends sendcounts[j] elements to rank j, in rank order in sendbuf, and receives recvcounts[i]
 * from rank i, in rank order in recvbuf. recvcounts[i] must be what rank i sends this rank:
 * RINGD_E_MISMATCH on every rank otherwise, naming the ranks. Two steps in the daemon under
 * name: an allgather of every rank's sendcounts, then the alltoall of the whole matrix (the
 * second started by whichever call of the session handles the first, as ringd_allgatherv_into
 * says). The ranks need not know their receive counts: see ringd_alltoallv_into. */
RINGD_API ringd_result_t ringd_alltoallv(ringd_t *r, const char *name, const void *sendbuf,
                                         const size_t *sendcounts, void *recvbuf,
                                         const size_t *recvcounts, ringd_dtype_t dtype);
RINGD_API ringd_result_t ringd_alltoallv_async(ringd_t *r, const char *name, const void *sendbuf,
                                               const size_t *sendcounts, void *recvbuf,
                                               const size_t *recvcounts, ringd_dtype_t dtype,
                                               ringd_request_t **req);

/* Alltoallv whose receive counts the ranks learn (Horovod's alltoall with splits): as
 * ringd_alltoallv, but recv(ctx, counts, size, total) gives the receive buffer once every rank's
 * sendcounts are known (counts: what this rank receives from each rank), and recvcounts, when not
 * NULL, receives those counts. layout as in ringd_allgatherv_into. */
RINGD_API ringd_result_t ringd_alltoallv_into(ringd_t *r, const char *name, const void *sendbuf,
                                              const size_t *sendcounts, uint64_t layout,
                                              ringd_dtype_t dtype, ringd_recv_fn recv, void *ctx,
                                              size_t *recvcounts);
RINGD_API ringd_result_t ringd_alltoallv_into_async(ringd_t *r, const char *name,
                                                    const void *sendbuf, const size_t *sendcounts,
                                                    uint64_t layout, ringd_dtype_t dtype,
                                                    ringd_recv_fn recv, void *ctx,
                                                    size_t *recvcounts, ringd_request_t **req);

/* This rank has run out of data (Horovod's hvd.join). Returns once every rank of the job (or of
 * the process set r is) has called ringd_join; until then the other ranks' allreduces complete
 * with this rank contributing zeros, for every reduce op (AVERAGE still divides by the whole
 * size), decided by the daemons. While any rank has joined, only allreduces of host memory
 * outside groups run: any other collective that would need a joined rank fails on every rank
 * with RINGD_E_INVALID, naming it. *last_rank (when not NULL) receives the rank that joined
 * last in the order of collectives: the one that had submitted the most collectives since its
 * previous join or generation change (of ranks tied, the highest). Waits without
 * op_timeout_ms (the daemon's --stall-abort ends a join the other ranks stop working towards);
 * not inside a group. Asynchronous collectives submitted before it still complete, except those
 * of two steps still learning their counts (ringd_allgatherv_into, ringd_alltoallv): their data
 * steps would need this rank, so they fail on every rank with RINGD_E_INVALID. */
RINGD_API ringd_result_t ringd_join(ringd_t *r, int *last_rank);

/* Returns once every rank has entered the barrier of the same name. */
RINGD_API ringd_result_t ringd_barrier(ringd_t *r, const char *name);
RINGD_API ringd_result_t ringd_barrier_async(ringd_t *r, const char *name, ringd_request_t **req);

/* Groups: the collectives this session submits between ringd_group_start and ringd_group_end
 * (their _async forms; a synchronous call in a group fails with RINGD_E_INVALID) are one unit to
 * the daemon: held until every rank has submitted every one of them, negotiated together, run
 * together (small allreduces fused), and failed together — a failure of one (a mismatch, a
 * refusal, a stall) fails every one, on every rank, with its reason. Every rank groups the same
 * collectives in the same order (the group is named after its first; its size and order are
 * compared like the collectives' parameters). At most the daemon's --max-pending (4096 by
 * default) in a group; no barrier. ringd_group_end sends them; wait for each request after it,
 * as usual (before, ringd_wait and ringd_test refuse it: RINGD_E_INVALID). Groups do not nest.
 * Collectives of two steps (ringd_allgatherv_into, ringd_alltoallv and _into) take their first
 * steps in the group; once all have ended, their data steps go as a group of their own, from
 * whichever call of the session handles the last: all of them run or all fail alike (a layout
 * that differs between ranks, found after the first steps, fails those of two steps, not the
 * group's others, which have run). */
RINGD_API ringd_result_t ringd_group_start(ringd_t *r);
RINGD_API ringd_result_t ringd_group_end(ringd_t *r);

/* Process sets: collectives among a subset of the job's ranks. Every rank of the job calls
 * ringd_process_set_create with the same ranks (1 or more of the job's, in increasing order;
 * ranks that pass another set fail with RINGD_E_MISMATCH, every one, naming them) in the same
 * order of creations. A member gets *ps, a session of the set: every collective takes it as it
 * takes r (ringd_rank(*ps) is its rank in the set, ringd_size(*ps) the set's size), under names
 * of the set's own, and ranks outside the set never wait for them; a rank outside gets *ps NULL.
 * Sets may overlap and be used at the same time. Opening it waits for every member, as
 * ringd_open does. Once the job changes generation (a membership change this session has
 * heard of), the set's collectives fail with RINGD_E_MEMBERSHIP: close it and create it again
 * after the reset. Close a set with ringd_close, before r. */
RINGD_API ringd_result_t ringd_process_set_create(ringd_t *r, const int *ranks, int n,
                                                  ringd_t **ps);

/* A process set opened by its members alone, under a name every member passes (torch's
 * new_group, which only the group's ranks build: they name it by the group): every member calls
 * it with the same name and ranks (increasing), and gets *ps as from ringd_process_set_create;
 * a rank outside the set gets RINGD_E_INVALID. Members that pass the same number of ranks but
 * other ones fail with RINGD_E_MISMATCH, every one; sets of different sizes under one name are
 * refused by the daemon (RINGD_E_REFUSED) or wait out open_timeout_ms, as does a member whose
 * peers never call. name: 1 to 252 printable ASCII bytes, unique among the sets of the job's
 * generation. */
RINGD_API ringd_result_t ringd_process_set_open(ringd_t *r, const char *name, const int *ranks,
                                                int n, ringd_t **ps);

/* The shape of the tensor of the next collective this session submits, packed by the binding
 * (Horovod's check that ranks reduce tensors of one shape, not only of one element count):
 * ranks whose submissions of one name carry different shapes fail with RINGD_E_MISMATCH naming
 * both, on every rank; every rank gives the same shape, or none. Packed: up to 3 dimensions,
 * each below 2^20, as (ndims << 60) | d0 << 20 (ndims - 1) | ...; others (0-d tensors included)
 * as a digest with the top bit set. 0, the default: no shape. The next submission takes it,
 * whether it succeeds or not (an internal one too: a two-step collective's first step, a
 * process set's allgather): set it just before the collective it is for. */
RINGD_API void ringd_next_shape(ringd_t *r, uint64_t shape);

/* Starts writing the timeline of this session's collectives to path, a Chrome trace as
 * RINGD_TIMELINE writes (Horovod's hvd.start_timeline): rank 0 writes path, or every rank its
 * own when path has "%r" (replaced by the rank); the other ranks write nothing. Collectives
 * submitted before it may or may not be in the file; those after it are. RINGD_E_INVALID when
 * one is being written already (RINGD_TIMELINE's too) or inside a group, RINGD_E_SYSTEM when the
 * file cannot be made, RINGD_E_PROTOCOL from a daemon older than this library. A process set's
 * session has its own timeline (RINGD_TIMELINE applies to the job's session only). */
RINGD_API ringd_result_t ringd_timeline_start(ringd_t *r, const char *path);

/* Stops the timeline being written (ringd_timeline_start's or RINGD_TIMELINE's) and closes its
 * file (RINGD_OK when none is). Completes that arrive later carry no trace. RINGD_E_SYSTEM when
 * the file could not be written whole, RINGD_E_INVALID inside a group. */
RINGD_API ringd_result_t ringd_timeline_stop(ringd_t *r);

/* This rank cannot run the collective named name (a binding found its arguments wrong, say):
 * the daemon fails it on every rank with rc and why (naming this rank), now or as each submits
 * it, so that no rank waits for it. NULL name: the rank's next unnamed collective. Returns
 * RINGD_OK once told (RINGD_E_INVALID for rc RINGD_OK or unknown, or a bad name). */
RINGD_API ringd_result_t ringd_refuse(ringd_t *r, const char *name, ringd_result_t rc,
                                      const char *why);

/* Waits for req to finish and releases it. Returns its result; on failure ringd_errmsg(r) says
 * why. On RINGD_E_TIMEOUT (op_timeout_ms) req stays pending: wait or test it again, or close the
 * session. A synchronous call that times out gives up its request instead: buffers outside the
 * arena are never touched again, but the daemon may still write an arena buffer's result until
 * the op ends on every rank. */
RINGD_API ringd_result_t ringd_wait(ringd_request_t *req);

/* Sets *done to 1 when req has finished, then releases it and returns its result; otherwise sets
 * *done to 0 and returns RINGD_OK. Never blocks. */
RINGD_API ringd_result_t ringd_test(ringd_request_t *req, int *done);

#ifdef __cplusplus
}
#endif

#endif
