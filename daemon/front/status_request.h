/* Status queries: the daemon's state, as one StatusReply. */
#ifndef RD_STATUS_REQUEST_H
#define RD_STATUS_REQUEST_H

#include "frame.h"

struct rd_session;

/* The StatusRequest handler: gathers the daemon's status (version, uptime, counters, jobs and
 * their rings, clients) and sends it to s as a StatusReply; out of memory, closes s with
 * RINGD_E_NOMEM. Loop thread. */
void rd_status_request(struct rd_session *s, const rd_msg *req);

#endif
