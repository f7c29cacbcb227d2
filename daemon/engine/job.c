/* Jobs on this node: clients join a job by name and leave it, the job renumbers its local ranks
 * as they come and go, follows its ring across nodes (up, down, lost), and drains. The life of
 * a job (job_phase) and what it knows of its ring (ring_health) are explicit states, each
 * changed in one checked function. */
#include "job.h"

#include <assert.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "check.h"
#include "internal.h"
#include "frame.h"
#include "log.h"
#include "ops.h"
#include "optab.h"
#include "group.h"
#include "pass.h"
#include "stall.h"

#define RD_OP_BUCKETS_MIN 64

static const char *const phase_names[JOB_NPHASES] = {"forming", "running", "draining", "left",
                                                     "freeing"};

/* Which phase may follow which (bit per phase). */
#define B(st) (1u << (st))
static const unsigned phase_moves[JOB_NPHASES] = {
    [JOB_FORMING] = B(JOB_RUNNING) | B(JOB_DRAINING) | B(JOB_FREEING),
    [JOB_RUNNING] = B(JOB_DRAINING) | B(JOB_FREEING),
    [JOB_DRAINING] = B(JOB_LEFT) | B(JOB_FREEING),
    [JOB_LEFT] = B(JOB_FREEING),
    [JOB_FREEING] = 0,
};

static const char *const ring_names[RING_NSTATES] = {"sound", "disrupted", "lost"};

/* A ring that is up again is sound; a lost one stays lost until then. */
static const unsigned ring_moves[RING_NSTATES] = {
    [RING_SOUND] = B(RING_DISRUPTED) | B(RING_LOST),
    [RING_DISRUPTED] = B(RING_SOUND) | B(RING_LOST),
    [RING_LOST] = B(RING_SOUND),
};
#undef B

/* A checked move of one of the job's state machines (what: its name in the log) from *state to
 * to: a move the table does not allow is a programmer error (an assertion, and an error in the
 * log where assertions are compiled out); every move is logged. */
static void move(const rd_job *j, const char *what, const char *const *names, const unsigned *moves,
                 int *state, int to)
{
    if (*state == to)
        return;
    if (!(moves[*state] & (1u << to))) {
        rd_log(RD_LOG_ERROR, "job", "job '%s': illegal %s move %s -> %s", j->name, what,
               names[*state], names[to]);
        assert(!"illegal job state move");
    }
    rd_log(RD_LOG_DEBUG, "job", "job '%s': %s %s -> %s", j->name, what, names[*state], names[to]);
    *state = to;
}

/* The one place a job changes phase. */
static void set_phase(rd_job *j, job_phase to)
{
    int st = (int)j->phase;
    move(j, "phase", phase_names, phase_moves, &st, (int)to);
    j->phase = (job_phase)st;
}

/* The one place the job's knowledge of its ring changes. */
static void set_ring(rd_job *j, ring_health to)
{
    int st = (int)j->ring;
    move(j, "ring", ring_names, ring_moves, &st, (int)to);
    j->ring = (ring_health)st;
}

const char *rd_job_name(const rd_job *j)
{
    return j->name;
}

void rd_job_free(rd_job *j)
{
    rd_engine *d = j->e;
    set_phase(j, JOB_FREEING);
    /* The scheduler and the device transport first: they unsubscribe from the world's channel
     * (what the world's end would tell them, their own end does). */
    rd_sched_free(j->sched);
    j->sched = NULL;
    rd_devcomm_free(j->devcomm);
    j->devcomm = NULL;
    rd_world_free(j->world);
    j->world = NULL;
    rd_pass_drop(j);
    rd_optab_clear(j);
    rd_job **pp = &d->jobs;
    while (*pp != NULL && *pp != j)
        pp = &(*pp)->next;
    if (*pp == j)
        *pp = j->next;
    if (j->ev_free != NULL)
        event_free(j->ev_free);
    if (j->ev_settle != NULL)
        event_free(j->ev_settle);
    if (j->ev_tell != NULL)
        event_free(j->ev_tell);
    if (j->ev_tick != NULL)
        event_free(j->ev_tick);
    if (d->metrics != NULL)
        rd_metrics_release(d->metrics, j->m);
    if (j->tl != NULL)
        rd_timeline_mark(j->tl, j->generation, "job ended on this node");
    free(j->buckets);
    free(j->slots);
    free(j->order);
    free(j->name);
    free(j);
}

