/* Multi-node jobs: registration in the rendezvous, forming the ring's links for a generation
 * (data connections to the next node, a control connection between every two nodes, which carries
 * the engine's scheduling messages), graceful changes (seals), and handing ring passes to the data
 * plane. */
#define _GNU_SOURCE
#include "world.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <event2/event.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "counters.h"
#include "log.h"
#include "membership.h"
#include "peer.h"
#include "rendezvous.h"
#include "xfer.h"

#define RD_WORLD_RETRY_MS 100

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

static const char *const state_names[] = {"idle",   "waiting", "connecting", "up",
                                          "sealed", "leaving", "set aside"};

/* The moves set_state allows: world_moves[from] has bit 1 << to. */
#define W_BIT(s) (1u << (s))
static const unsigned world_moves[W_NSTATES] = {
    [W_IDLE] = W_BIT(W_WAITING),
    [W_WAITING] = W_BIT(W_CONNECTING) | W_BIT(W_IDLE) | W_BIT(W_ASIDE),
    [W_CONNECTING] = W_BIT(W_UP) | W_BIT(W_WAITING) | W_BIT(W_IDLE) | W_BIT(W_ASIDE),
    [W_UP] = W_BIT(W_SEALED) | W_BIT(W_WAITING) | W_BIT(W_LEAVING) | W_BIT(W_IDLE) |
             W_BIT(W_ASIDE),
    [W_SEALED] = W_BIT(W_WAITING) | W_BIT(W_LEAVING) | W_BIT(W_IDLE) | W_BIT(W_ASIDE),
    [W_LEAVING] = W_BIT(W_IDLE),
    [W_ASIDE] = W_BIT(W_WAITING) | W_BIT(W_IDLE),
};

/* What this node knows of another member of the ring at this generation. */
typedef enum {
    M_ACTIVE,  /* announces and orders as usual */
    M_SEALED,  /* said Bye: announces and orders nothing more at this generation, stays */
    M_LEAVING, /* said Bye and leaves the job */
} member_state;

static const char *const member_names[] = {"active", "sealed", "leaving"};

/* What the next ring that comes up tells the clients. */
typedef enum {
    RS_NONE,      /* nothing: they go on (a first ring, or only a graceful change) */
    RS_BROKEN,    /* the ring broke (resync_why says how first): they re-synchronise, told what
                     changed in the membership since the last ring that was up, if anything did */
    RS_EXPLAINED, /* the membership changed as resync_why says: they re-synchronise */
} resync_state;

static const char *const resync_names[] = {"none", "broken", "explained"};

/* Whether Redis confirms this node's registration of the job. */
typedef enum {
    LEASE_HELD,   /* confirmed within --lease-ttl, or nothing says otherwise */
    LEASE_LAPSED, /* not confirmed for longer than --lease-ttl: the ring was given up */
} lease_state;

#define RD_ASIDE_MAX 8             /* members set aside that status still shows */
/* How a node that holds the ring key refuses a peer it is not ready for yet (peer_check): the
 * dialler keeps trying and never sets it aside for that, as it answers and only lags. */
#define RD_NOT_FORMING "is not forming generation"
#define RD_REJOIN_MAX_MS 300000    /* the longest a set-aside node waits to register again */

/* A member this node could not reach while the ring formed, evicted for it. */
typedef struct {
    char node[RD_NAME_MAX + 1];
    char addr[RD_ADDR_MAX];
    char why[256];
} aside_member;

/* One outbound connection being made, retried until the generation changes. */
typedef struct {
    rd_world *w;
    int kind, index;
    rd_peer_dial *dial;
    struct event *retry;
    int fd;
} slot;

struct rd_world {
    rd_net *net;
    char name[RD_NAME_MAX + 1]; /* the job's */
    uint32_t world_size, min_size, local_size;
    rd_world_events ev; /* news for the job */
    void *arg;
    world_state state;
    rd_rdv_view view;   /* the membership the ring is formed (or waits) with */
    rd_rdv_view latest; /* the rendezvous' last word, adopted once the ring can change */
    uint64_t generation;
    int position, nnodes;
    uint32_t first_rank;
    slot out_data[RD_RING_CONNS_MAX];
    slot out_ctrl[RD_RING_NODES_MAX]; /* to each node before this one in the ring */
    int in_data[RD_RING_CONNS_MAX];
    rd_peer_chan *ctrl[RD_RING_NODES_MAX]; /* with every other node, by position */
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
    /* Generation marks, compared with the views that come (not states: nothing else changes
     * with them): */
    uint64_t stale;    /* no ring forms at this generation or below: it broke */
    uint64_t deferred; /* a view whose departures were deferred once, waiting for Byes */
    struct rd_peer_probe *probe; /* is a node whose link broke still there? */
    rd_rdv_member probing;       /* that node */
    int probes;                  /* probes of it so far */
    size_t ntasks;               /* ring passes submitted to the current data plane, not done */
    uint64_t since;              /* when this node first registered the job: its ring order */
    int was_up;                  /* has been in a ring of the job */
    struct event *ev_reform;
    char reform_why[512]; /* why rd_world_reform asked for it ("": the links broke) */
    struct event *ev_grace;  /* W_SEALED: gives up on seals after --peer-timeout */
    struct event *ev_defer;  /* applies a deferred view */
    struct event *ev_linger; /* leaving: closes the links left open */
    struct event *ev_lapse;  /* keepalives; looks whether this node is cut off */
    lease_state lease;
    int64_t heard[RD_RING_NODES_MAX]; /* last control message from each node (ms) */
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
    int64_t rejoin_ms;           /* the next back-off of a set-aside node */
    struct event *ev_rejoin;     /* W_ASIDE: dials this node's own address, then registers */
    rd_peer_dial *self_dial;
    /* throughput sampling */
    uint64_t bytes_sent, bytes_recv; /* of earlier generations */
    uint64_t last_sent, last_recv;
    double rate_sent, rate_recv;
    int64_t last_sample_ms;
    struct event *ev_sample;
    rd_world *next; /* in net->worlds */
};

static void on_task_done(void *arg, rd_xfer_task *t);
static void on_linger(evutil_socket_t fd, short what, void *arg);
static void move_on(rd_world *w, const char *reason);
static void on_lapse(evutil_socket_t fd, short what, void *arg);
static void aside_prune(rd_world *w, const rd_rdv_view *v);

/* Moves the ring to st (staying is no move), logging it; a move world_moves does not allow is a
 * programmer error (an assertion, and an error in the log where assertions are compiled out). */
static void set_state(rd_world *w, world_state st)
{
    if (w->state == st)
        return;
    if (!(world_moves[w->state] & W_BIT(st))) {
        rd_log(RD_LOG_ERROR, "world", "job '%s': illegal ring move %s -> %s", w->name,
               state_names[w->state], state_names[st]);
        assert(!"illegal ring state move");
    }
    rd_log(RD_LOG_INFO, "world", "job '%s': ring %s -> %s (generation %" PRIu64 ")", w->name,
           state_names[w->state], state_names[st], w->generation);
    w->state = st;
}

/* 1 while the ring of this generation is up, sealed or not. */
static int ring_up(const rd_world *w)
{
    return w->state == W_UP || w->state == W_SEALED;
}

/* 1 while this generation's links exist or are being made. */
static int ring_linked(const rd_world *w)
{
    return ring_up(w) || w->state == W_CONNECTING;
}

/* Moves the member at position i to st: only forward (active, sealed, leaving); every member is
 * active again when the generation's links close (teardown). */
static void member_set(rd_world *w, int i, member_state st)
{
    if (w->members[i] >= st)
        return; /* a Bye saying it stays, after one saying it leaves, changes nothing */
    rd_log(RD_LOG_DEBUG, "world", "job '%s': node %s %s -> %s (generation %" PRIu64 ")",
           w->name, w->view.members[i].node, member_names[w->members[i]], member_names[st],
           w->generation);
    w->members[i] = st;
}

/* What the next ring tells the clients becomes st, why saying it (NULL: keeps the reason it
 * has). RS_NONE only when a ring comes up; a reason once given is not taken back by a vaguer one
 * (RS_EXPLAINED does not go back to RS_BROKEN). */
static void resync_set(rd_world *w, resync_state st, const char *why)
{
    assert(st != RS_BROKEN || w->resync == RS_NONE);
    if (w->resync != st)
        rd_log(RD_LOG_DEBUG, "world", "job '%s': clients' re-synchronisation %s -> %s (%s)",
               w->name, resync_names[w->resync], resync_names[st],
               why != NULL ? why : w->resync_why);
    w->resync = st;
    if (why != NULL)
        snprintf(w->resync_why, sizeof(w->resync_why), "%s", why);
}

/* Redis confirms this node's registration again, or stopped confirming it (lease lapsed). */
static void lease_set(rd_world *w, lease_state st)
{
    if (w->lease == st)
        return;
    rd_log(st == LEASE_LAPSED ? RD_LOG_DEBUG : RD_LOG_INFO, "world",
           "job '%s': registration %s", w->name,
           st == LEASE_LAPSED ? "lapsed" : "confirmed again");
    w->lease = st;
}

static int conns(const rd_world *w)
{
    return (int)w->net->cfg->conns_per_link;
}

static const rd_rdv_member *member(const rd_world *w, int pos)
{
    return &w->view.members[pos];
}

static void view_clear(rd_rdv_view *v)
{
    free(v->members);
    memset(v, 0, sizeof(*v));
}

static int view_copy(rd_rdv_view *dst, const rd_rdv_view *src)
{
    rd_rdv_member *m = calloc(src->nmembers ? src->nmembers : 1, sizeof(*m));
    if (m == NULL)
        return -1;
    if (src->nmembers > 0)
        memcpy(m, src->members, src->nmembers * sizeof(*m));
    free(dst->members);
    dst->members = m;
    dst->nmembers = src->nmembers;
    dst->generation = src->generation;
    dst->started = src->started;
    dst->started_at = src->started_at;
    return 0;
}

