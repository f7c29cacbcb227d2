/* The engine of the daemon's jobs: its clients as the engine sees them, the news it gives the
 * front about them, the engine object itself (its jobs, their timeline recordings) and the
 * daemon's status of its jobs. Loop thread only. */
#ifndef RD_ENGINE_H
#define RD_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "counters.h"
#include "exec.h"
#include "metrics.h"
#include "report.h"
#include "status.h"
#include "timeline.h"
#include "world.h"

struct event_base;
struct rd_arena;

#include "client.h"

/* The engine of the daemon's jobs: cfg, counters, metrics (NULL: none kept), exec (the data-path
 * executor) and net (NULL without --redis: one-node jobs only) are borrowed for its lifetime; ev
 * is copied. Returns NULL when out of memory. */
rd_engine *rd_engine_new(struct event_base *base, const rd_config *cfg, rd_counters *counters,
                         rd_metrics *metrics, rd_exec *exec, rd_net *net,
                         const rd_client_events *ev);

/* Records the ops and ring changes of job (running here now, or from when it comes) into tl
 * (borrowed until rd_engine_record_stop) from now on, for who: a job of another uid than a
 * non-admin's is never recorded. Returns RINGD_OK, or with err set RINGD_E_REFUSED (the job is
 * being recorded already, or runs as another user) or RINGD_E_NOMEM. */
rd_status rd_engine_record(rd_engine *e, const char *job, rd_timeline *tl, const rd_viewer *who,
                           char *err, size_t errlen);

/* Ends the recording into tl (none: a no-op). */
void rd_engine_record_stop(rd_engine *e, const rd_timeline *tl);

/* Frees every job and op left at shutdown, after the executor has stopped. NULL is a no-op. */
void rd_engine_free(rd_engine *e);

/* Describes every job into st->jobs and st->njobs (for status): the arrays are allocated with
 * malloc and belong to st (rd_daemon_status_free releases them, also after a failure); strings are
 * borrowed from the engine. Returns RINGD_OK, or RINGD_E_NOMEM. */
rd_status rd_engine_describe(rd_engine *e, rd_daemon_status *st);

/* From now on new clients are refused (a drain). */
void rd_engine_set_draining(rd_engine *e);
int rd_engine_draining(const rd_engine *e);

/* The first of the engine's jobs (rd_job_next gives the others), or NULL. */
rd_job *rd_engine_jobs(const rd_engine *e);

#endif
