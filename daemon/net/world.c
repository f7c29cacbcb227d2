/* Multi-node jobs: the ring's states (one enum, a table of legal moves, one set_state), the
 * rendezvous' views and what they do to the ring, graceful changes (seals), the lease, and the
 * world's life. The links of a generation are made in world_links.c, the control channel is in
 * world_ctrl.c, the data plane glue in world_plane.c, the daemon's network context in
 * world_net.c; world_int.h is what they share. */
#define _GNU_SOURCE
#include "world_int.h"

#include <assert.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "counters.h"
#include "log.h"
#include "membership.h"

/* The names of world_state's values (world_int.h), for logs and status. */
static const char *const state_names[] = {"idle",   "waiting", "connecting", "up",
                                          "sealed", "leaving", "set aside"};

/* The moves set_state allows: world_moves[from] has bit 1 << to. */
#define W_BIT(s) (1u << (s))
static const unsigned world_moves[W_NSTATES] = {
    [W_IDLE] = W_BIT(W_WAITING),
    [W_WAITING] = W_BIT(W_CONNECTING) | W_BIT(W_IDLE) | W_BIT(W_ASIDE),
    [W_CONNECTING] = W_BIT(W_UP) | W_BIT(W_WAITING) | W_BIT(W_IDLE) | W_BIT(W_ASIDE),
    [W_UP] = W_BIT(W_SEALED) | W_BIT(W_WAITING) | W_BIT(W_LEAVING) | W_BIT(W_IDLE) | W_BIT(W_ASIDE),
    [W_SEALED] = W_BIT(W_WAITING) | W_BIT(W_LEAVING) | W_BIT(W_IDLE) | W_BIT(W_ASIDE),
    [W_LEAVING] = W_BIT(W_IDLE),
    [W_ASIDE] = W_BIT(W_WAITING) | W_BIT(W_IDLE),
};

static const char *const member_names[] = {"active", "sealed", "leaving"};

static const char *const resync_names[] = {"none", "broken", "explained"};

static void on_lapse(evutil_socket_t fd, short what, void *arg);
static void on_linger(evutil_socket_t fd, short what, void *arg);
static int world_leave(rd_world *w, const char *loss);

const char *world_state_name(world_state st)
{
    return state_names[st];
}

/* Moves the ring to st (staying is no move), logging it; a move world_moves does not allow is a
 * programmer error (an assertion, and an error in the log where assertions are compiled out). */
void world_set_state(rd_world *w, world_state st)
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
int world_ring_up(const rd_world *w)
{
    return w->state == W_UP || w->state == W_SEALED;
}

/* 1 while this generation's links exist or are being made. */
int world_ring_linked(const rd_world *w)
{
    return world_ring_up(w) || w->state == W_CONNECTING;
}

/* Moves the member at position i to st: only forward (active, sealed, leaving); every member is
 * active again when the generation's links close (teardown). */
void world_member_set(rd_world *w, int i, member_state st)
{
    if (w->members[i] >= st)
        return; /* a Bye saying it stays, after one saying it leaves, changes nothing */
    rd_log(RD_LOG_DEBUG, "world", "job '%s': node %s %s -> %s (generation %" PRIu64 ")", w->name,
           w->view.members[i].node, member_names[w->members[i]], member_names[st], w->generation);
    w->members[i] = st;
}

/* What the next ring tells the clients becomes st, why saying it (NULL: keeps the reason it
 * has). RS_NONE only when a ring comes up; a reason once given is not taken back by a vaguer one
 * (RS_EXPLAINED does not go back to RS_BROKEN). */
void world_resync_set(rd_world *w, resync_state st, const char *why)
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
    rd_log(st == LEASE_LAPSED ? RD_LOG_DEBUG : RD_LOG_INFO, "world", "job '%s': registration %s",
           w->name, st == LEASE_LAPSED ? "lapsed" : "confirmed again");
    w->lease = st;
}

int world_conns(const rd_world *w)
{
    return (int)w->net->cfg->conns_per_link;
}