/* A data plane whose ring is gone: its running task ends by itself (a graceful change) or fails
 * at once (rd_xfer_cut: the ring broke), then on_retired frees it. */
typedef struct retiring {
    struct rd_xfer *x;
    struct retiring *next;
} retiring;

static void on_retired(void *arg, struct rd_xfer *x)
{
    rd_world *w = arg;
    for (retiring **pp = &w->retiring; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->x == x) {
            retiring *r = *pp;
            *pp = r->next;
            free(r);
            break;
        }
    }
    rd_xfer_free(x, RINGD_E_MEMBERSHIP, "the ring is gone");
}

typedef enum {
    TD_CARRY, /* a graceful change: ops under negotiation go on at the next ring */
    TD_FAIL,  /* the ring broke or changed: ops not moving data are doomed, clients resync */
    TD_LEAVE, /* this node leaves the job: what is not moving data fails */
    TD_END,   /* the job or the daemon ends here: everything is cut short */
} teardown_how;

/* Closes everything of the current generation and moves the ring to next, before the job
 * hears of it (ring_ended, ring_down). Unless TD_END, the task on the wire may still end by
 * itself, as it does when a node that left had already done its part. */
static void teardown(rd_world *w, const char *why, teardown_how how, world_state next)
{
    int was_up = ring_linked(w) || w->state == W_LEAVING;
    /* A broken ring's pass on the wire is cut: a node may be gone, and its ops are doomed anyway.
     */
    int graceful = how == TD_CARRY || how == TD_LEAVE;
    if (how == TD_FAIL && w->resync != RS_NONE)
        why = w->resync_why; /* ops doomed meanwhile hear the first cause */
    else if (how == TD_FAIL && was_up) {
        resync_set(w, RS_BROKEN, why);
        if (w->stale < w->generation)
            w->stale = w->generation;
        w->ev.disrupted(w->arg);
    }
    set_state(w, next);
    for (int c = 0; c < RD_RING_CONNS_MAX; c++) {
        slot *s = &w->out_data[c];
        rd_peer_dial_cancel(s->dial);
        s->dial = NULL;
        if (s->retry != NULL)
            event_del(s->retry);
        if (s->fd >= 0)
            close(s->fd);
        s->fd = -1;
        if (w->in_data[c] >= 0)
            close(w->in_data[c]);
        w->in_data[c] = -1;
    }
    for (int i = 0; i < RD_RING_NODES_MAX; i++) {
        slot *s = &w->out_ctrl[i];
        rd_peer_dial_cancel(s->dial);
        s->dial = NULL;
        if (s->retry != NULL)
            event_del(s->retry);
        rd_peer_chan_free(w->ctrl[i]);
        w->ctrl[i] = NULL;
    }
    w->ev.ring_ended(w->arg);
    memset(w->members, 0, sizeof(w->members)); /* M_ACTIVE */
    event_del(w->ev_reform);
    event_del(w->ev_connect);
    event_del(w->ev_grace);
    event_del(w->ev_linger);
    if (w->xfer != NULL) {
        uint64_t sent, received;
        rd_xfer_bytes(w->xfer, &sent, &received);
        w->bytes_sent += sent;
        w->bytes_recv += received;
        struct rd_xfer *x = w->xfer;
        w->xfer = NULL;
        w->ntasks = 0;
        retiring *r = w->xfer_link;
        w->xfer_link = NULL;
        /* Its thread ends off the loop, reported by on_retired, unless the world ends now. */
        if (how != TD_END) {
            r->x = x;
            r->next = w->retiring;
            w->retiring = r;
            rd_xfer_retire(x, RINGD_E_MEMBERSHIP, why, on_retired, w);
        } else {
            free(r);
            rd_xfer_free(x, RINGD_E_MEMBERSHIP, why);
        }
    }
    for (retiring *r = w->retiring; !graceful && how != TD_END && r != NULL; r = r->next)
        rd_xfer_cut(r->x);
    while (how == TD_END && w->retiring != NULL) {
        retiring *r = w->retiring;
        w->retiring = r->next;
        rd_xfer_free(r->x, RINGD_E_MEMBERSHIP, why);
        free(r);
    }
    if (was_up)
        w->ev.ring_down(w->arg, why, how == TD_CARRY);
}

static void dial_start(slot *s);
static void reform_later(rd_world *w);

/* Dials again after RD_WORLD_RETRY_MS: the peer may not have reached this generation yet. A
 * retry that cannot be scheduled would leave the ring connecting for ever: it re-forms instead. */
static void dial_later(slot *s)
{
    struct timeval tv = {0, RD_WORLD_RETRY_MS * 1000};
    if (event_add(s->retry, &tv) != 0) {
        rd_world *w = s->w;
        rd_log(RD_LOG_ERROR, "world", "job '%s': cannot schedule a dial retry; the ring re-forms",
               w->name);
        snprintf(w->reform_why, sizeof(w->reform_why), "a dial retry could not be scheduled");
        reform_later(w);
    }
}

/* A slot's retry timer: dial again. */
static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    dial_start(arg);
}

/* The ring of this generation is up: the job learns its ranks and size. */
static void ring_is_up(rd_world *w)
{
    uint32_t size = 0;
    for (int i = 0; i < w->nnodes; i++)
        size += member(w, i)->local_size;
    set_state(w, W_UP);
    w->was_up = 1;
    w->rejoin_ms = 0;
    w->self_aside[0] = '\0';
    aside_prune(w, &w->view);
    for (int i = 0; i < w->nnodes; i++)
        w->heard[i] = rd_now_ms();
    rd_log(RD_LOG_INFO, "world",
           "job '%s': ring of %d nodes up at generation %" PRIu64
           ", this node is %d (ranks %u-%u of %u)",
           w->name, w->nnodes, w->generation, w->position, w->first_rank,
           w->first_rank + member(w, w->position)->local_size - 1, size);
    resync_state resync = w->resync;
    resync_set(w, RS_NONE, NULL);
    char changes[512] = "", why[1024];
    if (resync == RS_BROKEN && w->last_up.nmembers > 0)
        rd_membership_describe(&w->last_up, &w->view, changes, sizeof(changes));
    snprintf(why, sizeof(why),
             "job '%s' changed (%s); it is at generation %" PRIu64 " with %u ranks: re-synchronise",
             w->name,
             changes[0] != '\0' ? changes
             : resync != RS_NONE ? w->resync_why
                                : "new members",
             w->generation, size);
    if (view_copy(&w->last_up, &w->view) != 0)
        w->last_up.nmembers = 0;
    w->ev.ring_up(w->arg, w->first_rank, w->generation, size, resync != RS_NONE, why);
}

/* Every link of the generation is there: start the data plane and welcome the clients. */
static void maybe_up(rd_world *w)
{
    if (w->state != W_CONNECTING)
        return;
    int C = conns(w);
    for (int c = 0; c < C; c++)
        if (w->out_data[c].fd < 0 || w->in_data[c] < 0)
            return;
    for (int i = 0; i < w->nnodes; i++)
        if (i != w->position && w->ctrl[i] == NULL)
            return;
    if (w->nnodes == 1) { /* the job's last node: ops run here alone, without a data plane */
        ring_is_up(w);
        return;
    }

    uint32_t sizes[RD_RING_NODES_MAX];
    for (int i = 0; i < w->nnodes; i++)
        sizes[i] = member(w, i)->local_size;
    int sfd[RD_RING_CONNS_MAX], rfd[RD_RING_CONNS_MAX];
    for (int c = 0; c < C; c++) {
        sfd[c] = w->out_data[c].fd;
        rfd[c] = w->in_data[c];
        w->out_data[c].fd = w->in_data[c] = -1;
    }
    rd_xfer_config xc = {
        .nnodes = w->nnodes,
        .position = w->position,
        .local_sizes = sizes,
        .generation = w->generation,
        .segment_size = w->net->cfg->segment_size,
        .conns = C,
        .send_fds = sfd,
        .recv_fds = rfd,
        .timeout_ms = w->net->cfg->peer_timeout,
        .poll_us = w->net->cfg->poll_us,
        .next_node = member(w, (w->position + 1) % w->nnodes)->node,
        .prev_node = member(w, (w->position + w->nnodes - 1) % w->nnodes)->node,
    };
    char err[256];
    w->xfer = rd_xfer_new(w->net->base, &xc, on_task_done, w, err, sizeof(err));
    if (w->xfer != NULL && (w->xfer_link = malloc(sizeof(*w->xfer_link))) == NULL) {
        rd_xfer_free(w->xfer, RINGD_E_NOMEM, "out of memory"); /* nothing submitted yet */
        w->xfer = NULL;
        snprintf(err, sizeof(err), "out of memory starting the data plane");
    }
    if (w->xfer == NULL) {
        rd_log(RD_LOG_ERROR, "world", "job '%s': %s", w->name, err);
        teardown(w, "cannot start the ring", TD_FAIL, W_WAITING);
        return;
    }
    ring_is_up(w);
}

static void on_ctrl_msg(void *arg, rd_peer_chan *c, const rd_msg *m);
static void on_ctrl_err(void *arg, rd_peer_chan *c, const char *why);

/* Schedules the ring's teardown (it broke) off the current callback. */
static void reform_later(rd_world *w)
{
    event_active(w->ev_reform, 0, 0);
}

static void apply_view(rd_world *w);