/* Frees j once it has neither clients nor ops on the executor. */
static void job_maybe_free(rd_job *j)
{
    /* A draining job outlives its clients until it has left its ring gracefully. */
    if (j->phase == JOB_DRAINING || j->phase == JOB_FREEING)
        return;
    if (j->nclients == 0 && j->nrunning == 0) {
        rd_log(RD_LOG_INFO, "job", "job '%s': last client left", j->name);
        rd_job_free(j);
    }
}

void rd_job_free_later(rd_job *j)
{
    if (j->nclients == 0 && j->nrunning == 0)
        event_active(j->ev_free, 0, 0);
}

static void on_free_later(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    job_maybe_free(arg);
}

/* A sealed ring may have waited for the device passes that ended: settled on a later turn, not
 * from within the transport's callback that ended them. */
static void on_settle_later(evutil_socket_t fd, short what, void *arg)
{
    rd_job *j = arg;
    (void)fd;
    (void)what;
    if (j->world != NULL)
        rd_world_settle(j->world);
}

/* Tells the other nodes of the failures they have not heard of, one op at a time (telling one
 * may end others: the list is read again for each). */
static void on_tell_later(evutil_socket_t fd, short what, void *arg)
{
    rd_job *j = arg;
    (void)fd;
    (void)what;
    /* A sealed ring takes no announcements (the op would go back to the list's end): the next
     * ring hears of them. At most as many turns as there are ops to tell. */
    for (size_t n = j->count[OP_UNTOLD]; n > 0 && j->world != NULL && rd_world_up(j->world) &&
                                         !rd_world_sealed(j->world) && j->first[OP_UNTOLD] != NULL;
         n--) {
        rd_op *o = j->first[OP_UNTOLD];
        rd_ops_tell(o, o->status, o->message, 0, NULL, 0);
    }
}

void rd_job_tell_later(rd_job *j)
{
    if (j->world != NULL)
        event_active(j->ev_tell, 0, 0);
}

static void job_changed(rd_job *j, uint64_t generation, uint32_t size, int sync, const char *why);

/* Sends Welcome and the arena to every session of j still waiting. */
static void job_welcome(rd_job *j)
{
    int any = 0;
    for (uint32_t k = 0; k < j->nclients; k++) { /* slots 0..nclients-1: all there */
        rd_client *c = j->slots[k];
        if (c->arena->fd < 0) /* passed already: welcomed at an earlier generation */
            continue;
        rd_client_view v = {j->generation, j->first_rank + k, j->size, k, j->local_size};
        if (j->e->ev.welcome(c, &v, c->arena->fd) == RINGD_OK) {
            rd_arena_close_fd(c->arena);
            any = 1;
        }
    }
    if (any)
        rd_log(RD_LOG_INFO, "job",
               "job '%s': clients welcomed, ranks %u-%u of %u, generation %" PRIu64, j->name,
               j->first_rank, j->first_rank + j->local_size - 1, j->size, j->generation);
}

/* Places the clients in slots 0..n-1 (n >= nclients, n <= local_cap) and renumbers their local
 * ranks: each that asked for a local rank below n gets it (no two clients ask for one rank:
 * rd_job_join refuses the second), the others take the slots left, lowest first, in the order
 * they had. */