const rd_rdv_member *world_member(const rd_world *w, int pos)
{
    return &w->view.members[pos];
}

void world_view_clear(rd_rdv_view *v)
{
    free(v->members);
    memset(v, 0, sizeof(*v));
}

int world_view_copy(rd_rdv_view *dst, const rd_rdv_view *src)
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

/* Closes everything of the current generation and moves the ring to next, before the job
 * hears of it (ring_ended, ring_down). Unless TD_END, the task on the wire may still end by
 * itself, as it does when a node that left had already done its part. */
void world_teardown(rd_world *w, const char *why, teardown_how how, world_state next)
{
    int was_up = world_ring_linked(w) || w->state == W_LEAVING;
    if (how == TD_FAIL)
        w->nleft = 0; /* a failure, not a graceful change: every node re-synchronises */
    if (how == TD_FAIL && w->resync != RS_NONE)
        why = w->resync_why; /* ops doomed meanwhile hear the first cause */
    else if (how == TD_FAIL && was_up) {
        world_resync_set(w, RS_BROKEN, why);
        if (w->stale < w->generation)
            w->stale = w->generation;
        w->ev.disrupted(w->arg);
    }
    /* A forming ring given up gracefully (the change goes on at a newer generation): the nodes
     * linked already hear that this one seals it, for some of them may be up, and its links
     * closing unannounced would be a failure to them. */
    if (how == TD_CARRY && w->state == W_CONNECTING)
        world_send_bye(w, 0, NULL);
    world_set_state(w, next);
    world_links_close(w);
    /* The job first: what it had in flight on this ring belongs to an old one before the
     * subscribers' ends (a device transport's abort) report on it. */
    if (w->ev.ring_ended != NULL)
        w->ev.ring_ended(w->arg);
    rd_ringchan_ended(&w->chan);
    memset(w->members, 0, sizeof(w->members)); /* M_ACTIVE */
    event_del(w->ev_reform);
    event_del(w->ev_connect);
    event_del(w->ev_grace);
    event_del(w->ev_linger);
    world_plane_retire(w, why, how);
    if (was_up)
        w->ev.ring_down(w->arg, why, how == TD_CARRY);
}

void world_left_add(rd_world *w, const rd_rdv_member *m)
{
    for (size_t k = 0; k < w->nleft; k++)
        if (strcmp(w->left[k].node, m->node) == 0 && w->left[k].incarnation == m->incarnation)
            return;
    if (w->nleft < RD_RING_NODES_MAX) {
        w->left_gone[w->nleft] = 0;
        w->left_ms[w->nleft] = rd_now_ms();
        w->left[w->nleft++] = *m;
    }
}

/* 1 when v still has a member that said it leaves and has not been seen gone since (a view
 * without it marks it gone). */
static int view_has_leaver(rd_world *w, const rd_rdv_view *v)
{
    int has = 0;
    int64_t now = rd_now_ms();
    for (size_t k = 0; k < w->nleft; k++) {
        if (w->left_gone[k])
            continue;
        if (rd_membership_has_any(v, &w->left[k], 1) &&
            now - w->left_ms[k] < w->net->cfg->lease_ttl)
            has = 1;
        else
            w->left_gone[k] = 1;
    }
    return has;
}

