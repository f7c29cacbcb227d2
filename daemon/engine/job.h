/* Jobs as the front sees them: clients join a job by name and leave it; the job renumbers its
 * local ranks as they come and go, follows its ring across nodes, and drains. Submits go to the
 * op path (ops.h). Loop thread only. */
#ifndef RD_JOB_H
#define RD_JOB_H

#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "request.h"
#include "status.h"

/* Adds client c (its engine, pid and uid set) to the job its Hello names, creating the job and
 * the client's arena; once the job has all its local clients each waiting one is welcomed.
 * Returns RINGD_OK, or a refusal with err set (the caller closes the connection). */
rd_status rd_job_join(rd_client *c, const rd_hello *h, char *err, size_t errlen);

/* Removes a departing client from its job. A running job goes on without it at a new
 * generation (every op not moving data fails with RINGD_E_MEMBERSHIP naming it); running ops
 * finish without it. */
void rd_job_leave(rd_client *c);

/* Client c, in a job, asks for its op's trace in every Complete from now on (on), or no longer. */
void rd_job_trace(rd_client *c, int on);

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
