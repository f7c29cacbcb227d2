/* Jobs and their op tables: clients join a job by name; collectives are matched by tensor name
 * across the job's local clients, checked for consistency, and run once all have submitted. */
#ifndef RD_JOB_H
#define RD_JOB_H

#include <stddef.h>
#include <stdint.h>

#include "frame.h"
#include "request.h"
#include "report.h"
#include "negotiate.h"
#include "ringd.h"
#include "status.h"

#include <sys/types.h>

#include "config.h"
#include "counters.h"
#include "exec.h"
#include "metrics.h"
#include "timeline.h"
#include "world.h"

struct event_base;
struct rd_arena;

#define RD_LOCAL_SIZE_MAX 1024

typedef struct rd_engine rd_engine;
typedef struct rd_job rd_job;

/* A local client of a job as the engine sees it. The front embeds one in each client
 * connection and fills engine, pid and uid; the engine sets the rest from rd_job_join on. */
typedef struct rd_client {
    rd_engine *engine;
    pid_t pid; /* of the client process (SO_PEERCRED) */
    uid_t uid;
    struct rd_job *job;       /* from rd_job_join until rd_job_leave */
    uint32_t local_rank;      /* in the job's current generation */
    int64_t asked_rank;       /* the local rank it asked for (Hello), -1: any */
    struct rd_arena *arena;   /* one reference, from rd_job_join on; the front drops it */
    struct rd_arena *device_arena; /* its device arena (MEM_DEVICE handle 1) on device, once
                                      welcomed with one: one reference the front holds */
    int device;                    /* the CUDA device the front gave it; -1: none */
    const char *device_uuid;       /* its UUID ("GPU-..."), static; NULL: none */
    uint64_t ops_in_flight;   /* Submits not yet answered (the front counts them) */
    uint64_t ops_completed;
    int timeline;             /* its Completes carry their op's trace (Hello.timeline) */
} rd_client;

/* The job as one client sees it. */
typedef struct {
    uint64_t generation;
    uint32_t rank, size, local_rank, local_size;
} rd_client_view;

/* News for clients, sent by the front. Loop thread. */
typedef struct {
    /* The job has started: sends c Welcome with v and its arena's memfd (passed once: the
     * engine closes its copy after). Returns RINGD_OK once sent (the client may then submit),
     * else why not (RINGD_E_CLOSED: c is not waiting for it, going away). */
    rd_status (*welcome)(rd_client *c, const rd_client_view *v, int arena_fd);
    /* c waits for the job's ring: ranks of world_size registered on nodes at generation. */
    void (*waiting)(rd_client *c, uint32_t ranks, uint32_t world_size, uint32_t nodes,
                    uint64_t generation, const char *detail);
    /* c's request ended with status (message: why, "" on success); trace: the op's path, when
     * c asked for traces and the request became an op (valid during the call), else NULL. */
    void (*complete)(rd_client *c, uint64_t request_id, ringd_result_t status,
                     const char *message, const rd_trace_op *trace);
} rd_client_events;

/* The engine of the daemon's jobs: cfg, counters, metrics (NULL: none kept), exec (the data-path
 * executor) and net (NULL without --redis: one-node jobs only) are borrowed for its lifetime; ev
 * is copied. Returns NULL when out of memory. */
rd_engine *rd_engine_new(struct event_base *base, const rd_config *cfg, rd_counters *counters,
                         rd_metrics *metrics, rd_exec *exec, rd_net *net,
                         const rd_client_events *ev);

/* Records the ops and ring changes of job (running here now, or from when it comes) into tl
 * (borrowed until the recording stops) from now on; tl NULL stops the job's recording.
 * Returns RINGD_OK, RINGD_E_REFUSED when the job is being recorded already, or RINGD_E_NOMEM. */
rd_status rd_engine_record(rd_engine *e, const char *job, rd_timeline *tl);

/* Frees every job and op left at shutdown, after the executor has stopped. NULL is a no-op. */
void rd_engine_free(rd_engine *e);

/* From now on new clients are refused (a drain). */
void rd_engine_set_draining(rd_engine *e);
int rd_engine_draining(const rd_engine *e);

/* The first of the engine's jobs (rd_job_next gives the others), or NULL. */
rd_job *rd_engine_jobs(const rd_engine *e);

/* Adds client c (its engine, pid and uid set) to the job its Hello names, creating the job and
 * the client's arena; once the job has all its local clients each waiting one is welcomed.
 * Returns RINGD_OK, or a refusal with err set (the caller closes the connection). */
ringd_result_t rd_job_join(rd_client *c, const rd_hello *h, char *err, size_t errlen);

/* Validates and matches one Submit of a welcomed client. Every outcome ends in exactly one
 * complete event for the request, now or when the op finishes. */
void rd_job_submit(rd_client *c, const rd_submit *m);

/* Removes a departing client from its job. A running job goes on without it at a new
 * generation (every op not moving data fails with RINGD_E_MEMBERSHIP naming it); running ops
 * finish without it. */
void rd_job_leave(rd_client *c);

/* Describes every job into st->jobs and st->njobs (for status): the arrays are allocated with
 * malloc and belong to st (rd_daemon_status_free releases them, also after a failure); strings are
 * borrowed from the engine. Returns RINGD_OK, or RINGD_E_NOMEM. */
rd_status rd_job_describe(rd_engine *e, rd_daemon_status *st);

/* The job's name, for status. */
const char *rd_job_name(const rd_job *j);

/* The job as the client at local_rank sees it into *v: returns 1, or 0 (v untouched) before the
 * job started, and while its local ranks were renumbered and its ring is not up again. */
int rd_job_client_view(const rd_job *j, uint32_t local_rank, rd_client_view *v);

/* Leaves the job gracefully (ringctl drain, SIGTERM): new Submits are refused and ops not yet
 * announced fail; returns 1 once nothing is under way and the node has left the ring. Call
 * again until it does; force: what is still under way fails and the node leaves now. */
int rd_job_drain(rd_job *j, int force);

/* The engine's next job after j, or NULL. */
rd_job *rd_job_next(const rd_job *j);

#endif