/* The ring of this generation is up: the job learns its ranks and size. */
void world_ring_is_up(rd_world *w)
{
    uint32_t size = 0;
    for (int i = 0; i < w->nnodes; i++)
        size += world_member(w, i)->local_size;
    world_set_state(w, W_UP);
    w->was_up = 1;
    /* Leavers still in the ring said Bye at this generation (while it formed): they are leaving
     * it; those not in it have left. */
    size_t keep = 0;
    for (size_t k = 0; k < w->nleft; k++) {
        if (rd_membership_has_any(&w->view, &w->left[k], 1)) {
            w->left_ms[keep] = w->left_ms[k];
            w->left[keep++] = w->left[k];
        }
    }
    w->nleft = keep;
    memset(w->left_gone, 0, sizeof(w->left_gone));
    w->rejoin_ms = 0;
    w->self_aside[0] = '\0';
    world_aside_prune(w, &w->view);
    for (int i = 0; i < w->nnodes; i++)
        w->heard[i] = w->told[i] = rd_now_ms();
    rd_log(RD_LOG_INFO, "world",
           "job '%s': ring of %d nodes up at generation %" PRIu64
           ", this node is %d (ranks %u-%u of %u)",
           w->name, w->nnodes, w->generation, w->position, w->first_rank,
           w->first_rank + world_member(w, w->position)->local_size - 1, size);
    resync_state resync = w->resync;
    world_resync_set(w, RS_NONE, NULL);
    char changes[512] = "", why[1024];
    if (resync == RS_BROKEN && w->last_up.nmembers > 0)
        rd_membership_describe(&w->last_up, &w->view, changes, sizeof(changes));
    snprintf(why, sizeof(why),
             "job '%s' changed (%s); it is at generation %" PRIu64 " with %u ranks: re-synchronise",
             w->name,
             changes[0] != '\0'  ? changes
             : resync != RS_NONE ? w->resync_why
                                 : "new members",
             w->generation, size);
    if (world_view_copy(&w->last_up, &w->view) != 0)
        w->last_up.nmembers = 0;
    w->ev.ring_up(w->arg, w->first_rank, w->generation, size, resync != RS_NONE, why);
}

/* Schedules the ring's teardown (it broke) off the current callback. */
void world_reform_later(rd_world *w)
{
    event_active(w->ev_reform, 0, 0);
}

/* A graceful change begins (a node said it leaves): this node seals the ring, announcing and
 * ordering nothing more at this generation; the coordinator's order so far goes out first. */
void world_carry_start(rd_world *w)
{
    if (w->state != W_UP)
        return;
    rd_ringchan_flush(&w->chan);
    world_set_state(w, W_SEALED);
    world_send_bye(w, 0, NULL);
    int64_t ms = w->net->cfg->peer_timeout;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(w->ev_grace, &tv);
    rd_log(RD_LOG_INFO, "world",
           "job '%s': ring of generation %" PRIu64 " sealed for a graceful change", w->name,
           w->generation);
}

/* Sealed: once every other node has sealed (so every announcement and order of this
 * generation is in) and the orders have started, the ring is taken down keeping what is under
 * negotiation, and the next view is applied. */
void world_carry_check(rd_world *w)
{
    if (w->state != W_SEALED)
        return;
    for (int i = 0; i < w->nnodes; i++)
        if (i != w->position && w->members[i] == M_ACTIVE)
            return;
    if (w->ev.awaits_order(w->arg) >= RD_AWAIT_NEGOTIATION) /* ordered work not all here */
        return;
    if (w->ntasks > 0) /* ordered ring passes still on the wire or queued for it */
        return;
    if (w->latest.generation == w->generation)
        return; /* the rendezvous has not shown the change yet */
    world_teardown(w, "the ring is re-forming without a node that left", TD_CARRY, W_WAITING);
    world_apply_view(w);
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
    if (sealed && (w->ntasks > 0 || w->ev.awaits_order(w->arg) == RD_AWAIT_CROSSING)) {
        int64_t ms = w->net->cfg->peer_timeout;
        struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
        evtimer_add(w->ev_grace, &tv);
        return;
    }
    rd_log(RD_LOG_WARN, "world",
           "job '%s': not every node sealed generation %" PRIu64
           " within --peer-timeout; dropping the ring",
           w->name, w->generation);
    world_reform_later(w);
}

/* How view v changes the ring (why says what changed). */
static rd_change classify(const rd_world *w, const rd_rdv_view *v, char *why, size_t len)
{
    rd_member_news news[RD_RING_NODES_MAX];
    for (int i = 0; i < w->nnodes; i++)
        news[i] = (rd_member_news){w->members[i] == M_LEAVING, w->members[i] != M_ACTIVE,
                                   i != w->position && world_ring_linked(w) &&
                                       w->ctrl[world_tree_toward(w, i)] != NULL};
    const rd_rdv_view *cur = w->nnodes > 0 ? &w->view : NULL;
    return rd_membership_assess(cur, w->nnodes, news, v, why, len);
}

