/* Device backend interface: reduction kernels, and the hooks the CUDA backend fills. */
#ifndef RD_BACKEND_H
#define RD_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h" /* rd_dtype, rd_redop, rd_coll: their names, sizes and checks */

/* How the raw inputs are scaled and the combined result finished.
 * Floating types: each input is multiplied by prescale before combining; the combined value is
 * divided by divisor (when > 1) and multiplied by postscale. f32, f16 and bf16 compute in float,
 * f64 in double; f16 and bf16 are rounded once, to nearest even, when stored.
 * Integer types: arithmetic wraps modulo 2^bits; prescale and postscale must be 1; the result is
 * divided by divisor (truncating toward zero). */
typedef struct {
    double prescale;
    double postscale;
    uint32_t divisor;
} rd_reduce_args;

#define RD_REDUCE_ARGS_INIT                                                                        \
    {                                                                                              \
        1.0, 1.0, 1                                                                                \
    }

/* dst[i] = finish(combine_k(scale(src[k][i]))) for i < count, k < nsrc (nsrc >= 1), combining in
 * source order. dst may be the same buffer as any src (exactly, not partially overlapping).
 * op must be SUM, MIN, MAX or PROD. Thread-safe; callers split large ranges across threads. */
void rd_reduce(rd_dtype dt, rd_redop op, void *dst, const void *const *src, int nsrc, size_t count,
               const rd_reduce_args *args);

/* IEEE binary16 and bfloat16 conversions; float-to-half rounds to nearest even, NaN stays NaN. */
float rd_f16_to_f32(uint16_t h);
uint16_t rd_f32_to_f16(float f);
float rd_bf16_to_f32(uint16_t b);
uint16_t rd_f32_to_bf16(float f);

/* Where a tensor's memory lives. Values match MemoryKind in ringd.proto and ringd_memory_t in
 * client/include/ringd.h. */
typedef enum {
    RD_MEM_ARENA = 0,  /* the session's host arena: a sealed memfd the client maps too */
    RD_MEM_DEVICE = 1, /* device memory shared as a file descriptor (CUDA VMM): a device arena */
    RD_MEM_COUNT
} rd_mem_kind;

/* Memory of one client session that a backend made reachable (rd_backend.import): the data path
 * reads and writes [base, base + size). Owned by whoever imported it, until release. */
typedef struct {
    rd_mem_kind kind;
    int device;    /* device memory: its device */
    uint8_t *base; /* where the daemon's data path reaches it */
    uint64_t size;
    void *priv; /* the backend's */
} rd_mem;

struct event_base;

/* An asynchronous operation ended (status 0, or non-zero with why), on the loop it was given. */
typedef void (*rd_backend_done_fn)(void *arg, int status, const char *why);

/* Whole collectives run by a library that owns its transport (NCCL): one communicator per job and
 * ring generation. A backend without one leaves rd_backend.transport NULL and collectives cross
 * nodes on the daemon's TCP ring. */
typedef struct rd_transport rd_transport;
#define RD_TRANSPORT_ID_MAX 128
typedef struct {
    /* Process-wide set-up at the daemon's start, before any thread that may read the
     * environment: the transport's sockets on interface ifname (the one peers reach this node
     * on: NCCL picks its bootstrap interface once per process, at its first call), unless the
     * operator chose one (NCCL_SOCKET_IFNAME). Returns 1 when it chose ifname, 0 when it left
     * the choice as it was, -1 with err set. */
    int (*setup)(const char *ifname, char *err, size_t errlen);
    /* 0 when this transport can be used here (its library loads); -1 with err set saying why
     * not. Cheap after the first call. Loop thread, as every call here. */
    int (*probe)(char *err, size_t errlen);
    /* A new communicator id into id (*id_len bytes, at most RD_TRANSPORT_ID_MAX), made by the
     * coordinator of each generation. Returns 0, or -1 with err set (no library among the
     * reasons). */
    int (*make_id)(uint8_t *id, size_t *id_len, char *err, size_t errlen);
    /* Starts a communicator for rank of nranks on device, all of whom were given the same id;
     * it never blocks: poll says when it is ready. A collective that has not finished
     * timeout_ms (plus its bytes at 100 MB/s) after it reached the head of the device's queue
     * (a peer that never came), or an asynchronous error of the library (a peer that died),
     * ends the communicator: it is aborted, and every pending done reports the failure. Returns
     * NULL with err set. */
    rd_transport *(*init)(const uint8_t *id, size_t id_len, int nranks, int rank, int device,
                          int64_t timeout_ms, char *err, size_t errlen);
    /* 0: t is formed and idle; 1: busy (still forming, or still queueing a collective: poll
     * again; the caller bounds the wait and aborts); -1: it failed, err set (abort it). A
     * failure seen while collectives are pending ends the communicator as a timeout does. */
    int (*poll)(rd_transport *t, char *err, size_t errlen);
    /* Queues one collective (RD_COLL_ALLREDUCE, _BROADCAST or _ALLGATHER; op SUM, MIN, MAX or
     * PROD: AVG is SUM and a division by the caller) of count elements per rank on device
     * buffers of t's device, after those queued before; done(arg, 0 or -1, why) follows on
     * base's loop once it ran or failed (base: the same for every run on t; done may run again,
     * never abort). f16 and bf16 sums are NCCL's, rounded at each step: not the bits of ringd's
     * kernels. Returns 0, or -1 with err set (done is then not called). */
    int (*run)(rd_transport *t, struct event_base *base, int coll, rd_dtype dt, rd_redop op,
               const void *in, void *out, size_t count, int root, rd_backend_done_fn done,
               void *arg, char *err, size_t errlen);
    /* Ends the communicator, cutting short what runs on it, and frees t: returns at once, the
     * abort and the drain running off the loop. Every pending done is called later on the loop
     * (0 for those that had finished, else -1) once the device no longer touches their
     * buffers, or, when the abort has not returned within timeout_ms (a wedged device), -1
     * then, saying so: their arguments must live until then. May be called from a done. NULL
     * is a no-op. */
    void (*abort)(rd_transport *t);
    /* abort for an owner that goes away with its runs (the daemon stopping): the same, but no
     * pending done is ever called, and the owner frees their buffers while the device may
     * still touch them (the abort may still run when the process exits). NULL is a no-op. */
    void (*forget)(rd_transport *t);
} rd_transport_ops;

