/* The control channel of a job's ring: links along a tree of the ring's nodes (a node's parent
 * and children, ctrltree.h), carrying the engine's scheduling messages (fanned out to the
 * channel's subscribers by kind), Bye, Error and the keepalive. Every message but the keepalive
 * travels as a Relay that each node passes on toward where it goes, so each node's messages
 * reach every node in the order it sent them, as over a full mesh, with at most
 * RD_CTRL_FANOUT + 1 links per node instead of N - 1. What a node passes on to a neighbour in
 * one loop turn leaves as one frame (or a few, within --max-frame); its own messages go at once
 * when nothing is queued for that neighbour. While the ring is up, the other nodes'
 * announcements wait until the engine releases them (rd_world_release: up once the nodes below
 * have all announced an op, down once every node has), so that an op costs a node one frame
 * each way rather than one per loop turn its announcements trickle in over. Also here: a
 * control link that breaks, and the probe that tells a gone node from a broken link. */
#define _GNU_SOURCE
#include "world_int.h"

#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "counters.h"
#include "log.h"

static void on_ctrl_msg(void *arg, rd_peer_chan *c, const rd_msg *m);
static void on_ctrl_err(void *arg, rd_peer_chan *c, const char *why);
static void on_flush(evutil_socket_t fd, short what, void *arg);
static void on_hold(evutil_socket_t fd, short what, void *arg);
static void relay_on(rd_world *w, int from, int to, const Ringd__Relay *r, int own, int hold);

int world_tree_parent(const rd_world *w)
{
    return rd_ctrltree_parent(w->position, RD_CTRL_FANOUT);
}

int world_tree_neighbour(const rd_world *w, int i)
{
    return rd_ctrltree_linked(w->position, i, w->nnodes, RD_CTRL_FANOUT);
}

int world_tree_toward(const rd_world *w, int t)
{
    return rd_ctrltree_toward(w->position, t, RD_CTRL_FANOUT);
}

int world_ctrl_init(rd_world *w)
{
    w->ev_flush = event_new(w->net->base, -1, 0, on_flush, w);
    w->ev_hold = evtimer_new(w->net->base, on_hold, w);
    return w->ev_flush != NULL && w->ev_hold != NULL ? 0 : -1;
}

void world_ctrl_free(rd_world *w)
{
    world_ctrl_close(w);
    for (int i = 0; i < RD_RING_NODES_MAX; i++)
        free(w->outq[i].items);
    memset(w->outq, 0, sizeof(w->outq));
    if (w->ev_hold != NULL)
        event_free(w->ev_hold);
    if (w->ev_flush != NULL)
        event_free(w->ev_flush);
    w->ev_flush = NULL;
    w->ev_hold = NULL;
}

/* A Relay could not be queued (why): the ring drops, and nothing more goes out at this
 * generation, so that no node hears a later message of this node's without the lost one. */
static void queue_failed(rd_world *w, const char *why)
{
    w->outq_failed = 1;
    if (w->state == W_LEAVING) /* nothing it passes on would arrive whole: it stops */
        event_active(w->ev_linger, 0, 0);
    else
        rd_world_drop(w, why);
}

/* Queues r (taken) for the neighbour at i, to go at the end of the loop turn, or when released
 * if hold. Past the limit (RD_CTRL_QUEUED_MIN, or RD_CTRL_QUEUED_FRAMES of the largest frames), or
 * out of memory, r is freed and the ring drops. */
static void queue_add(rd_world *w, int i, Ringd__Relay *r, int hold)
{
    ctrl_queue *q = &w->outq[i];
    size_t len = rd_relay_size(r);
    size_t most = RD_CTRL_QUEUED_FRAMES * ((size_t)w->net->cfg->max_frame + RD_RELAY_OVERHEAD);
    if (most < RD_CTRL_QUEUED_MIN)
        most = RD_CTRL_QUEUED_MIN;
    if (w->outq_failed) {
        rd_relay_free(r);
        return;
    }
    if (q->n == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 8;
        Ringd__Relay **items = realloc(q->items, cap * sizeof(*items));
        if (items == NULL) {
            rd_relay_free(r);
            queue_failed(w, "out of memory queueing a control message");
            return;
        }
        q->items = items;
        q->cap = cap;
    }
    if (w->outq_bytes + len > most) {
        char why[160];
        snprintf(why, sizeof(why),
                 "over %zu MiB of control messages queued for the neighbours in the control tree",
                 most >> 20);
        rd_relay_free(r);
        queue_failed(w, why);
        return;
    }
    q->items[q->n++] = r;
    q->bytes += len;
    /* a frame's worth goes: holding it longer saves no frame, and the copies held for every
     * neighbour count against the limit */
    q->urgent |= !hold || q->bytes >= (size_t)w->net->cfg->max_frame;
    w->outq_bytes += len;
    event_active(w->ev_flush, 0, 0);
}

