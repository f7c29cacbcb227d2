/* Jobs that span nodes: the daemon's rendezvous and peer listener, and for each such job its
 * registration, the ring's links at each generation, negotiation through the coordinator (the
 * first node of the ring) and the data plane. Loop thread only. */
#ifndef RD_WORLD_H
#define RD_WORLD_H

#include <stddef.h>
#include <stdint.h>

#include "frame.h"
#include "negotiate.h"
#include "ringd.h"

struct rd_daemon;
struct rd_job;
struct rd_xfer_task;

typedef struct rd_world rd_world;

/* Loads the ring key and starts the peer listener and the rendezvous (--redis). Returns 0, or -1
 * with err set. Without --redis does nothing. */
int rd_world_init(struct rd_daemon *d, char *err, size_t errlen);

/* Stops them (after every world is freed). */
void rd_world_shutdown(struct rd_daemon *d);

/* The multi-node side of job j (world_size > local_size). Returns NULL when out of memory. */
rd_world *rd_world_new(struct rd_daemon *d, struct rd_job *j);

/* Leaves the rendezvous, closes the links, ends the ring's tasks. NULL is a no-op. */
void rd_world_free(rd_world *w);

/* Every local client is there: joins the rendezvous. */
void rd_world_register(rd_world *w);

/* The job has no local clients left (or must go now): leaves the rendezvous; a ring that is up
 * is left gracefully (Bye, see rd_world_leave), so the others finish what this node announced. */
void rd_world_unregister(rd_world *w);

/* The job's local clients changed while it runs: the ring is torn down (ops doomed, see
 * rd_job_ring_down) and the node registers again with its new local size. */
void rd_world_resize(rd_world *w, const char *why);

/* Draining: once nothing is under way, tells every node it leaves (Bye), leaves the rendezvous
 * and closes the links. Returns 1 when it has left. */
int rd_world_leave(rd_world *w);

/* The nodes that have not announced the op named name (own: this node's announced op, or NULL
 * for one this node has not announced), as "ranks 2-3 (node n1)"; "" when not known. */
void rd_world_missing(const rd_world *w, const char *name, const void *own, char *buf, size_t len);

/* This node's announced op own, named name, has waited past --stall-abort (message says for
 * whom): asks the nodes that have not announced it to announce it failed (RINGD_E_STALLED), which
 * ends it alike on every node. Nothing while the ring is not up. */
void rd_world_stalled(rd_world *w, const char *name, const void *own, const char *message);

/* Something only a new ring settles (why): the ring breaks and re-forms; ops not moving data fail
 * with RINGD_E_MEMBERSHIP and why once it is back. Nothing while the ring is not up. */
void rd_world_reform(rd_world *w, const char *why);

/* Why the job has no ring, for messages ("2 of min_size 3 ranks on 2 nodes"). */
void rd_world_detail(const rd_world *w, char *buf, size_t len);

/* 1 when the ring is complete and its links are up: ops may be negotiated. */
int rd_world_up(const rd_world *w);

/* Returns 0 when the ring is changing gracefully and takes no announcements (the op is held:
 * nothing happened to it), else 1 and announces to every node that this node's ranks all
 * submitted name with p (or that it failed here: status non-zero and message). A direct op (small:
 * see --direct-bytes) carries this node's contribution in data[0..len). Once every node has
 * announced it, rd_job_negotiated(j, own, ...) follows; for ops bound for the ring, the
 * coordinator's order then comes through rd_job_go. */
int rd_world_ready(rd_world *w, const char *name, const rd_op_params *p, ringd_result_t status,
                   const char *message, int direct, const uint8_t *data, size_t len, void *own);

/* 1 when the job's ring is this node alone: ops bound for it run here without a data plane. */
int rd_world_solo(const rd_world *w);

/* Runs t on the ring; rd_job_task_done(j, t) follows on the loop. */
void rd_world_submit(rd_world *w, struct rd_xfer_task *t);

/* The ring, for status (allocated; rd_world_describe_free releases it). NULL when out of memory. */
Ringd__RingInfo *rd_world_describe(const rd_world *w);
void rd_world_describe_free(Ringd__RingInfo *ri);

/* The bound peer address ("" without --redis), and whether Redis is connected. */
const char *rd_world_address(const struct rd_daemon *d);
int rd_world_redis_connected(const struct rd_daemon *d);

#endif
