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

#include "config.h"
#include "counters.h"

struct event_base;
struct rd_xfer_task;

typedef struct rd_net rd_net;
typedef struct rd_world rd_world;

/* The daemon-wide network context (--redis): loads the ring key, starts the peer listener and
 * connects to the rendezvous. cfg and counters are borrowed for its lifetime. Returns NULL with
 * err set. */
rd_net *rd_net_new(struct event_base *base, const rd_config *cfg, rd_counters *counters, char *err,
                   size_t errlen);

/* Stops them, after every world is freed. NULL is a no-op. */
void rd_net_free(rd_net *net);

/* The address peers dial ("" for a NULL net), and whether Redis is connected. */
const char *rd_net_address(const rd_net *net);
int rd_net_redis_connected(const rd_net *net);

/* News of a world for its job, on the loop. arg is the one given to rd_world_new. */
typedef struct {
    /* The ring is up at generation with size ranks, this node's first being first_rank. sync: the
     * membership changed in a way clients must re-synchronise with (not a graceful leave), why
     * says how. */
    void (*ring_up)(void *arg, uint32_t first_rank, uint64_t generation, uint32_t size, int sync,
                    const char *why);
    /* How far the ring has come while it forms (ranks registered on nodes, detail). */
    void (*ring_waiting)(void *arg, uint32_t ranks, uint32_t nodes, uint64_t generation,
                         const char *detail);
    /* The ring went down. carry (a graceful change): ops under negotiation are announced again
     * on the next ring; otherwise every op not moving data is doomed with why. */
    void (*ring_down)(void *arg, const char *why, int carry);
    /* No ring will come soon (this node lost its registration): ops not moving data fail now. */
    void (*ring_lost)(void *arg, const char *why);
    /* The ring broke under running ops: their failures wait for the next ring. */
    void (*disrupted)(void *arg);
    /* Every node has announced this node's op own (see rd_world_ready). */
    void (*negotiated)(void *arg, void *own, const Ringd__GoEntry *e);
    /* Another node announced that the op named name failed there (or announcements disagree):
     * the oldest op of that name this node has not announced fails with status and message. */
    void (*failed_elsewhere)(void *arg, const char *name, const rd_op_params *p, uint32_t status,
                             const char *message);
    /* The coordinator's order for ops bound for the ring. */
    void (*go)(void *arg, const Ringd__Go *go);
    /* 2 while orders wait for ops to be negotiated here, 1 while negotiated ring-bound ops wait
     * for an order, else 0. */
    int (*awaits_order)(void *arg);
    /* A ring task submitted with rd_world_submit ended. */
    void (*task_done)(void *arg, struct rd_xfer_task *t);
} rd_world_events;

/* The multi-node side of job (world_size > local_size), reporting to ev with arg (the structure
 * is copied). Returns NULL when out of memory. */
rd_world *rd_world_new(rd_net *net, const char *job, uint32_t world_size, uint32_t min_size,
                       uint32_t local_size, const rd_world_events *ev, void *arg);

/* Leaves the rendezvous, closes the links, ends the ring's tasks. NULL is a no-op. */
void rd_world_free(rd_world *w);

/* Every local client is there: joins the rendezvous. */
void rd_world_register(rd_world *w);

/* The job has no local clients left (or must go now): leaves the rendezvous; a ring that is up
 * is left gracefully (Bye, see rd_world_leave), so the others finish what this node announced. */
void rd_world_unregister(rd_world *w);

/* The job's local clients changed (now local_size of them): a ring that runs is torn down (ops
 * doomed, see ring_down) and the node registers again with its new local size. */
void rd_world_resize(rd_world *w, uint32_t local_size, const char *why);

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
 * announced it, the negotiated event follows; for ops bound for the ring, the coordinator's order
 * then comes through the go event. */
int rd_world_ready(rd_world *w, const char *name, const rd_op_params *p, ringd_result_t status,
                   const char *message, int direct, const uint8_t *data, size_t len, void *own);

/* 1 when the job's ring is this node alone: ops bound for it run here without a data plane. */
int rd_world_solo(const rd_world *w);

/* Runs t on the ring; the task_done event follows on the loop. */
void rd_world_submit(rd_world *w, struct rd_xfer_task *t);

/* The ring, for status (allocated; rd_world_describe_free releases it). NULL when out of memory. */
Ringd__RingInfo *rd_world_describe(const rd_world *w);
void rd_world_describe_free(Ringd__RingInfo *ri);

#endif
