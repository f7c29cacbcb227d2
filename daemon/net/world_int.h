/* The inside of a job's ring, shared by the files world.c is split into: world.c (the ring's
 * states, views and graceful changes), world_links.c (making the links of a generation),
 * world_ctrl.c (the control channel), world_plane.c (the data plane glue) and world_net.c (the
 * daemon's rendezvous and peer listener). Private to them: the engine sees world.h only. Loop
 * thread only. */
#ifndef RD_WORLD_INT_H
#define RD_WORLD_INT_H

#include <stddef.h>
#include <stdint.h>

#include "world.h"

#include "auth.h"
#include "ctrltree.h"
#include "peer.h"
#include "rendezvous.h"
#include "ringchan.h"
#include "xfer.h"

struct event;
struct retiring;

#define RD_WORLD_RETRY_MS 100
/* Bytes of Relays a node holds for its neighbours, at least, as its limit (those whose links are
 * being made hold theirs until they are); RD_CTRL_QUEUED_FRAMES of the largest frames when that
 * is more: four, and for each of at most RD_CTRL_FANOUT + 1 neighbours the frame's worth it may
 * hold (world_ctrl.c) and the Relay that tips it over. */
#define RD_CTRL_QUEUED_MIN (64u << 20)
#define RD_CTRL_QUEUED_FRAMES (4 + 2 * (RD_CTRL_FANOUT + 1))
/* The longest a node holds announcements it passes on that the engine has not released
 * (rd_world_release): long against a small op, short against the stall inspector, which reads
 * who has announced what. */
#define RD_CTRL_HOLD_MS 20

struct rd_net {
    struct event_base *base;
    const rd_config *cfg;
    rd_counters *counters;
    rd_auth_key key;
    rd_peer_net *peers; /* the listener and dialler of authenticated links */
    rd_rdv *rdv;
    uint64_t incarnation;
    char address[RD_ADDR_MAX];
    rd_world *worlds; /* every multi-node job's */
};

/* The ring of a job on this node (world.c holds the names and the table of legal moves). */
typedef enum {
    W_IDLE,       /* not registered: the job lacks local clients */
    W_WAITING,    /* registered; the membership does not make a complete ring yet */
    W_CONNECTING, /* complete at this generation: links being made */
    W_UP,         /* links up: ops run */
    W_SEALED,     /* up, sealed for a graceful change (a node said Bye): nothing more is
                     announced or ordered at this generation; ends once every node sealed and
                     the ring's passes are done, or at --peer-timeout */
    W_LEAVING,    /* drained: told every node it leaves; links close as the others let go */
    W_ASIDE,      /* the other nodes could not reach this one while the ring formed: not
                     registered, registers again after a back-off once its address answers */
    W_NSTATES
} world_state;

/* What this node knows of another member of the ring at this generation. */
typedef enum {
    M_ACTIVE,  /* announces and orders as usual */
    M_SEALED,  /* said Bye: announces and orders nothing more at this generation, stays */
    M_LEAVING, /* said Bye and leaves the job */
} member_state;

/* What the next ring that comes up tells the clients. */
typedef enum {
    RS_NONE,      /* nothing: they go on (a first ring, or only a graceful change) */
    RS_BROKEN,    /* the ring broke (resync_why says how first): they re-synchronise, told what
                     changed in the membership since the last ring that was up, if anything did */
    RS_EXPLAINED, /* the membership changed as resync_why says: they re-synchronise */
} resync_state;

/* Whether Redis confirms this node's registration of the job. */
typedef enum {
    LEASE_HELD,   /* confirmed within --lease-ttl, or nothing says otherwise */
    LEASE_LAPSED, /* not confirmed for longer than --lease-ttl: the ring was given up */
} lease_state;

#define RD_ASIDE_MAX 8 /* members set aside that status still shows */
/* How a node that holds the ring key refuses a peer it is not ready for yet (peer_check): the
 * dialler keeps trying and never sets it aside for that, as it answers and only lags. */
#define RD_NOT_FORMING "is not forming generation"
#define RD_REJOIN_MAX_MS 300000 /* the longest a set-aside node waits to register again */

/* A member this node could not reach while the ring formed, evicted for it. */
typedef struct {
    char node[RD_NAME_MAX + 1];
    char addr[RD_ADDR_MAX];
    char why[256];
} aside_member;

/* The Relays for one neighbour in the control tree, oldest first: sent as one frame (or a few,
 * within --max-frame) at the end of the loop turn, once its link is made, or (announcements of
 * other nodes only, while the ring is up) once released (rd_world_release). */
