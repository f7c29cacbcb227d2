/* The checks of what a client sends, on their own: a Hello, a Submit, and a Submit against the
 * first submission of its op. Pure functions (no I/O, no state): unit-tested in
 * tests/test_check.c. Any thread. */
#ifndef RD_CHECK_H
#define RD_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "backend.h"
#include "negotiate.h"
#include "request.h"
#include "status.h"

#define RD_LOCAL_SIZE_MAX 1024
#define RD_ARENA_MIN (RD_CTRL_BYTES + 4096u)
#define RD_GROUP_MAX 65536u /* ops in one group */

/* What a Hello is checked against: the daemon as it is now. */
typedef struct {
    const char *node;    /* this node's name, for messages */
    int draining;        /* the daemon takes no new clients */
    int multinode;       /* it runs with --redis: jobs may span nodes */
    uint64_t arena_size; /* the arena of a client that asks for none (--arena-size) */
    uint64_t arena_max;  /* --arena-max */
} rd_check_daemon;

/* Checks a Hello on its own (protocol, names, sizes, the arena asked for); what depends on the
 * job it names (sizes it runs with, its user, free slots) is the job's to check. Returns
 * RINGD_OK with *min_size and *arena_size set (the defaults applied), or why not with err set. */
rd_status rd_check_hello(const rd_hello *h, const rd_check_daemon *d, uint32_t *min_size,
                         uint64_t *arena_size, char *err, size_t errlen);

/* The session a Submit is checked against. */
typedef struct {
    const char *node;             /* this node's name, for messages */
    uint32_t size;                /* ranks of the job now */
    const rd_arena *arena;        /* the session's host arena (its data after RD_CTRL_BYTES) */
    const rd_arena *device_arena; /* its device arena, or NULL */
    int device;                   /* the CUDA device it was given; -1: none */
    uint32_t rank;                /* its rank in the job now */
    uint64_t generation;          /* the job's now */
} rd_check_session;

/* Checks a Submit with a valid name on its own: op, dtype, reduce op and scales, the root, the
 * tensor descriptors, every rank's counts, and that its buffers lie in the arena's data area,
 * aligned, in place or apart. Returns RINGD_OK, or RINGD_E_INVALID with err set
 * (RINGD_E_MEMBERSHIP for counts while the job renumbers its ranks, or for counts and blocks
 * of a generation that is not the job's: the client placed them by ranks that have changed). */
rd_status rd_check_submit(const rd_check_session *s, const rd_submit *m, char *err, size_t errlen);

/* 1 when the Submit's buffers are in the session's device arena, 0 in its host arena. */
int rd_check_on_device(const rd_submit *m);

/* The parameters of a checked Submit that ranks must agree on, in a job of size ranks (those an
 * op does not use are normalised: a barrier has no dtype or count, only an allreduce and a
 * reducescatter a reduce op and scales; a reducescatter's count is its whole input, an
 * allgatherv's its whole output, with the digest of their counts). */
rd_op_params rd_check_params(const rd_submit *m, uint32_t size);

/* Bytes of a Submit's input and output, of rank `rank` in a job of size ranks. */
void rd_check_lengths(const rd_submit *m, uint32_t size, uint32_t rank, uint64_t *in_len,
                      uint64_t *out_len);

/* Elements before rank's block of a reducescatter's input or an allgatherv's output (counts
 * checked: rank within them). */
uint64_t rd_check_own_offset(const rd_submit *m, uint32_t rank);

/* The first submission of an op, that the others are checked against. */
typedef struct {
    const char *name;
    const rd_op_params *p;
    uint32_t rank;      /* its local rank */
    int multinode;      /* messages name global ranks and the node */
    uint32_t base_rank; /* global rank of local rank 0 */
    const char *node;
    uint32_t size; /* ranks of the job now */
} rd_check_first;

/* Compares local rank `rank`'s Submit m with the op's first submission. Returns 1 when they
 * agree, else 0 with msg naming both ranks and the fields that differ. */
int rd_check_match(const rd_check_first *f, const rd_submit *m, uint32_t rank, char *msg,
                   size_t len);

/* Checks that local rank `rank`'s memory (backends[rank], that imported it) moves with the
 * other local ranks' (backends[k], NULL for those yet to submit) of an op of nparts ranks: one
 * backend for all, and no more ranks than it reduces at once. Returns 1, or 0 with msg naming
 * the ranks and what to do. */
int rd_check_memory(const char *name, const char *node, const rd_backend *const *backends,
                    uint32_t nparts, uint32_t rank, char *msg, size_t len);

#endif
