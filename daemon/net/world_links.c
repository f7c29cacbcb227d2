/* The links of a job's ring at one generation: dialling the next node (data) and the parent in
 * the control tree (control), taking the connections other nodes dial here (peer_check), and
 * what happens when some never come: members this node cannot reach are set aside, and a node
 * the others cannot reach sets itself aside until its own address answers. */
#define _GNU_SOURCE
#include "world_int.h"

#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

static void dial_start(slot *s);

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
        world_reform_later(w);
    }
}

/* A slot's retry timer: dial again. */
static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    dial_start(arg);
}

/* Every link of the generation is there: start the data plane and welcome the clients. */
void world_maybe_up(rd_world *w)
{
    if (w->state != W_CONNECTING)
        return;
    world_ctrl_flush(w);
    int C = world_conns(w);
    for (int c = 0; c < C; c++)
        if (w->out_data[c].fd < 0 || w->in_data[c] < 0)
            return;
    for (int i = 0; i < w->nnodes; i++)
        if (world_tree_neighbour(w, i) && w->ctrl[i] == NULL)
            return;
    for (int i = 0; i < w->nnodes; i++)
        if (w->members[i] != M_ACTIVE) /* it sealed this generation while it formed: the next */
            return;
    if (w->nnodes == 1) { /* the job's last node: ops run here alone, without a data plane */
        world_ring_is_up(w);
        return;
    }
    char err[256];
    if (world_plane_start(w, err, sizeof(err)) != 0) {
        rd_log(RD_LOG_ERROR, "world", "job '%s': %s", w->name, err);
        world_teardown(w, "cannot start the ring", TD_FAIL, W_WAITING);
        return;
    }
    world_ring_is_up(w);
}

/* The ring position a slot dials: the next node for data, node s->index (the parent) for
 * control, node s->index for direct links. */
static int slot_target(const slot *s)
{
    const rd_world *w = s->w;
    return s->kind != RINGD__LINK_KIND__LINK_DATA ? s->index : (w->position + 1) % w->nnodes;
}

/* Tells the waiting clients which members this node cannot reach so far, and why. */
static void tell_waiting(rd_world *w)
{
    char detail[1024];
    size_t n = (size_t)snprintf(detail, sizeof(detail),
                                "every rank has registered; connecting to the other nodes");
    for (int i = 0; i < w->nnodes && n < sizeof(detail); i++)
        if (w->unreach[i][0] != '\0')
            n += (size_t)snprintf(
                detail + n, sizeof(detail) - n, "; node %s at %s is unreachable (%.200s)",
                world_member(w, i)->node, world_member(w, i)->addr, w->unreach[i]);
    w->ev.ring_waiting(w->arg, w->world_size, (uint32_t)w->nnodes, w->generation, detail);
}

/* 1 when this node's links with the member at position i are all up (either way). */
static int links_up_with(const rd_world *w, int i)
{
    if (i == (w->position + 1) % w->nnodes)
        for (int c = 0; c < world_conns(w); c++)
            if (w->out_data[c].fd < 0)
                return 0;
    if (i == (w->position + w->nnodes - 1) % w->nnodes)
        for (int c = 0; c < world_conns(w); c++)
            if (w->in_data[c] < 0)
                return 0;
    return !world_tree_neighbour(w, i) || w->ctrl[i] != NULL;
}

/* 1 when this node dials links to the member at position i (data to the next, control to the
 * parent). */
static int dials(const rd_world *w, int i)
{
    return i == (w->position + 1) % w->nnodes || i == world_tree_parent(w);
}

/* 1 when the links this node dials to the member at position i are up. */
static int dials_up_with(const rd_world *w, int i)
{
    if (i == (w->position + 1) % w->nnodes)
        for (int c = 0; c < world_conns(w); c++)
            if (w->out_data[c].fd < 0)
                return 0;
    return i != world_tree_parent(w) || w->ctrl[i] != NULL;
}

