/* Chrome trace event files (the JSON array format chrome://tracing and Perfetto open) of ops'
 * paths through a node: one row per tensor with each phase as a span, each rank's submission as
 * an instant, the ring passes on the node's row, and membership changes as global instants.
 * Written as records come, so memory stays bounded over a whole run (libringd's RINGD_TIMELINE,
 * ringctl timeline). */
#ifndef RD_CHROME_TRACE_H
#define RD_CHROME_TRACE_H

#include <stdint.h>
#include <stdio.h>

struct Ringd__OpTrace;

#define RD_CTRACE_ROWS 4096 /* tensor names given a row of their own; the rest share one */

typedef struct {
    FILE *f;
    int any;                       /* an event is written: the next one needs a comma */
    uint64_t last_pass;            /* the last ring pass drawn on the node's row */
    uint32_t rows[RD_CTRACE_ROWS]; /* pids named so far (0: free), open addressing */
    int other_named;               /* the shared row is titled */
    int failed;                    /* a write failed */
} rd_ctrace;

/* Starts a trace on f (borrowed, left open) for node, whose row is titled so. Returns 0, or -1
 * when writing fails. */
int rd_ctrace_open(rd_ctrace *t, FILE *f, const char *node);

/* Writes op's phases (only those it passed, in order), its ranks' submissions and its pass. */
void rd_ctrace_op(rd_ctrace *t, const struct Ringd__OpTrace *op);

/* Writes a membership change at t_us (CLOCK_MONOTONIC microseconds). */
void rd_ctrace_mark(rd_ctrace *t, int64_t t_us, uint64_t generation, const char *what);

/* Ends the JSON array and flushes f. Returns 0, or -1 when any write failed. */
int rd_ctrace_close(rd_ctrace *t);

#endif