/* Sends Bye (leaving or only sealing) to every node still connected. */
static void send_bye(rd_world *w, int leaving)
{
    Ringd__Bye bye = RINGD__BYE__INIT;
    bye.generation = w->generation;
    bye.leaving = leaving;
    rd_msg m = RINGD__MSG__INIT;
    m.body_case = RINGD__MSG__BODY_BYE;
    m.bye = &bye;
    for (int i = 0; i < w->nnodes; i++)
        if (i != w->position && w->ctrl[i] != NULL)
            rd_peer_chan_send(w->ctrl[i], &m);
}

/* A graceful change begins (a node said it leaves): this node seals the ring, announcing and
 * ordering nothing more at this generation; the coordinator's order so far goes out first. */
static void carry_start(rd_world *w)
{
    if (w->state != W_UP)
        return;
    w->ev.flush(w->arg);
    set_state(w, W_SEALED);
    send_bye(w, 0);
    int64_t ms = w->net->cfg->peer_timeout;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(w->ev_grace, &tv);
    rd_log(RD_LOG_INFO, "world",
           "job '%s': ring of generation %" PRIu64 " sealed for a graceful change",
           w->name, w->generation);
}

/* Sealed: once every other node has sealed (so every announcement and order of this
 * generation is in) and the orders have started, the ring is taken down keeping what is under
 * negotiation, and the next view is applied. */
static void carry_check(rd_world *w)
{
    if (w->state != W_SEALED)
        return;
    for (int i = 0; i < w->nnodes; i++)
        if (i != w->position && w->members[i] == M_ACTIVE)
            return;
    if (w->ev.awaits_order(w->arg) >= 2) /* ordered batches whose ops are not all here */
        return;
    if (w->ntasks > 0) /* ordered ring passes still on the wire or queued for it */
        return;
    if (w->latest.generation == w->generation)
        return; /* the rendezvous has not shown the change yet */
    teardown(w, "the ring is re-forming without a node that left", TD_CARRY, W_WAITING);
    apply_view(w);
}

/* Sealed for too long: some node never sealed. The ring counts as broken. */
static void on_grace(evutil_socket_t fd, short what, void *arg)
{
    rd_world *w = arg;
    (void)fd;
    (void)what;
    if (w->state != W_SEALED)
        return;
    int sealed = 1;
    for (int i = 0; i < w->nnodes; i++)
        sealed &= i == w->position || w->members[i] != M_ACTIVE;
    /* passes still on the wire (the data plane bounds them) or on the job's device transport
     * (NCCL bounds them) */
    if (sealed && (w->ntasks > 0 || w->ev.awaits_order(w->arg) == 3)) {
        int64_t ms = w->net->cfg->peer_timeout;
        struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
        evtimer_add(w->ev_grace, &tv);
        return;
    }
    rd_log(RD_LOG_WARN, "world",
           "job '%s': not every node sealed generation %" PRIu64
           " within --peer-timeout; dropping the ring",
           w->name, w->generation);
    reform_later(w);
}

/* A ring task ended (on the current data plane or a retiring one). A data plane that broke
 * stays broken: every node re-forms the ring, at the same generation when nobody left. */
static void on_task_done(void *arg, rd_xfer_task *t)
{
    rd_world *w = arg;
    int current = t->ring == w->xfer;
    if (current)
        w->ntasks--;
    if (w->xfer != NULL && rd_xfer_broken(w->xfer)) {
        w->ev.disrupted(w->arg); /* its failures are answered once the ring is back */
        if (w->resync == RS_NONE) /* even if a graceful change takes the ring down first */
            resync_set(w, RS_BROKEN, "the ring's data links broke");
        /* A node that breaks off the ring says why on its control link (Error, Bye), or that
         * link ends too: a moment for that to arrive first, so the clients hear the cause. */
        struct timeval tv = {0, 20 * 1000};
        if (!event_pending(w->ev_reform, EV_TIMEOUT, NULL))
            event_add(w->ev_reform, &tv);
    }
    w->ev.task_done(w->arg, t);
    if (current)
        carry_check(w);
}

/* The ring position a slot dials: the next node for data, node s->index for control. */
static int slot_target(const slot *s)
{
    const rd_world *w = s->w;
    return s->kind == RINGD__LINK_KIND__LINK_CONTROL ? s->index : (w->position + 1) % w->nnodes;
}

/* Tells the waiting clients which members this node cannot reach so far, and why. */
static void tell_waiting(rd_world *w)
{
    char detail[1024];
    size_t n = (size_t)snprintf(detail, sizeof(detail),
                                "every rank has registered; connecting to the other nodes");
    for (int i = 0; i < w->nnodes && n < sizeof(detail); i++)
        if (w->unreach[i][0] != '\0')
            n += (size_t)snprintf(detail + n, sizeof(detail) - n,
                                  "; node %s at %s is unreachable (%.200s)", member(w, i)->node,
                                  member(w, i)->addr, w->unreach[i]);
    w->ev.ring_waiting(w->arg, w->world_size, (uint32_t)w->nnodes, w->generation,
                        detail);
}

/* 1 when this node's links with the member at position i are all up (either way). */
static int links_up_with(const rd_world *w, int i)
{
    if (i == (w->position + 1) % w->nnodes)
        for (int c = 0; c < conns(w); c++)
            if (w->out_data[c].fd < 0)
                return 0;
    if (i == (w->position + w->nnodes - 1) % w->nnodes)
        for (int c = 0; c < conns(w); c++)
            if (w->in_data[c] < 0)
                return 0;
    return w->ctrl[i] != NULL;
}

/* 1 when the links this node dials to the member at position i are up. */
static int dials_up_with(const rd_world *w, int i)
{
    if (i == (w->position + 1) % w->nnodes)
        for (int c = 0; c < conns(w); c++)
            if (w->out_data[c].fd < 0)
                return 0;
    return i > w->position || w->ctrl[i] != NULL;
}

/* 1 when at least one link of this generation came up: this node is not cut off itself. */
static int any_link_up(const rd_world *w)
{
    for (int c = 0; c < conns(w); c++)
        if (w->out_data[c].fd >= 0 || w->in_data[c] >= 0)
            return 1;
    for (int i = 0; i < w->nnodes; i++)
        if (i != w->position && w->ctrl[i] != NULL)
            return 1;
    return 0;
}

/* Remembers member m as set aside with why, for status (the oldest entry goes when full). */
static void aside_add(rd_world *w, const rd_rdv_member *m, const char *why)
{
    int k = 0;
    while (k < w->naside && strcmp(w->aside[k].node, m->node) != 0)
        k++;
    if (k == RD_ASIDE_MAX) {
        memmove(&w->aside[0], &w->aside[1], (RD_ASIDE_MAX - 1) * sizeof(w->aside[0]));
        k = RD_ASIDE_MAX - 1;
    } else if (k == w->naside) {
        w->naside++;
    }
    snprintf(w->aside[k].node, sizeof(w->aside[k].node), "%s", m->node);
    snprintf(w->aside[k].addr, sizeof(w->aside[k].addr), "%s", m->addr);
    snprintf(w->aside[k].why, sizeof(w->aside[k].why), "%.255s", why);
}

/* Forgets the members set aside that are in view v now. */
static void aside_prune(rd_world *w, const rd_rdv_view *v)
{
    int n = 0;
    for (int k = 0; k < w->naside; k++) {
        int back = 0;
        for (size_t i = 0; i < v->nmembers && !back; i++)
            back = strcmp(v->members[i].node, w->aside[k].node) == 0;
        if (!back)
            w->aside[n++] = w->aside[k];
    }
    w->naside = n;
}

/* When some member's links to this node never came though this node's own dials to it are up
 * (or it dials none), says so in self_aside and returns 1: the others may not reach this node. */
static int missing_inbound(rd_world *w)
{
    for (int i = 0; i < w->nnodes; i++) {
        if (i == w->position || links_up_with(w, i))
            continue;
        int dialled = i == (w->position + 1) % w->nnodes || i < w->position;
        if (dialled && !dials_up_with(w, i))
            continue;
        snprintf(w->self_aside, sizeof(w->self_aside),
                 "no connection came from node %s within %" PRId64
                 " ms: can it reach this node at %s (--advertise)?",
                 member(w, i)->node, rd_now_ms() - w->connect_ms, w->net->address);
        return 1;
    }
    return 0;
}

/* The ring has been connecting for --peer-timeout. Members this node dials and cannot reach are
 * set aside: evicted from the rendezvous (that incarnation only), so that the others form the
 * ring without them, as long as this node is not cut off itself (some link of its came up). */
static void on_connect_deadline(evutil_socket_t fd, short what, void *arg)
{
    rd_world *w = arg;
    (void)fd;
    (void)what;
    if (w->state != W_CONNECTING)
        return;
    if (missing_inbound(w))
        rd_log(RD_LOG_WARN, "world", "job '%s': %s", w->name, w->self_aside);
    int cut_off = !any_link_up(w);
    for (int i = 0; i < w->nnodes; i++) {
        if (i == w->position || links_up_with(w, i))
            continue;
        const rd_rdv_member *m = member(w, i);
        int dialled = i == (w->position + 1) % w->nnodes || i < w->position;
        char why[512];
        if (!dialled || dials_up_with(w, i)) /* what is missing is its dial to this node */
            continue;
        if (strstr(w->unreach[i], RD_NOT_FORMING) != NULL) {
            rd_log(RD_LOG_WARN, "world",
                   "job '%s': node %s answers but has not reached generation %" PRIu64
                   " within --peer-timeout (%s)",
                   w->name, m->node, w->generation, w->unreach[i]);
            continue;
        }
        if (w->unreach[i][0] != '\0')
            snprintf(why, sizeof(why), "node %.64s cannot reach it: %.300s", w->net->cfg->node,
                     w->unreach[i]);
        else
            snprintf(why, sizeof(why), "node %.64s had no answer from %.128s within --peer-timeout",
                     w->net->cfg->node, m->addr);
        if (cut_off) {
            rd_log(RD_LOG_WARN, "world",
                   "job '%s': node %s is unreachable (%s), but no other link of this node came "
                   "up either: not setting it aside",
                   w->name, m->node, why);
            continue;
        }
        rd_log(RD_LOG_WARN, "world", "job '%s': setting node %s aside: %s", w->name,
               m->node, why);
        aside_add(w, m, why);
        if (rd_rdv_evict(w->net->rdv, w->name, m->node, m->incarnation, why) != 0)
            rd_log(RD_LOG_WARN, "world",
                   "job '%s': node %s could not be set aside; it leaves when its lease expires",
                   w->name, m->node);
    }
}