/* Drops items[0..k) of the queue for the neighbour at i (sent or given up). */
static void queue_drop(rd_world *w, int i, size_t k)
{
    ctrl_queue *q = &w->outq[i];
    if (k == 0)
        return;
    for (size_t j = 0; j < k; j++) {
        size_t len = rd_relay_size(q->items[j]);
        w->outq_bytes -= len;
        q->bytes -= len;
        rd_relay_free(q->items[j]);
    }
    memmove(q->items, q->items + k, (q->n - k) * sizeof(*q->items));
    q->n -= k;
    if (q->n == 0)
        q->urgent = 0;
}

/* Sends relays[0..n) to the neighbour at i (its link is made) as one frame, counted. */
static void frame_send(rd_world *w, int i, Ringd__Relay **relays, size_t n)
{
    Ringd__Relays rs;
    rd_msg m;
    rd_relays_msg(&m, &rs, relays, n);
    size_t bytes = rd_peer_chan_send(w->ctrl[i], &m);
    if (bytes > 0) {
        w->told[i] = rd_now_ms();
        w->net->counters->ctrl_sent++;
        w->net->counters->ctrl_bytes_sent += bytes;
    }
}

/* Sends the queue of the neighbour at i over its link, in frames of at most --max-frame (one
 * Relay alone may pass it by its envelope). */
static void queue_send(rd_world *w, int i)
{
    ctrl_queue *q = &w->outq[i];
    size_t max = (size_t)w->net->cfg->max_frame, at = 0;
    while (at < q->n && w->ctrl[i] != NULL) {
        size_t k = 0, bytes = 16; /* the frame's header and tags */
        while (at + k < q->n && (k == 0 || bytes + rd_relay_size(q->items[at + k]) <= max))
            bytes += rd_relay_size(q->items[at + k++]);
        frame_send(w, i, q->items + at, k);
        at += k;
    }
    queue_drop(w, i, at);
}

/* 1 when the queue of the neighbour at i goes now: all of it (the hold ran out), something in
 * it is not held, the ring is not up (nothing is held then), or the engine released its way. */
static int queue_due(const rd_world *w, int i, int all)
{
    if (all || w->outq[i].urgent || w->state != W_UP)
        return 1;
    return (w->release & (i == world_tree_parent(w) ? RD_RELEASE_UP : RD_RELEASE_DOWN)) != 0;
}

/* Sends what is due (all: everything), keeps what is held, and forgets what is for nobody. */
static void flush(rd_world *w, int all)
{
    int held = 0;
    for (int i = 0; i < RD_RING_NODES_MAX; i++) {
        if (w->outq[i].n == 0)
            continue;
        if (w->outq_failed)
            queue_drop(w, i, w->outq[i].n);
        else if (w->ctrl[i] != NULL && queue_due(w, i, all))
            queue_send(w, i);
        else if (w->ctrl[i] != NULL)
            held = 1;
        else if (w->state != W_CONNECTING) /* its link is gone, or was never made: for nobody */
            queue_drop(w, i, w->outq[i].n);
    }
    w->release = 0;
    if (!held) {
        event_del(w->ev_hold);
    } else if (!evtimer_pending(w->ev_hold, NULL)) {
        struct timeval tv = {0, RD_CTRL_HOLD_MS * 1000};
        evtimer_add(w->ev_hold, &tv);
    }
}

void world_ctrl_flush(rd_world *w)
{
    flush(w, 0);
}

void rd_world_release(rd_world *w, unsigned what)
{
    if (w->state != W_UP)
        return;
    w->release |= what;
    event_active(w->ev_flush, 0, 0);
}

