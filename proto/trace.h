/* The timeline's records as plain values (what the engine fills and a recording keeps), and the
 * OpTrace and TimelineReply messages they become: built here, the only place that knows that
 * format. */
#ifndef RD_TRACE_H
#define RD_TRACE_H

#include <stddef.h>
#include <stdint.h>

/* The ring phases of an op on the TCP ring, as rd_xfer_task times them. */
typedef enum {
    RD_PHASE_BEGIN,     /* the data plane took it */
    RD_PHASE_STAGED,    /* the local ranks' inputs are reduced (or copied) into the pass */
    RD_PHASE_SCATTERED, /* reduce-scatter done (allreduce) */
    RD_PHASE_MOVED,     /* the ring's steps done */
    RD_PHASE_END,       /* results written to every local rank */
    RD_PHASES
} rd_ring_phase;

/* One op at its end. Times are CLOCK_MONOTONIC microseconds (the clients' clock too: one
 * kernel); 0 where the op did not pass that point. */
typedef struct {
    uint64_t seq;     /* the op's number on this node */
    const char *name; /* borrowed while recording; owned once recorded */
    uint32_t kind;    /* rd_coll */
    uint32_t status;  /* ringd_result_t */
    uint64_t bytes;   /* per rank */
    uint64_t generation;
    uint32_t first_rank;        /* global rank of local rank 0 */
    uint32_t nranks;            /* local ranks */
    int64_t *submit_us;         /* nranks: when each submitted (0: never); borrowed, then owned */
    int64_t ready_us;           /* every local rank had submitted */
    int64_t negotiated_us;      /* the nodes agreed on it (multi-node) */
    int64_t started_us;         /* its data began to move (ordered, or run here) */
    int64_t ring_us[RD_PHASES]; /* on the TCP ring */
    int64_t end_us;
    uint64_t pass;     /* the ring pass it rode in (0: none) */
    uint32_t pass_ops; /* ops fused into that pass */
    int direct;        /* its result came with the negotiation (small) */
} rd_trace_op;

/* A membership change: the ring went down, or came up at a generation. */
typedef struct {
    int64_t t_us;
    uint64_t generation;
    char what[256];
} rd_trace_mark;

struct Ringd__OpTrace;
struct Ringd__TimelineReply;

/* Fills m (a Ringd__OpTrace, initialised here) from t; m borrows t's name and arrays, so is valid
 * while t is. */
void rd_trace_msg(struct Ringd__OpTrace *m, const rd_trace_op *t);

/* A TimelineReply of ops[0..nops) and marks[0..nmarks) (pointer arrays, borrowed: the reply is
 * valid while they are), to send: the caller's, rd_trace_reply_free. NULL when out of memory. */
struct Ringd__TimelineReply *rd_trace_reply_new(const rd_trace_op *const *ops, size_t nops,
                                                const rd_trace_mark *const *marks, size_t nmarks);
void rd_trace_reply_free(struct Ringd__TimelineReply *r);

#endif
