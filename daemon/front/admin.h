/* The admin requests a connection may send instead of a Hello (ringctl status, drain, metrics,
 * timeline): the one table of their handlers, which ringd and the session fuzzer both wire into
 * rd_front, and what those handlers drop when a connection goes away. Loop thread only. */
#ifndef RD_ADMIN_H
#define RD_ADMIN_H

#include <stddef.h>

#include "front.h"

/* The handlers, one per request body (rd_front.admin), and their number (rd_front.nadmin).
 * Static storage. */
extern const rd_admin_handler rd_admin_handlers[];
extern const size_t rd_admin_nhandlers;

/* s goes away: the drain and the timeline recordings drop what they hold of it
 * (rd_front.forget). */
void rd_admin_forget(rd_front *f, struct rd_session *s);

#endif