int rd_world_below(const rd_world *w, int position)
{
    return rd_ctrltree_below(w->position, position, RD_CTRL_FANOUT);
}

void world_ctrl_close(rd_world *w)
{
    if (w->ev_flush != NULL)
        event_del(w->ev_flush);
    if (w->ev_hold != NULL)
        event_del(w->ev_hold);
    w->release = 0;
    for (int i = 0; i < RD_RING_NODES_MAX; i++) {
        if (w->ctrl[i] != NULL && !w->outq_failed)
            queue_send(w, i);
        queue_drop(w, i, w->outq[i].n);
    }
    w->outq_bytes = 0;
    w->outq_failed = 0;
}

/* The end of the loop turn: what this turn queued goes out, unless held. */
static void on_flush(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    flush(arg, 0);
}

/* RD_CTRL_HOLD_MS since something was first held: whatever is held goes. */
static void on_hold(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    flush(arg, 1);
}

void world_ctrl_poke(rd_world *w, int i)
{
    if (!world_tree_neighbour(w, i) || w->ctrl[i] == NULL)
        return;
    Ringd__Poke p = RINGD__POKE__INIT;
    rd_msg m = RINGD__MSG__INIT;
    m.body_case = RINGD__MSG__BODY_POKE;
    m.poke = &p;
    size_t n = rd_peer_chan_send(w->ctrl[i], &m);
    if (n > 0) {
        w->told[i] = rd_now_ms();
        w->net->counters->ctrl_keepalives++;
    }
}

/* Sends m, this node's, to position to (-1: every node, the neighbour at skip taking nothing)
 * along the tree. */
static void tree_send(rd_world *w, int to, int skip, const rd_msg *m)
{
    if (!world_ring_linked(w) && w->state != W_LEAVING) /* no links of this generation */
        return;
    Ringd__Relay *r = rd_relay_new(m, (uint32_t)w->position, to);
    if (r == NULL) {
        queue_failed(w, "out of memory sending a control message");
        return;
    }
    relay_on(w, skip, to, r, 1, 0);
    rd_relay_free(r);
}

/* Sends Bye (leaving or only sealing) to every node still reached. */
void world_send_bye(rd_world *w, int leaving, const char *loss)
{
    Ringd__Bye bye = RINGD__BYE__INIT;
    bye.generation = w->generation;
    bye.leaving = leaving;
    bye.loss = (char *)(loss != NULL ? loss : "");
    rd_msg m = RINGD__MSG__INIT;
    m.body_case = RINGD__MSG__BODY_BYE;
    m.bye = &bye;
    tree_send(w, -1, -1, &m);
}

void world_send_error(rd_world *w, const char *why, int skip)
{
    Ringd__Error e = RINGD__ERROR__INIT;
    e.status = RINGD_E_MEMBERSHIP;
    e.message = (char *)why;
    rd_msg m = RINGD__MSG__INIT;
    m.body_case = RINGD__MSG__BODY_ERROR;
    m.error = &e;
    tree_send(w, -1, skip, &m);
}

void rd_world_send(rd_world *w, const int *to, int nto, const rd_schedmsg *m)
{
    rd_schedmsg stamped = *m;
    stamped.generation = w->generation;
    rd_msg *msg = rd_schedmsg_encode(&stamped);
    if (msg == NULL) {
        queue_failed(w, "out of memory sending a scheduling message");
        return;
    }
    if (to == NULL) {
        tree_send(w, -1, -1, msg);
    } else {
        for (int k = 0; k < nto; k++)
            if (to[k] >= 0 && to[k] < w->nnodes && to[k] != w->position)
                tree_send(w, to[k], -1, msg);
    }
    rd_schedmsg_encoded_free(msg);
}