/* What view v makes of this node's ring. */
typedef struct {
    int pos;          /* this node's position in it, or -1 */
    uint32_t ranks;   /* registered in it */
    uint32_t first;   /* this node's first rank */
    int complete;     /* the ring forms at its generation */
    char detail[512]; /* why not, or "" */
} view_fit;

/* Where this node stands in view v, and whether v makes a complete ring (or why not). */
static void view_assess(const rd_world *w, const rd_rdv_view *v, view_fit *f)
{
    uint32_t world = w->world_size, min = w->min_size;
    uint32_t ranks = 0, first = 0;
    int pos = -1, consistent = 1;
    char *detail = f->detail;
    detail[0] = '\0';
    for (size_t i = 0; i < v->nmembers; i++) {
        const rd_rdv_member *m = &v->members[i];
        if (strcmp(m->node, w->net->cfg->node) == 0 && m->incarnation == w->net->incarnation) {
            pos = (int)i;
            first = ranks;
        }
        if ((m->world_size != world || m->min_size != min) && consistent) {
            consistent = 0;
            snprintf(detail, sizeof(f->detail),
                     "node %s runs the job with world_size %u min_size %u, this node with %u "
                     "and %u",
                     m->node, m->world_size, m->min_size, world, min);
        }
        ranks += m->local_size;
    }
    int enough = ranks >= world || (v->started && ranks >= min);
    if (pos < 0)
        snprintf(detail, sizeof(f->detail), "this node is not registered (yet)");
    else if (v->nmembers > RD_RING_NODES_MAX)
        snprintf(detail, sizeof(f->detail), "more than %d nodes", RD_RING_NODES_MAX);
    else if (consistent && !enough && v->started)
        snprintf(detail, sizeof(f->detail),
                 "%u ranks on %zu nodes, below min_size %u: waiting for nodes to come", ranks,
                 v->nmembers, min);
    else if (consistent && !enough)
        snprintf(detail, sizeof(f->detail), "%u of %u ranks have registered (on %zu nodes)", ranks,
                 world, v->nmembers);
    else if (v->generation <= w->stale)
        snprintf(detail, sizeof(f->detail), "generation %" PRIu64 " broke; waiting for the next",
                 v->generation);
    f->complete = pos >= 0 && consistent && enough && v->nmembers <= RD_RING_NODES_MAX &&
                  v->generation > w->stale;
    f->pos = pos;
    f->ranks = ranks;
    f->first = first;
}

/* A node giving up the ring it was forming because of view v, where to the nodes that have that
 * generation up only nodes that said Bye went: it tells them it seals it (Bye, not leaving), so
 * that its links closing is the graceful change to them that it is. Its own clients may still
 * have to re-synchronise (against the last ring up here). */
static void seal_forming(rd_world *w, const rd_rdv_view *v)
{
    if (w->state == W_CONNECTING && w->nleft > 0 &&
        rd_membership_within_left(&w->view, w->left, w->nleft, v))
        world_send_bye(w, 0, NULL);
}

/* Applies the last view: waits, or (re)forms the ring at its generation. A ring that is up and
 * meets a new generation first ends: gracefully when the only change is nodes that said Bye,
 * else broken (its clients re-synchronise). */