static void slots_arrange(rd_job *j, uint32_t n)
{
    uint32_t m = 0;
    for (uint32_t k = 0; k < j->local_cap; k++) {
        if (j->slots[k] != NULL)
            j->order[m++] = j->slots[k];
        j->slots[k] = NULL;
    }
    for (uint32_t i = 0; i < m; i++) {
        rd_client *c = j->order[i];
        if (c->asked_rank >= 0 && c->asked_rank < (int64_t)n) {
            j->slots[c->asked_rank] = c;
            j->order[i] = NULL;
        }
    }
    uint32_t free_slot = 0;
    for (uint32_t i = 0; i < m; i++) {
        if (j->order[i] == NULL)
            continue;
        while (j->slots[free_slot] != NULL)
            free_slot++;
        j->slots[free_slot] = j->order[i];
    }
    for (uint32_t k = 0; k < j->local_cap; k++)
        if (j->slots[k] != NULL)
            j->slots[k]->local_rank = k;
}

/* Moves the clients into slots 0..nclients-1, renumbering their local ranks. */
static void slots_compact(rd_job *j)
{
    slots_arrange(j, j->nclients);
}

/* Ops on the workers of a one-node job whose ranks changed under them (the job is at a new
 * generation): a loss fails them, since their ranks must hear it on this answer and split their
 * data anew (a lost rank's contribution may be in the result or not); a join lets them end, their
 * answer leaving the ranks' view of the job as it was, so that their next Submit fails instead. */
static void running_outran(rd_job *j, int lost, const char *why)
{
    for (rd_op *o = j->first[OP_RUNNING]; o != NULL; o = o->snext) {
        if (!lost) {
            o->outran_join = 1;
            continue;
        }
        if (o->outran_loss)
            continue; /* the first loss it ran through names it */
        char msg[1024];
        snprintf(msg, sizeof(msg),
                 "tensor '%s': %s while it ran: restore the last committed state and broadcast "
                 "it from rank 0",
                 o->name, why);
        free(o->message);
        o->message = strdup(msg); /* NULL: op_ran says less */
        o->outran_loss = 1;
    }
}

/* A running job's local membership changed (lost: a client went without a goodbye, else one
 * joined; why says how): every op not moving data fails, and the job goes on at a new generation
 * with the clients it has: at once on one node, through the rendezvous across nodes. */
static void job_reshape(rd_job *j, int lost, const char *why)
{
    /* Mismatch tombstones index the old local ranks: the ranks they wait for are renumbered. */
    rd_optab_drop_failed(j);
    slots_compact(j);
    j->local_size = j->nclients;
    if (j->world != NULL) {
        j->ranks_from = j->generation + 1;
        if (j->nclients > 0)
            rd_world_resize(j->world, j->local_size, why);
        return;
    }
    j->generation++;
    j->size = j->local_size;
    j->sync_generation = j->generation;
    snprintf(j->sync_why, sizeof(j->sync_why), "%s", why);
    running_outran(j, lost, why);
    rd_optab_fail_unstarted(j, why);
    if (j->nclients > 0)
        job_changed(j, j->generation, j->size, 1, why);
    job_welcome(j);
    rd_log(RD_LOG_INFO, "job", "job '%s': %s; generation %" PRIu64 ", %u ranks", j->name, why,
           j->generation, j->size);
}