int world_ctrl_link(rd_world *w, int i, int fd, const rd_seal *seal)
{
    /* A frame holds at most --max-frame of Relays, or one Relay and its envelope. */
    rd_peer_chan *c = rd_peer_chan_new(w->net->base, fd, seal, world_member(w, i)->node,
                                       (uint32_t)w->net->cfg->max_frame + RD_RELAY_OVERHEAD,
                                       on_ctrl_msg, on_ctrl_err, w);
    if (c == NULL)
        return -1;
    if (w->ctrl[i] != NULL) {
        /* A re-dial replaces the earlier connection, and with it what went over that one and
         * was not read: a gap in what some node hears of another. */
        char why[RD_NAME_MAX + 96];
        snprintf(why, sizeof(why), "node %s made its control link again", world_member(w, i)->node);
        rd_world_drop(w, why);
    }
    rd_peer_chan_free(w->ctrl[i]);
    w->ctrl[i] = c;
    return 0;
}

/* The position of the node on the other end of channel c, or -1. */
static int chan_position(const rd_world *w, const rd_peer_chan *c)
{
    for (int i = 0; i < w->nnodes; i++)
        if (w->ctrl[i] == c)
            return i;
    return -1;
}

/* A message of the node at position from (its Ready, the coordinator's Go, a Bye, an Error),
 * relayed to this node or sent by a neighbour. */
static void ctrl_handle(rd_world *w, int from, const rd_msg *m)
{
    rd_schedmsg sm;
    char err[256];
    rd_schedmsg_status st = rd_schedmsg_decode(m, &sm, err, sizeof(err));
    if (st == RD_SCHEDMSG_BAD) {
        char why[640];
        snprintf(why, sizeof(why), "scheduling message from node %s: %s",
                 world_member(w, from)->node, err);
        rd_world_drop(w, why);
        return;
    }
    if (st == RD_SCHEDMSG_DECODED && sm.generation == w->generation) {
        int took = rd_ringchan_message(&w->chan, from, &sm), kind = (int)sm.kind;
        rd_schedmsg_release(&sm);
        if (took == 0) { /* the sender runs something this node does not */
            char why[640];
            snprintf(why, sizeof(why),
                     "scheduling message of kind %d from node %s: nothing on this node takes it",
                     kind, world_member(w, from)->node);
            rd_world_drop(w, why);
            return;
        }
        world_carry_check(w);
        return;
    }
    if (st == RD_SCHEDMSG_DECODED) /* of another generation: unexpected, below */
        rd_schedmsg_release(&sm);
    if (m->body_case == RINGD__MSG__BODY_BYE && m->bye->generation == w->generation) {
        world_member_set(w, from, m->bye->leaving ? M_LEAVING : M_SEALED);
        if (m->bye->leaving)
            world_left_add(w, world_member(w, from));
        /* A node whose last client closed or died: graceful for the ring, a loss to the clients,
         * who hear it (once, naming the rank) when the next ring comes up. A reason a view gave
         * stays. */
        if (m->bye->leaving && m->bye->loss != NULL && m->bye->loss[0] != '\0' &&
            w->resync != RS_EXPLAINED) {
            char loss[RD_WORLD_LOSS_MAX];
            snprintf(loss, sizeof(loss), "%s", m->bye->loss);
            world_resync_set(w, RS_EXPLAINED, loss);
        }
        rd_log(RD_LOG_INFO, "world", "job '%s': node %s %s generation %" PRIu64, w->name,
               world_member(w, from)->node, m->bye->leaving ? "leaves the ring of" : "sealed",
               w->generation);
        if (world_ring_up(w)) {
            world_carry_start(w);
            world_carry_check(w);
        }
        return;
    }
    if (m->body_case == RINGD__MSG__BODY_ERROR && m->error->message != NULL) {
        /* A node breaks off the ring and says why (a client of it left), or tells why another
         * did: ops here end with that reason; the node registers anew, moving the job on. The
         * relay passed it on already, so every node hears the cause before the links close. */
        char why[512];
        snprintf(why, sizeof(why), "%.500s", m->error->message);
        rd_log(RD_LOG_INFO, "world", "job '%s': node %s says the ring breaks: %s", w->name,
               world_member(w, from)->node, why);
        /* Its data links may have ended first: the cause it names beats "the links broke" (not
         * a change a view named). */
        if (w->resync == RS_BROKEN)
            world_resync_set(w, RS_EXPLAINED, why);
        /* The sender moves the job to a new generation: this one never forms again here. */
        if (w->stale < w->generation)
            w->stale = w->generation;
        world_teardown(w, why, TD_FAIL, W_WAITING);
        world_resync_set(w, RS_EXPLAINED, NULL);
        world_apply_view(w);
        return;
    }
    rd_log(RD_LOG_WARN, "world",
           "job '%s': unexpected control message %d from node %s at generation %" PRIu64, w->name,
           (int)m->body_case, world_member(w, from)->node, w->generation);
}

