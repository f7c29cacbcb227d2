/* Per-job metrics: ops by kind and result, bytes, latency histograms by size class, negotiation
 * waits, fusion, membership changes and stalls. Kept by job name, so that a job's series outlive
 * it long enough for Prometheus to scrape their last values, and continue when a job of that
 * name comes back. Updated once per op (never per segment); loop thread only. */
#ifndef RD_METRICS_H
#define RD_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "ringd.h"
#include "status.h"

#define RD_METRICS_KINDS RD_COLL_COUNT /* by rd_coll, named by rd_coll_name */
#define RD_METRICS_SIZES 5             /* size classes of an op's bytes per rank */
#define RD_METRICS_LATENCY_BUCKETS 20
#define RD_METRICS_PASS_BUCKETS 11
#define RD_METRICS_RETAIN_MS (10 * 60 * 1000) /* an ended job's series stay this long */
#define RD_METRICS_JOBS_MAX 256 /* entries kept; ended jobs beyond it go, oldest first */

/* Why a job's ring changed, as ringd_membership_changes_total{cause} says it. */
typedef enum {
    RD_CHANGE_CAUSE_START,  /* the job's first ring on this node */
    RD_CHANGE_CAUSE_JOIN,   /* more ranks than before */
    RD_CHANGE_CAUSE_LEAVE,  /* fewer, gracefully: a node drained or its last client closed, and
                               it said Bye; what was under way finished */
    RD_CHANGE_CAUSE_SHRINK, /* fewer, and clients re-synchronise: a process closed on a node
                               that keeps others, a crash, a lost lease */
    RD_CHANGE_CAUSE_REFORM, /* the same number of ranks at a new generation (a broken link) */
    RD_CHANGE_CAUSES
} rd_change_cause;

extern const char *const rd_change_cause_names[RD_CHANGE_CAUSES];
extern const char *const rd_metrics_size_names[RD_METRICS_SIZES];
/* Upper bounds of the buckets (+Inf follows): seconds, and ops per ring pass. */
extern const double rd_metrics_latency_bounds[RD_METRICS_LATENCY_BUCKETS];
extern const double rd_metrics_pass_bounds[RD_METRICS_PASS_BUCKETS];

/* A histogram's observations: bucket[i] counts those in (bound[i-1], bound[i]] (not cumulative;
 * the last is +Inf). */
typedef struct {
    uint64_t bucket[RD_METRICS_LATENCY_BUCKETS + 1];
    uint64_t count;
    double sum;
} rd_histogram;

typedef struct rd_job_metrics {
    char *name;
    uint32_t live;    /* jobs of this name on the node now */
    int64_t ended_ms; /* when the last one ended (live 0) */
    uint64_t ops[RD_METRICS_KINDS][RINGD_RESULT_COUNT];
    uint64_t bytes[RD_METRICS_KINDS]; /* written into the clients' arenas by ops that succeeded */
    rd_histogram latency[RD_METRICS_KINDS][RD_METRICS_SIZES]; /* first submit here to the end */
    rd_histogram negotiation; /* every local rank submitted to the nodes agreeing on it */
    rd_histogram pass_ops;    /* ops per ring pass (rd_metrics_pass_bounds) */
    uint64_t changes[RD_CHANGE_CAUSES];
    uint64_t stall_warnings, stall_aborts;
    struct rd_job_metrics *next;
} rd_job_metrics;

typedef struct rd_metrics rd_metrics;

/* An empty registry, the caller's (rd_metrics_free). NULL when out of memory. */
rd_metrics *rd_metrics_new(void);
void rd_metrics_free(rd_metrics *m);

/* The entry of job name, made when there is none (counted live until rd_metrics_release):
 * the registry's. NULL when out of memory. */
rd_job_metrics *rd_metrics_acquire(rd_metrics *m, const char *name);

/* A job of jm's name ended here; jm stays RD_METRICS_RETAIN_MS. NULL is a no-op. */
void rd_metrics_release(rd_metrics *m, rd_job_metrics *jm);

/* The entries kept (forgetting those past their retention first), in order of creation. */
rd_job_metrics *rd_metrics_jobs(rd_metrics *m);

/* Counts one op of kind (rd_coll) that ended with result; bytes per rank classify its latency
 * (us, from its first submission here), written bytes count when it succeeded. jm NULL: no-op. */
void rd_metrics_op(rd_job_metrics *jm, unsigned kind, rd_status result, uint64_t size,
                   uint64_t written, int64_t us);

/* Adds one observation v to h, whose n bounds are bounds. */
void rd_histogram_observe(rd_histogram *h, const double *bounds, size_t n, double v);

/* The size class (index into rd_metrics_size_names) of an op of bytes per rank. */
unsigned rd_metrics_size_class(uint64_t bytes);

/* Why a ring changed from prev_size ranks (0: the job's first ring here) to size, sync saying
 * the clients must re-synchronise (a failure, not a graceful change). */
rd_change_cause rd_change_cause_of(uint32_t prev_size, uint32_t size, int sync);

#endif