int rd_job_drain(rd_job *j, int force)
{
    if (!rd_job_draining(j)) {
        set_phase(j, JOB_DRAINING);
        /* Ops some local ranks have not submitted can no longer complete here: they fail, and
         * the other nodes, never having heard of them, carry them over without this node. */
        static const op_state unannounced[] = {OP_PENDING, OP_HELD, OP_DOOMED};
        for (size_t k = 0; k < sizeof(unannounced) / sizeof(unannounced[0]); k++)
            while (j->first[unannounced[k]] != NULL)
                rd_optab_fail(j->first[unannounced[k]], RINGD_E_CLOSED,
                              "tensor '%s': node %s is draining; job '%s' goes on without it",
                              j->first[unannounced[k]]->name, j->e->cfg->node, j->name);
    }
    if (force) {
        char why[512];
        snprintf(why, sizeof(why), "node %s drained before the op could end (--drain-timeout)",
                 j->e->cfg->node);
        rd_optab_fail_unstarted(j, why);
        if (j->world != NULL)
            rd_world_unregister(j->world);
        if (j->phase == JOB_DRAINING) {
            set_phase(j, JOB_LEFT);
            event_active(j->ev_free, 0, 0);
        }
        return 1;
    }
    int busy = j->nrunning > 0 || j->count[OP_HELD] > 0 || j->count[OP_ANNOUNCED] > 0 ||
               j->count[OP_RING_READY] > 0 || j->count[OP_RUNNING] > 0 || j->count[OP_DOOMED] > 0;
    if (busy)
        return 0;
    if (j->world != NULL && !rd_world_leave(j->world))
        return 0;
    if (j->phase == JOB_DRAINING) {
        set_phase(j, JOB_LEFT);
        event_active(j->ev_free, 0, 0); /* a job without clients goes, off the caller's loop */
    }
    return 1;
}

rd_job *rd_job_next(const rd_job *j)
{
    return j->next;
}

static const rd_world_events world_events;

/* Whether job j (NULL: none of that name yet) takes client s, whose Hello h (checked on its
 * own, min_size its default applied) names it. Returns RINGD_OK, or why not with err set. */
static rd_status job_refuses(const rd_job *j, const rd_client *s, const rd_hello *h,
                             uint32_t min_size, char *err, size_t errlen)
{
    if (j == NULL)
        return RINGD_OK;
    if (j->world_size != h->world_size || j->local_cap != h->local_size ||
        j->min_size != min_size) {
        snprintf(err, errlen,
                 "job '%s' runs with world_size %u local_size %u min_size %u; this client asked "
                 "for %u, %u and %u",
                 h->job, j->world_size, j->local_cap, j->min_size, h->world_size, h->local_size,
                 min_size);
        return RINGD_E_REFUSED;
    }
    if (j->uid != s->uid) {
        snprintf(err, errlen, "job '%s' belongs to uid %u; this client runs as uid %u", h->job,
                 (unsigned)j->uid, (unsigned)s->uid);
        return RINGD_E_REFUSED;
    }
    if (j->nclients == j->local_cap || rd_job_draining(j)) {
        char pids[256] = "";
        for (uint32_t k = 0; k < j->local_cap && strlen(pids) < sizeof(pids) - 16; k++)
            if (j->slots[k] != NULL)
                snprintf(pids + strlen(pids), sizeof(pids) - strlen(pids), "%s%d",
                         pids[0] ? ", " : "", (int)j->slots[k]->pid);
        snprintf(err, errlen, "job '%s' already has its %u local clients (pids %s)", h->job,
                 j->local_cap, pids);
        return RINGD_E_REFUSED;
    }
    for (uint32_t k = 0; h->local_rank >= 0 && k < j->local_cap; k++) {
        if (j->slots[k] != NULL && j->slots[k]->asked_rank == h->local_rank) {
            snprintf(err, errlen,
                     "job '%s': local rank %" PRId64 " on node %s is taken by pid %d, which asked "
                     "for it first: give each process of the node its own local rank "
                     "(RINGD_LOCAL_RANK, LOCAL_RANK)",
                     h->job, h->local_rank, j->e->cfg->node, (int)j->slots[k]->pid);
            return RINGD_E_REFUSED;
        }
    }
    return RINGD_OK;
}

/* The multi-node side of j: its world, and the scheduler and device transport that hear the
 * world's ring on their own. Returns 0, or -1 when out of memory. */
