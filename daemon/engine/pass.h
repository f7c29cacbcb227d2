/* Passes: how the ops the coordinator ordered cross nodes, host ops as ring tasks on the data
 * plane, device ops as device passes (NCCL, or staged onto the TCP ring), through one crossing
 * queue kept in the coordinator's order. Loop thread only (device passes' steps run on the
 * executor and report to the loop). */
#ifndef RD_PASS_H
#define RD_PASS_H

#include <stddef.h>

#include "internal.h"

struct rd_xfer_task;

/* rd_sched_events.start (arg: the job): runs owns[0..n) (one op, or allreduces that fuse) as
 * one pass, in the segments and over the connections of tuning u. */
void rd_pass_start(void *arg, void **owns, size_t n, const rd_tuning *u);

/* rd_world_events.task_done (arg: the job): a ring task ended; its ops finish, fail, or are
 * doomed to wait for the next ring. */
void rd_pass_done(void *arg, struct rd_xfer_task *t);

/* rd_world_events.awaits_order (arg: the job): what the job's ring must wait for before it may
 * seal for a graceful change. */
rd_world_await rd_pass_awaits(void *arg);

/* The ring ended: what has not crossed yet never will on it (host ops are doomed to wait for
 * the next ring; device passes end, or end when their gather does); the queue opens again. */
void rd_pass_ring_ended(rd_job *j);

/* At the job's end: the queue's entries go with it (its ops are freed with it). */
void rd_pass_drop(rd_job *j);

#endif