void world_apply_view(rd_world *w)
{
    const rd_rdv_view *v = &w->latest;
    view_fit f;
    view_assess(w, v, &f);
    int pos = f.pos;

    if (w->state == W_LEAVING || w->state == W_IDLE || w->state == W_ASIDE)
        return;
    if (world_ring_linked(w) && w->generation == v->generation)
        return;
    /* Only the generation moved, the members are the ones of the ring (each registered again
     * after its lease ran out while Redis did not answer): the ring goes on as it is. */
    if (world_ring_up(w) && rd_membership_same(&w->view, v)) {
        rd_log(RD_LOG_INFO, "world",
               "job '%s': generation %" PRIu64 " has the members of the ring of generation %" PRIu64
               " (registered again): the ring goes on",
               w->name, v->generation, w->generation);
        return;
    }
    /* Removed after a ring that formed without some member's connection ever coming: the
     * others could not reach this node, and set it aside. Registering again at once would stop
     * their ring again; it waits, and first checks that its own address answers. */
    if (pos < 0 && w->since != 0 && w->state == W_CONNECTING &&
        rd_now_ms() - w->connect_ms >= w->net->cfg->peer_timeout / 2)
        world_missing_inbound(w);
    if (pos < 0 && w->since != 0 && w->self_aside[0] != '\0') {
        world_set_self_aside(w);
        return;
    }

    if (world_ring_up(w)) {
        char why[512];
        rd_change k = classify(w, v, why, sizeof(why));
        if (k == RD_CHANGE_DEFER && w->deferred != v->generation) {
            w->deferred = v->generation; /* a Bye or the link's end settles it */
            struct timeval tv = {0, 100 * 1000};
            evtimer_add(w->ev_defer, &tv);
            return;
        }
        if (k == RD_CHANGE_GRACEFUL) {
            world_carry_start(w);
            world_carry_check(w);
            return;
        }
        resync_state before = w->resync;
        world_teardown(w, why, TD_FAIL, W_WAITING);
        /* The view names what changed: a better reason than a broken link's, not than one a
         * node gave (RS_EXPLAINED already). */
        world_resync_set(w, RS_EXPLAINED, before == RS_EXPLAINED ? NULL : why);
    } else if (view_has_leaver(w, v)) {
        /* A node that said it leaves is still registered: its leave is on its way to Redis
         * (or its lease runs out), and the next view is the one to form. */
        rd_log(RD_LOG_INFO, "world",
               "job '%s': generation %" PRIu64 " still has a node that said it leaves: waiting "
               "for the next",
               w->name, v->generation);
        /* At most a lease: then the view is looked at again, as it is if none came. */
        struct timeval tv = {(time_t)(w->net->cfg->lease_ttl / 1000),
                             (suseconds_t)(w->net->cfg->lease_ttl % 1000) * 1000};
        evtimer_add(w->ev_defer, &tv);
        if (w->state == W_CONNECTING) {
            if (rd_membership_within_left(&w->last_up, w->left, w->nleft, v)) {
                world_teardown(w, "a leaving node is still registered", TD_CARRY, W_WAITING);
            } else {
                char why[512];
                rd_membership_describe(&w->last_up, v, why, sizeof(why));
                seal_forming(w, v);
                world_teardown(w, why, TD_FAIL, W_WAITING);
                world_resync_set(w, RS_EXPLAINED, why);
            }
        }
        return;
    } else if (w->state == W_CONNECTING && w->nleft > 0 &&
               rd_membership_within_left(&w->last_up, w->left, w->nleft, v)) {
        /* The graceful change goes on at a newer generation (a node registered again, say):
         * what was held stays held for the ring that forms. */
        world_teardown(w, "the ring re-forms at a newer generation", TD_CARRY, W_WAITING);
    } else if (w->state == W_CONNECTING) {
        /* Not up yet, so no node could say Bye to it: whatever changed, clients re-synchronise
         * (the message names the changes since the last ring that was up). */
        seal_forming(w, v);
        world_teardown(w, "the membership changed while the ring formed", TD_FAIL, W_WAITING);
    }
    /* Not up, nothing broke, and the members changed beyond the nodes that said they leave
     * (one came, came back or changed its size, or went without a word): the clients must
     * re-synchronise when the ring is up, whatever was carried over to it. */
    if (w->resync == RS_NONE && w->last_up.nmembers > 0 &&
        !rd_membership_within_left(&w->last_up, w->left, w->nleft, v)) {
        char why[512];
        rd_membership_describe(&w->last_up, v, why, sizeof(why));
        world_resync_set(w, RS_EXPLAINED, why[0] != '\0' ? why : "the ring re-forms");
    }
    if (world_view_copy(&w->view, v) != 0) {
        rd_log(RD_LOG_ERROR, "world", "job '%s': out of memory", w->name);
        world_set_state(w, W_WAITING);
        return;
    }
    w->generation = v->generation;
    w->nnodes = 0;
    if (!f.complete) {
        if (f.detail[0] != '\0')
            rd_log(RD_LOG_INFO, "world", "job '%s': generation %" PRIu64 ": %s", w->name,
                   v->generation, f.detail);
        world_set_state(w, W_WAITING);
        w->ev.ring_waiting(w->arg, f.ranks, (uint32_t)v->nmembers, v->generation, f.detail);
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
    w->first_rank = f.first;
    world_connect_ring(w);
}

/* The view deferred for a Bye that never came: apply it as it is. */
static void on_defer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    world_apply_view(arg);
}

