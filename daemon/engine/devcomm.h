/* A multi-node job's device communicator: runs the device transport's agreement (devplan.h) at
 * every ring generation with the device backend's transport (NCCL), the world's control links
 * and a timer of its own; aborts the communicator when the ring ends; sets aside the nodes that
 * never joined and re-forms the ring when NCCL fails. One per job spanning nodes, for its life.
 * Loop thread only. */
#ifndef RD_DEVCOMM_H
#define RD_DEVCOMM_H

#include <stdint.h>

#include "backend.h"
#include "config.h"
#include "ringd.h"
#include "schedmsg.h"
#include "world.h"

struct event_base;

typedef struct rd_devcomm rd_devcomm;

#define RD_DEVCOMM_GPUS 64

/* Which job's communicator holds each GPU of this daemon. NCCL needs the collectives of
 * communicators that share a GPU run in one order on every rank, or they can deadlock; jobs
 * coordinated apart cannot promise that, so a GPU carries one job's NCCL communicator at a
 * time, and another job on it crosses nodes on the TCP ring (saying why) until it is free.
 * One per engine, zeroed; loop thread. */
typedef struct {
    const rd_devcomm *holder[RD_DEVCOMM_GPUS];
} rd_devcomm_gpus;

/* News for whoever orders device ops (the job's scheduler: rd_sched_settled). */
typedef struct {
    /* The generation's device transport is settled: nccl 1 (device ops cross on NCCL) or 0
     * (the TCP ring, through the host). Ops may be ordered from now on. */
    void (*settled)(void *arg, int nccl);
} rd_devcomm_events;

/* The communicator of job (its world w, borrowed), among the daemon's others on gpus
 * (borrowed), reporting to ev with arg (copied). It hears the ring's control channel itself
 * (DevOffer, DevPlan, DevConfirm, the ring forming and ending) through rd_world_subscribe; the
 * functions below for those are what it calls. Returns NULL when out of memory. */
rd_devcomm *rd_devcomm_new(struct event_base *base, const rd_config *cfg, rd_devcomm_gpus *gpus,
                           rd_world *w, const char *job, const rd_devcomm_events *ev, void *arg);

/* Aborts the communicator, its pending collectives never reported (their job goes with them).
 * NULL is a no-op. */
void rd_devcomm_free(rd_devcomm *c);

/* The ring of generation forms with nodes[0..nnodes), this node at position. Returns RINGD_OK,
 * or RINGD_E_NOMEM. */
rd_status rd_devcomm_ring_forming(rd_devcomm *c, uint64_t generation, int nnodes, int position,
                                  const rd_ring_node *nodes);

/* What this node brings to the ring: whether every local rank of the job has a device arena
 * (device 1), local rank 0's GPU (its index and UUID, borrowed), and the transport of their
 * backend (NULL: none). */
typedef struct {
    int device;
    int gpu;
    const char *gpu_uuid;
    const rd_transport_ops *ops;
} rd_devcomm_local;

/* The ring is up: this node offers what local allows. */
void rd_devcomm_ring_up(rd_devcomm *c, const rd_devcomm_local *local);

/* The ring of the generation ended: the communicator is aborted. NULL is a no-op. */
void rd_devcomm_ring_ended(rd_devcomm *c);

/* A DevOffer, DevPlan or DevConfirm of the current generation from the node at position from. */
void rd_devcomm_message(rd_devcomm *c, int from, const rd_schedmsg *m);

/* A collective on NCCL ended: ok, or failed (why). A failure may be a peer that went away, not
 * NCCL: only when collectives failed at two generations in a row, none succeeding between,
 * does an auto job's device tensors cross on the TCP ring from then on (this node offers no
 * NCCL). */
void rd_devcomm_outcome(rd_devcomm *c, int ok, const char *why);

/* 1 once the generation settled on NCCL. */
int rd_devcomm_nccl(const rd_devcomm *c);

/* Why device ops of the settled generation must fail (--gpu-transport nccl, and NCCL cannot
 * run), or NULL when they may run. */
const char *rd_devcomm_refusal(const rd_devcomm *c);

/* The ring position of the node holding global rank, or -1. */
int rd_devcomm_position_of(const rd_devcomm *c, uint32_t rank);

/* Ranks on every node when every node has as many (an NCCL allgather takes equal parts), else
 * 0. */
uint32_t rd_devcomm_even(const rd_devcomm *c);

/* Queues one collective on the generation's NCCL communicator (rd_transport_ops.run: count
 * elements per NCCL rank; root a ring position): done follows on the loop. Returns 0, or -1
 * with err set (done is not called). */
int rd_devcomm_run(rd_devcomm *c, struct event_base *base, int coll, rd_dtype dt, rd_redop op,
                   const void *in, void *out, size_t count, int root, rd_backend_done_fn done,
                   void *arg, char *err, size_t errlen);

/* For status: the generation's transport ("nccl", "tcp", or how far the agreement came) and
 * why (""), both owned by c and valid until it changes. */
void rd_devcomm_describe(const rd_devcomm *c, const char **transport, const char **why);

#endif
