/* A client's requests as the daemon's layers use them: plain values decoded from the wire here,
 * the only place that knows its format, so that the engine never handles generated protobuf
 * types. Strings are borrowed from the decoded message and valid as long as it is. */
#ifndef RD_REQUEST_H
#define RD_REQUEST_H

#include <stddef.h>
#include <stdint.h>

struct Ringd__Hello;
struct Ringd__Submit;

/* Hello: a client joins a job. */
typedef struct {
    uint32_t protocol;
    const char *job;
    uint32_t world_size, local_size, min_size; /* min_size 0: 1 */
    uint64_t arena_size;                       /* 0: the daemon's default */
    uint32_t open_timeout_ms;                  /* 0: the daemon's default */
    int64_t local_rank;                        /* the local rank asked for; -1: any */
    int64_t device;             /* the CUDA device asked for; -1: the daemon's pick */
    uint64_t device_arena_size; /* device arena bytes asked for; 0: none */
    int timeline;               /* Completes carry the op's trace */
} rd_hello;

/* Where a tensor is (MemoryKind values match rd_mem_kind in gpu/backend.h). */
typedef struct {
    int present; /* 0: the Submit had none (a library older than descriptors) */
    int kind;
    uint32_t device;
    uint64_t handle, offset;
} rd_tensor_ref;

/* Submit: one rank's part of a collective. op, dtype and redop are the wire's values (rd_coll,
 * rd_dtype and rd_redop match them) and may be out of range: the engine checks them. */
typedef struct {
    uint64_t request_id;
    int op;
    const char *name;
    int dtype;
    uint64_t count;
    uint64_t in_offset, out_offset;
    int redop;
    uint32_t root;
    double prescale, postscale;
    uint64_t generation;
    uint32_t refused; /* the library could not run it (a ringd_result_t), refusal says why */
    const char *refusal;
    rd_tensor_ref input, output;
    const uint64_t *counts; /* reducescatter, allgatherv: every rank's count (borrowed) */
    size_t ncounts;         /* 0: none */
    const char *group;      /* "" in none; else of group_size ops, this the group_index-th */
    uint32_t group_size, group_index;
    int join; /* ringd_join's allgather (RD_JOIN_NAME): the rank contributes zeros until it ends */
    uint64_t shape; /* the tensor's shape as the binding packed it (ringd_next_shape); 0: none */
} rd_submit;

/* The plain values of a decoded Hello or Submit (NULL strings become ""). */
void rd_hello_of(const struct Ringd__Hello *m, rd_hello *h);
void rd_submit_of(const struct Ringd__Submit *m, rd_submit *s);

#endif
