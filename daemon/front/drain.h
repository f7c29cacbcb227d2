/* Graceful drain (ringctl drain, SIGTERM): every job is left once the ops under way on this node
 * have ended, bounded by a timeout; the other nodes go on without this one and no op of theirs
 * fails. The daemon refuses new clients from then on. Loop thread only. */
#ifndef RD_DRAIN_H
#define RD_DRAIN_H

#include <stdint.h>

#include "frame.h"
#include "status.h"

struct rd_front;
struct rd_session;

/* Starts draining the node (or joins the drain under way): s (a ringctl session, or NULL) gets a
 * DrainReply when it ends; exit_after ends the event loop then (SIGTERM). timeout_ms bounds the
 * wait for ops under way; what is still under way then fails. Returns RINGD_OK, or
 * RINGD_E_NOMEM. */
rd_status rd_drain_start(struct rd_front *f, struct rd_session *s, int64_t timeout_ms,
                         int exit_after);

/* The DrainRequest handler: starts draining (or joins the drain under way) within the request's
 * timeout, the daemon's --drain-timeout when it gives none; s gets a DrainReply at the end. */
void rd_drain_request(struct rd_session *s, const rd_msg *m);

/* s is going away: it is not answered. */
void rd_drain_forget(struct rd_front *f, struct rd_session *s);

/* Frees the drain's state at shutdown. */
void rd_drain_free(struct rd_front *f);

#endif