/* A dial ended: a data connection waits in its slot for the data plane, a control connection
 * becomes a channel; a refusal (most often a peer not yet at this generation) retries. */
static void on_dialled(void *arg, int fd, const char *why)
{
    slot *s = arg;
    rd_world *w = s->w;
    s->dial = NULL;
    int to = slot_target(s);
    if (fd < 0) {
        int first = w->unreach[to][0] == '\0';
        snprintf(w->unreach[to], sizeof(w->unreach[to]), "%s", why);
        rd_log(first ? RD_LOG_INFO : RD_LOG_DEBUG, "world", "job '%s': cannot reach node %s: %s; retrying",
               w->name, member(w, to)->node, why);
        if (first)
            tell_waiting(w);
        dial_later(s);
        return;
    }
    w->unreach[to][0] = '\0';
    if (s->kind == RINGD__LINK_KIND__LINK_CONTROL) {
        w->ctrl[s->index] =
            rd_peer_chan_new(w->net->base, fd, member(w, s->index)->node,
                             (uint32_t)w->net->cfg->max_frame, on_ctrl_msg, on_ctrl_err, w);
        if (w->ctrl[s->index] == NULL) {
            close(fd);
            reform_later(w);
            return;
        }
    } else {
        s->fd = fd;
    }
    maybe_up(w);
}

/* Dials the slot's peer (the next node for data, node s->index for control) with this
 * generation's PeerHello, if the ring is still connecting. */
static void dial_start(slot *s)
{
    rd_world *w = s->w;
    if (w->state != W_CONNECTING)
        return;
    int to = slot_target(s);
    Ringd__PeerHello h = RINGD__PEER_HELLO__INIT;
    h.protocol = RD_PEER_PROTOCOL_VERSION;
    h.job = (char *)w->name;
    h.generation = w->generation;
    h.node = (char *)w->net->cfg->node;
    h.kind = (Ringd__LinkKind)s->kind;
    h.index = s->kind == RINGD__LINK_KIND__LINK_CONTROL ? 0 : (uint32_t)s->index;
    h.conns = (uint32_t)conns(w);
    h.segment_size = w->net->cfg->segment_size;
    s->dial = rd_peer_dial_new(w->net->peers, member(w, to)->addr, &h, on_dialled, s);
    if (s->dial == NULL)
        dial_later(s);
}

/* The view is complete: make the links of its generation. */
static void connect_ring(rd_world *w)
{
    /* Scheduling messages come from now on: nodes up before this one announce their ops already. */
    rd_ring_node nodes[RD_RING_NODES_MAX];
    uint32_t first = 0;
    for (int i = 0; i < w->nnodes; i++) {
        nodes[i] = (rd_ring_node){member(w, i)->node, first, member(w, i)->local_size};
        first += member(w, i)->local_size;
    }
    if (w->ev.ring_forming(w->arg, w->generation, w->nnodes, w->position, nodes) != RINGD_OK) {
        rd_log(RD_LOG_ERROR, "world", "job '%s': out of memory forming the ring",
               w->name);
        set_state(w, W_WAITING);
        return;
    }
    set_state(w, W_CONNECTING);
    memset(w->unreach, 0, sizeof(w->unreach));
    w->connect_ms = rd_now_ms();
    int64_t ms = w->net->cfg->peer_timeout;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(w->ev_connect, &tv);
    tell_waiting(w);
    for (int c = 0; c < conns(w); c++)
        dial_start(&w->out_data[c]);
    for (int q = 0; q < w->position; q++)
        dial_start(&w->out_ctrl[q]);
}

/* How view v changes the ring (why says what changed). */
static rd_change classify(const rd_world *w, const rd_rdv_view *v, char *why, size_t len)
{
    rd_member_news news[RD_RING_NODES_MAX];
    for (int i = 0; i < w->nnodes; i++)
        news[i] = (rd_member_news){w->members[i] == M_LEAVING, w->members[i] != M_ACTIVE,
                                   i != w->position && w->ctrl[i] != NULL};
    const rd_rdv_view *cur = w->nnodes > 0 ? &w->view : NULL;
    return rd_membership_assess(cur, w->nnodes, news, v, why, len);
}

static void on_rejoin(evutil_socket_t fd, short what, void *arg);

/* This node was set aside (self_aside says why): it leaves the rendezvous, tells its clients,
 * and registers again after a back-off (--peer-timeout, doubling up to RD_REJOIN_MAX_MS). */
static void set_aside(rd_world *w)
{
    teardown(w, w->self_aside, TD_FAIL, W_ASIDE);
    rd_rdv_leave(w->net->rdv, w->name);
    w->since = 0;
    if (w->rejoin_ms < w->net->cfg->peer_timeout)
        w->rejoin_ms = w->net->cfg->peer_timeout;
    char detail[1024];
    snprintf(detail, sizeof(detail),
             "node %.64s was set aside: %.500s; it registers again in %" PRId64 " ms", w->net->cfg->node,
             w->self_aside, w->rejoin_ms);
    rd_log(RD_LOG_WARN, "world", "job '%s': %s", w->name, detail);
    w->ev.ring_waiting(w->arg, 0, 0, w->generation, detail);
    struct timeval tv = {w->rejoin_ms / 1000, (w->rejoin_ms % 1000) * 1000};
    evtimer_add(w->ev_rejoin, &tv);
    w->rejoin_ms = w->rejoin_ms * 2 > RD_REJOIN_MAX_MS ? RD_REJOIN_MAX_MS : w->rejoin_ms * 2;
}

#define RD_SELF_PROBE_JOB "~self-probe" /* a job no client names: any ringd refuses it */

/* A set-aside node's dial of its own advertised address: registers again once this very daemon
 * answers there (it refuses the probe, naming itself), which a port nothing listens on, a
 * listener that never answers, a ringd of another key and a ringd of another node all fail. */
static void on_self_dialled(void *arg, int fd, const char *why)
{
    rd_world *w = arg;
    w->self_dial = NULL;
    if (fd >= 0)
        close(fd);
    char self[RD_NAME_MAX + 16];
    size_t n = (size_t)snprintf(self, sizeof(self), " on node %s", w->net->cfg->node);
    size_t len = fd < 0 ? strlen(why) : 0;
    if (w->state != W_ASIDE)
        return;
    /* Refused by a ringd that ends its answer with this node's name: this very daemon. */
    if (fd < 0 && strstr(why, ": refused: ") != NULL && len >= n &&
        strcmp(why + len - n, self) == 0) {
        w->self_aside[0] = '\0';
        rd_log(RD_LOG_INFO, "world",
               "job '%s': this node answers at %s: registering again after being set aside",
               w->name, w->net->address);
        rd_world_register(w);
        return;
    }
    snprintf(w->self_aside, sizeof(w->self_aside),
             "this node does not answer at its own address (%.300s): check --advertise",
             fd >= 0 ? "another daemon accepted" : why);
    rd_log(RD_LOG_WARN, "world", "job '%s': %s; trying again in %" PRId64 " ms",
           w->name, w->self_aside, w->rejoin_ms);
    struct timeval tv = {w->rejoin_ms / 1000, (w->rejoin_ms % 1000) * 1000};
    evtimer_add(w->ev_rejoin, &tv);
    w->rejoin_ms = w->rejoin_ms * 2 > RD_REJOIN_MAX_MS ? RD_REJOIN_MAX_MS : w->rejoin_ms * 2;
}

static void on_rejoin(evutil_socket_t fd, short what, void *arg)
{
    rd_world *w = arg;
    (void)fd;
    (void)what;
    if (w->state != W_ASIDE || w->self_dial != NULL)
        return;
    Ringd__PeerHello h = RINGD__PEER_HELLO__INIT;
    h.protocol = RD_PEER_PROTOCOL_VERSION;
    h.job = (char *)RD_SELF_PROBE_JOB;
    h.node = (char *)w->net->cfg->node;
    h.kind = RINGD__LINK_KIND__LINK_CONTROL;
    w->self_dial = rd_peer_dial_new(w->net->peers, w->net->address, &h, on_self_dialled, w);
    if (w->self_dial == NULL)
        on_self_dialled(w, -1, "the address does not resolve");
}

/* Applies the last view: waits, or (re)forms the ring at its generation. A ring that is up and
 * meets a new generation first ends: gracefully when the only change is nodes that said Bye,
 * else broken (its clients re-synchronise). */