static int job_spans_nodes(rd_job *j)
{
    rd_engine *d = j->e;
    static const rd_sched_events sched_events = {
        .negotiated = rd_ops_negotiated,
        .failed_elsewhere = rd_ops_failed_elsewhere,
        .start = rd_pass_start,
        .heard = rd_ops_heard,
    };
    static const rd_devcomm_events devcomm_events = {.settled = rd_sched_settled};
    j->world =
        rd_world_new(d->net, j->name, j->world_size, j->min_size, j->local_size, &world_events, j);
    if (j->world == NULL)
        return -1;
    j->sched = rd_sched_new(d->base, d->cfg, j->world, j->name, &sched_events, j);
    if (j->sched == NULL)
        return -1;
    j->devcomm =
        rd_devcomm_new(d->base, d->cfg, &d->gpus, j->world, j->name, &devcomm_events, j->sched);
    return j->devcomm != NULL ? 0 : -1;
}

/* A new job of d named by Hello h (checked), its first client s. Returns it, linked into d's
 * jobs, or NULL with err set. */
static rd_job *job_new(rd_engine *d, const rd_client *s, const rd_hello *h, uint32_t min_size,
                       char *err, size_t errlen)
{
    rd_job *j = calloc(1, sizeof(*j));
    if (j == NULL || (j->name = strdup(h->job)) == NULL ||
        (j->slots = calloc(h->local_size, sizeof(*j->slots))) == NULL ||
        (j->order = calloc(h->local_size, sizeof(*j->order))) == NULL ||
        (j->buckets = calloc(RD_OP_BUCKETS_MIN, sizeof(*j->buckets))) == NULL) {
        if (j != NULL) {
            free(j->slots);
            free(j->order);
            free(j->name);
            free(j);
        }
        snprintf(err, errlen, "out of memory creating job '%s'", h->job);
        return NULL;
    }
    j->e = d;
    j->uid = s->uid;
    j->nbuckets = RD_OP_BUCKETS_MIN;
    j->world_size = h->world_size;
    j->min_size = min_size;
    j->local_cap = j->local_size = h->local_size;
    j->size = h->world_size;
    j->wait_ms = h->open_timeout_ms ? h->open_timeout_ms : 30000;
    j->ev_free = event_new(d->base, -1, 0, on_free_later, j);
    j->ev_settle = event_new(d->base, -1, 0, on_settle_later, j);
    j->ev_tell = event_new(d->base, -1, 0, on_tell_later, j);
    j->ev_tick = event_new(d->base, -1, EV_PERSIST, rd_stall_tick, j);
    int64_t every = rd_stall_period(j);
    struct timeval tv = {every / 1000, (every % 1000) * 1000};
    if (j->ev_free == NULL || j->ev_settle == NULL || j->ev_tell == NULL || j->ev_tick == NULL ||
        event_add(j->ev_tick, &tv) != 0 ||
        (j->world_size > j->local_size && job_spans_nodes(j) != 0)) {
        rd_job_free(j); /* not linked yet, no ops: only what was made */
        snprintf(err, errlen, "out of memory creating job '%s'", h->job);
        return NULL;
    }
    j->next = d->jobs;
    d->jobs = j;
    j->m = d->metrics != NULL ? rd_metrics_acquire(d->metrics, j->name) : NULL;
    for (struct recording *r = d->recordings; r != NULL; r = r->next)
        if (strcmp(r->job, j->name) == 0 && (r->who.admin || r->who.uid == j->uid))
            j->tl = r->tl;
    rd_log(RD_LOG_INFO, "job", "job '%s': created, %u local clients expected", j->name,
           j->local_size);
    return j;
}

