/* The ring data plane of one job at one generation: a thread that runs collectives over the
 * links to the next and the previous node, pipelined in segments, off the loop. */
#ifndef RD_XFER_H
#define RD_XFER_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "ringd.h"
#include "seal.h"
#include "status.h"
#include "timeline.h"

struct event_base;

#define RD_RING_NODES_MAX 256 /* nodes in one ring */
#define RD_RING_CONNS_MAX 16  /* connections each way between neighbours */

/* One tensor of a task: its L local inputs and outputs (pointers into the clients' arenas, checked
 * by the caller) and its elements per rank (of a reducescatter and an allgatherv: the sum of the
 * task's counts). */
typedef struct {
    const uint8_t **in;
    uint8_t **out;
    uint64_t count;
} rd_xfer_member;

typedef struct rd_xfer_task {
    const rd_backend *backend; /* reaches the members' memory: every reduction and copy */
    rd_coll coll;              /* allreduce, broadcast, allgather, reducescatter, allgatherv */
    rd_dtype dtype;
    rd_redop redop; /* SUM, MIN, MAX or PROD */
    rd_reduce_args args;
    uint32_t root;           /* broadcast: the global rank */
    uint64_t segment_size;   /* bytes per frame, at most the ring's; 0: the ring's */
    int conns;               /* connections used, at most the ring's; 0: all of them */
    uint64_t doubling_bytes; /* an allreduce, broadcast, allgather (its gathered result) or
                                reducescatter (its whole vector) of at most this many bytes goes
                                by recursive doubling or halving over the direct links (the
                                order's tuning; 0: never) */
    size_t nmembers;         /* more than one: a fused allreduce */
    const uint64_t *counts;  /* reducescatter, allgatherv: every rank's count, in rank order (the
                                nodes' ranks in ring order, then local rank) */
    rd_xfer_member *members;
    void *ctx;            /* the caller's */
    struct rd_xfer *ring; /* the caller's: which data plane it went to */
    rd_status status;     /* set by the thread */
    char message[320];
    int64_t phase_us[RD_PHASES]; /* set by the thread: when it passed each rd_ring_phase (us) */
    uint64_t seq;
    struct rd_xfer_task *next;
} rd_xfer_task;

typedef struct {
    int nnodes, position;        /* ring size and this node's place */
    const uint32_t *local_sizes; /* ranks on each node, by ring position */
    uint64_t generation;
    uint64_t segment_size;
    int conns;           /* connections each way */
    const int *send_fds; /* conns connections to the next node; taken */
    const int *recv_fds; /* conns connections from the previous node; taken */
    /* Their keys (copied; --encrypt), or NULL: every link in the clear. A ring's links, direct
     * links included, are all sealed or none are: a sealed ring with a link in the clear does
     * not start, and takes no direct link in the clear. */
    const rd_seal *send_seals, *recv_seals;
    int64_t timeout_ms; /* no progress for this long fails the link */
    int64_t poll_us;    /* spin this long before sleeping */
    const char *next_node, *prev_node;
    /* Direct links: an alltoall of a ring of 3 nodes or more goes straight to each node when
     * nnodes - 1 <= pair_links (--pair-links, the same on every node), over connections the
     * loop hands in (rd_xfer_pair); pairs_wanted(arg, x) on the loop says some are wanted. */
    int pair_links;
    const char *const *nodes; /* every node's name, by position (copied) */
    void (*pairs_wanted)(void *arg, struct rd_xfer *x);
} rd_xfer_config;

typedef struct rd_xfer rd_xfer;

/* Called on the loop for each task, in submission order. */
typedef void (*rd_xfer_done_fn)(void *arg, rd_xfer_task *t);

/* Starts the thread. Returns NULL with err set (the fds are closed either way on failure). */
rd_xfer *rd_xfer_new(struct event_base *base, const rd_xfer_config *c, rd_xfer_done_fn done,
                     void *arg, char *err, size_t errlen);

/* Queues t; done(arg, t) follows on the loop. Loop thread only. */
void rd_xfer_submit(rd_xfer *x, rd_xfer_task *t);

/* Closes the links, stops the thread, and ends every task not yet reported with status and why
 * (done is called for each, in order, before this returns). A retired data plane's thread has
 * ended already and is not waited for; any other is joined, which takes at most the segment it
 * works on, as its links are shut first. NULL is a no-op. Loop thread only. */
void rd_xfer_free(rd_xfer *x, rd_status status, const char *why);

/* Shuts the links down: the task running now fails at once instead of ending by itself (use
 * with rd_xfer_retire when the ring broke). Loop thread only. */
void rd_xfer_cut(rd_xfer *x);

/* Lets the task running now end by itself (it completes when its data flowed, or fails when a
 * link breaks or stalls), fails the queued ones with status and why, and stops the thread; then
 * retired(arg, x) is called on the loop after the last done callback, and must free x with
 * rd_xfer_free. Loop thread only. */
void rd_xfer_retire(rd_xfer *x, rd_status status, const char *why,
                    void (*retired)(void *arg, rd_xfer *x), void *arg);

/* 1 once a link has failed: every later task fails at once; the ring must be re-formed. */
int rd_xfer_broken(const rd_xfer *x);

/* Payload bytes sent to the next node and received from the previous one so far. */
void rd_xfer_bytes(const rd_xfer *x, uint64_t *sent, uint64_t *received);

/* Payload bytes moved over the direct links so far, both ways. */
uint64_t rd_xfer_pair_bytes(const rd_xfer *x);

/* The direct link with the node at position q is fd (taken) with its keys, seal (copied): the
 * thread takes it up when it next looks, closing the one it had, and starts that node's part of
 * the alltoall under way again (the other end does the same: it has a new connection too). Loop
 * thread. */
void rd_xfer_pair(rd_xfer *x, int q, int fd, const rd_seal *seal);

/* 1 when the alltoall or recursive doubling under way waits for the direct link with the node
 * at position q: the loop dials those after this node's position; the others dial this node.
 * Loop thread. */
int rd_xfer_pair_wanted(rd_xfer *x, int q);

/* Direct links x holds open; *used_ms when an alltoall last used them (0: never), *busy 1
 * while one does. Loop thread. */
int rd_xfer_pairs_open(rd_xfer *x, int64_t *used_ms, int *busy);

/* Closes x's direct links unless an alltoall is using them; returns how many it closed. The
 * other ends find them closed at their next alltoall and connect again. Loop thread. */
int rd_xfer_pairs_close(rd_xfer *x);

#endif