static void apply_view(rd_world *w)
{
    const rd_rdv_view *v = &w->latest;
    uint32_t world = w->world_size, min = w->min_size;
    uint32_t ranks = 0, first = 0;
    int pos = -1, consistent = 1;
    char detail[512] = "";
    for (size_t i = 0; i < v->nmembers; i++) {
        const rd_rdv_member *m = &v->members[i];
        if (strcmp(m->node, w->net->cfg->node) == 0 && m->incarnation == w->net->incarnation) {
            pos = (int)i;
            first = ranks;
        }
        if ((m->world_size != world || m->min_size != min) && consistent) {
            consistent = 0;
            snprintf(detail, sizeof(detail),
                     "node %s runs the job with world_size %u min_size %u, this node with %u "
                     "and %u",
                     m->node, m->world_size, m->min_size, world, min);
        }
        ranks += m->local_size;
    }
    int enough = ranks >= world || (v->started && ranks >= min);
    if (pos < 0)
        snprintf(detail, sizeof(detail), "this node is not registered (yet)");
    else if (v->nmembers > RD_RING_NODES_MAX)
        snprintf(detail, sizeof(detail), "more than %d nodes", RD_RING_NODES_MAX);
    else if (consistent && !enough && v->started)
        snprintf(detail, sizeof(detail),
                 "%u ranks on %zu nodes, below min_size %u: waiting for nodes to come", ranks,
                 v->nmembers, min);
    else if (consistent && !enough)
        snprintf(detail, sizeof(detail), "%u of %u ranks have registered (on %zu nodes)", ranks,
                 world, v->nmembers);
    else if (v->generation <= w->stale)
        snprintf(detail, sizeof(detail), "generation %" PRIu64 " broke; waiting for the next",
                 v->generation);
    int complete = pos >= 0 && consistent && enough && v->nmembers <= RD_RING_NODES_MAX &&
                   v->generation > w->stale;

    if (w->state == W_LEAVING || w->state == W_IDLE || w->state == W_ASIDE)
        return;
    if (ring_linked(w) && w->generation == v->generation)
        return;
    /* Only the generation moved, the members are the ones of the ring (each registered again
     * after its lease ran out while Redis did not answer): the ring goes on as it is. */
    if (ring_up(w) && rd_membership_same(&w->view, v)) {
        rd_log(RD_LOG_INFO, "world",
               "job '%s': generation %" PRIu64 " has the members of the ring of generation %" PRIu64
               " (registered again): the ring goes on",
               w->name, v->generation, w->generation);
        return;
    }
    /* Removed after a ring that formed without some member's connection ever coming: the
     * others could not reach this node, and set it aside. Registering again at once would stop their
     * ring again; it waits, and first checks that its own address answers. */
    if (pos < 0 && w->since != 0 && w->state == W_CONNECTING &&
        rd_now_ms() - w->connect_ms >= w->net->cfg->peer_timeout / 2)
        missing_inbound(w);
    if (pos < 0 && w->since != 0 && w->self_aside[0] != '\0') {
        set_aside(w);
        return;
    }

    if (ring_up(w)) {
        char why[512];
        rd_change k = classify(w, v, why, sizeof(why));
        if (k == RD_CHANGE_DEFER && w->deferred != v->generation) {
            w->deferred = v->generation; /* a Bye or the link's end settles it */
            struct timeval tv = {0, 100 * 1000};
            evtimer_add(w->ev_defer, &tv);
            return;
        }
        if (k == RD_CHANGE_GRACEFUL) {
            carry_start(w);
            carry_check(w);
            return;
        }
        resync_state before = w->resync;
        teardown(w, why, TD_FAIL, W_WAITING);
        /* The view names what changed: a better reason than a broken link's, not than one a
         * node gave (RS_EXPLAINED already). */
        resync_set(w, RS_EXPLAINED, before == RS_EXPLAINED ? NULL : why);
    } else if (w->state == W_CONNECTING) {
        /* Not up yet, so no node could say Bye to it: whatever changed, clients re-synchronise
         * (the message names the changes since the last ring that was up). */
        teardown(w, "the membership changed while the ring formed", TD_FAIL, W_WAITING);
    }
    if (view_copy(&w->view, v) != 0) {
        rd_log(RD_LOG_ERROR, "world", "job '%s': out of memory", w->name);
        set_state(w, W_WAITING);
        return;
    }
    w->generation = v->generation;
    w->nnodes = 0;
    if (!complete) {
        if (detail[0] != '\0')
            rd_log(RD_LOG_INFO, "world", "job '%s': generation %" PRIu64 ": %s",
                   w->name, v->generation, detail);
        set_state(w, W_WAITING);
        w->ev.ring_waiting(w->arg, ranks, (uint32_t)v->nmembers, v->generation, detail);
        if (pos < 0 && w->was_up && w->since != 0) {
            /* Removed while it ran (its lease ran out, or it was evicted): it comes back as a
             * newcomer, after the nodes that went on without it, so rank 0 stays with them. */
            w->since = 0;
            rd_world_register(w);
        }
        return;
    }
    w->position = pos;
    w->nnodes = (int)v->nmembers;
    w->first_rank = first;
    connect_ring(w);
}

/* The view deferred for a Bye that never came: apply it as it is. */
static void on_defer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    apply_view(arg);
}

/* The ring broke (a link failed, a peer misbehaved, or seals never came): it is taken down with
 * its ops doomed, and this node registers again so that every node moves to a new generation
 * (the one that broke never forms again). */
static void on_reform(evutil_socket_t fd, short what, void *arg)
{
    rd_world *w = arg;
    (void)fd;
    (void)what;
    if (!ring_linked(w))
        return;
    char why[512];
    snprintf(why, sizeof(why), "%s", w->reform_why[0] ? w->reform_why : "the ring's links broke");
    w->reform_why[0] = '\0';
    teardown(w, why, TD_FAIL, W_WAITING);
    move_on(w, why);
}

/* Runs maybe_up on the turn after a peer's connection was accepted. */
static void on_check(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    maybe_up(arg);
}

/* Payload bytes this node sent to the next node and received from the previous one, in all
 * generations of the job. */
static void link_bytes(const rd_world *w, uint64_t *sent, uint64_t *received)
{
    *sent = w->bytes_sent;
    *received = w->bytes_recv;
    if (w->xfer != NULL) {
        uint64_t s, r;
        rd_xfer_bytes(w->xfer, &s, &r);
        *sent += s;
        *received += r;
    }
}

/* Once a second: the links' throughput over the last second, for status. */
static void on_sample(evutil_socket_t fd, short what, void *arg)
{
    rd_world *w = arg;
    (void)fd;
    (void)what;
    uint64_t s, r;
    link_bytes(w, &s, &r);
    int64_t now = rd_now_ms();
    double dt = (double)(now - w->last_sample_ms) / 1000.0;
    if (dt > 0) {
        w->rate_sent = (double)(s - w->last_sent) / dt;
        w->rate_recv = (double)(r - w->last_recv) / dt;
    }
    w->last_sent = s;
    w->last_recv = r;
    w->last_sample_ms = now;
}

rd_world *rd_world_new(rd_net *net, const char *job, uint32_t world_size, uint32_t min_size,
                       uint32_t local_size, const rd_world_events *ev, void *arg)
{
    rd_world *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return NULL;
    struct event_base *base = net->base;
    w->net = net;
    snprintf(w->name, sizeof(w->name), "%s", job);
    w->world_size = world_size;
    w->min_size = min_size;
    w->local_size = local_size;
    w->ev = *ev;
    w->arg = arg;
    w->state = W_IDLE;
    w->next = net->worlds;
    net->worlds = w;
    int ok = 1;
    for (int c = 0; c < RD_RING_CONNS_MAX; c++) {
        w->out_data[c] = (slot){.w = w, .kind = RINGD__LINK_KIND__LINK_DATA, .index = c, .fd = -1};
        w->out_data[c].retry = event_new(base, -1, 0, on_retry, &w->out_data[c]);
        ok &= w->out_data[c].retry != NULL;
        w->in_data[c] = -1;
    }
    for (int i = 0; i < RD_RING_NODES_MAX; i++) {
        w->out_ctrl[i] =
            (slot){.w = w, .kind = RINGD__LINK_KIND__LINK_CONTROL, .index = i, .fd = -1};
        w->out_ctrl[i].retry = event_new(base, -1, 0, on_retry, &w->out_ctrl[i]);
        ok &= w->out_ctrl[i].retry != NULL;
    }
    w->ev_reform = event_new(base, -1, 0, on_reform, w);
    w->ev_grace = evtimer_new(base, on_grace, w);
    w->ev_defer = evtimer_new(base, on_defer, w);
    w->ev_linger = evtimer_new(base, on_linger, w);
    w->ev_lapse = event_new(base, -1, EV_PERSIST, on_lapse, w);
    w->ev_check = event_new(base, -1, 0, on_check, w);
    w->ev_sample = event_new(base, -1, EV_PERSIST, on_sample, w);
    w->ev_connect = evtimer_new(base, on_connect_deadline, w);
    w->ev_rejoin = evtimer_new(base, on_rejoin, w);
    struct timeval sec = {1, 0};
    if (!ok || w->ev_connect == NULL || w->ev_rejoin == NULL || w->ev_reform == NULL || w->ev_grace == NULL ||
        w->ev_defer == NULL || w->ev_linger == NULL || w->ev_lapse == NULL || w->ev_check == NULL ||
        w->ev_sample == NULL || event_add(w->ev_sample, &sec) != 0) {
        rd_world_free(w);
        return NULL;
    }
    w->last_sample_ms = rd_now_ms();
    int64_t ms = net->cfg->lease_ttl / 4;
    struct timeval lt = {ms / 1000, (ms % 1000) * 1000};
    event_add(w->ev_lapse, &lt);
    return w;
}