typedef struct {
    Ringd__Relay **items;
    size_t n, cap;
    size_t bytes; /* rd_relay_size of the items */
    int urgent;   /* something in it may not wait (or it holds a frame's worth): all of it goes
                     at the turn's end */
} ctrl_queue;

/* One outbound connection being made, retried until the generation changes. */
typedef struct {
    rd_world *w;
    int kind, index;
    rd_peer_dial *dial;
    struct event *retry;
    int fd;
    rd_seal seal; /* fd's keys (--encrypt) */
} slot;

/* How the ring of a generation ends (world_teardown). */
typedef enum {
    TD_CARRY, /* a graceful change: ops under negotiation go on at the next ring */
    TD_FAIL,  /* the ring broke or changed: ops not moving data are doomed, clients resync */
    TD_LEAVE, /* this node leaves the job: what is not moving data fails */
    TD_END,   /* the job or the daemon ends here: everything is cut short */
} teardown_how;

struct rd_world {
    rd_net *net;
    char name[RD_NAME_MAX + 1]; /* the job's */
    uint32_t world_size, min_size, local_size;
    rd_world_events ev; /* news for the job */
    void *arg;
    rd_ringchan chan; /* who hears the control channel */
    world_state state;
    rd_rdv_view view;   /* the membership the ring is formed (or waits) with */
    rd_rdv_view latest; /* the rendezvous' last word, adopted once the ring can change */
    uint64_t generation;
    int position, nnodes;
    uint32_t first_rank;
    slot out_data[RD_RING_CONNS_MAX];
    slot out_ctrl[RD_RING_NODES_MAX]; /* to the parent in the control tree */
    slot out_pair[RD_RING_NODES_MAX]; /* alltoall's direct links to the nodes after this one */
    int pair_in[RD_RING_NODES_MAX];   /* direct links from the nodes before, for the data plane */
    rd_seal pair_in_seal[RD_RING_NODES_MAX];
    struct event *ev_pairs; /* hands pair_in to the data plane, after PeerAccept */
    int in_data[RD_RING_CONNS_MAX];
    rd_seal in_seal[RD_RING_CONNS_MAX];
    rd_peer_chan *ctrl[RD_RING_NODES_MAX]; /* with the parent and children, by position */
    /* What goes to each neighbour at the end of this loop turn, and what waits for a
     * neighbour's link while the ring forms (a node up already may send through this one). */
    ctrl_queue outq[RD_RING_NODES_MAX];
    size_t outq_bytes;
    int outq_failed; /* a Relay could not be queued: nothing more goes out at this generation,
                        so that no node hears a later message of this node's without it */
    struct event *ev_flush;
    unsigned release;      /* rd_world_release this turn */
    struct event *ev_hold; /* RD_CTRL_HOLD_MS after a node first held something: all goes */
    struct rd_xfer *xfer;
    struct retiring *xfer_link; /* made with xfer: its place on retiring, so retiring never fails */
    struct retiring *retiring;  /* data planes of earlier generations, ending */
    /* A graceful change (a node leaves through ringctl drain): every node seals the ring (Bye:
     * it announces and orders nothing more at this generation; W_SEALED), ops every node
     * announced end, and the rest carry over to the next ring. */
    member_state members[RD_RING_NODES_MAX]; /* by position, at this generation */
    resync_state resync;
    char resync_why[512];
    rd_rdv_view last_up; /* the members of the last ring that was up */
    /* Members that said they leave (Bye), kept until a ring without them is up: a view that
     * still has one is not formed (its leave is on its way to Redis), and one without them that
     * changes nothing else keeps the graceful change going, also while a ring forms. */
    rd_rdv_member left[RD_RING_NODES_MAX];
    uint8_t left_gone[RD_RING_NODES_MAX]; /* a view without it came: its leave reached Redis (if
                                             it registers again, it is a member like any other) */
    int64_t left_ms[RD_RING_NODES_MAX];   /* when it said Bye: a lease later, a view that still
                                             has it has it as a member again (it registered
                                             anew), and it is waited for no more */
    size_t nleft;
    /* Generation marks, compared with the views that come (not states: nothing else changes
     * with them): */
    uint64_t stale;              /* no ring forms at this generation or below: it broke */
    uint64_t deferred;           /* a view whose departures were deferred once, waiting for Byes */
    struct rd_peer_probe *probe; /* is a node whose link broke still there? */
    rd_rdv_member probing;       /* that node */
    int probes;                  /* probes of it so far */
    size_t ntasks;               /* ring passes submitted to the current data plane, not done */
    uint64_t since;              /* when this node first registered the job: its ring order */
    int was_up;                  /* has been in a ring of the job */
    struct event *ev_reform;
    char reform_why[512];    /* why rd_world_reform asked for it ("": the links broke) */
    struct event *ev_grace;  /* W_SEALED: gives up on seals after --peer-timeout */
    struct event *ev_defer;  /* applies a deferred view */
    struct event *ev_linger; /* leaving: closes the links left open */
    struct event *ev_lapse;  /* keepalives; looks whether this node is cut off */
    lease_state lease;
    /* Left, and its job ended (rd_world_free while W_LEAVING): the net owns it, the job hears
     * nothing more, and it is freed once it stops passing messages on (on_linger). */
    int orphaned;
    int64_t heard[RD_RING_NODES_MAX]; /* last control message from each neighbour (ms) */
    int64_t told[RD_RING_NODES_MAX];  /* last control message sent to each neighbour (ms) */
    struct event *ev_check;           /* runs maybe_up on the next turn */
    /* Reachability while the ring forms: the last failure of a dial to each member ("" when
     * none, or once a dial to it succeeded); past --peer-timeout, members this node cannot reach
     * are set aside (evicted, listed in aside), and this node, when nothing came from some
     * member, sets itself aside (W_ASIDE, why in self_aside). */
    char unreach[RD_RING_NODES_MAX][256];
    struct event *ev_connect;
    int64_t connect_ms; /* when the ring began connecting */
    aside_member aside[RD_ASIDE_MAX];
    int naside;
    char self_aside[512];
    int64_t rejoin_ms;       /* the next back-off of a set-aside node */
    struct event *ev_rejoin; /* W_ASIDE: dials this node's own address, then registers */
    rd_peer_dial *self_dial;
    /* throughput sampling */
    uint64_t bytes_sent, bytes_recv; /* of earlier generations */
    uint64_t pair_bytes;             /* over direct links, both ways, of earlier generations */
    uint64_t last_sent, last_recv;
    double rate_sent, rate_recv;
    int64_t last_sample_ms;
    struct event *ev_sample;
    rd_world *next; /* in net->worlds */
};

