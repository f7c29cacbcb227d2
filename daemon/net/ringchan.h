/* Who hears the control channel of a job's ring: a small fixed table of subscribers (the
 * scheduler, the device-transport agreement), and the fan-out of the channel's news to them in a
 * fixed order. Pure: no I/O, no allocation. Loop thread only. */
#ifndef RD_RINGCHAN_H
#define RD_RINGCHAN_H

#include <stdint.h>

#include "schedmsg.h"

#include "status.h"

/* A node of a ring, for the engine's table and messages. */
typedef struct {
    const char *node;
    uint32_t first_rank, local_size;
} rd_ring_node;

/* A subscriber to the control channel of a job's ring; arg is the one given with it. A callback
 * may be NULL (nothing to hear). Every call is on the loop thread. */
typedef struct {
    /* Bit (1u << RD_SCHEDMSG_x) for each kind of scheduling message it takes. */
    uint32_t kinds;
    /* The ring of generation forms with nodes[0..nnodes) (valid during the call), this node at
     * position: messages of that generation may come from now on. Returns RINGD_OK, or
     * RINGD_E_NOMEM: the ring waits for the next view (the subscribers after it hear nothing;
     * ended comes later as usual). */
    rd_status (*forming)(void *arg, uint64_t generation, int nnodes, int position,
                         const rd_ring_node *nodes);
    /* The ring of the current generation ended, up or not (before the job hears ring_down when
     * it was up). It may come without a forming before it: then there is nothing to end. */
    void (*ended)(void *arg);
    /* A scheduling message of one of its kinds (decoded and checked, valid during the call) of
     * the current generation from the node at position from, while the ring forms or is up. */
    void (*message)(void *arg, int from, const rd_schedmsg *m);
    /* The ring seals for a graceful change, or this node leaves it: what it has queued goes out
     * now, before this node's Bye. */
    void (*flush)(void *arg);
} rd_ring_channel;

#define RD_RINGCHAN_MAX 4 /* subscribers of one ring */

/* The subscribers of one ring, in the order they subscribed. Zeroed is empty. */
typedef struct {
    rd_ring_channel ch[RD_RINGCHAN_MAX];
    void *arg[RD_RINGCHAN_MAX];
    int handle[RD_RINGCHAN_MAX];
    int n;
    int next_handle;
    int calling; /* inside a fan-out: the table may not change */
} rd_ringchan;

/* Adds ch (copied) with arg after the subscribers t has. Returns its handle (0 or more, never
 * reused) for rd_ringchan_unsubscribe, or -1 when t is full. Not from within a fan-out. */
int rd_ringchan_subscribe(rd_ringchan *t, const rd_ring_channel *ch, void *arg);

/* Removes the subscriber of handle (an unknown handle or -1 is a no-op); the others keep their
 * order. Not from within a fan-out. */
void rd_ringchan_unsubscribe(rd_ringchan *t, int handle);

/* forming to every subscriber in order, stopping at the first that fails: returns RINGD_OK or
 * that failure. */
rd_status rd_ringchan_forming(rd_ringchan *t, uint64_t generation, int nnodes, int position,
                              const rd_ring_node *nodes);

/* ended to every subscriber, the last to subscribe first. */
void rd_ringchan_ended(rd_ringchan *t);

/* m to every subscriber that takes its kind, in order. Returns how many took it: 0 means nothing
 * on this node takes that kind. */
int rd_ringchan_message(rd_ringchan *t, int from, const rd_schedmsg *m);

/* flush to every subscriber in order. */
void rd_ringchan_flush(rd_ringchan *t);

#endif
