/* Status queries: the daemon's state, as one StatusReply. */
#ifndef RD_STATUS_REQUEST_H
#define RD_STATUS_REQUEST_H

#include "frame.h"

struct rd_session;

/* The StatusRequest handler: builds a StatusReply (version, uptime, jobs, clients, op counters)
 * and sends it to s. */
void rd_status_request(struct rd_session *s, const rd_msg *req);

#endif