/* 1 when at least one link of this generation came up: this node is not cut off itself. */
static int any_link_up(const rd_world *w)
{
    for (int c = 0; c < world_conns(w); c++)
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

/* Sets node m aside (why, logged): this node dials it no more, and the rendezvous evicts that
 * incarnation (else it leaves when its lease expires). */
static void set_aside(rd_world *w, const rd_rdv_member *m, const char *why)
{
    rd_log(RD_LOG_WARN, "world", "job '%s': setting node %s aside: %s", w->name, m->node, why);
    aside_add(w, m, why);
    if (rd_rdv_evict(w->net->rdv, w->name, m->node, m->incarnation, why) != 0)
        rd_log(RD_LOG_WARN, "world",
               "job '%s': node %s could not be set aside; it leaves when its lease expires",
               w->name, m->node);
}

/* Forgets the members set aside that are in view v now. */
void world_aside_prune(rd_world *w, const rd_rdv_view *v)
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
int world_missing_inbound(rd_world *w)
{
    for (int i = 0; i < w->nnodes; i++) {
        if (i == w->position || links_up_with(w, i))
            continue;
        if (dials(w, i) && !dials_up_with(w, i))
            continue;
        snprintf(w->self_aside, sizeof(w->self_aside),
                 "no connection came from node %s within %" PRId64
                 " ms: can it reach this node at %s (--advertise)?",
                 world_member(w, i)->node, rd_now_ms() - w->connect_ms, w->net->address);
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
    if (world_missing_inbound(w))
        rd_log(RD_LOG_WARN, "world", "job '%s': %s", w->name, w->self_aside);
    int cut_off = !any_link_up(w);
    for (int i = 0; i < w->nnodes; i++) {
        if (i == w->position || links_up_with(w, i))
            continue;
        const rd_rdv_member *m = world_member(w, i);
        char why[512];
        if (!dials(w, i) || dials_up_with(w, i)) /* what is missing is its dial to this node */
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
        set_aside(w, m, why);
    }
}

/* A dial ended: a data connection waits in its slot for the data plane, a control connection
 * becomes a channel; a refusal (most often a peer not yet at this generation) retries. */
static void on_dialled(void *arg, int fd, const rd_seal *seal, const char *why)
{
    slot *s = arg;
    rd_world *w = s->w;
    s->dial = NULL;
    int to = slot_target(s);
    if (fd < 0 && s->kind == RINGD__LINK_KIND__LINK_PAIR) { /* the ring is up: only retry */
        rd_log(RD_LOG_DEBUG, "world", "job '%s': direct link to node %s: %s; retrying", w->name,
               world_member(w, to)->node, why);
        dial_later(s);
        return;
    }
    if (fd < 0) {
        int first = w->unreach[to][0] == '\0';
        snprintf(w->unreach[to], sizeof(w->unreach[to]), "%s", why);
        rd_log(first ? RD_LOG_INFO : RD_LOG_DEBUG, "world",
               "job '%s': cannot reach node %s: %s; retrying", w->name, world_member(w, to)->node,
               why);
        if (first)
            tell_waiting(w);
        dial_later(s);
        return;
    }
    w->unreach[to][0] = '\0';
    if (s->kind == RINGD__LINK_KIND__LINK_PAIR) { /* for the data plane of this generation */
        if (w->xfer != NULL && world_ring_up(w))
            rd_xfer_pair(w->xfer, s->index, fd, seal);
        else
            close(fd);
        return;
    }
    if (s->kind == RINGD__LINK_KIND__LINK_CONTROL) {
        if (world_ctrl_link(w, s->index, fd, seal) != 0) {
            close(fd);
            world_reform_later(w);
            return;
        }
    } else {
        s->fd = fd;
        s->seal = *seal;
    }
    world_maybe_up(w);
}

/* Dials the slot's peer (the next node for data, node s->index for control) with this
 * generation's PeerHello, if the ring is still connecting. */
static void dial_start(slot *s)
{
    rd_world *w = s->w;
    /* a direct link is dialled while the ring is up, as long as its data plane wants it */
    if (s->kind == RINGD__LINK_KIND__LINK_PAIR
            ? !world_ring_up(w) || w->xfer == NULL || !rd_xfer_pair_wanted(w->xfer, s->index)
            : w->state != W_CONNECTING)
        return;
    int to = slot_target(s);
    Ringd__PeerHello h = RINGD__PEER_HELLO__INIT;
    h.protocol = RD_PEER_PROTOCOL_VERSION;
    h.job = (char *)w->name;
    h.generation = w->generation;
    h.node = (char *)w->net->cfg->node;
    h.kind = (Ringd__LinkKind)s->kind;
    h.index = s->kind == RINGD__LINK_KIND__LINK_CONTROL ? 0
              : s->kind == RINGD__LINK_KIND__LINK_PAIR  ? (uint32_t)w->position
                                                        : (uint32_t)s->index;
    h.conns = (uint32_t)world_conns(w);
    h.segment_size = w->net->cfg->segment_size;
    h.pair_links = (uint32_t)w->net->cfg->pair_links;
    h.max_frame = w->net->cfg->max_frame;
    h.direct_bytes = w->net->cfg->direct_bytes;
    h.to = (char *)world_member(w, to)->node;
    s->dial = rd_peer_dial_new(w->net->peers, world_member(w, to)->addr, &h, on_dialled, s);
    if (s->dial == NULL)
        dial_later(s);
}

/* The view is complete: make the links of its generation. */
void world_connect_ring(rd_world *w)
{
    /* Scheduling messages come from now on: nodes up before this one announce their ops already. */
    rd_ring_node nodes[RD_RING_NODES_MAX];
    uint32_t first = 0;
    for (int i = 0; i < w->nnodes; i++) {
        nodes[i] = (rd_ring_node){world_member(w, i)->node, first, world_member(w, i)->local_size};
        first += world_member(w, i)->local_size;
    }
    if (rd_ringchan_forming(&w->chan, w->generation, w->nnodes, w->position, nodes) != RINGD_OK) {
        rd_log(RD_LOG_ERROR, "world", "job '%s': out of memory forming the ring", w->name);
        world_set_state(w, W_WAITING);
        return;
    }
    world_ctrl_close(w); /* nothing of an earlier generation goes over this one's links */
    world_set_state(w, W_CONNECTING);
    memset(w->unreach, 0, sizeof(w->unreach));
    w->connect_ms = rd_now_ms();
    int64_t ms = w->net->cfg->peer_timeout;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(w->ev_connect, &tv);
    tell_waiting(w);
    for (int c = 0; c < world_conns(w); c++)
        dial_start(&w->out_data[c]);
    if (w->position > 0)
        dial_start(&w->out_ctrl[world_tree_parent(w)]);
}

/* This node was set aside (self_aside says why): it leaves the rendezvous, tells its clients,
 * and registers again after a back-off (--peer-timeout, doubling up to RD_REJOIN_MAX_MS). */
void world_set_self_aside(rd_world *w)
{
    world_teardown(w, w->self_aside, TD_FAIL, W_ASIDE);
    rd_rdv_leave(w->net->rdv, w->name);
    w->since = 0;
    if (w->rejoin_ms < w->net->cfg->peer_timeout)
        w->rejoin_ms = w->net->cfg->peer_timeout;
    char detail[1024];
    snprintf(detail, sizeof(detail),
             "node %.64s was set aside: %.500s; it registers again in %" PRId64 " ms",
             w->net->cfg->node, w->self_aside, w->rejoin_ms);
    rd_log(RD_LOG_WARN, "world", "job '%s': %s", w->name, detail);
    w->ev.ring_waiting(w->arg, 0, 0, w->generation, detail);
    struct timeval tv = {w->rejoin_ms / 1000, (w->rejoin_ms % 1000) * 1000};
    evtimer_add(w->ev_rejoin, &tv);
    w->rejoin_ms = w->rejoin_ms * 2 > RD_REJOIN_MAX_MS ? RD_REJOIN_MAX_MS : w->rejoin_ms * 2;
}

/* A job no client may name (RD_JOB_RESERVED first): any ringd refuses it. */
#define RD_SELF_PROBE_JOB "~self-probe"

/* A set-aside node's dial of its own advertised address: registers again once this very daemon
 * answers there (it refuses the probe, naming itself), which a port nothing listens on, a
 * listener that never answers, a ringd of another key and a ringd of another node all fail. */
static void on_self_dialled(void *arg, int fd, const rd_seal *seal, const char *why)
{
    rd_world *w = arg;
    (void)seal;
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
    rd_log(RD_LOG_WARN, "world", "job '%s': %s; trying again in %" PRId64 " ms", w->name,
           w->self_aside, w->rejoin_ms);
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
    h.to = (char *)w->net->cfg->node;
    w->self_dial = rd_peer_dial_new(w->net->peers, w->net->address, &h, on_self_dialled, w);
    if (w->self_dial == NULL)
        on_self_dialled(w, -1, NULL, "the address does not resolve");
}

void rd_world_set_aside(rd_world *w, int position, const char *why)
{
    if (!world_ring_up(w) || position < 0 || position >= w->nnodes || position == w->position)
        return;
    set_aside(w, world_member(w, position), why);
}

/* The job's world named in a PeerHello, if this node has one. */
rd_world *world_of(rd_net *net, const char *job)
{
    rd_world *w = net->worlds;
    while (w != NULL && strcmp(w->name, job) != 0)
        w = w->next;
    return w;
}

/* 1 when a peer's settings that every node must share differ from this node's; err names those
 * that differ, the peer's value and this node's. */
static int settings_differ(const rd_world *w, const Ringd__PeerHello *h, char *err, size_t errlen)
{
    const rd_config *cfg = w->net->cfg;
    const struct {
        const char *flag;
        uint64_t theirs, ours;
    } s[] = {
        {"--conns-per-link", h->conns, (uint64_t)world_conns(w)},
        {"--segment-size", h->segment_size, cfg->segment_size},
        {"--pair-links", h->pair_links, (uint64_t)cfg->pair_links},
        {"--max-frame", h->max_frame, cfg->max_frame},
        {"--direct-bytes", h->direct_bytes, cfg->direct_bytes},
    };
    size_t at = (size_t)snprintf(err, errlen, "node %s runs", h->node);
    int differ = 0;
    for (size_t k = 0; k < sizeof(s) / sizeof(s[0]); k++) {
        if (s[k].theirs == s[k].ours)
            continue;
        if (at < errlen)
            at +=
                (size_t)snprintf(err + at, errlen - at, "%s %s %" PRIu64 " (this node %" PRIu64 ")",
                                 differ ? "," : "", s[k].flag, s[k].theirs, s[k].ours);
        differ = 1;
    }
    if (differ && at < errlen)
        snprintf(err + at, errlen - at, "; all nodes must agree");
    return differ;
}

/* A direct link (alltoall) from a node before this one, at this generation while its ring is
 * up: kept for the data plane, which takes it on the next turn (after PeerAccept is written). */
static rd_status pair_check(rd_world *w, const Ringd__PeerHello *h, int fd, const rd_seal *seal,
                            int *quiet, char *err, size_t errlen)
{
    if (h->generation > w->generation || !world_ring_up(w) || w->xfer == NULL) {
        *quiet = 1;
        snprintf(err, errlen,
                 "job '%s' has no ring of generation %" PRIu64 " up here (at %" PRIu64 ", %s)",
                 h->job, h->generation, w->generation, world_state_name(w->state));
        return RINGD_E_MEMBERSHIP;
    }
    if (settings_differ(w, h, err, errlen))
        return RINGD_E_REFUSED;
    uint32_t from = h->index;
    if (from >= (uint32_t)w->position || strcmp(world_member(w, (int)from)->node, h->node) != 0) {
        snprintf(err, errlen, "unexpected direct link from node %s (position %u; this node is %d)",
                 h->node, from, w->position);
        return RINGD_E_REFUSED;
    }
    if (w->pair_in[from] >= 0) /* a re-dial replaces the link not taken up yet */
        close(w->pair_in[from]);
    w->pair_in[from] = fd;
    w->pair_in_seal[from] = *seal;
    event_active(w->ev_pairs, 0, 0);
    return RINGD_OK;
}

/* Makes room for need more direct links in this node's pool (--pair-links, every job's
 * together): closes other jobs' links, least recently used first, that no alltoall is using.
 * Those in use stay: the pool is over its bound until their alltoalls end. */
static void pairs_make_room(rd_net *net, const rd_world *self, int need)
{
    for (;;) {
        int open = 0, busy;
        int64_t used, lru_ms = 0;
        rd_world *lru = NULL;
        for (rd_world *o = net->worlds; o != NULL; o = o->next) {
            open += world_plane_retiring_pairs(o); /* theirs close as they end */
            if (o->xfer == NULL)
                continue;
            int k = rd_xfer_pairs_open(o->xfer, &used, &busy);
            open += k;
            if (o != self && k > 0 && !busy && (lru == NULL || used < lru_ms)) {
                lru = o;
                lru_ms = used;
            }
        }
        if (open + need <= net->cfg->pair_links || lru == NULL)
            return;
        int closed = rd_xfer_pairs_close(lru->xfer);
        rd_log(RD_LOG_INFO, "world",
               "job '%s': closed its %d direct links to make room for job '%s' (--pair-links %lld)",
               lru->name, closed, self->name, (long long)net->cfg->pair_links);
        if (closed == 0)
            return;
    }
}

void world_pairs_wanted(void *arg, struct rd_xfer *x)
{
    rd_world *w = arg;
    if (w->xfer == NULL || x != w->xfer || !world_ring_up(w))
        return; /* a retiring data plane's alltoall ends without new links */
    uint8_t want[RD_RING_NODES_MAX];
    int need = 0, dial = 0;
    for (int q = 0; q < w->nnodes; q++) {
        want[q] = (uint8_t)rd_xfer_pair_wanted(w->xfer, q);
        need += want[q];
        dial |= want[q] && q > w->position;
    }
    pairs_make_room(w->net, w, need);
    for (int q = w->position + 1; q < w->nnodes && dial; q++) {
        slot *s = &w->out_pair[q];
        if (want[q] && s->dial == NULL && !event_pending(s->retry, EV_TIMEOUT, NULL))
            dial_start(s);
    }
}

/* Hands the direct links taken from the nodes before this one to the data plane. */
static void on_pairs(evutil_socket_t fd, short what, void *arg)
{
    rd_world *w = arg;
    (void)fd;
    (void)what;
    for (int q = 0; q < RD_RING_NODES_MAX; q++) {
        if (w->pair_in[q] < 0)
            continue;
        if (w->xfer != NULL && world_ring_up(w) && q < w->nnodes)
            rd_xfer_pair(w->xfer, q, w->pair_in[q], &w->pair_in_seal[q]);
        else
            close(w->pair_in[q]);
        w->pair_in[q] = -1;
        rd_seal_wipe(&w->pair_in_seal[q]);
    }
    pairs_make_room(w->net, w, 0);
}

/* Takes an authenticated peer's connection into the ring it names, or says why not: unknown job,
 * another generation, settings that differ, a node that is not the expected neighbour. *quiet
 * marks refusals the peer is expected to retry. */
static rd_status peer_check(rd_net *net, const Ringd__PeerHello *h, int fd, const rd_seal *seal,
                            uint64_t *generation, int *quiet, char *err, size_t errlen)
{
    if (h->protocol != RD_PEER_PROTOCOL_VERSION) {
        snprintf(err, errlen,
                 "node %s speaks protocol %u, this node %d: run one ringd version "
                 "per job (upgrade node by node only between compatible versions)",
                 h->node, h->protocol, RD_PEER_PROTOCOL_VERSION);
        return RINGD_E_PROTOCOL;
    }
    /* A connection meant for another node (an address that moved, or one redirected in flight):
     * its PeerHello, bound into sealed links' keys, says whom it was for. */
    if (strcmp(h->to, net->cfg->node) != 0) {
        snprintf(err, errlen, "node %s meant to reach node %s; this is node %s", h->node, h->to,
                 net->cfg->node);
        return RINGD_E_REFUSED;
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
    if (h->kind == RINGD__LINK_KIND__LINK_PAIR)
        return pair_check(w, h, fd, seal, quiet, err, errlen);
    if (h->generation > w->generation || w->state != W_CONNECTING) {
        *quiet = 1;
        snprintf(err, errlen, "job '%s' " RD_NOT_FORMING " %" PRIu64 " here (at %" PRIu64 ", %s)",
                 h->job, h->generation, w->generation, world_state_name(w->state));
        return RINGD_E_MEMBERSHIP;
    }
    if (settings_differ(w, h, err, errlen))
        return RINGD_E_REFUSED;
    int prev = (w->position + w->nnodes - 1) % w->nnodes;
    if (h->kind == RINGD__LINK_KIND__LINK_DATA) {
        if (strcmp(h->node, world_member(w, prev)->node) != 0 ||
            h->index >= (uint32_t)world_conns(w)) {
            snprintf(err, errlen, "unexpected data connection %u from node %s (previous node: %s)",
                     h->index, h->node, world_member(w, prev)->node);
            return RINGD_E_REFUSED;
        }
        /* A peer that re-dials while this node still forms the ring (it tore down and came back)
         * replaces its earlier connection, which it has closed. */
        if (w->in_data[h->index] >= 0)
            close(w->in_data[h->index]);
        w->in_data[h->index] = fd;
        w->in_seal[h->index] = *seal;
        event_active(w->ev_check, 0, 0); /* after the caller has written PeerAccept */
        return RINGD_OK;
    }
    int from = -1; /* a child in the control tree */
    for (int i = w->position + 1; i < w->nnodes; i++)
        if (rd_ctrltree_parent(i, RD_CTRL_FANOUT) == w->position &&
            strcmp(world_member(w, i)->node, h->node) == 0)
            from = i;
    if (from < 0) {
        snprintf(err, errlen, "unexpected control connection from node %s", h->node);
        return RINGD_E_REFUSED;
    }
    if (world_ctrl_link(w, from, fd, seal) != 0) { /* the caller closes fd */
        snprintf(err, errlen, "out of memory");
        return RINGD_E_NOMEM;
    }
    event_active(w->ev_check, 0, 0);
    return RINGD_OK;
}

/* Decides on a peer's PeerHello and logs a refusal: a peer ahead of this node's view retries
 * (debug); anything else is worth a warning. */
rd_status world_on_peer(void *arg, const Ringd__PeerHello *h, int fd, const rd_seal *seal,
                        const char *remote, uint64_t *generation, char *err, size_t errlen)
{
    int quiet = 0;
    rd_status rc = peer_check(arg, h, fd, seal, generation, &quiet, err, errlen);
    if (rc != RINGD_OK)
        rd_log(quiet ? RD_LOG_DEBUG : RD_LOG_WARN, "peer",
               "connection from %s (node '%s', job '%s'): refused: %s", remote, h->node, h->job,
               err);
    return rc;
}

int world_links_init(rd_world *w)
{
    struct event_base *base = w->net->base;
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
        w->out_pair[i] = (slot){.w = w, .kind = RINGD__LINK_KIND__LINK_PAIR, .index = i, .fd = -1};
        w->out_pair[i].retry = event_new(base, -1, 0, on_retry, &w->out_pair[i]);
        ok &= w->out_pair[i].retry != NULL;
        w->pair_in[i] = -1;
    }
    w->ev_connect = evtimer_new(base, on_connect_deadline, w);
    w->ev_rejoin = evtimer_new(base, on_rejoin, w);
    w->ev_pairs = event_new(base, -1, 0, on_pairs, w);
    return ok && w->ev_connect != NULL && w->ev_rejoin != NULL && w->ev_pairs != NULL ? 0 : -1;
}

void world_links_free(rd_world *w)
{
    if (w->ev_connect != NULL)
        event_free(w->ev_connect);
    if (w->ev_rejoin != NULL)
        event_free(w->ev_rejoin);
    for (int c = 0; c < RD_RING_CONNS_MAX; c++)
        if (w->out_data[c].retry != NULL)
            event_free(w->out_data[c].retry);
    for (int i = 0; i < RD_RING_NODES_MAX; i++) {
        if (w->out_ctrl[i].retry != NULL)
            event_free(w->out_ctrl[i].retry);
        if (w->out_pair[i].retry != NULL)
            event_free(w->out_pair[i].retry);
    }
    if (w->ev_pairs != NULL)
        event_free(w->ev_pairs);
}

void world_links_close(rd_world *w)
{
    world_ctrl_close(w);
    for (int c = 0; c < RD_RING_CONNS_MAX; c++) {
        slot *s = &w->out_data[c];
        rd_peer_dial_cancel(s->dial);
        s->dial = NULL;
        if (s->retry != NULL)
            event_del(s->retry);
        if (s->fd >= 0)
            close(s->fd);
        s->fd = -1;
        rd_seal_wipe(&s->seal);
        if (w->in_data[c] >= 0)
            close(w->in_data[c]);
        w->in_data[c] = -1;
        rd_seal_wipe(&w->in_seal[c]);
    }
    for (int i = 0; i < RD_RING_NODES_MAX; i++) {
        slot *s = &w->out_ctrl[i];
        rd_peer_dial_cancel(s->dial);
        s->dial = NULL;
        if (s->retry != NULL)
            event_del(s->retry);
        rd_peer_chan_free(w->ctrl[i]);
        w->ctrl[i] = NULL;
        s = &w->out_pair[i];
        rd_peer_dial_cancel(s->dial);
        s->dial = NULL;
        if (s->retry != NULL)
            event_del(s->retry);
        if (w->pair_in[i] >= 0)
            close(w->pair_in[i]);
        w->pair_in[i] = -1;
        rd_seal_wipe(&w->pair_in_seal[i]);
    }
}
