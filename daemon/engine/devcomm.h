/* A multi-node job's device communicator: runs the device transport's agreement (devring.h) at
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

/* The communicator of job (its world w and net, borrowed). Returns NULL when out of memory. */
rd_devcomm *rd_devcomm_new(struct event_base *base, const rd_config *cfg, rd_net *net,
                           rd_world *w, const char *job);

/* Aborts the communicator. NULL is a no-op. */
void rd_devcomm_free(rd_devcomm *c);

/* The ring of generation forms with nodes[0..nnodes), this node at position. Returns RINGD_OK,
 * or RINGD_E_NOMEM. */
rd_status rd_devcomm_ring_forming(rd_devcomm *c, uint64_t generation, int nnodes, int position,
                                  const rd_ring_node *nodes);

/* What this node brings to the ring: whether every rank of the job here passes device memory
 * (device 1), on which GPU, and the transport of their backend (NULL: none). */
typedef struct {
    int device;
    int gpu;
    const rd_transport_ops *ops;
} rd_devcomm_local;

/* The ring is up: this node offers what local allows. */
void rd_devcomm_ring_up(rd_devcomm *c, const rd_devcomm_local *local);

/* The ring of the generation ended: the communicator is aborted. */
void rd_devcomm_ring_ended(rd_devcomm *c);

/* A DevOffer, DevPlan or DevConfirm of the current generation from the node at position from. */
void rd_devcomm_message(rd_devcomm *c, int from, const rd_schedmsg *m);

/* For status: the generation's transport ("nccl", "tcp", or how far the agreement came) and
 * why (""), both owned by c and valid until it changes. */
void rd_devcomm_describe(const rd_devcomm *c, const char **transport, const char **why);

#endif
