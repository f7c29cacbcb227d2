/* Jobs and their op tables: clients join a job by name; collectives are matched by tensor name
 * across the job's local clients, checked for consistency, and run once all have submitted. */
#ifndef RD_JOB_H
#define RD_JOB_H

#include <stddef.h>
#include <stdint.h>

#include "frame.h"
#include "ringd.h"

struct rd_session;
struct rd_daemon;

#define RD_LOCAL_SIZE_MAX 1024

typedef struct rd_job rd_job;

/* Adds session s (state NEW) to the job its Hello names, creating the job and the session's
 * arena; once the job has all its local clients each waiting one gets Welcome and the arena fd.
 * Returns RINGD_OK, or a refusal with err set (the caller closes the session). */
ringd_result_t rd_job_join(struct rd_session *s, const Ringd__Hello *h, char *err, size_t errlen);

/* Validates and matches one Submit of an active session. Every outcome ends in exactly one
 * Complete for the request, now or when the op finishes. */
void rd_job_submit(struct rd_session *s, const Ringd__Submit *m);

/* Removes a departing session from its job: pending ops of the job fail with
 * RINGD_E_MEMBERSHIP on the other ranks; running ops finish without it. */
void rd_job_leave(struct rd_session *s);

/* Describes every job into the reply's jobs array (allocated with malloc; rd_job_describe_free
 * releases it). */
int rd_job_describe(struct rd_daemon *d, Ringd__JobInfo ***jobs, size_t *njobs);
void rd_job_describe_free(Ringd__JobInfo **jobs, size_t njobs);

/* Frees every job and op left at shutdown, after the executor has stopped. */
void rd_job_free_all(struct rd_daemon *d);

/* The job's name, for status. */
const char *rd_job_name(const rd_job *j);

/* Multi-node jobs: lookups and the calls daemon/world.c makes into the job. */
struct rd_world;
struct rd_xfer_task;
rd_job *rd_job_find(struct rd_daemon *d, const char *name);
struct rd_world *rd_job_world(const rd_job *j);
uint32_t rd_job_world_size(const rd_job *j);
uint32_t rd_job_local_size(const rd_job *j);

/* The ring is up at generation: waiting clients get Welcome with ranks from first_rank on. */
void rd_job_ring_up(rd_job *j, uint32_t first_rank, uint64_t generation);

/* Tells waiting clients how far the ring has come (Waiting). */
void rd_job_ring_waiting(rd_job *j, uint32_t ranks, uint32_t nodes, uint64_t generation,
                         const char *detail);

/* The ring went down: ops waiting for the coordinator fail with RINGD_E_MEMBERSHIP and why. */
void rd_job_ring_down(rd_job *j, const char *why);

/* Every node has announced the op whose handle is own (an rd_op of j): e fails it, carries its
 * result (direct), or says it is bound for the ring. */
void rd_job_negotiated(rd_job *j, void *own, const Ringd__GoEntry *e);

/* The coordinator's order for ops bound for the ring: each batch runs (fused where it can) once
 * every op in it is negotiated here, batches in order. */
void rd_job_go(rd_job *j, const Ringd__Go *go);

/* 1 while ops negotiated for the ring wait for the coordinator's order, or orders wait for
 * ops. */
int rd_job_awaits_order(const rd_job *j);

/* A ring task ended (an rd_xfer_done_fn with the job as argument). */
void rd_job_task_done(rd_job *j, struct rd_xfer_task *t);

#endif
