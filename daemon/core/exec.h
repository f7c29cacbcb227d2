/* Data-path executor: worker threads that run a range function over split ranges, off the event
 * loop, and hand completion back to the loop through a wake-up fd. */
#ifndef RD_EXEC_H
#define RD_EXEC_H

#include <stddef.h>

#include "status.h"

struct event_base;
typedef struct rd_exec rd_exec;

/* Work over [begin, end) of a task's units. Runs on a worker thread; ranges of one task are
 * disjoint and may run concurrently. */
typedef void (*rd_exec_fn)(void *ctx, size_t begin, size_t end);

/* Called on the event loop once every range of a task has run. */
typedef void (*rd_exec_done_fn)(void *ctx);

/* Starts nthreads workers that report to base. Returns NULL with err set. */
rd_exec *rd_exec_new(struct event_base *base, int nthreads, char *err, size_t errlen);

/* Stops and joins the workers after the tasks already queued have run (their done callbacks are
 * not called). rd_exec_free(NULL) is a no-op. */
void rd_exec_free(rd_exec *x);

/* Queues fn over [0, units), split into at most one range per worker, range edges multiples of
 * grain; done(ctx) follows on the loop. Returns RINGD_OK, or RINGD_E_NOMEM. Loop thread only. */
rd_status rd_exec_submit(rd_exec *x, rd_exec_fn fn, rd_exec_done_fn done, void *ctx, size_t units,
                         size_t grain);

#endif