void rd_world_free(rd_world *w)
{
    if (w == NULL)
        return;
    for (rd_world **pp = &w->net->worlds; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    }
    if (w->state != W_IDLE && w->state != W_LEAVING && w->state != W_ASIDE)
        rd_rdv_leave(w->net->rdv, w->name);
    rd_peer_probe_cancel(w->probe);
    rd_peer_dial_cancel(w->self_dial);
    teardown(w, "the job ended on this node", TD_END, W_IDLE);
    if (w->ev_connect != NULL)
        event_free(w->ev_connect);
    if (w->ev_rejoin != NULL)
        event_free(w->ev_rejoin);
    for (int c = 0; c < RD_RING_CONNS_MAX; c++)
        if (w->out_data[c].retry != NULL)
            event_free(w->out_data[c].retry);
    for (int i = 0; i < RD_RING_NODES_MAX; i++)
        if (w->out_ctrl[i].retry != NULL)
            event_free(w->out_ctrl[i].retry);
    if (w->ev_reform != NULL)
        event_free(w->ev_reform);
    if (w->ev_sample != NULL)
        event_free(w->ev_sample);
    if (w->ev_check != NULL)
        event_free(w->ev_check);
    if (w->ev_grace != NULL)
        event_free(w->ev_grace);
    if (w->ev_defer != NULL)
        event_free(w->ev_defer);
    if (w->ev_linger != NULL)
        event_free(w->ev_linger);
    if (w->ev_lapse != NULL)
        event_free(w->ev_lapse);
    view_clear(&w->view);
    view_clear(&w->latest);
    view_clear(&w->last_up);
    free(w);
}

void rd_world_register(rd_world *w)
{
    rd_net *ws = w->net;
    rd_rdv_member self;
    memset(&self, 0, sizeof(self));
    snprintf(self.node, sizeof(self.node), "%s", w->net->cfg->node);
    snprintf(self.addr, sizeof(self.addr), "%s", ws->address);
    self.local_size = w->local_size;
    self.world_size = w->world_size;
    self.min_size = w->min_size;
    self.incarnation = ws->incarnation;
    if (w->since == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        w->since = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
    }
    self.since = w->since;
    event_del(w->ev_rejoin);
    if (rd_rdv_join(ws->rdv, w->name, &self) != 0) {
        rd_log(RD_LOG_ERROR, "world", "job '%s': out of memory registering", w->name);
        return;
    }
    set_state(w, W_WAITING);
    w->ev.ring_waiting(w->arg, 0, 0, w->generation, "registering in the rendezvous");
}

void rd_world_unregister(rd_world *w)
{
    if (w->state == W_IDLE || w->state == W_LEAVING)
        return;
    if (w->state == W_ASIDE) {
        event_del(w->ev_rejoin);
        set_state(w, W_IDLE);
        return;
    }
    if (ring_up(w)) { /* its clients are done: the others finish what it announced */
        rd_world_leave(w);
        return;
    }
    rd_rdv_leave(w->net->rdv, w->name);
    teardown(w, "this node left the job", TD_LEAVE, W_IDLE);
}

void rd_world_resize(rd_world *w, uint32_t local_size, const char *why)
{
    w->local_size = local_size;
    if (w->state == W_LEAVING)
        return;
    if (w->state == W_ASIDE) { /* registers its new size when back; its ops cannot wait that long */
        w->ev.ring_lost(w->arg, why);
        return;
    }
    if (w->state == W_IDLE) { /* its clients had all left; one is back */
        rd_world_register(w);
        return;
    }
    /* The other nodes hear why before their links break, so their clients do too. */
    Ringd__Error e = RINGD__ERROR__INIT;
    e.status = RINGD_E_MEMBERSHIP;
    e.message = (char *)why;
    rd_msg m = RINGD__MSG__INIT;
    m.body_case = RINGD__MSG__BODY_ERROR;
    m.error = &e;
    for (int i = 0; i < w->nnodes; i++)
        if (i != w->position && w->ctrl[i] != NULL)
            rd_peer_chan_send(w->ctrl[i], &m);
    teardown(w, why, TD_FAIL, W_WAITING);
    resync_set(w, RS_EXPLAINED, why); /* also when the ring was not up: the clients' ranks change */
    rd_world_register(w);
}

/* Redis has not confirmed this node's registration for longer than the lease: the other nodes
 * have gone on without it (Redis is unreachable from here, or this daemon was stopped). Its ring
 * is over; the clients hear it now rather than when a ring comes back, and the node registers
 * again as a newcomer, which Redis takes once it is reachable. */
static void on_lapse(evutil_socket_t fd, short what, void *arg)
{
    rd_world *w = arg;
    (void)fd;
    (void)what;
    /* Every node hears from every other at least this often, ring traffic or not. */
    int64_t now = rd_now_ms(), silent = 0;
    rd_msg poke = RINGD__MSG__INIT;
    Ringd__Poke p = RINGD__POKE__INIT;
    poke.body_case = RINGD__MSG__BODY_POKE;
    poke.poke = &p;
    for (int i = 0; ring_up(w) && i < w->nnodes; i++) {
        if (i == w->position || w->ctrl[i] == NULL)
            continue;
        rd_peer_chan_send(w->ctrl[i], &poke);
        if (now - w->heard[i] > silent)
            silent = now - w->heard[i];
    }
    /* Redis down for everyone: the ring goes on as long as its nodes hear from each other. */
    int cut_off = !ring_up(w) || silent > w->net->cfg->lease_ttl;
    int lapsed = w->state != W_IDLE && w->state != W_LEAVING && w->state != W_ASIDE && cut_off &&
                 rd_rdv_lapsed(w->net->rdv, w->name);
    if (!lapsed || w->lease == LEASE_LAPSED) { /* nothing new */
        lease_set(w, lapsed ? LEASE_LAPSED : LEASE_HELD);
        return;
    }
    lease_set(w, LEASE_LAPSED);
    char why[1024];
    snprintf(why, sizeof(why),
             "node %s lost its place in job '%s': neither Redis nor the other nodes have "
             "answered for more than --lease-ttl %" PRId64 " ms, so they go on without it",
             w->net->cfg->node, w->name, w->net->cfg->lease_ttl);
    rd_log(RD_LOG_WARN, "world", "%s", why);
    if (ring_linked(w))
        teardown(w, why, TD_FAIL, W_WAITING);
    w->ev.ring_lost(w->arg, why);
    w->since = 0;
    rd_world_register(w);
}

/* Leaving: the links the other nodes have not closed yet are closed now. */
static void on_linger(evutil_socket_t fd, short what, void *arg)
{
    rd_world *w = arg;
    (void)fd;
    (void)what;
    if (w->state != W_LEAVING)
        return;
    teardown(w, "this node left the job", TD_LEAVE, W_IDLE);
}

int rd_world_leave(rd_world *w)
{
    if (w->state == W_LEAVING || w->state == W_IDLE)
        return 1;
    if (w->state == W_ASIDE) {
        rd_world_unregister(w);
        return 1;
    }
    if (!ring_up(w)) {
        rd_rdv_leave(w->net->rdv, w->name);
        teardown(w, "this node left the job", TD_LEAVE, W_IDLE);
        return 1;
    }
    w->ev.flush(w->arg); /* what the coordinator ordered goes out before its Bye */
    send_bye(w, 1);
    rd_rdv_leave(w->net->rdv, w->name);
    set_state(w, W_LEAVING);
    /* The others close their links once they have read the Bye; whatever is left goes soon. */
    struct timeval tv = {1, 0};
    evtimer_add(w->ev_linger, &tv);
    rd_log(RD_LOG_INFO, "world", "job '%s': left the ring of generation %" PRIu64,
           w->name, w->generation);
    return 1;
}

void rd_world_reform(rd_world *w, const char *why)
{
    if (!ring_up(w))
        return;
    rd_log(RD_LOG_WARN, "world", "job '%s': %s; the ring re-forms", w->name, why);
    snprintf(w->reform_why, sizeof(w->reform_why), "%s", why);
    reform_later(w);
}

void rd_world_detail(const rd_world *w, char *buf, size_t len)
{
    uint32_t ranks = 0;
    for (size_t i = 0; i < w->latest.nmembers; i++)
        ranks += w->latest.members[i].local_size;
    snprintf(buf, len,
             "%u ranks registered on %zu nodes at generation %" PRIu64
             " (world_size %u, min_size %u), ring %s",
             ranks, w->latest.nmembers, w->latest.generation, w->world_size,
             w->min_size, state_names[w->state]);
}

int rd_world_up(const rd_world *w)
{
    return ring_up(w);
}

int rd_world_solo(const rd_world *w)
{
    return w->nnodes == 1;
}

void rd_world_send(rd_world *w, const int *to, int nto, const rd_schedmsg *m)
{
    rd_schedmsg stamped = *m;
    stamped.generation = w->generation;
    rd_msg *msg = rd_schedmsg_encode(&stamped);
    if (msg == NULL) {
        rd_world_drop(w, "out of memory sending a scheduling message");
        return;
    }
    for (int k = 0; k < (to != NULL ? nto : w->nnodes); k++) {
        int i = to != NULL ? to[k] : k;
        if (i >= 0 && i < w->nnodes && i != w->position && w->ctrl[i] != NULL)
            rd_peer_chan_send(w->ctrl[i], msg);
    }
    rd_schedmsg_encoded_free(msg);
}

int rd_world_sealed(const rd_world *w)
{
    return w->state == W_SEALED || w->state == W_LEAVING; /* both after this node's Bye */
}

void rd_world_settle(rd_world *w)
{
    carry_check(w);
}

void rd_world_set_aside(rd_world *w, int position, const char *why)
{
    if (!ring_up(w) || position < 0 || position >= w->nnodes || position == w->position)
        return;
    const rd_rdv_member *m = member(w, position);
    rd_log(RD_LOG_WARN, "world", "job '%s': setting node %s aside: %s", w->name, m->node, why);
    aside_add(w, m, why);
    if (rd_rdv_evict(w->net->rdv, w->name, m->node, m->incarnation, why) != 0)
        rd_log(RD_LOG_WARN, "world",
               "job '%s': node %s could not be set aside; it leaves when its lease expires",
               w->name, m->node);
}

void rd_world_drop(rd_world *w, const char *why)
{
    rd_log(RD_LOG_WARN, "world", "job '%s': %s; dropping the ring", w->name, why);
    reform_later(w);
}

