/* The stall inspector of a job's ops, on a timer of the job. Loop thread only. */
#ifndef RD_STALL_H
#define RD_STALL_H

#include <event2/util.h>
#include <stdint.h>

#include "internal.h"

/* How often the job looks for stalls and ops waiting too long for a ring: a quarter of the
 * shortest limit, between 10 ms and 1 s. */
int64_t rd_stall_period(const rd_job *j);

/* The job's timer (arg: the job): tombstones past --stall-abort go, ops past the job's wait
 * for a ring end, and while the ring is up ops waiting for ranks are inspected: warned about
 * past --stall-warn, ended alike on every node past --stall-abort. */
void rd_stall_tick(evutil_socket_t fd, short what, void *arg);

/* The job's ops that have waited past --stall-warn, into js->stalls (at most 64; allocated, js
 * owns them). Returns 0, or -1 when out of memory. */
int rd_stall_describe(const rd_job *j, rd_job_status *js);

#endif