/* Queues a copy of r for the neighbour at i (held until released if hold): 0, or -1 out of
 * memory (the ring drops). */
static int queue_copy(rd_world *w, int i, const Ringd__Relay *r, int own, int hold)
{
    if (own && w->outq[i].n == 0 && w->ctrl[i] != NULL && !w->outq_failed) {
        /* This node's own, with nothing before it for that neighbour: now, not at the turn's
         * end (a small op's announcement is the latency of the op). */
        Ringd__Relay *one = (Ringd__Relay *)r;
        frame_send(w, i, &one, 1);
        return 0;
    }
    Ringd__Relay *copy = rd_relay_copy(r);
    if (copy == NULL) {
        queue_failed(w, "out of memory passing a control message on");
        return -1;
    }
    queue_add(w, i, copy, hold);
    return 0;
}

/* Passes r on toward where it goes, from the neighbour at from (-1: none), own when it is this
 * node's, hold when it may wait for the engine's release: to every other neighbour when it is
 * for every node, else to the neighbour on the way (none when it is for this node). */
static void relay_on(rd_world *w, int from, int to, const Ringd__Relay *r, int own, int hold)
{
    if (to >= 0) {
        if (to != w->position)
            queue_copy(w, world_tree_toward(w, to), r, own, hold);
        return;
    }
    int parent = world_tree_parent(w);
    if (parent >= 0 && parent != from && queue_copy(w, parent, r, own, hold) != 0)
        return;
    int first = rd_ctrltree_first_child(w->position, RD_CTRL_FANOUT);
    for (int child = first; child < first + RD_CTRL_FANOUT && child < w->nnodes; child++)
        if (child != from && queue_copy(w, child, r, own, hold) != 0)
            return;
}

/* 1 when m, another node's message for every node, may wait for the engine's release: a Ready
 * of this generation announcing ops ready there (none failed, no stall requests), which
 * matters only once the nodes it waits on have announced them too. */
static int holdable(const rd_world *w, const rd_msg *m)
{
    if (m == NULL || m->body_case != RINGD__MSG__BODY_READY ||
        m->ready->generation != w->generation || m->ready->n_stalled > 0)
        return 0;
    for (size_t k = 0; k < m->ready->n_ops; k++)
        if (m->ready->ops[k]->status != 0)
            return 0;
    return 1;
}

/* Opens r, a Relay from the neighbour at position from, and passes it on toward where it goes
 * (before this node acts on it, so that a Bye or an Error reaches the nodes beyond before this
 * one's links close). Returns its message (the caller's, rd_frame_free) when it is for this node
 * too, in *inner with its *origin; 0, or -1 when the Relay could not have come this way (a
 * peer's fault: the ring drops, why says so). */
static int relay_pass(rd_world *w, int from, const Ringd__Relay *r, rd_msg **inner, int *origin,
                      char *why, size_t len)
{
    uint32_t o = 0;
    int to = -1;
    char err[256];
    if (rd_relay_open(r, inner, &o, &to, err, sizeof(err)) != RD_FRAME_OK) {
        snprintf(why, len, "control message from node %s: %s", world_member(w, from)->node, err);
        return -1;
    }
    /* From a node beyond the neighbour that passed it, for a node this one reaches otherwise. */
    if (o >= (uint32_t)w->nnodes || (int)o == w->position || world_tree_toward(w, (int)o) != from ||
        to >= w->nnodes || to == (int)o ||
        (to >= 0 && to != w->position && world_tree_toward(w, to) == from)) {
        snprintf(why, len,
                 "control message from node %s relayed from position %" PRIu32 " to %d, which "
                 "does not come that way in a ring of %d nodes",
                 world_member(w, from)->node, o, to, w->nnodes);
        rd_frame_free(*inner);
        *inner = NULL;
        return -1;
    }
    relay_on(w, from, to, r, 0, to < 0 && holdable(w, *inner));
    if (to >= 0 && to != w->position) {
        rd_frame_free(*inner);
        *inner = NULL;
    }
    *origin = (int)o;
    return 0;
}