rd_status rd_job_join(rd_client *s, const rd_hello *h, char *err, size_t errlen)
{
    rd_engine *d = s->engine;
    rd_check_daemon cd = {d->cfg->node, d->draining, d->net != NULL, d->cfg->arena_size,
                          d->cfg->arena_max};
    uint32_t min_size;
    uint64_t want;
    rd_status rc = rd_check_hello(h, &cd, &min_size, &want, err, errlen);
    if (rc != RINGD_OK)
        return rc;
    rd_job *j = d->jobs;
    while (j != NULL && strcmp(j->name, h->job) != 0)
        j = j->next;
    if ((rc = job_refuses(j, s, h, min_size, err, errlen)) != RINGD_OK)
        return rc;
    s->arena = rd_arena_new(want, err, errlen);
    if (s->arena == NULL)
        return RINGD_E_NOMEM;
    if (j == NULL && (j = job_new(d, s, h, min_size, err, errlen)) == NULL)
        return RINGD_E_NOMEM;
    uint32_t k = 0;
    while (j->slots[k] != NULL) /* a free slot: nclients < local_cap */
        k++;
    j->slots[k] = s;
    j->nclients++;
    j->ntraced += s->timeline != 0;
    s->job = j;
    s->asked_rank = h->local_rank;
    /* A running job renumbers its clients as it reshapes; one that forms holds every slot. */
    slots_arrange(j, rd_job_started(j) ? j->nclients : j->local_cap);
    rd_log(RD_LOG_INFO, "job", "job '%s': pid %d joined as local rank %u%s (%u of %u)", j->name,
           (int)s->pid, s->local_rank, s->asked_rank >= 0 ? ", which it asked for" : "",
           j->nclients, j->local_cap);
    if (rd_job_started(j)) {
        char why[640];
        snprintf(why, sizeof(why), "pid %d joined job '%s' on node %s", (int)s->pid, j->name,
                 d->cfg->node);
        job_reshape(j, 0, why);
        return RINGD_OK;
    }
    if (j->nclients < j->local_cap)
        return RINGD_OK;
    if (j->world != NULL) {
        rd_world_register(j->world);
    } else {
        j->generation++;
        j->sync_generation = j->generation;
        j->size = j->local_size;
        job_changed(j, j->generation, j->size, 0, "every local rank joined");
        set_phase(j, JOB_RUNNING);
        job_welcome(j);
    }
    return RINGD_OK;
}

void rd_job_trace(rd_client *c, int on)
{
    rd_job *j = c->job;
    if (j == NULL || (c->timeline != 0) == (on != 0))
        return;
    c->timeline = on != 0;
    if (on)
        j->ntraced++;
    else if (j->ntraced > 0)
        j->ntraced--;
}

void rd_job_leave(rd_client *s)
{
    rd_job *j = s->job;
    uint32_t rank = s->local_rank;
    char why[640];

    if (rd_job_started(j))
        snprintf(why, sizeof(why), "rank %u (pid %d, node %s) left job '%s'", j->first_rank + rank,
                 (int)s->pid, j->e->cfg->node, j->name);
    else
        snprintf(why, sizeof(why), "local rank %u (pid %d) left job '%s'", rank, (int)s->pid,
                 j->name);
    j->slots[rank] = NULL;
    j->nclients--;
    j->ntraced -= s->timeline != 0 && j->ntraced > 0;
    s->timeline = 0;
    s->job = NULL;
    rd_log(RD_LOG_INFO, "job", "%s; %u local clients remain", why, j->nclients);

    for (size_t i = 0; i < j->nbuckets; i++)
        for (rd_op *o = j->buckets[i]; o != NULL; o = o->next)
            for (uint32_t k = 0; k < o->nparts; k++)
                if (o->parts[k].s == s)
                    o->parts[k].s = NULL;
    if (rd_job_started(j) && !rd_job_draining(j) && j->nclients > 0) {
        job_reshape(j, 1, why);
        job_maybe_free(j);
        return;
    }
    if (rd_job_draining(j)) { /* what it submitted still ends; the drain leaves the ring */
        if (j->world == NULL)
            running_outran(j, 1, why); /* but not as if the rank were there */
        slots_compact(j);
        if (j->world != NULL) /* renumbered under a ring it leaves: no view adds up now */
            j->ranks_from = j->generation + 1;
        job_maybe_free(j);
        return;
    }
    slots_compact(j);
    if (!rd_job_started(j))
        j->local_size = j->local_cap;
    rd_optab_fail_unstarted(j, why);
    /* fails what was negotiating; ring completions free the job later. A running job's last
     * rank here leaving is a loss to the others: the node leaves as a drain does, but says why,
     * so their clients re-synchronise. */
    if (j->world != NULL && rd_job_started(j))
        rd_world_abandon(j->world, why);
    else if (j->world != NULL)
        rd_world_unregister(j->world);
    job_maybe_free(j);
}

