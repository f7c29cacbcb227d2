/* Jobs and their op tables: clients join a job by name; collectives are matched by tensor name
 * across the job's local clients, checked for consistency, and run once all have submitted. */
#ifndef RD_JOB_H
#define RD_JOB_H

#include <stddef.h>
#include <stdint.h>

#include "frame.h"
#include "negotiate.h"
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

/* Removes a departing session from its job. A running job goes on without it at a new
 * generation (every op not moving data fails with RINGD_E_MEMBERSHIP naming it); running ops
 * finish without it. */
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
uint32_t rd_job_min_size(const rd_job *j);

/* The job as the client at local_rank sees it, into a Complete (unchanged before it started). */
void rd_job_client_view(const rd_job *j, uint32_t local_rank, Ringd__Complete *c);

/* The ring is up at generation with size ranks: waiting clients get Welcome with ranks from
 * first_rank on; ops held meanwhile are announced. sync: the membership changed in a way
 * clients must re-synchronise with (not a graceful leave): every op not moving data fails with
 * RINGD_E_MEMBERSHIP (why, or the message it was doomed with), and so do Submits tagged with an
 * older generation. */
void rd_job_ring_up(rd_job *j, uint32_t first_rank, uint64_t generation, uint32_t size, int sync,
                    const char *why);

/* Tells waiting clients how far the ring has come (Waiting). */
void rd_job_ring_waiting(rd_job *j, uint32_t ranks, uint32_t nodes, uint64_t generation,
                         const char *detail);

/* The ring went down. carry (a graceful leave): ops under negotiation are announced again on the
 * next ring. Otherwise every op not moving data is doomed: it fails with RINGD_E_MEMBERSHIP and
 * why when the next ring is up (its answer then carries the new rank and size), or after the
 * job's wait. */
void rd_job_ring_down(rd_job *j, const char *why, int carry);

/* No ring will come soon (this node lost its registration): every op not moving data fails now
 * with RINGD_E_MEMBERSHIP and why. */
void rd_job_ring_lost(rd_job *j, const char *why);

/* The ring broke under running ops: their failures wait for the next ring like doomed ops. */
void rd_job_disrupted(rd_job *j);

/* Leaves the job gracefully (ringctl drain, SIGTERM): new Submits are refused and ops not yet
 * announced fail; returns 1 once nothing is under way and the node has left the ring. Call
 * again until it does; force: what is still under way fails and the node leaves now. */
int rd_job_drain(rd_job *j, int force);

/* The daemon's next job after j, or NULL. */
rd_job *rd_job_next(const rd_job *j);

/* Every node has announced the op whose handle is own (an rd_op of j): e fails it, carries its
 * result (direct), or says it is bound for the ring. */
void rd_job_negotiated(rd_job *j, void *own, const Ringd__GoEntry *e);

/* Another node announced that the op named name (params p) failed there, or the announcements
 * disagree: the oldest op of that name this node has not announced fails now with status and
 * message on every local rank that submitted it (and on those that submit it later), and this
 * node announces the failure too, so that no node waits for the others' ranks. */
void rd_job_failed_elsewhere(rd_job *j, const char *name, const rd_op_params *p, uint32_t status,
                             const char *message);

/* The coordinator's order for ops bound for the ring: each batch runs (fused where it can) once
 * every op in it is negotiated here, batches in order. */
void rd_job_go(rd_job *j, const Ringd__Go *go);

/* 2 while orders of the coordinator wait for ops to be negotiated here, 1 while ops negotiated
 * for the ring wait for the coordinator's order, else 0. */
int rd_job_awaits_order(const rd_job *j);

/* A ring task ended (an rd_xfer_done_fn with the job as argument). */
void rd_job_task_done(rd_job *j, struct rd_xfer_task *t);

#endif