void rd_world_submit(rd_world *w, struct rd_xfer_task *t)
{
    w->net->counters->ring_passes++;
    w->net->counters->ring_ops += t->nmembers;
    w->ntasks++;
    t->ring = w->xfer;
    rd_xfer_submit(w->xfer, t);
}

/* The position of the node on the other end of channel c, or -1. */
static int chan_position(const rd_world *w, const rd_peer_chan *c)
{
    for (int i = 0; i < w->nnodes; i++)
        if (w->ctrl[i] == c)
            return i;
    return -1;
}

/* A control message: a node's Ready, the coordinator's Go, or a node's Bye. */
static void on_ctrl_msg(void *arg, rd_peer_chan *c, const rd_msg *m)
{
    rd_world *w = arg;
    w->net->counters->activity++;
    if (!ring_linked(w))
        return;
    int from = chan_position(w, c);
    if (from >= 0)
        w->heard[from] = rd_now_ms();
    if (m->body_case == RINGD__MSG__BODY_POKE) /* a keepalive */
        return;
    rd_schedmsg sm;
    char err[256];
    rd_schedmsg_status st =
        from >= 0 ? rd_schedmsg_decode(m, &sm, err, sizeof(err)) : RD_SCHEDMSG_OTHER;
    if (st == RD_SCHEDMSG_BAD) {
        char why[640];
        snprintf(why, sizeof(why), "scheduling message from node %s: %s", member(w, from)->node,
                 err);
        rd_world_drop(w, why);
        return;
    }
    if (st == RD_SCHEDMSG_DECODED && sm.generation == w->generation) {
        w->ev.message(w->arg, from, &sm);
        rd_schedmsg_release(&sm);
        carry_check(w);
        return;
    }
    if (st == RD_SCHEDMSG_DECODED) /* of another generation: unexpected, below */
        rd_schedmsg_release(&sm);
    if (from >= 0 && m->body_case == RINGD__MSG__BODY_BYE && m->bye->generation == w->generation) {
        member_set(w, from, m->bye->leaving ? M_LEAVING : M_SEALED);
        rd_log(RD_LOG_INFO, "world", "job '%s': node %s %s generation %" PRIu64,
               w->name, member(w, from)->node,
               m->bye->leaving ? "leaves the ring of" : "sealed", w->generation);
        if (ring_up(w)) {
            carry_start(w);
            carry_check(w);
        }
        return;
    }
    if (from >= 0 && m->body_case == RINGD__MSG__BODY_ERROR && m->error->message != NULL &&
        ring_up(w)) {
        /* A node breaks off the ring and says why (a client of it left): its clients' ops and
         * these end with that reason; it registers anew, which moves the job on. */
        char why[512];
        snprintf(why, sizeof(why), "%.500s", m->error->message);
        rd_log(RD_LOG_INFO, "world", "job '%s': node %s breaks off the ring: %s",
               w->name, member(w, from)->node, why);
        /* Its data links may have ended first: the cause it names beats "the links broke". */
        if (w->resync != RS_NONE)
            resync_set(w, RS_EXPLAINED, why);
        teardown(w, why, TD_FAIL, W_WAITING);
        resync_set(w, RS_EXPLAINED, NULL);
        apply_view(w);
        return;
    }
    rd_log(RD_LOG_WARN, "world",
           "job '%s': unexpected control message %d from %s at generation %" PRIu64,
           w->name, (int)m->body_case, rd_peer_chan_name(c), w->generation);
}

/* The ring of generation w->stale broke with every node still there: the job moves to the next
 * generation (once, however many nodes ask), where the ring forms again. */
static void move_on(rd_world *w, const char *reason)
{
    if (w->state == W_ASIDE || w->state == W_IDLE || w->state == W_LEAVING)
        return; /* not registered on purpose (a probe may answer after this node left) */
    /* Registering again when the bump cannot be asked for; not over links of a newer ring. */
    if (rd_rdv_bump(w->net->rdv, w->name, w->stale, reason) != RINGD_OK && !ring_linked(w))
        rd_world_register(w);
    apply_view(w); /* another node may have moved it on already */
}

/* Whether a node whose link broke still listens: a refusal means its daemon is gone, and it is
 * removed from the rendezvous at once instead of when its lease runs out. */
static void on_probed(void *arg, int alive, const char *why)
{
    rd_world *w = arg;
    w->probe = NULL;
    const rd_rdv_member *m = &w->probing;
    rd_log(RD_LOG_DEBUG, "world", "job '%s': probe of node %s at %s: %s", w->name,
           m->node, m->addr, why);
    if (alive == 0) {
        char reason[384];
        snprintf(reason, sizeof(reason), "%s:%s", m->node, why);
        rd_log(RD_LOG_WARN, "world", "job '%s': node %s is gone (%s); removing it",
               w->name, m->node, why);
        rd_rdv *rdv = w->net->rdv;
        if (rd_rdv_evict(rdv, w->name, m->node, m->incarnation, reason) != 0) {
            rd_log(RD_LOG_WARN, "world",
                   "job '%s': node %s could not be removed from the rendezvous; the ring "
                   "re-forms at a new generation",
                   w->name, m->node);
            move_on(w, "a link broke");
        }
    } else if (alive == 1 && ++w->probes < 3) {
        /* A daemon just killed may still have its listener open for a moment: look again. */
        w->probe = rd_peer_probe_new(w->net->base, m->addr, 50, on_probed, w);
        if (w->probe == NULL)
            move_on(w, "a link broke");
    } else {
        /* Still there (or unknown): the link broke, not the node. A new generation re-forms it. */
        move_on(w, "a link broke");
    }
}

/* A control link broke. After a Bye that is the node letting go; otherwise the node is gone or
 * the link failed: the ring breaks (its ops are doomed until the next ring) and the node is
 * probed to tell which. */
static void on_ctrl_err(void *arg, rd_peer_chan *c, const char *why)
{
    rd_world *w = arg;
    int from = chan_position(w, c);
    if (from >= 0 && w->members[from] != M_ACTIVE) {
        rd_peer_chan_free(c);
        w->ctrl[from] = NULL;
        carry_check(w);
        return;
    }
    rd_log(RD_LOG_WARN, "world", "job '%s': control link with node %s: %s", w->name,
           rd_peer_chan_name(c), why);
    if (w->state == W_LEAVING) {
        rd_peer_chan_free(c);
        for (int i = 0; i < RD_RING_NODES_MAX; i++)
            if (w->ctrl[i] == c)
                w->ctrl[i] = NULL;
        return;
    }
    if (from < 0 || !ring_linked(w)) {
        reform_later(w);
        return;
    }
    char gone[768];
    snprintf(gone, sizeof(gone),
             "the control link of job '%s' with node %s broke (%s): that node is gone, or the "
             "link failed",
             w->name, member(w, from)->node, why);
    w->probing = *member(w, from);
    w->probes = 0;
    rd_peer_probe_cancel(w->probe);
    w->probe = rd_peer_probe_new(w->net->base, w->probing.addr, 0, on_probed, w);
    teardown(w, gone, TD_FAIL, W_WAITING);
    if (w->probe == NULL)
        move_on(w, "a link broke");
}

/* The job's world named in a PeerHello, if this node has one. */
static rd_world *world_of(rd_net *net, const char *job)
{
    rd_world *w = net->worlds;
    while (w != NULL && strcmp(w->name, job) != 0)
        w = w->next;
    return w;
}

static ringd_result_t peer_check(rd_net *net, const Ringd__PeerHello *h, int fd,
                                 uint64_t *generation, int *quiet, char *err, size_t errlen);

/* Decides on a peer's PeerHello and logs a refusal: a peer ahead of this node's view retries
 * (debug); anything else is worth a warning. */
static ringd_result_t on_peer(void *arg, const Ringd__PeerHello *h, int fd, const char *remote,
                              uint64_t *generation, char *err, size_t errlen)
{
    int quiet = 0;
    ringd_result_t rc = peer_check(arg, h, fd, generation, &quiet, err, errlen);
    if (rc != RINGD_OK)
        rd_log(quiet ? RD_LOG_DEBUG : RD_LOG_WARN, "peer",
               "connection from %s (node '%s', job '%s'): refused: %s", remote, h->node, h->job,
               err);
    return rc;
}

/* Takes an authenticated peer's connection into the ring it names, or says why not: unknown job,
 * another generation, settings that differ, a node that is not the expected neighbour. *quiet
 * marks refusals the peer is expected to retry. */