/* A device backend: every reduction and copy of the data path goes through one. The CPU backend
 * is always built; a CUDA backend fills the same table behind the 'cuda' feature. */
typedef struct rd_backend {
    const char *name;
    /* 1: its memory is not the host's (device memory): the data path hands it whole ops, never
     * host scratch, and crosses nodes only through host staging. */
    int device_memory;
    int max_sources; /* the most sources one reduce takes (0: any number) */
    /* rd_reduce's contract, on memory this backend reaches (for a device backend: all of dst and
     * src on one device, nsrc at most 16). Returns 0, or -1 when the device failed (error()
     * says why); the CPU backend never fails. Thread-safe. */
    int (*reduce)(rd_dtype dt, rd_redop op, void *dst, const void *const *src, int nsrc,
                  size_t count, const rd_reduce_args *args);
    /* dst[0..bytes) = src[0..bytes); the ranges may overlap on the CPU, not on a device. Returns
     * 0, or -1 as reduce. Thread-safe. */
    int (*copy)(void *dst, const void *src, size_t bytes);
    /* Why the calling thread's last reduce or copy failed: a static or thread-local string. */
    const char *(*error)(void);
    /* Makes device usable by reduce and copy on the calling thread (a device backend: its
     * context current); call it before them on a thread of its own. NULL for the CPU. Returns
     * 0, or -1 as reduce. */
    int (*bind)(int device);
    /* New memory of kind on device, size bytes at least (rounded up as the backend allocates:
     * m->size says), reachable as *m and exported as *fd for a client to map (the caller's, to
     * pass on and close). NULL in a backend without shareable memory. Returns 0, or -1 with err
     * set. Loop thread. */
    int (*share)(rd_mem_kind kind, int device, uint64_t size, int *fd, rd_mem *m, char *err,
                 size_t errlen);
    /* Makes size bytes of memory of kind, passed as fd (not taken), reachable as *m. Returns 0,
     * or -1 with err set (a kind this backend does not handle among the reasons). */
    int (*import)(rd_mem_kind kind, int device, int fd, uint64_t size, rd_mem *m, char *err,
                  size_t errlen);
    /* Undoes import. A zeroed m is a no-op. */
    void (*release)(rd_mem *m);
    /* reduce and copy that return at once: done(arg, ...) follows on base's loop, after the work
     * (never from within the call). Return 0, or -1 when the work cannot be queued (then done is
     * not called). Loop thread only. */
    int (*reduce_async)(struct event_base *base, rd_dtype dt, rd_redop op, void *dst,
                        const void *const *src, int nsrc, size_t count, const rd_reduce_args *args,
                        rd_backend_done_fn done, void *arg);
    int (*copy_async)(struct event_base *base, void *dst, const void *src, size_t bytes,
                      rd_backend_done_fn done, void *arg);
    const rd_transport_ops *transport; /* NULL: none */
} rd_backend;

/* Calls done(arg, status, why) on base's next loop turn: how a backend whose work ran during the
 * call reports it (why is copied). Returns 0, or -1 when it cannot be queued. Loop thread. */
int rd_backend_report(struct event_base *base, int status, const char *why, rd_backend_done_fn done,
                      void *arg);

/* The CPU backend: static storage, never freed. It imports RD_MEM_ARENA (a shared mapping of
 * the memfd) and runs its asynchronous operations at once, reporting on the next loop turn. */
const rd_backend *rd_backend_cpu(void);

/* The CUDA backend (gpu/cuda.c): device arenas (share RD_MEM_DEVICE), kernels and copies on
 * them, through the driver loaded at run time. Static storage, never freed; NULL in a build
 * without CUDA. A machine without a driver gets the table, and every call fails saying so. */
const rd_backend *rd_backend_cuda(void);

/* First thing in the main of a program that may cross nodes on a backend's transport (ringd):
 * a helper some backend starts this program as (the NCCL transport's id roots) runs here, and
 * its exit status is returned; -1 for an ordinary start. */
int rd_backend_helper_main(int argc, char **argv);

#endif