/* The ring broke (a link failed, a peer misbehaved, or seals never came): it is taken down with
 * its ops doomed, and this node registers again so that every node moves to a new generation
 * (the one that broke never forms again). */
static void on_reform(evutil_socket_t fd, short what, void *arg)
{
    rd_world *w = arg;
    (void)fd;
    (void)what;
    if (!world_ring_linked(w))
        return;
    char why[512];
    snprintf(why, sizeof(why), "%s", w->reform_why[0] ? w->reform_why : "the ring's links broke");
    w->reform_why[0] = '\0';
    world_teardown(w, why, TD_FAIL, W_WAITING);
    world_move_on(w, why);
}

/* Runs maybe_up on the turn after a peer's connection was accepted. */
static void on_check(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    world_maybe_up(arg);
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
    int ok = world_links_init(w) == 0 && world_ctrl_init(w) == 0;
    w->ev_reform = event_new(base, -1, 0, on_reform, w);
    w->ev_grace = evtimer_new(base, on_grace, w);
    w->ev_defer = evtimer_new(base, on_defer, w);
    w->ev_linger = evtimer_new(base, on_linger, w);
    w->ev_lapse = event_new(base, -1, EV_PERSIST, on_lapse, w);
    w->ev_check = event_new(base, -1, 0, on_check, w);
    if (!ok || w->ev_reform == NULL || w->ev_grace == NULL || w->ev_defer == NULL ||
        w->ev_linger == NULL || w->ev_lapse == NULL || w->ev_check == NULL ||
        world_plane_init(w) != 0) {
        rd_world_free(w);
        return NULL;
    }
    int64_t ms = net->cfg->lease_ttl / 4;
    struct timeval lt = {ms / 1000, (ms % 1000) * 1000};
    event_add(w->ev_lapse, &lt);
    return w;
}

/* What an orphaned world tells its job: nothing (the job is gone). */
static void orphan_ring_up(void *arg, uint32_t first_rank, uint64_t generation, uint32_t size,
                           int sync, const char *why)
{
    (void)arg, (void)first_rank, (void)generation, (void)size, (void)sync, (void)why;
}
static void orphan_ring_waiting(void *arg, uint32_t ranks, uint32_t nodes, uint64_t generation,
                                const char *detail)
{
    (void)arg, (void)ranks, (void)nodes, (void)generation, (void)detail;
}
static void orphan_why(void *arg, const char *why)
{
    (void)arg, (void)why;
}
static void orphan_ring_down(void *arg, const char *why, int carry)
{
    (void)arg, (void)why, (void)carry;
}
static void orphan_news(void *arg)
{
    (void)arg;
}
static rd_world_await orphan_awaits(void *arg)
{
    (void)arg;
    return RD_AWAIT_NOTHING;
}
static void orphan_task_done(void *arg, struct rd_xfer_task *t)
{
    (void)arg, (void)t;
}
static const rd_world_events orphan_events = {
    .ring_up = orphan_ring_up,
    .ring_waiting = orphan_ring_waiting,
    .ring_down = orphan_ring_down,
    .ring_lost = orphan_why,
    .disrupted = orphan_news,
    .ring_ended = orphan_news,
    .awaits_order = orphan_awaits,
    .task_done = orphan_task_done,
};

