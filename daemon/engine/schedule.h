/* Scheduling of a multi-node job's ops, the protocol its nodes run over the ring's control links:
 * each node announces the ops its ranks all submitted (Ready) to every other node; the
 * negotiation table says when every node has announced one, and how it ends (failed, direct, or
 * bound for the ring); the coordinator (the ring's first node) orders those bound for the ring
 * (Go), and every node runs each ordered batch once all its ops are negotiated there, fusing
 * small allreduces into one ring pass. Stalled ops are ended alike on every node (Ready.stalled).
 * One per job, for its life; the table lives from a ring's forming to its end. Loop thread only.
 */
#ifndef RD_SCHEDULE_H
#define RD_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "negotiate.h"
#include "ringd.h"
#include "schedmsg.h"
#include "world.h"

struct event_base;

typedef struct rd_sched rd_sched;

/* News for the job, which owns the ops (own: the job's handle of one of its ops). */
typedef struct {
    /* Every node has announced this node's op own: e says failed (status, message), direct (the
     * result in e->data) or bound for the ring (status 0, not direct). Returns 1 with *p set to
     * its params when own now waits for the coordinator's order (the scheduler keeps it until
     * it starts, the ring ends, or rd_sched_forget); 2 when the job keeps it for now, bound for
     * the ring, and hands it over later itself (rd_sched_keep: a group's members go together);
     * else 0. */
    int (*negotiated)(void *arg, void *own, const rd_neg_outcome *e, rd_op_params *p);
    /* Another node announced that the op named name (params p) failed there, or the
     * announcements disagree: the oldest op of that name this node has not announced fails with
     * status and message, and is announced failed (rd_sched_announce). */
    void (*failed_elsewhere)(void *arg, const char *name, const rd_op_params *p, uint32_t status,
                             const char *message);
    /* Runs owns[0..n) on the ring as one pass: one op, or n allreduces that fuse, in segments
     * and over the connections that tuning u (the order's) says. */
    void (*start)(void *arg, void **owns, size_t n, const rd_tuning *u);
    /* Another node announced an op, perhaps one this node has not (rd_sched_unannounced lists
     * them): a node whose ranks have all joined takes its part in it. Called for each op a node
     * announces, before the ops it completes are negotiated. NULL: not wanted. */
    void (*heard)(void *arg);
} rd_sched_events;

/* The scheduler of job (its world w, borrowed), reporting to ev with arg (copied). It hears the
 * ring's control channel itself (Ready and Go, the ring forming, ending and sealing) through
 * rd_world_subscribe. Returns NULL when out of memory. */
rd_sched *rd_sched_new(struct event_base *base, const rd_config *cfg, rd_world *w, const char *job,
                       const rd_sched_events *ev, void *arg);

/* NULL is a no-op. */
void rd_sched_free(rd_sched *s);

/* The ring is up: failures other nodes announced while this node connected end its ops now. */
void rd_sched_ring_up(rd_sched *s);

/* A new ring starts held: the coordinator's orders wait, queued, while the generation's device
 * transport is agreed (every node must know it before any op runs). rd_devcomm_events.settled
 * with the scheduler as arg: the transport is settled (nccl: on NCCL), orders go. */
void rd_sched_settled(void *arg, int nccl);
int rd_sched_held(const rd_sched *s);

/* own, an op the negotiated event kept for the coordinator's order, ends before it starts: the
 * scheduler lets go of it. NULL s or an own it does not hold is a no-op. */
void rd_sched_forget(rd_sched *s, const void *own);

/* Keeps own (named name, params p), negotiated for the ring, for the coordinator's order, which
 * the coordinator extends with it: what negotiated returning 1 does, for ops the job kept
 * back (returned 2) until now. Every node must keep its ops of a batch in the same order. */
void rd_sched_keep(rd_sched *s, void *own, const char *name, const rd_op_params *p);

/* Returns 0 when the ring cannot take announcements now (forming, or sealed for a graceful
 * change: the op is held and nothing happened to it), else 1 once it announced to every node
 * that this node's ranks all submitted name with p, or that it failed here (status non-zero,
 * message). A direct op carries this node's contribution in data[0..len). Once every node has
 * announced it, the negotiated event follows, and for an op bound for the ring its start in
 * the coordinator's order. */
int rd_sched_announce(rd_sched *s, const char *name, const rd_op_params *p, rd_status status,
                      const char *message, int direct, const uint8_t *data, size_t len, void *own);

/* The nodes that have not announced the op named name (own: this node's announced op, or NULL
 * for one this node has not announced), as "ranks 2-3 (node n1)"; "" when not known. */
void rd_sched_missing(const rd_sched *s, const char *name, const void *own, char *buf, size_t len);

/* This node's announced op own, named name, waited past --stall-abort (message says for whom):
 * asks the nodes that have not announced it to announce it failed (RINGD_E_STALLED), which
 * ends it alike on every node. Nothing while the ring is not up. */
void rd_sched_stalled(rd_sched *s, const char *name, const void *own, const char *message);

/* The ops other nodes announced and this node has not (rd_neg_unannounced), while the ring is
 * up; else none. */
size_t rd_sched_unannounced(const rd_sched *s, rd_neg_unheard *out, size_t max);

/* 1 while orders of the coordinator wait for their ops to be negotiated here. */
int rd_sched_orders_waiting(const rd_sched *s);

/* Starts the queued orders, in order, while every op of the next is negotiated here. */
void rd_sched_run(rd_sched *s);

/* The tuning the ring's orders carry (none before the first), and the coordinator's autotune
 * figures, into ws. NULL is a no-op. */
void rd_sched_describe(const rd_sched *s, rd_world_status *ws);

/* Fusion, the same on every node since it depends only on the batch and the agreed params:
 * allreduces of p[0..n) smaller than threshold bytes that agree on dtype, op and scales share a
 * group of at most threshold bytes, groups numbered in the order of their first op; group[i] is
 * SIZE_MAX for an op that runs alone (device memory always does: it has no fusion buffer).
 * Returns the number of groups, or SIZE_MAX when out of
 * memory (then nothing may start: every node must group alike). */
size_t rd_sched_group(const rd_op_params *p, size_t n, uint64_t threshold, size_t *group);

#endif