/* world_links.c: data plane x wants direct links (rd_xfer_pair_wanted): when it is the
 * generation's, dials those it must, after making room in the node's pool of them. xfer's
 * pairs_wanted. */
void world_pairs_wanted(void *arg, struct rd_xfer *x);

/* world.c: the ring's states and views. */

/* The name of state st, for logs and status. */
const char *world_state_name(world_state st);
/* Moves the ring to st (staying is no move), logging it; a move the table does not allow is a
 * programmer error. */
void world_set_state(rd_world *w, world_state st);
/* 1 while the ring of this generation is up, sealed or not. */
int world_ring_up(const rd_world *w);
/* 1 while this generation's links exist or are being made. */
int world_ring_linked(const rd_world *w);
/* Moves the member at position i to st, only forward (teardown makes every member active). */
void world_member_set(rd_world *w, int i, member_state st);
/* What the next ring tells the clients becomes st, why saying it (NULL: keeps the reason). */
void world_resync_set(rd_world *w, resync_state st, const char *why);
/* --conns-per-link, and the member at position pos of the current view (borrowed). */
int world_conns(const rd_world *w);
const rd_rdv_member *world_member(const rd_world *w, int pos);

/* m said it leaves the job (Bye): remembered in w->left until a ring is up. */
void world_left_add(rd_world *w, const rd_rdv_member *m);
/* Frees v's members and zeroes it; copies src into dst (0, or -1 out of memory: dst unchanged). */
void world_view_clear(rd_rdv_view *v);
int world_view_copy(rd_rdv_view *dst, const rd_rdv_view *src);
/* Frees w whatever its state (rd_world_free keeps a leaving one). */
void world_destroy(rd_world *w);
/* Closes everything of the current generation and moves the ring to next, telling the channel's
 * subscribers (ended) and then the job (ring_down, when it was up). */
void world_teardown(rd_world *w, const char *why, teardown_how how, world_state next);
/* Every link of the generation is up (and its data plane started): the job hears ring_up. */
void world_ring_is_up(rd_world *w);
/* Schedules the ring's teardown (it broke) off the current callback. */
void world_reform_later(rd_world *w);
/* A node said Bye: this node seals the ring (flush, then its own Bye). */
void world_carry_start(rd_world *w);
/* Sealed: takes the ring down for the next view once every node sealed and nothing is pending. */
void world_carry_check(rd_world *w);
/* Applies the rendezvous' last view: waits, or (re)forms the ring at its generation. */
void world_apply_view(rd_world *w);
/* The ring broke with every node still there: the job moves to the next generation. */
void world_move_on(rd_world *w, const char *reason);

