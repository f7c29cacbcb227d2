/* The path of an op from Submit to start: matched by name across the job's local ranks, run
 * here when the job is this node alone, else announced to the other nodes and negotiated.
 * Loop thread only. */
#ifndef RD_OPS_H
#define RD_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "client.h"
#include "negotiate.h"
#include "request.h"
#include "status.h"

typedef struct rd_op rd_op;

/* Checks and matches one Submit of welcomed client c. Every outcome ends in exactly one
 * complete event for the request, now or when the op finishes. */
void rd_ops_submit(rd_client *c, const rd_submit *m);

/* Points o's plan at its ranks' buffers (the divisor of the job's current size; an allgather's
 * input moved to its own slot first). A failure is in o->plan.failed and o->plan.why. */
void rd_ops_resolve(rd_op *o);

/* Every rank has submitted o and it runs on this node alone: inline, or on the executor. */
void rd_ops_run_here(rd_op *o);

/* 1 when o's counts (a reducescatter's, an allgatherv's) are for the job's size now, or it has
 * none; else 0 with o failed (RINGD_E_MEMBERSHIP): ranks left or joined since it was submitted. */
int rd_ops_counts_current(rd_op *o);

/* Every local rank submitted o, of a multi-node job: tells the other nodes (its contribution
 * with it when small, --direct-bytes), or holds it for the next ring. */
void rd_ops_announce(rd_op *o);

/* Announces o (status: its failure here, or RINGD_OK) to the other nodes, which may end it at
 * once; holds it when the ring takes no announcements now. */
void rd_ops_tell(rd_op *o, rd_status status, const char *message, int direct, const uint8_t *data,
                 size_t len);

/* rd_sched_events.negotiated (arg: the job): every node has announced own. Returns 1 with *p
 * its params when the op waits for the coordinator's order (RING_READY), else 0 (it ended). */
int rd_ops_negotiated(void *arg, void *own, const rd_neg_outcome *e, rd_op_params *p);

/* rd_sched_events.failed_elsewhere (arg: the job): the oldest op of that name this node has not
 * announced fails with status and message, and is announced failed. */
void rd_ops_failed_elsewhere(void *arg, const char *name, const rd_op_params *p, uint32_t status,
                             const char *message);

/* rd_sched_events.heard (arg: the job): other nodes announced ops; a node whose ranks have all
 * joined (ringd_join) takes its part in those it has none of. */
void rd_ops_heard(void *arg);

#endif