void world_linger_check(rd_world *w, int broke)
{
    if (w->state != W_LEAVING)
        return;
    /* Its neighbours need it until they close their links, and those leaving too until every
     * node's Bye is in (it has passed them all on by then); none once the ring broke. */
    int all_bye = 1;
    for (int i = 0; i < w->nnodes; i++)
        all_bye &= i == w->position || w->members[i] != M_ACTIVE;
    for (int i = 0; i < w->nnodes && !broke; i++)
        if (w->ctrl[i] != NULL && (w->members[i] != M_LEAVING || !all_bye))
            return;
    event_active(w->ev_linger, 0, 0);
}

/* What a leaving node takes from m, a message of origin's: a Bye (which of its neighbours
 * leave), and whether the ring broke (an Error: 1). */
static int leaving_take(rd_world *w, int origin, const rd_msg *m)
{
    if (m->body_case == RINGD__MSG__BODY_BYE && m->bye->generation == w->generation)
        world_member_set(w, origin, m->bye->leaving ? M_LEAVING : M_SEALED);
    return m->body_case == RINGD__MSG__BODY_ERROR;
}

/* A frame on the control link with the neighbour at position from: a keepalive, or Relays. Every
 * Relay of the frame is passed on first, then those for this node are handled in order while
 * the link stands at this generation (one of them may end the ring). Anything else, and a Relay
 * that could not have come this way, is a peer's fault: the ring drops. */
static void on_ctrl_msg(void *arg, rd_peer_chan *c, const rd_msg *m)
{
    rd_world *w = arg;
    w->net->counters->activity++;
    int leaving = w->state == W_LEAVING; /* still passes messages on; acts on none */
    if (!world_ring_linked(w) && !leaving)
        return;
    int from = chan_position(w, c);
    if (from < 0)
        return;
    w->heard[from] = rd_now_ms();
    if (m->body_case == RINGD__MSG__BODY_POKE) /* a keepalive */
        return;
    char why[640];
    if (m->body_case != RINGD__MSG__BODY_RELAYS) {
        snprintf(why, sizeof(why),
                 "control message from node %s: a message of type %d where Relays belong",
                 world_member(w, from)->node, (int)m->body_case);
        queue_failed(w, why);
        return;
    }
    const Ringd__Relays *rs = m->relays;
    rd_msg **inner = calloc(rs->n_relays > 0 ? rs->n_relays : 1, sizeof(*inner));
    int *origin = calloc(rs->n_relays > 0 ? rs->n_relays : 1, sizeof(*origin));
    int bad = inner == NULL || origin == NULL;
    if (bad)
        snprintf(why, sizeof(why), "out of memory taking control messages from node %s",
                 world_member(w, from)->node);
    for (size_t k = 0; k < rs->n_relays && !bad; k++)
        bad = relay_pass(w, from, rs->relays[k], &inner[k], &origin[k], why, sizeof(why)) != 0;
    uint64_t generation = w->generation;
    int broke = 0;
    for (size_t k = 0; k < rs->n_relays && inner != NULL; k++) {
        /* the ring may have ended at one of them: the rest are for nobody */
        if (!bad && inner[k] != NULL && w->ctrl[from] == c && w->generation == generation) {
            if (leaving)
                broke |= leaving_take(w, origin[k], inner[k]);
            else
                ctrl_handle(w, origin[k], inner[k]);
        }
        rd_frame_free(inner[k]);
    }
    free(inner);
    free(origin);
    if (bad) /* what came after the bad one was not passed on: nothing more may be */
        queue_failed(w, why);
    else if (leaving)
        world_linger_check(w, broke);
}

/* Whether a node whose link broke still listens: a refusal means its daemon is gone, and it is
 * removed from the rendezvous at once instead of when its lease runs out. */
