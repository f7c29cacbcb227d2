/* Status queries: the daemon's state, as one StatusReply. */
#ifndef RD_STATUS_REQUEST_H
#define RD_STATUS_REQUEST_H

#include "frame.h"
#include "report.h"

struct rd_session;
struct rd_front;

/* The daemon's status now (version, uptime, counters, jobs and their rings, clients, GPUs): the
 * caller's (rd_daemon_status_free), borrowing the daemon's strings, so valid within this
 * callback of the loop. NULL when out of memory. Loop thread. */
rd_daemon_status *rd_front_status_new(struct rd_front *d);

/* The StatusRequest handler: gathers the daemon's status (version, uptime, counters, jobs and
 * their rings, clients) and sends it to s as a StatusReply; out of memory, closes s with
 * RINGD_E_NOMEM. Loop thread. */
void rd_status_request(struct rd_session *s, const rd_msg *req);

#endif
