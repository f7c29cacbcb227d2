/* ringctl timeline: records one job's timeline on this node for some seconds, then answers with
 * it. */
#ifndef RD_TIMELINE_REQUEST_H
#define RD_TIMELINE_REQUEST_H

#include "frame.h"

struct rd_front;
struct rd_session;

#define RD_TLREQ_SECONDS_MAX 3600
#define RD_TLREQ_REPLY_MAX (60u << 20) /* bytes of ops in one reply: the oldest go first */

/* The TimelineRequest handler: starts recording the job (running here or from when it comes)
 * and answers TimelineReply when the seconds are over; a bad request, or a job being recorded
 * already, is answered at once with a status and a message. Loop thread. */
void rd_tlreq_request(struct rd_session *s, const rd_msg *req);

/* s goes away: its recording stops and is dropped. */
void rd_tlreq_forget(struct rd_front *f, struct rd_session *s);

/* Stops and drops every recording (shutdown). */
void rd_tlreq_free_all(struct rd_front *f);

#endif