void rd_world_free(rd_world *w)
{
    if (w == NULL)
        return;
    if (w->state == W_LEAVING && !w->orphaned) {
        /* Its job ends, but the nodes beyond it in the control tree still hear each other
         * through it: it stays, told nothing more, its data plane ended as the job's memory
         * goes. */
        world_plane_retire(w, "the job ended on this node", TD_END);
        if (w->ev.ring_ended != NULL) /* the job hears its ring end, as when it is freed */
            w->ev.ring_ended(w->arg);
        w->ev.ring_down(w->arg, "the job ended on this node", 0);
        w->ev = orphan_events;
        w->arg = NULL;
        w->orphaned = 1;
        rd_log(RD_LOG_DEBUG, "world",
               "job '%s': ended here; still passing the other nodes' messages on", w->name);
        return;
    }
    world_destroy(w);
}

void world_destroy(rd_world *w)
{
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
    world_teardown(w, "the job ended on this node", TD_END, W_IDLE);
    world_links_free(w);
    world_ctrl_free(w);
    world_plane_free(w);
    if (w->ev_reform != NULL)
        event_free(w->ev_reform);
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
    world_view_clear(&w->view);
    world_view_clear(&w->latest);
    world_view_clear(&w->last_up);
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
    world_set_state(w, W_WAITING);
    w->ev.ring_waiting(w->arg, 0, 0, w->generation, "registering in the rendezvous");
}

void rd_world_unregister(rd_world *w)
{
    if (w->state == W_IDLE || w->state == W_LEAVING)
        return;
    if (w->state == W_ASIDE) {
        event_del(w->ev_rejoin);
        world_set_state(w, W_IDLE);
        return;
    }
    if (world_ring_up(w)) { /* its clients are done: the others finish what it announced */
        rd_world_leave(w);
        return;
    }
    rd_rdv_leave(w->net->rdv, w->name);
    world_teardown(w, "this node left the job", TD_LEAVE, W_IDLE);
}

void rd_world_abandon(rd_world *w, const char *why)
{
    if (w->state == W_IDLE || w->state == W_LEAVING || w->state == W_ASIDE) {
        rd_world_unregister(w);
        return;
    }
    char loss[RD_WORLD_LOSS_MAX];
    snprintf(loss, sizeof(loss), "%s", why);
    world_leave(w, loss);
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
    world_send_error(w, why, -1);
    world_teardown(w, why, TD_FAIL, W_WAITING);
    world_resync_set(w, RS_EXPLAINED,
                     why); /* also when the ring was not up: the clients' ranks change */
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
    /* Every node hears from its neighbours in the control tree at least this often (every
     * lease / 4): a keepalive to those this node has sent nothing else to since the last tick
     * (ops announced and messages passed on count). */
    int64_t now = rd_now_ms(), silent = 0, period = w->net->cfg->lease_ttl / 4;
    for (int i = 0; (world_ring_up(w) || w->state == W_LEAVING) && i < w->nnodes; i++) {
        if (i == w->position || w->ctrl[i] == NULL)
            continue;
        if (now - w->told[i] >= period - period / 8) /* a tick may come a little early */
            world_ctrl_poke(w, i);
        if (now - w->heard[i] > silent)
            silent = now - w->heard[i];
    }
    /* Redis down for everyone: the ring goes on as long as its nodes hear from each other. */
    int cut_off = !world_ring_up(w) || silent > w->net->cfg->lease_ttl;
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
    if (world_ring_linked(w))
        world_teardown(w, why, TD_FAIL, W_WAITING);
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
    world_teardown(w, "this node left the job", TD_LEAVE, W_IDLE);
    if (w->orphaned)
        world_destroy(w);
}

/* Leaves the ring gracefully (Bye): what every node announced finishes, the rest carries over.
 * loss (NULL for a drain) says why the other nodes' clients must re-synchronise all the same. */
