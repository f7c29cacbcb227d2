/* The device transport of a multi-node job's ring, agreed afresh at every generation over the
 * ring's authenticated control links (never through Redis):
 *   1. once the ring is up, every node offers what it can to the coordinator (DevOffer);
 *   2. the coordinator decides for the whole generation (rd_devplan_decide) and sends its plan
 *      to every node (DevPlan): the TCP ring, or NCCL with a unique id it made for this
 *      generation alone;
 *   3. under NCCL each node starts its communicator with that id, rank = its ring position, and
 *      confirms to the coordinator that it joined, then that it formed (DevConfirm);
 *   4. the generation's transport is settled on a node once its plan is TCP, or once its own
 *      communicator formed; the coordinator, once every node's has.
 * Every wait is bounded by timeout_ms (--peer-timeout; twice that on the nodes that wait for
 * the coordinator, which acts first): a node that does not join in time is named for setting
 * aside, like a node the ring cannot reach; a communicator that fails, or
 * joins and does not form in time, fails the generation and the ring re-forms. What comes from
 * another generation is ignored; what a node of this generation could not have sent is refused.
 * Pure protocol: messages, communicators and time are the caller's (rd_devplan_events).
 * Loop thread only. */
#ifndef RD_DEVPLAN_H
#define RD_DEVPLAN_H

#include <stddef.h>
#include <stdint.h>

#include "schedmsg.h"

/* What a node offers for a generation (a DevOffer). */
typedef struct {
    int want;        /* its --gpu-transport: RD_DEV_WANT_AUTO, _NCCL or _TCP */
    int device;      /* 1: every rank of the job on it passes device memory */
    int can;         /* 1: it can form an NCCL communicator (library, GPU) */
    const char *why; /* can 0: why not */
    const char *gpu; /* the UUID of the GPU its communicator would use; NULL or "": none known */
} rd_devplan_offer;

/* The transport of a generation for offers[0..n) of the nodes named names[0..n), in ring
 * order: RD_DEV_NCCL when no node wants TCP, every node's ranks pass device memory and every
 * node can form a communicator on a GPU of its own; else RD_DEV_TCP, with why naming the first
 * node that stands in the way ("node b: no NCCL library"), or two nodes on one GPU (NCCL takes
 * one rank per GPU: daemons of one machine sharing its GPUs). A node that wants NCCL does not
 * change the choice: it only makes a TCP plan an error for its device ops
 * (rd_devplan_required). */
int rd_devplan_decide(const rd_devplan_offer *offers, const char *const *names, int n, char *why,
                      size_t len);

typedef enum {
    RD_DEVPLAN_IDLE,     /* no ring of a generation */
    RD_DEVPLAN_LINKING,  /* the ring forms: the coordinator keeps the offers that come early */
    RD_DEVPLAN_OFFERING, /* this node's offer made; the coordinator collects every node's */
    RD_DEVPLAN_JOINING,  /* NCCL: this node's communicator is starting */
    RD_DEVPLAN_FORMED,   /* NCCL: this node's communicator formed; the coordinator waits for
                            every other node's */
    RD_DEVPLAN_NCCL,     /* settled: device ops cross nodes on NCCL */
    RD_DEVPLAN_TCP,      /* settled: device ops cross nodes on the TCP ring, through the host */
    RD_DEVPLAN_FAILED,   /* NCCL failed this generation: the ring re-forms */
    RD_DEVPLAN_NSTATES
} rd_devplan_state;

const char *rd_devplan_state_name(rd_devplan_state st);

