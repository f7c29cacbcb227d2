/* Autotuning of a job's ring: a coordinate descent over fusion threshold, fusion cycle, segment
 * size and connections per link, scored by the bytes the coordinator orders per second. */
#include "autotune.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { K_FUSION, K_CYCLE, K_SEGMENT, K_CONNS, K_N };

#define VALUES_MAX 16

struct rd_tuner {
    uint64_t vals[K_N][VALUES_MAX]; /* each knob's values, ascending */
    size_t nvals[K_N];
    rd_tuning best, cur;
    double best_bps;
    int knob;     /* the knob tried now */
    size_t idx;   /* its value tried now */
    int round;    /* rounds over the knobs done */
    int gained;   /* a setting beat the best this round */
    int measured; /* the start setting has been measured */
    int64_t window_us;
    int warm;          /* 1: letting the last setting's ops drain; 0: measuring */
    int64_t last_feed; /* 0: no order yet in this trial */
    int64_t elapsed;   /* of this phase, pauses capped */
    uint64_t bytes;    /* ordered while measuring */
    uint32_t trials;
};

static uint64_t knob_get(const rd_tuning *u, int k)
{
    switch (k) {
    case K_FUSION: return u->fusion_threshold;
    case K_CYCLE: return u->cycle_us;
    case K_SEGMENT: return u->segment_size;
    default: return u->conns;
    }
}

static void knob_set(rd_tuning *u, int k, uint64_t v)
{
    switch (k) {
    case K_FUSION: u->fusion_threshold = v; break;
    case K_CYCLE: u->cycle_us = (uint32_t)v; break;
    case K_SEGMENT: u->segment_size = v; break;
    default: u->conns = (uint32_t)v; break;
    }
}

/* Adds v to knob k's values, keeping them ascending and distinct. */
static void value_add(rd_tuner *t, int k, uint64_t v)
{
    size_t n = t->nvals[k], i = 0;
    while (i < n && t->vals[k][i] < v)
        i++;
    if ((i < n && t->vals[k][i] == v) || n == VALUES_MAX)
        return;
    memmove(&t->vals[k][i + 1], &t->vals[k][i], (n - i) * sizeof(uint64_t));
    t->vals[k][i] = v;
    t->nvals[k]++;
}

rd_tuner *rd_tuner_new(const rd_tuning *start, uint64_t max_segment, uint32_t max_conns,
                       int64_t window_us)
{
    rd_tuner *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    /* Fusion from 1 MiB (DDP's first bucket) to 256 MiB; cycles up to 5 ms, Horovod's default
     * range is 1-100 ms but its cycle also paces negotiation, which ours does not. */
    for (uint64_t v = 1u << 20; v <= 256u << 20; v *= 4)
        value_add(t, K_FUSION, v);
    static const uint64_t cycles[] = {0, 1000, 2500, 5000};
    for (size_t i = 0; i < sizeof(cycles) / sizeof(cycles[0]); i++)
        value_add(t, K_CYCLE, cycles[i]);
    for (uint64_t v = 256u << 10; v <= max_segment; v *= 2)
        value_add(t, K_SEGMENT, v);
    for (uint64_t v = 1; v <= max_conns; v = v < 4 ? v + 1 : v * 2)
        value_add(t, K_CONNS, v);
    value_add(t, K_CONNS, max_conns);
    t->cur = *start;
    t->cur.autotune = RD_AUTOTUNE_TUNING;
    for (int k = 0; k < K_N; k++)
        value_add(t, k, knob_get(&t->cur, k));
    t->best = t->cur;
    t->window_us = window_us > 0 ? window_us : 1;
    t->warm = 1;
    t->trials = 1;
    return t;
}

void rd_tuner_free(rd_tuner *t)
{
    free(t);
}

/* Moves on from the setting just measured: the next value of the knob tried, or of the next
 * knob, skipping the best's own (measured already); after the last knob, another round or
 * settled. */
static void next_setting(rd_tuner *t)
{
    for (;;) {
        if (t->measured)
            t->idx++;
        t->measured = 1;
        if (t->idx >= t->nvals[t->knob]) {
            t->idx = 0;
            if (++t->knob == K_N) {
                t->knob = 0;
                if (++t->round >= RD_TUNER_ROUNDS || !t->gained) {
                    t->cur = t->best;
                    t->cur.autotune = RD_AUTOTUNE_SETTLED;
                    return;
                }
                t->gained = 0;
            }
        }
        uint64_t v = t->vals[t->knob][t->idx];
        if (v == knob_get(&t->best, t->knob))
            continue;
        t->cur = t->best;
        knob_set(&t->cur, t->knob, v);
        t->trials++;
        return;
    }
}

int rd_tuner_feed(rd_tuner *t, uint64_t bytes, int64_t now_us)
{
    if (t->cur.autotune == RD_AUTOTUNE_SETTLED)
        return 0;
    if (t->last_feed == 0) { /* the trial's first order: its time starts here */
        t->last_feed = now_us;
        return 0;
    }
    int64_t gap = now_us - t->last_feed;
    t->last_feed = now_us;
    t->elapsed += gap < 0 ? 0 : gap > RD_TUNER_GAP_US ? RD_TUNER_GAP_US : gap;
    if (t->warm) {
        if (t->elapsed >= t->window_us / 4) {
            t->warm = 0;
            t->elapsed = 0;
            t->bytes = 0;
        }
        return 0;
    }
    t->bytes += bytes;
    if (t->elapsed < t->window_us)
        return 0;
    double bps = (double)t->bytes * 1e6 / (double)t->elapsed;
    if (!t->measured) { /* the start setting: the one to beat */
        t->best_bps = bps;
    } else if (bps > t->best_bps * (1 + RD_TUNER_GAIN)) {
        t->best = t->cur;
        t->best_bps = bps;
        t->gained = 1;
    }
    rd_tuning before = t->cur;
    next_setting(t);
    t->warm = 1;
    t->elapsed = 0;
    t->bytes = 0;
    t->last_feed = now_us;
    return before.autotune != t->cur.autotune ||
           before.fusion_threshold != t->cur.fusion_threshold ||
           before.cycle_us != t->cur.cycle_us || before.segment_size != t->cur.segment_size ||
           before.conns != t->cur.conns;
}

const rd_tuning *rd_tuner_current(const rd_tuner *t)
{
    return &t->cur;
}

void rd_tuner_stats(const rd_tuner *t, uint32_t *trials, double *best_bps)
{
    *trials = t->trials;
    *best_bps = t->best_bps;
}

/* v as "16M", "512K" or "1000". */
static void size_text(char *buf, size_t len, uint64_t v)
{
    static const char unit[] = "KMG";
    int u = -1;
    while (u < 2 && v >= 1024 && v % 1024 == 0) {
        v /= 1024;
        u++;
    }
    if (u < 0)
        snprintf(buf, len, "%llu", (unsigned long long)v);
    else
        snprintf(buf, len, "%llu%c", (unsigned long long)v, unit[u]);
}

void rd_tuning_describe(char *buf, size_t len, const rd_tuning *u)
{
    char fusion[24], seg[24];
    size_text(fusion, sizeof(fusion), u->fusion_threshold);
    size_text(seg, sizeof(seg), u->segment_size);
    snprintf(buf, len, "fusion threshold %s, cycle %u us, segment %s, %u connection%s", fusion,
             u->cycle_us, seg, u->conns, u->conns == 1 ? "" : "s");
}
