/* Timeline records: each op's path through this node (when each local rank submitted it, the
 * negotiation, the queue, the ring's phases, the fused pass it rode in, its end) and the ring's
 * membership changes, kept in bounded memory while `ringctl timeline` records a job, and handed
 * to clients that asked for their own (RINGD_TIMELINE). Loop thread only. */
#ifndef RD_TIMELINE_H
#define RD_TIMELINE_H

#include <stddef.h>
#include <stdint.h>

#include "trace.h"

typedef struct rd_timeline rd_timeline;

/* A recording that keeps at most max_ops ops (and as many marks), the caller's
 * (rd_timeline_free). NULL when out of memory. */
rd_timeline *rd_timeline_new(size_t max_ops);
void rd_timeline_free(rd_timeline *t);

/* Copies op (its name and submit times too) into t, forgetting the oldest op when full. */
void rd_timeline_op(rd_timeline *t, const rd_trace_op *op);
void rd_timeline_mark(rd_timeline *t, uint64_t generation, const char *what);

/* What t holds, oldest first: rd_timeline_ops(t, i) for i < rd_timeline_nops(t) and the marks
 * alike (valid until t changes; NULL past the end), and how many records were forgotten. */
const rd_trace_op *rd_timeline_ops(const rd_timeline *t, size_t i);
size_t rd_timeline_nops(const rd_timeline *t);
const rd_trace_mark *rd_timeline_marks(const rd_timeline *t, size_t i);
size_t rd_timeline_nmarks(const rd_timeline *t);
uint64_t rd_timeline_dropped(const rd_timeline *t);

#endif