static ringd_result_t peer_check(rd_net *net, const Ringd__PeerHello *h, int fd,
                                 uint64_t *generation, int *quiet, char *err, size_t errlen)
{
    if (h->protocol != RD_PEER_PROTOCOL_VERSION) {
        snprintf(err, errlen,
                 "node %s speaks protocol %u, this node %d: run one ringd version "
                 "per job (upgrade node by node only between compatible versions)",
                 h->node, h->protocol, RD_PEER_PROTOCOL_VERSION);
        return RINGD_E_PROTOCOL;
    }
    rd_world *w = world_of(net, h->job);
    if (w == NULL || w->state == W_IDLE) {
        *quiet = 1; /* its clients left, or have not all come yet */
        snprintf(err, errlen, "job '%s' has no clients on node %s", h->job, net->cfg->node);
        return RINGD_E_REFUSED;
    }
    *generation = w->generation;
    if (h->generation < w->generation) {
        snprintf(err, errlen, "stale generation %" PRIu64 " (job '%s' is at %" PRIu64 ")",
                 h->generation, h->job, w->generation);
        return RINGD_E_MEMBERSHIP;
    }
    if (h->generation > w->generation || w->state != W_CONNECTING) {
        *quiet = 1;
        snprintf(err, errlen,
                 "job '%s' " RD_NOT_FORMING " %" PRIu64 " here (at %" PRIu64 ", %s)", h->job,
                 h->generation, w->generation, state_names[w->state]);
        return RINGD_E_MEMBERSHIP;
    }
    if (h->conns != (uint32_t)conns(w) || h->segment_size != net->cfg->segment_size) {
        snprintf(err, errlen,
                 "node %s runs --conns-per-link %u --segment-size %" PRIu64
                 ", this node %d and %" PRIu64 "; all nodes must agree",
                 h->node, h->conns, h->segment_size, conns(w), net->cfg->segment_size);
        return RINGD_E_REFUSED;
    }
    int prev = (w->position + w->nnodes - 1) % w->nnodes;
    if (h->kind == RINGD__LINK_KIND__LINK_DATA) {
        if (strcmp(h->node, member(w, prev)->node) != 0 || h->index >= (uint32_t)conns(w)) {
            snprintf(err, errlen, "unexpected data connection %u from node %s (previous node: %s)",
                     h->index, h->node, member(w, prev)->node);
            return RINGD_E_REFUSED;
        }
        /* A peer that re-dials while this node still forms the ring (it tore down and came back)
         * replaces its earlier connection, which it has closed. */
        if (w->in_data[h->index] >= 0)
            close(w->in_data[h->index]);
        w->in_data[h->index] = fd;
        event_active(w->ev_check, 0, 0); /* after the caller has written PeerAccept */
        return RINGD_OK;
    }
    int from = -1;
    for (int i = w->position + 1; i < w->nnodes; i++)
        if (strcmp(member(w, i)->node, h->node) == 0)
            from = i;
    if (from < 0) {
        snprintf(err, errlen, "unexpected control connection from node %s", h->node);
        return RINGD_E_REFUSED;
    }
    rd_peer_chan_free(w->ctrl[from]); /* a re-dial replaces the earlier connection */
    w->ctrl[from] = rd_peer_chan_new(net->base, fd, h->node, (uint32_t)net->cfg->max_frame, on_ctrl_msg,
                                     on_ctrl_err, w);
    if (w->ctrl[from] == NULL) { /* the caller closes fd */
        snprintf(err, errlen, "out of memory");
        return RINGD_E_NOMEM;
    }
    event_active(w->ev_check, 0, 0);
    return RINGD_OK;
}

/* The rendezvous' new view of a job: kept as the latest, applied when the ring can change. */
static void on_view(void *arg, const char *job, const rd_rdv_view *v)
{
    rd_net *net = arg;
    rd_world *w = world_of(net, job);
    if (w == NULL || w->state == W_IDLE)
        return;
    if (view_copy(&w->latest, v) != 0) {
        rd_log(RD_LOG_ERROR, "world", "job '%s': out of memory", job);
        return;
    }
    apply_view(w);
}

/* Reads the first line of a file (a password). */
static int read_secret(const char *path, char *buf, size_t len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (fgets(buf, (int)len, f) == NULL)
        buf[0] = '\0';
    fclose(f);
    buf[strcspn(buf, "\r\n")] = '\0';
    return 0;
}

rd_net *rd_net_new(struct event_base *base, const rd_config *cfg, rd_counters *counters, char *err,
                   size_t errlen)
{
    rd_net *net = calloc(1, sizeof(*net));
    char password[512] = "";
    if (net == NULL || rd_auth_init() != 0) {
        snprintf(err, errlen, "cannot initialise the crypto library");
        free(net);
        return NULL;
    }
    net->base = base;
    net->cfg = cfg;
    net->counters = counters;
    if (cfg->insecure) {
        rd_auth_insecure(&net->key);
        rd_log(RD_LOG_WARN, "world", "--insecure: peers are not authenticated");
    } else if (rd_auth_load(&net->key, cfg->key_file, err, errlen) != 0) {
        goto fail;
    }
    if (cfg->redis_password_file[0] != '\0' &&
        read_secret(cfg->redis_password_file, password, sizeof(password), err, errlen) != 0)
        goto fail;
    if (getrandom(&net->incarnation, sizeof(net->incarnation), 0) != sizeof(net->incarnation))
        net->incarnation = (uint64_t)getpid() << 32 ^ (uint64_t)time(NULL);
    net->peers = rd_peer_net_new(base, cfg->listen, &net->key, cfg->handshake_ms, on_peer, net,
                                 err, errlen);
    if (net->peers == NULL)
        goto fail;
    const char *adv = cfg->advertise[0] != '\0' ? cfg->advertise : rd_peer_net_address(net->peers);
    snprintf(net->address, sizeof(net->address), "%s", adv);
    rd_rdv_options o = {
        .url = cfg->redis_url,
        .password = password[0] != '\0' ? password : NULL,
        .lease_ms = cfg->lease_ttl,
        .on_view = on_view,
        .arg = net,
    };
    net->rdv = rd_rdv_new(base, &o, err, errlen);
    memset(password, 0, sizeof(password));
    if (net->rdv == NULL)
        goto fail;
    rd_log(RD_LOG_INFO, "world", "node %s: peers connect to %s (listening on %s); rendezvous %s",
           cfg->node, net->address, rd_peer_net_address(net->peers), cfg->redis_url);
    return net;
fail:
    rd_net_free(net);
    return NULL;
}

void rd_net_free(rd_net *net)
{
    if (net == NULL)
        return;
    rd_rdv_free(net->rdv);
    rd_peer_net_free(net->peers);
    free(net);
}

const char *rd_net_address(const rd_net *net)
{
    return net != NULL ? net->address : "";
}

int rd_net_interface(const rd_net *net, char *buf, size_t len)
{
    char host[128];
    unsigned char want[16], have[16];
    struct ifaddrs *ifs, *i;
    int found = -1;
    if (net == NULL)
        return -1;
    /* "10.0.0.3:7070" or "[fd00::3]:7070": the host part, without brackets */
    const char *a = net->address, *colon = strrchr(a, ':');
    if (colon == NULL || (size_t)(colon - a) >= sizeof(host))
        return -1;
    int bracket = a[0] == '[';
    snprintf(host, sizeof(host), "%.*s", (int)(colon - a) - 2 * bracket, a + bracket);
    int family = inet_pton(AF_INET, host, want) == 1    ? AF_INET
                 : inet_pton(AF_INET6, host, want) == 1 ? AF_INET6
                                                        : 0;
    if (family == 0 || getifaddrs(&ifs) != 0)
        return -1; /* a name: the interface is not known here */
    for (i = ifs; i != NULL && found != 0; i = i->ifa_next) {
        if (i->ifa_addr == NULL || i->ifa_addr->sa_family != family)
            continue;
        size_t n = family == AF_INET ? 4 : 16;
        memcpy(have,
               family == AF_INET ? (void *)&((struct sockaddr_in *)i->ifa_addr)->sin_addr
                                 : (void *)&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr,
               n);
        if (memcmp(have, want, n) == 0) {
            snprintf(buf, len, "%s", i->ifa_name);
            found = 0;
        }
    }
    freeifaddrs(ifs);
    return found;
}

int rd_net_redis_connected(const rd_net *net)
{
    return net != NULL && net->rdv != NULL && rd_rdv_connected(net->rdv);
}

int64_t rd_net_redis_rtt_us(const rd_net *net)
{
    return net != NULL ? rd_rdv_rtt_us(net->rdv) : -1;
}

rd_status rd_world_describe(const rd_world *w, rd_world_status *r)
{
    /* Members set aside by this node come after the view's. */
    size_t n = w->view.nmembers, na = (size_t)w->naside;
    memset(r, 0, sizeof(*r));
    if (n + na > 0 && (r->members = calloc(n + na, sizeof(*r->members))) == NULL)
        return RINGD_E_NOMEM;
    r->generation = w->generation;
    r->state = state_names[w->state];
    r->position = (uint32_t)(w->position >= 0 ? w->position : 0);
    uint32_t first = 0;
    for (size_t i = 0; i < n + na; i++) {
        rd_member_status *mi = &r->members[r->nmembers++];
        char *st = mi->state;
        if (i >= n) { /* set aside by this node */
            const aside_member *a = &w->aside[i - n];
            mi->node = a->node;
            mi->address = a->addr;
            snprintf(st, sizeof(mi->state), "set aside: %s", a->why);
            continue;
        }
        const rd_rdv_member *m = &w->view.members[i];
        mi->first_rank = first;
        mi->node = m->node;
        mi->address = m->addr;
        mi->local_size = m->local_size;
        int self = strcmp(m->node, w->net->cfg->node) == 0;
        if (self && w->state == W_ASIDE)
            snprintf(st, sizeof(mi->state), "set aside: %s", w->self_aside);
        else if (self)
            snprintf(st, sizeof(mi->state), "%s", state_names[w->state]);
        else if (w->state == W_CONNECTING && (int)i < w->nnodes && w->unreach[i][0] != '\0')
            snprintf(st, sizeof(mi->state), "unreachable: %s", w->unreach[i]);
        else
            snprintf(st, sizeof(mi->state), "%s", ring_up(w) ? "up" : "member");
        first += m->local_size;
    }
    if (n > 0)
        r->coordinator = w->view.members[0].node;
    if (ring_up(w) && w->nnodes >= 2) {
        uint64_t s, rv;
        link_bytes(w, &s, &rv);
        for (int k = 0; k < 2; k++) {
            rd_link_status *l = &r->links[r->nlinks++];
            int peer =
                k == 0 ? (w->position + 1) % w->nnodes : (w->position + w->nnodes - 1) % w->nnodes;
            l->peer = member(w, peer)->node;
            l->direction = k == 0 ? "send" : "recv";
            l->conns = (uint32_t)conns(w);
            l->bytes = k == 0 ? s : rv;
            l->throughput_bps = k == 0 ? w->rate_sent : w->rate_recv;
        }
    }
    return RINGD_OK;
}