static void on_probed(void *arg, int alive, const char *why)
{
    rd_world *w = arg;
    w->probe = NULL;
    const rd_rdv_member *m = &w->probing;
    rd_log(RD_LOG_DEBUG, "world", "job '%s': probe of node %s at %s: %s", w->name, m->node, m->addr,
           why);
    if (alive == 0) {
        char reason[384];
        snprintf(reason, sizeof(reason), "%s:%s", m->node, why);
        rd_log(RD_LOG_WARN, "world", "job '%s': node %s is gone (%s); removing it", w->name,
               m->node, why);
        rd_rdv *rdv = w->net->rdv;
        if (rd_rdv_evict(rdv, w->name, m->node, m->incarnation, reason) != 0) {
            rd_log(RD_LOG_WARN, "world",
                   "job '%s': node %s could not be removed from the rendezvous; the ring "
                   "re-forms at a new generation",
                   w->name, m->node);
            world_move_on(w, "a link broke");
        }
    } else if (alive == 1 && ++w->probes < 3) {
        /* A daemon just killed may still have its listener open for a moment: look again. */
        w->probe = rd_peer_probe_new(w->net->base, m->addr, 50, on_probed, w);
        if (w->probe == NULL)
            world_move_on(w, "a link broke");
    } else {
        /* Still there (or unknown): the link broke, not the node. A new generation re-forms it. */
        world_move_on(w, "a link broke");
    }
}

/* 1 when every node this one reaches through the neighbour at i (i among them) said Bye. */
static int sealed_beyond(const rd_world *w, int i)
{
    for (int m = 0; m < w->nnodes; m++)
        if (m != w->position && world_tree_toward(w, m) == i && w->members[m] == M_ACTIVE)
            return 0;
    return 1;
}

/* A control link broke. A neighbour closes its link once it has passed on every node's Bye it
 * heard: graceful when those of every node beyond it are in (or this node's own ring never came
 * up), a loss when not (it went away first). Otherwise the node is gone or the link failed:
 * the ring breaks (its ops are doomed until the next ring), the nodes beyond hear why, and the
 * node is probed to tell which. A leaving node only passes the cause on and stops. */
static void on_ctrl_err(void *arg, rd_peer_chan *c, const char *why)
{
    rd_world *w = arg;
    int from = chan_position(w, c);
    int graceful = from >= 0 && w->members[from] != M_ACTIVE &&
                   (sealed_beyond(w, from) || w->state == W_CONNECTING);
    if (w->state == W_LEAVING) {
        char gone[768]; /* why is c's */
        if (from >= 0 && !graceful)
            snprintf(gone, sizeof(gone),
                     "the control link of job '%s' with node %s broke (%s): that node is gone, "
                     "or the link failed",
                     w->name, world_member(w, from)->node, why);
        for (int i = 0; i < RD_RING_NODES_MAX; i++)
            if (w->ctrl[i] == c)
                w->ctrl[i] = NULL;
        rd_peer_chan_free(c);
        if (from >= 0 && !graceful)
            world_send_error(w, gone, from);
        world_linger_check(w, from >= 0 && !graceful);
        return;
    }
    if (graceful) {
        rd_peer_chan_free(c);
        w->ctrl[from] = NULL;
        world_carry_check(w);
        return;
    }
    rd_log(RD_LOG_WARN, "world", "job '%s': control link with node %s: %s", w->name,
           rd_peer_chan_name(c), why);
    if (from < 0 || !world_ring_linked(w)) {
        world_reform_later(w);
        return;
    }
    char gone[768];
    snprintf(gone, sizeof(gone),
             "the control link of job '%s' with node %s broke (%s): that node is gone, or the "
             "link failed",
             w->name, world_member(w, from)->node, why);
    /* The nodes beyond hear it from this one (they have no link with that node). */
    world_send_error(w, gone, from);
    w->probing = *world_member(w, from);
    w->probes = 0;
    rd_peer_probe_cancel(w->probe);
    w->probe = rd_peer_probe_new(w->net->base, w->probing.addr, 0, on_probed, w);
    world_teardown(w, gone, TD_FAIL, W_WAITING);
    if (w->probe == NULL)
        world_move_on(w, "a link broke");
}

int rd_world_subscribe(rd_world *w, const rd_ring_channel *ch, void *arg)
{
    return rd_ringchan_subscribe(&w->chan, ch, arg);
}

void rd_world_unsubscribe(rd_world *w, int handle)
{
    if (w != NULL)
        rd_ringchan_unsubscribe(&w->chan, handle);
}
