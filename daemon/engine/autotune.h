/* Autotuning of a job's ring (--autotune): which fusion threshold, fusion cycle, segment size and
 * connections per link give the most bytes per second, found by trying them on the running job.
 * Pure: the coordinator feeds it the bytes it orders with the time, and sends what it says in its
 * orders (Go.tuning), so that every node runs each batch alike. Loop thread only.
 *
 * The search is a coordinate descent over a few values of each knob, one knob at a time, keeping
 * a value only when it beats the best so far by more than RD_TUNER_GAIN: a trial first lets the
 * ops ordered under the last setting drain (a quarter window), then measures one window. A round
 * without a gain, or the second round, settles. Horovod searches the same space by Bayesian
 * optimisation; a short fixed list of values per knob needs fewer trials to settle, and each is
 * logged and shown by ringctl. */
#ifndef RD_AUTOTUNE_H
#define RD_AUTOTUNE_H

#include <stddef.h>
#include <stdint.h>

#include "schedmsg.h"

#define RD_TUNER_GAIN 0.05     /* a setting must beat the best by this fraction to be kept */
#define RD_TUNER_ROUNDS 2      /* rounds over the knobs at most */
#define RD_TUNER_GAP_US 250000 /* a pause between orders counts at most this long */

typedef struct rd_tuner rd_tuner;

/* A tuner starting at start (the settings to measure first), trying segment sizes up to
 * max_segment and connections up to max_conns (what the links have), each setting for window_us
 * of ordering. Returns NULL when out of memory. */
rd_tuner *rd_tuner_new(const rd_tuning *start, uint64_t max_segment, uint32_t max_conns,
                       int64_t window_us);

/* NULL is a no-op. */
void rd_tuner_free(rd_tuner *t);

/* The coordinator ordered bytes of ops at now_us (monotonic). Returns 1 when the setting to use
 * from now on changed (rd_tuner_current), else 0. */
int rd_tuner_feed(rd_tuner *t, uint64_t bytes, int64_t now_us);

/* The setting to order with now; its autotune field says tuning or settled. Owned by t. */
const rd_tuning *rd_tuner_current(const rd_tuner *t);

/* Settings tried so far, and the best one's bytes per second (0 before the first measurement). */
void rd_tuner_stats(const rd_tuner *t, uint32_t *trials, double *best_bps);

/* Describes tuning u as "fusion threshold 16M, cycle 1000 us, segment 512K, 2 connections". */
void rd_tuning_describe(char *buf, size_t len, const rd_tuning *u);

#endif
