/* The control channel of a job's ring: a link with every other node, carrying the engine's
 * scheduling messages (fanned out to the channel's subscribers by kind), Bye, Error and the
 * keepalive; a control link that breaks, and the probe that tells a gone node from a broken
 * link. */
#define _GNU_SOURCE
#include "world_int.h"

#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "counters.h"
#include "log.h"

void world_ctrl_send(rd_world *w, int i, const rd_msg *m)
{
    if (i < 0 || i >= w->nnodes || i == w->position || w->ctrl[i] == NULL)
        return;
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

/* Sends Bye (leaving or only sealing) to every node still connected. */
void world_send_bye(rd_world *w, int leaving, const char *loss)
{
    Ringd__Bye bye = RINGD__BYE__INIT;
    bye.generation = w->generation;
    bye.leaving = leaving;
    bye.loss = (char *)(loss != NULL ? loss : "");
    rd_msg m = RINGD__MSG__INIT;
    m.body_case = RINGD__MSG__BODY_BYE;
    m.bye = &bye;
    for (int i = 0; i < w->nnodes; i++)
        world_ctrl_send(w, i, &m);
}

void world_send_error(rd_world *w, const char *why, int skip)
{
    Ringd__Error e = RINGD__ERROR__INIT;
    e.status = RINGD_E_MEMBERSHIP;
    e.message = (char *)why;
    rd_msg m = RINGD__MSG__INIT;
    m.body_case = RINGD__MSG__BODY_ERROR;
    m.error = &e;
    for (int i = 0; i < w->nnodes; i++)
        if (i != skip)
            world_ctrl_send(w, i, &m);
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
    for (int k = 0; k < (to != NULL ? nto : w->nnodes); k++)
        world_ctrl_send(w, to != NULL ? to[k] : k, msg);
    rd_schedmsg_encoded_free(msg);
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
    if (!world_ring_linked(w))
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
    if (from >= 0 && m->body_case == RINGD__MSG__BODY_BYE && m->bye->generation == w->generation) {
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
    if (from >= 0 && m->body_case == RINGD__MSG__BODY_ERROR && m->error->message != NULL) {
        /* A node breaks off the ring and says why (a client of it left), or relays why another
         * did: ops here end with that reason; the node registers anew, moving the job on. */
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
        /* The others hear it from this node too, before its links close: one that saw them
         * close before reading the sender's Error (another socket) would know no cause. */
        world_send_error(w, why, from);
        world_teardown(w, why, TD_FAIL, W_WAITING);
        world_resync_set(w, RS_EXPLAINED, NULL);
        world_apply_view(w);
        return;
    }
    rd_log(RD_LOG_WARN, "world",
           "job '%s': unexpected control message %d from %s at generation %" PRIu64, w->name,
           (int)m->body_case, rd_peer_chan_name(c), w->generation);
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
    if (from >= 0 && w->members[from] != M_ACTIVE) {
        rd_peer_chan_free(c);
        w->ctrl[from] = NULL;
        world_carry_check(w);
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
    if (from < 0 || !world_ring_linked(w)) {
        world_reform_later(w);
        return;
    }
    char gone[768];
    snprintf(gone, sizeof(gone),
             "the control link of job '%s' with node %s broke (%s): that node is gone, or the "
             "link failed",
             w->name, world_member(w, from)->node, why);
    w->probing = *world_member(w, from);
    w->probes = 0;
    rd_peer_probe_cancel(w->probe);
    w->probe = rd_peer_probe_new(w->net->base, w->probing.addr, 0, on_probed, w);
    world_teardown(w, gone, TD_FAIL, W_WAITING);
    if (w->probe == NULL)
        world_move_on(w, "a link broke");
}

rd_peer_chan *world_ctrl_open(rd_world *w, int fd, const rd_seal *seal, const char *node)
{
    return rd_peer_chan_new(w->net->base, fd, seal, node, (uint32_t)w->net->cfg->max_frame,
                            on_ctrl_msg, on_ctrl_err, w);
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
