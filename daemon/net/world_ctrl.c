/* The control channel of a job's ring: links along a tree of the ring's nodes (a node's parent
 * and children), carrying the engine's scheduling messages (fanned out to the channel's
 * subscribers by kind), Bye, Error and the keepalive. Every message but the keepalive travels in
 * a Relay that each node passes on toward where it goes, so each node's messages reach every
 * node in the order it sent them, as over a full mesh, with k + 1 links per node instead of N - 1.
 * Also here: a control link that breaks, and the probe that tells a gone node from a broken
 * link. */
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

/* A message held for a neighbour whose link is still being made. */
struct ctrl_pending {
    rd_relay r;
    size_t len;
    struct ctrl_pending *next;
};

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

/* Holds m (a Relay) for the neighbour at i until its link is made; the ring drops when that
 * would hold more than RD_CTRL_PENDING_MAX bytes. */
static void pending_add(rd_world *w, int i, const rd_msg *m)
{
    size_t len = rd_frame_size(m);
    struct ctrl_pending *p = malloc(sizeof(*p));
    if (p == NULL || w->pending_bytes + len > RD_CTRL_PENDING_MAX || rd_relay_copy(&p->r, m) != 0) {
        free(p);
        rd_world_drop(w, "cannot hold the control messages for a node whose link is being made");
        return;
    }
    p->len = len;
    p->next = NULL;
    struct ctrl_pending **at = &w->pending[i];
    while (*at != NULL)
        at = &(*at)->next;
    *at = p;
    w->pending_bytes += len;
}

void world_ctrl_pending_clear(rd_world *w)
{
    for (int i = 0; i < RD_RING_NODES_MAX; i++) {
        while (w->pending[i] != NULL) {
            struct ctrl_pending *p = w->pending[i];
            w->pending[i] = p->next;
            rd_relay_free(&p->r);
            free(p);
        }
    }
    w->pending_bytes = 0;
}

/* Sends m on the link with the neighbour at i (there is one), counted. */
static void link_send(rd_world *w, int i, const rd_msg *m)
{
    size_t n = rd_peer_chan_send(w->ctrl[i], m);
    if (n > 0)
        w->told[i] = rd_now_ms();
    if (n > 0 && m->body_case == RINGD__MSG__BODY_POKE) {
        w->net->counters->ctrl_keepalives++;
    } else if (n > 0) {
        w->net->counters->ctrl_sent++;
        w->net->counters->ctrl_bytes_sent += n;
    }
}

void world_ctrl_send(rd_world *w, int i, const rd_msg *m)
{
    if (!world_tree_neighbour(w, i))
        return;
    /* Held while the link is made, and behind what is held once it is (order by origin). */
    if (w->ctrl[i] == NULL || w->pending[i] != NULL) {
        if (w->state == W_CONNECTING && m->body_case == RINGD__MSG__BODY_RELAY)
            pending_add(w, i, m);
        return;
    }
    link_send(w, i, m);
}

/* Sends m, this node's, to position to (-1: every node but skip's side, the neighbour at skip
 * taking nothing) along the tree. */
static void tree_send(rd_world *w, int to, int skip, const rd_msg *m)
{
    rd_relay r;
    if (rd_relay_wrap(&r, m, (uint32_t)w->position, to) != 0) {
        rd_world_drop(w, "out of memory sending a control message");
        return;
    }
    if (to >= 0) {
        world_ctrl_send(w, world_tree_toward(w, to), &r.msg);
    } else {
        for (int i = 0; i < w->nnodes; i++)
            if (i != skip)
                world_ctrl_send(w, i, &r.msg);
    }
    rd_relay_free(&r);
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
        rd_world_drop(w, "out of memory sending a scheduling message");
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
    rd_peer_chan *c =
        rd_peer_chan_new(w->net->base, fd, seal, world_member(w, i)->node,
                         (uint32_t)w->net->cfg->max_frame, on_ctrl_msg, on_ctrl_err, w);
    if (c == NULL)
        return -1;
    rd_peer_chan_free(w->ctrl[i]); /* a re-dial replaces the earlier connection */
    w->ctrl[i] = c;
    return 0;
}

void world_ctrl_pending_send(rd_world *w)
{
    for (int i = 0; i < w->nnodes; i++) {
        while (w->ctrl[i] != NULL && w->pending[i] != NULL) {
            struct ctrl_pending *p = w->pending[i];
            w->pending[i] = p->next;
            w->pending_bytes -= p->len;
            link_send(w, i, &p->r.msg);
            rd_relay_free(&p->r);
            free(p);
        }
    }
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

/* A frame on the control link with the neighbour at position from: a keepalive, or a Relay that
 * is passed on toward where it goes (before this node acts on it, so that a Bye or an Error
 * reaches the nodes beyond before this one's links close) and handled here when it is for this
 * node. A Relay that could not have come this way is a peer's fault: the ring drops. */
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
    rd_msg *inner = NULL;
    uint32_t origin = 0;
    int to = -1;
    char err[256], why[640];
    if (rd_relay_open(m, &inner, &origin, &to, err, sizeof(err)) != RD_FRAME_OK) {
        snprintf(why, sizeof(why), "control message from node %s: %s", world_member(w, from)->node,
                 err);
        if (!leaving)
            rd_world_drop(w, why);
        return;
    }
    /* From a node beyond the neighbour that passed it, for a node this one reaches otherwise. */
    int o = (int)origin;
    if (o >= w->nnodes || o == w->position || world_tree_toward(w, o) != from || to >= w->nnodes ||
        to == o || (to >= 0 && to != w->position && world_tree_toward(w, to) == from)) {
        snprintf(why, sizeof(why),
                 "control message from node %s relayed from position %d to %d, which does not "
                 "come that way in a ring of %d nodes",
                 world_member(w, from)->node, o, to, w->nnodes);
        rd_frame_free(inner);
        if (!leaving)
            rd_world_drop(w, why);
        return;
    }
    if (to < 0) {
        for (int i = 0; i < w->nnodes; i++)
            if (i != from)
                world_ctrl_send(w, i, m);
    } else if (to != w->position) {
        world_ctrl_send(w, world_tree_toward(w, to), m);
    }
    if (leaving) {
        rd_frame_free(inner);
        return;
    }
    if (to < 0 || to == w->position)
        ctrl_handle(w, o, inner);
    rd_frame_free(inner);
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

/* A control link broke. After a Bye that is the node letting go; otherwise the node is gone or
 * the link failed: the ring breaks (its ops are doomed until the next ring) and the node is
 * probed to tell which. */
static void on_ctrl_err(void *arg, rd_peer_chan *c, const char *why)
{
    rd_world *w = arg;
    int from = chan_position(w, c);
    if (from >= 0 && w->members[from] != M_ACTIVE && w->state != W_LEAVING) {
        rd_peer_chan_free(c);
        w->ctrl[from] = NULL;
        world_carry_check(w);
        return;
    }
    if (w->state == W_LEAVING) {
        /* A neighbour let go: once every one has, nothing more passes through this node. */
        rd_peer_chan_free(c);
        int left = 0;
        for (int i = 0; i < RD_RING_NODES_MAX; i++) {
            if (w->ctrl[i] == c)
                w->ctrl[i] = NULL;
            left |= w->ctrl[i] != NULL;
        }
        if (!left)
            event_active(w->ev_linger, 0, 0);
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
