/* Jobs that span nodes: the daemon's rendezvous and peer listener, and for each such job its
 * registration, the ring's membership and links at each generation (data connections to the
 * next node, control links along a tree of the ring's nodes, which carry the engine's
 * scheduling messages to the channel's subscribers, rd_world_subscribe) and the data plane. Loop
 * thread only. */
#ifndef RD_WORLD_H
#define RD_WORLD_H

#include <stddef.h>
#include <stdint.h>

#include "ringd.h"
#include "report.h"
#include "schedmsg.h"

#include "config.h"
#include "counters.h"
#include "ringchan.h"
#include "status.h"

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
/* The rings this node has left whose other nodes' messages it still passes on (a daemon that
 * shuts down after a drain waits for none, --peer-timeout at most). */
int rd_net_leaving(const rd_net *net);

/* The address peers dial ("" for a NULL net), and whether Redis is connected. */
const char *rd_net_address(const rd_net *net);
int rd_net_redis_connected(const rd_net *net);

/* The round trip of the last rendezvous command in microseconds (rd_rdv_rtt_us); -1: none. */
int64_t rd_net_redis_rtt_us(const rd_net *net);

/* The name of the network interface that holds the address peers dial (--advertise) into buf:
 * returns 0, or -1 when it is a host name or no interface here holds it. */
int rd_net_interface(const rd_net *net, char *buf, size_t len);

/* What a job's ring must wait for before it seals for a graceful change (or, sealed, before it
 * gives up on --peer-timeout), as the job says (awaits_order). */
typedef enum {
    RD_AWAIT_NOTHING,     /* nothing: the ring may seal and re-form */
    RD_AWAIT_ORDER,       /* negotiated ring-bound ops wait for an order */
    RD_AWAIT_NEGOTIATION, /* orders wait for ops to be negotiated here, or ordered work is still
                             to cross (device passes gathering, passes queued behind them) */
    RD_AWAIT_CROSSING,    /* ordered work crosses nodes outside rd_world_submit (device passes on
                             NCCL or staged: their transport bounds them) */
} rd_world_await;

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
    /* The ring of the current generation ended, up or not: before the subscribers of its
     * control channel hear so (rd_world_subscribe), and before ring_down when it was up. May be
     * NULL. */
    void (*ring_ended)(void *arg);
    /* What the ring must wait for before it may seal for a graceful change. */
    rd_world_await (*awaits_order)(void *arg);
    /* A ring task submitted with rd_world_submit ended: on the loop, possibly after ring_down
     * and ring_lost, even after the next ring_up (a broken ring's data plane retires off the
     * loop, its running task cut). */
    void (*task_done)(void *arg, struct rd_xfer_task *t);
} rd_world_events;

/* The multi-node side of job (world_size > local_size), reporting to ev with arg (the structure
 * is copied). Returns NULL when out of memory. */
rd_world *rd_world_new(rd_net *net, const char *job, uint32_t world_size, uint32_t min_size,
                       uint32_t local_size, const rd_world_events *ev, void *arg);

/* Leaves the rendezvous, closes the links, ends the ring's tasks; the job hears nothing more
 * from w. A world that is leaving its ring gracefully (rd_world_leave, rd_world_abandon) keeps
 * its control links with the net, passing the other nodes' messages on along the control tree,
 * until its neighbours let go or --peer-timeout passes (rd_net_free ends it at the latest). NULL
 * is a no-op. */
void rd_world_free(rd_world *w);

/* Every local client is there: joins the rendezvous. */
void rd_world_register(rd_world *w);

/* The job has no local clients left (or must go now): leaves the rendezvous; a ring that is up
 * or forming is left gracefully (Bye, see rd_world_leave), so the others finish what this node
 * announced, and carry over what they hold. */
void rd_world_unregister(rd_world *w);

/* The last local client of a running job left without a drain (it closed, or died): a loss. The
 * node leaves as a drain does (Bye: what every node announced still finishes, on every node
 * alike, the rest carries over), and the Bye says why (cut to RD_WORLD_LOSS_MAX bytes): the next
 * ring's clients re-synchronise, told who left, on their next answer. */
#define RD_WORLD_LOSS_MAX 512
void rd_world_abandon(rd_world *w, const char *why);

