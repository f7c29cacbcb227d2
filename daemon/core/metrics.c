/* Per-job metrics, kept by name past the job's end. */
#include "metrics.h"

#include <stdlib.h>
#include <string.h>

#include "counters.h"

const char *const rd_change_cause_names[RD_CHANGE_CAUSES] = {"start", "join", "leave", "shrink",
                                                             "reform"};
/* By bytes per rank: latency-bound, small, middle (ring, pipelining), large, very large. */
const char *const rd_metrics_size_names[RD_METRICS_SIZES] = {"0-4KiB", "4KiB-64KiB", "64KiB-1MiB",
                                                             "1MiB-16MiB", "16MiB+"};
static const uint64_t size_limits[RD_METRICS_SIZES - 1] = {4096, 65536, 1 << 20, 16 << 20};

/* From a one-node 4-byte op (about 10 us) to an op waiting for a slow rank. */
const double rd_metrics_latency_bounds[RD_METRICS_LATENCY_BUCKETS] = {
    10e-6, 25e-6, 50e-6,  100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3,
    25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1,      2.5,  5,      10,   30};
const double rd_metrics_pass_bounds[RD_METRICS_PASS_BUCKETS] = {1,  2,   4,   8,   16,  32,
                                                                64, 128, 256, 512, 1024};

struct rd_metrics {
    rd_job_metrics *first, *last;
    size_t n;
};

rd_metrics *rd_metrics_new(void)
{
    return calloc(1, sizeof(rd_metrics));
}

static void entry_free(rd_job_metrics *jm)
{
    free(jm->name);
    free(jm);
}

void rd_metrics_free(rd_metrics *m)
{
    if (m == NULL)
        return;
    while (m->first != NULL) {
        rd_job_metrics *jm = m->first;
        m->first = jm->next;
        entry_free(jm);
    }
    free(m);
}

/* Forgets ended entries past their retention, and the oldest ended ones while more than
 * RD_METRICS_JOBS_MAX are kept. */
static void prune(rd_metrics *m)
{
    int64_t now = rd_now_ms();
    size_t over = m->n > RD_METRICS_JOBS_MAX ? m->n - RD_METRICS_JOBS_MAX : 0;
    rd_job_metrics **pp = &m->first, *prev = NULL;
    while (*pp != NULL) {
        rd_job_metrics *jm = *pp;
        if (jm->live == 0 && (over > 0 || now - jm->ended_ms >= RD_METRICS_RETAIN_MS)) {
            *pp = jm->next;
            if (m->last == jm)
                m->last = prev;
            entry_free(jm);
            m->n--;
            over -= over > 0;
            continue;
        }
        prev = jm;
        pp = &jm->next;
    }
}

rd_job_metrics *rd_metrics_acquire(rd_metrics *m, const char *name)
{
    for (rd_job_metrics *jm = m->first; jm != NULL; jm = jm->next) {
        if (strcmp(jm->name, name) == 0) {
            jm->live++;
            return jm;
        }
    }
    rd_job_metrics *jm = calloc(1, sizeof(*jm));
    if (jm == NULL || (jm->name = strdup(name)) == NULL) {
        free(jm);
        return NULL;
    }
    jm->live = 1;
    if (m->last != NULL)
        m->last->next = jm;
    else
        m->first = jm;
    m->last = jm;
    m->n++;
    prune(m);
    return jm;
}

void rd_metrics_release(rd_metrics *m, rd_job_metrics *jm)
{
    (void)m;
    if (jm == NULL || jm->live == 0)
        return;
    if (--jm->live == 0)
        jm->ended_ms = rd_now_ms();
}

rd_job_metrics *rd_metrics_jobs(rd_metrics *m)
{
    prune(m);
    return m->first;
}

void rd_histogram_observe(rd_histogram *h, const double *bounds, size_t n, double v)
{
    size_t i = 0;
    while (i < n && v > bounds[i])
        i++;
    h->bucket[i]++;
    h->count++;
    h->sum += v;
}

unsigned rd_metrics_size_class(uint64_t bytes)
{
    unsigned c = 0;
    while (c < RD_METRICS_SIZES - 1 && bytes > size_limits[c])
        c++;
    return c;
}

void rd_metrics_op(rd_job_metrics *jm, unsigned kind, rd_status result, uint64_t size,
                   uint64_t written, int64_t us)
{
    if (jm == NULL || kind >= RD_METRICS_KINDS)
        return;
    unsigned r = (unsigned)result < RINGD_RESULT_COUNT ? (unsigned)result : RINGD_E_PROTOCOL;
    jm->ops[kind][r]++;
    if (result == RINGD_OK)
        jm->bytes[kind] += written;
    rd_histogram_observe(&jm->latency[kind][rd_metrics_size_class(size)], rd_metrics_latency_bounds,
                         RD_METRICS_LATENCY_BUCKETS, (double)(us > 0 ? us : 0) / 1e6);
}

rd_change_cause rd_change_cause_of(uint32_t prev_size, uint32_t size, int sync)
{
    if (prev_size == 0)
        return RD_CHANGE_CAUSE_START;
    if (size > prev_size)
        return RD_CHANGE_CAUSE_JOIN;
    if (size == prev_size)
        return RD_CHANGE_CAUSE_REFORM;
    return sync ? RD_CHANGE_CAUSE_SHRINK : RD_CHANGE_CAUSE_LEAVE;
}