/* Calls to the owner (the job), arg being the one given to rd_devplan_new. */
typedef struct {
    /* Sends m (DevOffer, DevPlan or DevConfirm) to the node at position to, or with to -1 to
     * every other node. */
    void (*send)(void *arg, int to, const rd_schedmsg *m);
    /* Coordinator, NCCL planned: a new unique id into id (*len bytes, at most
     * RD_SCHEDMSG_ID_MAX). Returns 0, or -1 with err set. */
    int (*make_id)(void *arg, uint8_t *id, size_t *len, char *err, size_t errlen);
    /* Starts this node's communicator: rank of nranks, from id[0..len). Returns 0 once started
     * (rd_devplan_formed follows), or -1 with err set. */
    int (*join)(void *arg, const uint8_t *id, size_t len, int nranks, int rank, char *err,
                size_t errlen);
    /* The generation's transport is settled: state RD_DEVPLAN_NCCL or RD_DEVPLAN_TCP (why says
     * why not NCCL). */
    void (*settled)(void *arg, rd_devplan_state st, const char *why);
    /* The generation failed (why): the ring must re-form. aside[0..naside): positions of nodes
     * that never offered or joined, to be set aside as nodes that cannot be reached. nccl 1:
     * NCCL itself failed (a communicator that could not start, failed, or never formed with
     * every node joined), not a node that went quiet. The owner ends this node's communicator
     * (rd_devplan_end follows with the ring's end). */
    void (*failed)(void *arg, const char *why, const int *aside, int naside, int nccl);
} rd_devplan_events;

typedef struct rd_devplan rd_devplan;

/* A protocol reporting to ev with arg (ev copied). Returns NULL when out of memory. */
rd_devplan *rd_devplan_new(const rd_devplan_events *ev, void *arg);

/* NULL is a no-op. */
void rd_devplan_free(rd_devplan *d);

/* The ring of generation forms with nnodes nodes named names[0..nnodes) (copied), this node at
 * position, the coordinator at 0: offers of nodes whose ring is up already are kept from now on.
 * Waits end timeout_ms after this node offers. Returns 0, or -1 when out of memory. */
int rd_devplan_start(rd_devplan *d, uint64_t generation, int nnodes, int position,
                     const char *const *names, int64_t timeout_ms);

/* The ring is up: this node offers own (its strings copied) at now_ms. A ring of one node
 * settles on TCP at once (nothing crosses nodes). Returns 0, or -1 when out of memory. */
int rd_devplan_up(rd_devplan *d, const rd_devplan_offer *own, int64_t now_ms);

/* The ring of the generation ended: back to idle (the owner ends any communicator). */
void rd_devplan_end(rd_devplan *d);

/* A DevOffer, DevPlan or DevConfirm (decoded) from the node at position from, come at now_ms.
 * One of another generation, or come while idle or failed, is ignored (returns 0). Returns 0, or -1
 * with err set when no node of this generation could have sent it (an offer to a node that is not
 * the coordinator, a plan from one, a second offer or plan, a confirm before the plan or out of
 * order): the caller drops the ring. */
int rd_devplan_message(rd_devplan *d, int from, const rd_schedmsg *m, int64_t now_ms, char *err,
                       size_t errlen);

/* This node's communicator, started by join, formed (ok 1) or failed (ok 0, why). Ignored
 * unless this node is joining. */
void rd_devplan_formed(rd_devplan *d, int ok, const char *why);

/* When rd_devplan_tick is next due (ms, the clock of now_ms), or 0 while nothing waits. */
int64_t rd_devplan_deadline(const rd_devplan *d);

/* The clock: a wait past its deadline fails the generation (naming the nodes that never joined
 * to the coordinator). */
void rd_devplan_tick(rd_devplan *d, int64_t now_ms);

rd_devplan_state rd_devplan_state_of(const rd_devplan *d);
uint64_t rd_devplan_generation(const rd_devplan *d);

/* Why the generation is on TCP, or failed ("" otherwise); owned by d, valid until it changes. */
const char *rd_devplan_why(const rd_devplan *d);

/* 1 when some node of a settled TCP generation wants NCCL (--gpu-transport nccl): device ops
 * must then fail with rd_devplan_why rather than cross through the host. */
int rd_devplan_required(const rd_devplan *d);

#endif