/* The job's local clients changed (now local_size of them): a ring that runs is torn down (ops
 * doomed, see ring_down) and the node registers again with its new local size. */
void rd_world_resize(rd_world *w, uint32_t local_size, const char *why);

/* Draining: once nothing is under way, tells every node it leaves (Bye), leaves the rendezvous
 * and closes the links. Returns 1 when it has left. */
int rd_world_leave(rd_world *w);

/* Something only a new ring settles (why): the ring breaks and re-forms; ops not moving data fail
 * with RINGD_E_MEMBERSHIP and why once it is back. Nothing while the ring is not up. */
void rd_world_reform(rd_world *w, const char *why);

/* Why the job has no ring, for messages ("2 of min_size 3 ranks on 2 nodes"). */
void rd_world_detail(const rd_world *w, char *buf, size_t len);

/* 1 when the ring is complete and its links are up: ops may be negotiated. */
int rd_world_up(const rd_world *w);

/* Sends m, stamped with the generation of the ring formed or forming, to the nodes at positions
 * to[0..nto) of the current ring, or with to NULL to every other node, along the control tree
 * (nodes whose way is not made yet get it once it is). Out of memory, the ring is dropped and
 * nothing more goes out at this generation. */
void rd_world_send(rd_world *w, const int *to, int nto, const rd_schedmsg *m);

/* While the ring is up, a node holds the other nodes' announcements (Ready) it passes on until
 * the engine says they are wanted, for 20 ms at most, and a frame's worth at most per
 * neighbour: a node's own messages, and everything else, go at once or at the end of the loop
 * turn, with what is held before them. What the engine releases at the end of this loop turn
 * (rd_neg_news): what goes up the control tree (an op every node below this one has
 * announced), what goes down (an op every node has announced), or both. Per origin, order holds
 * as ever: a release only says when. */
#define RD_RELEASE_UP 1u
#define RD_RELEASE_DOWN 2u
void rd_world_release(rd_world *w, unsigned what);

/* 1 when the announcements of the node at position reach the coordinator through this node in
 * the control tree (this node's own included), at the ring formed or forming. */
int rd_world_below(const rd_world *w, int position);

/* 1 while the ring is sealed for a graceful change: nothing more is announced or ordered at
 * this generation. */
int rd_world_sealed(const rd_world *w);

/* Work the job ran outside rd_world_submit (awaits_order said so) ended: a ring sealed for a
 * graceful change may re-form now. */
void rd_world_settle(rd_world *w);

/* The node at position of the ring that is up did not take its part in time (why): it is set
 * aside as a node this node cannot reach (evicted from the rendezvous, that incarnation only:
 * the node registers again when it sees it). The caller re-forms the ring (rd_world_reform). */
void rd_world_set_aside(rd_world *w, int position, const char *why);

/* A node sent something impossible, or this node cannot go on with the ring (why, logged): it
 * breaks and re-forms, while it is connecting or up (else nothing is left to break). */
void rd_world_drop(rd_world *w, const char *why);

/* Subscribes ch (copied) with arg to the control channel of the job's ring (see rd_ring_channel
 * for what it hears and when): subscribers hear in the order they subscribed, ended in reverse.
 * A scheduling message of a kind no subscriber takes drops the ring (rd_world_drop). Returns a
 * handle for rd_world_unsubscribe, or -1 when RD_RINGCHAN_MAX subscribe already. Not from within
 * one of the channel's calls. */
int rd_world_subscribe(rd_world *w, const rd_ring_channel *ch, void *arg);

/* Ends the subscription of handle (before its arg goes); w NULL or handle -1 is a no-op. Not
 * from within one of the channel's calls. */
void rd_world_unsubscribe(rd_world *w, int handle);

/* 1 when the job's ring is this node alone: ops bound for it run here without a data plane. */
int rd_world_solo(const rd_world *w);

/* Runs t on the ring; the task_done event follows on the loop. */
void rd_world_submit(rd_world *w, struct rd_xfer_task *t);

/* The ring as this node sees it, for status, into *r: its members array is allocated with
 * malloc and belongs to r from then on (rd_daemon_status_free releases it with the status r is part
 * of); its strings are borrowed from w. Returns RINGD_OK, or RINGD_E_NOMEM (r holds nothing). */
rd_status rd_world_describe(const rd_world *w, rd_world_status *r);

#endif
