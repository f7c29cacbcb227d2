/* Status queries: the daemon's state, as one StatusReply. */
#ifndef RD_STATUS_H
#define RD_STATUS_H

struct rd_session;

/* Builds a StatusReply (version, uptime, jobs, clients, op counters) and sends it to s. */
void rd_status_reply(struct rd_session *s);

#endif