/* world_links.c: the links of a generation. */

/* Makes the dial slots and the links' timers: 0, or -1 out of memory (world_links_free frees
 * what was made). */
int world_links_init(rd_world *w);
void world_links_free(rd_world *w);
/* Cancels the dials and closes every link of the generation, data and control. */
void world_links_close(rd_world *w);
/* The view is complete: the channel's subscribers hear forming, then the links are dialled. */
void world_connect_ring(rd_world *w);
/* Once every link of the generation is there: starts the data plane, and the ring is up. */
void world_maybe_up(rd_world *w);
/* When some member's links never came though this node's own dials to it are up, says so in
 * self_aside and returns 1: the others may not reach this node. */
int world_missing_inbound(rd_world *w);
/* This node was set aside (self_aside says why): leaves the rendezvous, registers again later. */
void world_set_self_aside(rd_world *w);
/* Forgets the members set aside that are in view v now. */
void world_aside_prune(rd_world *w, const rd_rdv_view *v);
/* The job's world of that name on net, or NULL. */
rd_world *world_of(rd_net *net, const char *job);
/* The peer listener's decision on a PeerHello (rd_peer_net_new's callback; arg: the net). */
rd_status world_on_peer(void *arg, const Ringd__PeerHello *h, int fd, const rd_seal *seal,
                        const char *remote, uint64_t *generation, char *err, size_t errlen);

/* world_ctrl.c: the control channel, over the control tree. */

/* This node's parent in the control tree (ctrltree.h; -1 for the root). A node keeps control
 * links with its parent and children only, and relays the other nodes' messages along them. */
int world_tree_parent(const rd_world *w);
/* 1 when position i is this node's parent or child in the control tree. */
int world_tree_neighbour(const rd_world *w, int i);
/* The neighbour in the tree through which this node reaches position t (not its own). */
int world_tree_toward(const rd_world *w, int t);
/* The control channel's flush event: 0, or -1 out of memory (world_ctrl_free frees it). */
int world_ctrl_init(rd_world *w);
void world_ctrl_free(rd_world *w);
/* Makes the control link over fd with the neighbour at position i (replacing an earlier one),
 * its messages handled here: 0, or -1 out of memory (fd is the caller's to close). */
int world_ctrl_link(rd_world *w, int i, int fd, const rd_seal *seal);
/* Sends each neighbour whose link is made what is queued for it (called from world_maybe_up and
 * at the turn's end, never before an accepted link's PeerAccept, which the listener writes at
 * once); what waits for a link stays while the ring forms, and is dropped otherwise. */
void world_ctrl_flush(rd_world *w);
/* Flushes, then forgets what is still queued (the links of the generation close). */
void world_ctrl_close(rd_world *w);
/* Sends Bye (leaving or only sealing) to every node still reached; loss (NULL: none) says why
 * a node leaves that was not drained (its clients must re-synchronise, see Bye.loss). */
void world_send_bye(rd_world *w, int leaving, const char *loss);

/* Tells every node still reached that the ring breaks, and why (Error), sending nothing over the
 * link with the neighbour at skip (-1: none). */
void world_send_error(rd_world *w, const char *why, int skip);

/* Leaving: ends the linger (ev_linger) once no neighbour needs this node to pass messages on,
 * or at once when broke (the ring broke). */
void world_linger_check(rd_world *w, int broke);
/* Sends the keepalive to the neighbour at position i, if its link is made (counted apart). */
void world_ctrl_poke(rd_world *w, int i);

/* world_plane.c: the data plane glue. */

/* The throughput sampler: 0, or -1 out of memory (world_plane_free frees it). */
int world_plane_init(rd_world *w);
void world_plane_free(rd_world *w);
/* Starts the data plane over the generation's data connections (taken from the slots): 0, or
 * -1 with err set. */
int world_plane_start(rd_world *w, char *err, size_t errlen);
/* The data plane of the generation retires (how says whether its passes are cut), and with
 * TD_END every retiring one ends at once. */
void world_plane_retire(rd_world *w, const char *why, teardown_how how);
/* The links to the next and previous node, into r. */
void world_plane_describe(const rd_world *w, rd_world_status *r);
/* Direct links the job's retiring data planes still hold (closed as each ends). */
int world_plane_retiring_pairs(const rd_world *w);

#endif
