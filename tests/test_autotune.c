/* The autotuner (daemon/engine/autotune.h) against made-up jobs whose throughput depends on the
 * setting in a known way. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "autotune.h"

#define MiB (1ull << 20)
#define KiB (1ull << 10)
#define WINDOW_US 200000
#define STEP_US 10000 /* an order every 10 ms */

/* A job's bytes per second under setting u. */
typedef double (*rate_fn)(const rd_tuning *u);

/* Best at fusion 16M, cycle 0, segment 512K, 2 connections: each knob off its best costs. */
static double peaked(const rd_tuning *u)
{
    double r = 1e9;
    r *= u->fusion_threshold == 16 * MiB ? 1.0 : 0.7;
    r *= u->cycle_us == 0 ? 1.0 : 0.8;
    r *= u->segment_size == 512 * KiB ? 1.0 : 0.75;
    r *= u->conns == 2 ? 1.0 : 0.6;
    return r;
}

/* The same whatever the setting, but for a small deterministic wobble. */
static double flat(const rd_tuning *u)
{
    return 1e9 * (1.0 + 0.01 * (double)((u->fusion_threshold / MiB + u->conns) % 3));
}

/* Feeds t orders at the rate the job has under its current setting, every STEP_US, until it
 * settles or max_us pass; spike(u) more bytes go with the first order after each change to u
 * (spike NULL: none). Returns the simulated time taken, or -1 when it never settled. */
static int64_t run_job(rd_tuner *t, rate_fn rate, int64_t max_us, rate_fn spike)
{
    int64_t now = 1000000;
    int changed = 1;
    for (int64_t end = now + max_us; now < end; now += STEP_US) {
        const rd_tuning *u = rd_tuner_current(t);
        cr_assert_leq(u->segment_size, 1 * MiB, "a segment over the links' maximum was tried");
        cr_assert(u->conns >= 1 && u->conns <= 4, "%u connections tried, of 4", u->conns);
        if (u->autotune == RD_AUTOTUNE_SETTLED)
            return now - 1000000;
        double bytes = rate(u) * STEP_US / 1e6 + (changed && spike != NULL ? spike(u) : 0);
        changed = rd_tuner_feed(t, (uint64_t)bytes, now);
    }
    return -1;
}

static const rd_tuning start = {
    .fusion_threshold = 64 * MiB, .segment_size = 1 * MiB, .conns = 2, .cycle_us = 0};

Test(autotune, finds_the_best_setting_of_each_knob_and_settles_on_it)
{
    rd_tuner *t = rd_tuner_new(&start, 1 * MiB, 4, WINDOW_US);
    cr_assert_not_null(t);
    cr_assert_eq(rd_tuner_current(t)->autotune, RD_AUTOTUNE_TUNING);
    int64_t took = run_job(t, peaked, 120 * 1000000LL, NULL);
    cr_assert_geq(took, 0, "never settled");
    const rd_tuning *u = rd_tuner_current(t);
    cr_assert_eq(u->fusion_threshold, 16 * MiB);
    cr_assert_eq(u->cycle_us, 0);
    cr_assert_eq(u->segment_size, 512 * KiB);
    cr_assert_eq(u->conns, 2);
    uint32_t trials;
    double bps;
    rd_tuner_stats(t, &trials, &bps);
    cr_assert_gt(trials, 4, "%u settings tried", trials);
    cr_assert_leq(trials, 2 * 16, "%u settings tried", trials);
    cr_assert(bps > 0.95e9 && bps < 1.05e9, "best %.3g B/s, the job's best is 1e9", bps);
    /* settled: nothing changes any more */
    for (int i = 0; i < 1000; i++)
        cr_assert_eq(rd_tuner_feed(t, 1 << 20, 2000000000LL + i * STEP_US), 0);
    cr_assert_eq(rd_tuner_current(t)->autotune, RD_AUTOTUNE_SETTLED);
    rd_tuner_free(t);
}

Test(autotune, keeps_the_start_when_nothing_beats_it_by_the_margin)
{
    rd_tuner *t = rd_tuner_new(&start, 1 * MiB, 4, WINDOW_US);
    int64_t took = run_job(t, flat, 120 * 1000000LL, NULL);
    cr_assert_geq(took, 0, "never settled");
    const rd_tuning *u = rd_tuner_current(t);
    cr_assert_eq(u->fusion_threshold, start.fusion_threshold);
    cr_assert_eq(u->segment_size, start.segment_size);
    cr_assert_eq(u->conns, start.conns);
    cr_assert_eq(u->cycle_us, start.cycle_us);
    /* one round without a gain settles: every setting of it tried once */
    uint32_t trials;
    double bps;
    rd_tuner_stats(t, &trials, &bps);
    cr_assert_leq(trials, 16, "%u settings tried in what should be one round", trials);
    rd_tuner_free(t);
}

/* Best at fusion 1M: a burst of bytes right after each change (ops of the last setting
 * draining) must not count for the setting tried. */
static double small_fusion(const rd_tuning *u)
{
    return u->fusion_threshold == 1 * MiB ? 2e9 : 1e9;
}

/* 2 GB at once after a change to any setting but fusion 1M: counted, it would make those
 * look ten times as fast over a window. */
static double burst(const rd_tuning *u)
{
    return u->fusion_threshold == 1 * MiB ? 0 : 2e9;
}

Test(autotune, bytes_ordered_while_the_last_setting_drains_do_not_count)
{
    rd_tuner *t = rd_tuner_new(&start, 1 * MiB, 4, WINDOW_US);
    int64_t took = run_job(t, small_fusion, 120 * 1000000LL, burst);
    cr_assert_geq(took, 0, "never settled");
    cr_assert_eq(rd_tuner_current(t)->fusion_threshold, 1 * MiB);
    rd_tuner_free(t);
}

Test(autotune, tries_only_what_the_links_have)
{
    rd_tuning one = start;
    one.conns = 1;
    one.segment_size = 256 * KiB;
    rd_tuner *t = rd_tuner_new(&one, 256 * KiB, 1, WINDOW_US);
    int64_t now = 1000000;
    for (int i = 0; i < 20000 && rd_tuner_current(t)->autotune != RD_AUTOTUNE_SETTLED; i++) {
        const rd_tuning *u = rd_tuner_current(t);
        cr_assert_eq(u->conns, 1);
        cr_assert_eq(u->segment_size, 256 * KiB);
        rd_tuner_feed(t, 1 << 20, now += STEP_US);
    }
    cr_assert_eq(rd_tuner_current(t)->autotune, RD_AUTOTUNE_SETTLED);
    rd_tuner_free(t);
}

Test(autotune, describes_a_setting_in_units)
{
    char buf[160];
    rd_tuning u = {
        .fusion_threshold = 16 * MiB, .segment_size = 512 * KiB, .conns = 1, .cycle_us = 2500};
    rd_tuning_describe(buf, sizeof(buf), &u);
    cr_assert_str_eq(buf, "fusion threshold 16M, cycle 2500 us, segment 512K, 1 connection");
    u.fusion_threshold = 1000;
    u.conns = 2;
    rd_tuning_describe(buf, sizeof(buf), &u);
    cr_assert_str_eq(buf, "fusion threshold 1000, cycle 2500 us, segment 512K, 2 connections");
}