int rd_job_client_view(const rd_job *j, uint32_t local_rank, rd_client_view *v)
{
    /* a new local rank with the old ranks would not add up */
    if (!rd_job_started(j) || j->generation < j->ranks_from)
        return 0;
    v->generation = j->generation;
    v->rank = j->first_rank + local_rank;
    v->size = j->size;
    v->local_rank = local_rank;
    v->local_size = j->local_size;
    return 1;
}

static void on_ring_waiting(void *arg, uint32_t ranks, uint32_t nodes, uint64_t generation,
                            const char *detail)
{
    rd_job *j = arg;
    for (uint32_t k = 0; k < j->local_cap; k++) /* a forming job's slots may have gaps */
        if (j->slots[k] != NULL && j->slots[k]->arena->fd >= 0) /* not welcomed yet */
            j->e->ev.waiting(j->slots[k], ranks, j->world_size, nodes, generation,
                             detail != NULL ? detail : "");
}

/* Orders ops by creation. */
static int op_seq_cmp(const void *a, const void *b)
{
    const rd_op *x = *(rd_op *const *)a, *y = *(rd_op *const *)b;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* The ring is up: this node offers a device transport for its ranks, which is NCCL's only when
 * every one of them passes device memory (their GPU: local rank 0's). */
static void devcomm_up(rd_job *j)
{
    rd_devcomm_local local = {.device = j->local_size > 0, .gpu = -1};
    for (uint32_t k = 0; k < j->local_size; k++)
        if (j->slots[k] == NULL || j->slots[k]->device_arena == NULL)
            local.device = 0;
    if (local.device) {
        const rd_arena *a = j->slots[0]->device_arena;
        local.gpu = a->mem.device;
        local.gpu_uuid = j->slots[0]->device_uuid;
        local.ops = a->backend->transport;
    }
    rd_devcomm_ring_up(j->devcomm, &local);
}

/* The job's ring changed to size ranks at generation (sync: after a failure; why: how): counted
 * by cause, and marked on its timeline. */
static void job_changed(rd_job *j, uint64_t generation, uint32_t size, int sync, const char *why)
{
    rd_change_cause c = rd_change_cause_of(j->ring_size, size, sync);
    if (j->m != NULL)
        j->m->changes[c]++;
    j->ring_size = size;
    if (j->tl != NULL) {
        char what[256];
        snprintf(what, sizeof(what), "%s: %u ranks at generation %" PRIu64 " (%s)",
                 rd_change_cause_names[c], size, generation, why);
        rd_timeline_mark(j->tl, generation, what);
    }
}

static void on_ring_up(void *arg, uint32_t first_rank, uint64_t generation, uint32_t size, int sync,
                       const char *why)
{
    rd_job *j = arg;
    int first = !rd_job_started(j);
    job_changed(j, generation, size, sync, why);
    j->first_rank = first_rank;
    j->generation = generation;
    j->size = size;
    set_ring(j, RING_SOUND);
    j->lost[0] = '\0';
    if (sync || first) {
        j->sync_generation = generation;
        snprintf(j->sync_why, sizeof(j->sync_why), "%s", why);
        rd_optab_fail_unstarted(j, why);
    }
    /* Ops the last ring failed under are never carried over: their data may be half reduced.
     * Their answer says first what changed (the node lost), then how the ring failed under them. */
    while (j->first[OP_DOOMED] != NULL) {
        rd_op *o = j->first[OP_DOOMED];
        if (o->message == NULL || !sync || why[0] == '\0') {
            rd_optab_fail(o, RINGD_E_MEMBERSHIP, "%s", o->message ? o->message : why);
            continue;
        }
        rd_optab_fail_changed(o, why, o->message);
    }
    job_welcome(j);
    if (j->phase == JOB_FORMING)
        set_phase(j, JOB_RUNNING);
    /* Ops held while the ring was down, or carried over from the last one, and failures the
     * other nodes have yet to hear of, in creation order (ops of one name are matched across
     * nodes in the order each node announces them). Telling o may end o, never another op. */
    size_t n = j->count[OP_HELD] + j->count[OP_UNTOLD], k = 0;
    rd_op **ops = n > 0 ? malloc(n * sizeof(*ops)) : NULL;
    if (n > 0 && ops == NULL) {
        rd_world_reform(j->world, "out of memory announcing the ops held for the ring");
        return;
    }
    for (rd_op *o = j->first[OP_HELD]; o != NULL; o = o->snext)
        ops[k++] = o;
    for (rd_op *o = j->first[OP_UNTOLD]; o != NULL; o = o->snext)
        ops[k++] = o;
    if (n > 1)
        qsort(ops, n, sizeof(*ops), op_seq_cmp);
    for (k = 0; k < n; k++) {
        if (ops[k]->state == OP_HELD && ops[k]->grp != NULL && !ops[k]->grp->released)
            continue; /* it goes with its group */
        if (ops[k]->state == OP_HELD)
            rd_ops_announce(ops[k]);
        else
            rd_ops_tell(ops[k], ops[k]->status, ops[k]->message, 0, NULL, 0);
    }
    free(ops);
    /* Failures other nodes announced while this node still connected end its ops now. */
    rd_sched_ring_up(j->sched);
    rd_ops_heard(j); /* ops announced while it formed, when this node's ranks have all joined */
    devcomm_up(j);
}

static void on_ring_down(void *arg, const char *why, int carry)
{
    rd_job *j = arg;
    rd_op *o, *next;
    if (j->tl != NULL) {
        char what[256];
        snprintf(what, sizeof(what), "ring down%s: %s", carry ? " (graceful)" : "", why);
        rd_timeline_mark(j->tl, j->generation, what);
    }
    while (j->first[OP_TOLD] != NULL) /* the next ring hears of them */
        rd_optab_set_state(j->first[OP_TOLD], OP_UNTOLD);
    if (!carry) {
        if (j->ring != RING_LOST)
            set_ring(j, RING_DISRUPTED);
        static const op_state live[] = {OP_PENDING, OP_HELD, OP_ANNOUNCED, OP_RING_READY};
        for (size_t k = 0; k < sizeof(live) / sizeof(live[0]); k++)
            while (j->first[live[k]] != NULL)
                rd_optab_doom(j->first[live[k]], why);
        return;
    }
    /* A graceful change: what was under negotiation is announced again on the next ring. */
    rd_group_renegotiate(j);
    for (o = j->first[OP_ANNOUNCED]; o != NULL; o = next) {
        next = o->snext;
        rd_optab_set_state(o, OP_HELD);
    }
    for (o = j->first[OP_RING_READY]; o != NULL; o = next) {
        next = o->snext;
        rd_optab_set_state(o, OP_HELD);
    }
}

static void on_disrupted(void *arg)
{
    rd_job *j = arg;
    if (j->ring != RING_LOST)
        set_ring(j, RING_DISRUPTED);
}

static void on_ring_lost(void *arg, const char *why)
{
    rd_job *j = arg;
    set_ring(j, RING_LOST);
    snprintf(j->lost, sizeof(j->lost), "%s", why);
    rd_optab_fail_unstarted(j, why);
}

/* The ring of the current generation ended, up or not: what was to cross on it never will. */
static void on_ring_ended(void *arg)
{
    rd_pass_ring_ended(arg);
}

static const rd_world_events world_events = {
    .ring_up = on_ring_up,
    .ring_waiting = on_ring_waiting,
    .ring_down = on_ring_down,
    .ring_lost = on_ring_lost,
    .disrupted = on_disrupted,
    .ring_ended = on_ring_ended,
    .awaits_order = rd_pass_awaits,
    .task_done = rd_pass_done,
};