static int world_leave(rd_world *w, const char *loss)
{
    if (w->state == W_LEAVING || w->state == W_IDLE)
        return 1;
    if (w->state == W_ASIDE) {
        rd_world_unregister(w);
        return 1;
    }
    if (!world_ring_up(w)) {
        /* A ring still forming: the nodes linked already hear that this one leaves, so that the
         * view without it is a graceful change to them too (what they hold carries over); the
         * channels write the Bye out before they close. */
        if (w->state == W_CONNECTING)
            world_send_bye(w, 1, loss);
        rd_rdv_leave(w->net->rdv, w->name);
        world_teardown(w, "this node left the job", TD_LEAVE, W_IDLE);
        return 1;
    }
    rd_ringchan_flush(&w->chan); /* what the coordinator ordered goes out before its Bye */
    world_send_bye(w, 1, loss);
    rd_rdv_leave(w->net->rdv, w->name);
    world_set_state(w, W_LEAVING);
    /* Its neighbours in the control tree close their links once their ring re-forms, having
     * heard every node's Bye, part of which this node passes on: it lingers until they have,
     * or for --peer-timeout at most. */
    int64_t ms = w->net->cfg->peer_timeout;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(w->ev_linger, &tv);
    world_linger_check(w, 0); /* no neighbour to pass anything on to, or only leaving ones */
    rd_log(RD_LOG_INFO, "world", "job '%s': left the ring of generation %" PRIu64, w->name,
           w->generation);
    return 1;
}

int rd_world_leave(rd_world *w)
{
    return world_leave(w, NULL);
}

void rd_world_reform(rd_world *w, const char *why)
{
    if (!world_ring_up(w))
        return;
    rd_log(RD_LOG_WARN, "world", "job '%s': %s; the ring re-forms", w->name, why);
    snprintf(w->reform_why, sizeof(w->reform_why), "%s", why);
    world_reform_later(w);
}

void rd_world_detail(const rd_world *w, char *buf, size_t len)
{
    uint32_t ranks = 0;
    for (size_t i = 0; i < w->latest.nmembers; i++)
        ranks += w->latest.members[i].local_size;
    snprintf(buf, len,
             "%u ranks registered on %zu nodes at generation %" PRIu64
             " (world_size %u, min_size %u), ring %s",
             ranks, w->latest.nmembers, w->latest.generation, w->world_size, w->min_size,
             state_names[w->state]);
}

int rd_world_up(const rd_world *w)
{
    return world_ring_up(w);
}

int rd_world_solo(const rd_world *w)
{
    return w->nnodes == 1;
}

int rd_world_sealed(const rd_world *w)
{
    return w->state == W_SEALED || w->state == W_LEAVING; /* both after this node's Bye */
}

void rd_world_settle(rd_world *w)
{
    world_carry_check(w);
}

void rd_world_drop(rd_world *w, const char *why)
{
    rd_log(RD_LOG_WARN, "world", "job '%s': %s; dropping the ring", w->name, why);
    world_reform_later(w);
}

/* The ring of generation w->stale broke with every node still there: the job moves to the next
 * generation (once, however many nodes ask), where the ring forms again. */
void world_move_on(rd_world *w, const char *reason)
{
    if (w->state == W_ASIDE || w->state == W_IDLE || w->state == W_LEAVING)
        return; /* not registered on purpose (a probe may answer after this node left) */
    /* Registering again when the bump cannot be asked for; not over links of a newer ring. */
    if (rd_rdv_bump(w->net->rdv, w->name, w->stale, reason) != RINGD_OK && !world_ring_linked(w))
        rd_world_register(w);
    world_apply_view(w); /* another node may have moved it on already */
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
            snprintf(st, sizeof(mi->state), "%s", world_ring_up(w) ? "up" : "member");
        first += m->local_size;
    }
    if (n > 0)
        r->coordinator = w->view.members[0].node;
    if (world_ring_up(w) && w->nnodes >= 2)
        world_plane_describe(w, r);
    return RINGD_OK;
}
