/* Jobs and their op tables: joining, matching submissions by name, mismatch detection, running
 * ready ops inline or on the executor, and failing what a departed client leaves behind. */
#include "job.h"

#include <assert.h>
#include <event2/event.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "counters.h"
#include "devcomm.h"
#include "exec.h"
#include "local.h"
#include "log.h"
#include "metrics.h"
#include "negotiate.h"
#include "ring.h"
#include "schedule.h"
#include "timeline.h"
#include "world.h"
#include "xfer.h"

#define RD_OP_BUCKETS_MIN 64
#define RD_GRAIN 4096 /* elements: worker ranges start on multiples of this */
#define RD_ARENA_MIN (RD_CTRL_BYTES + 4096u)


struct rd_engine {
    struct event_base *base;
    const rd_config *cfg;
    rd_counters *counters;
    rd_metrics *metrics;   /* NULL: none kept */
    rd_exec *exec;
    rd_net *net;           /* NULL: one-node jobs only */
    rd_devcomm_gpus gpus;  /* the jobs' NCCL communicators on this daemon's GPUs */
    rd_client_events ev;   /* news for the clients */
    rd_job *jobs;
    struct recording *recordings; /* timelines being recorded, by job name */
    int draining;          /* leaving every job: new clients are refused */
};

/* A timeline recording of the job of that name (there or not yet). */
struct recording {
    char *job;
    rd_timeline *tl; /* the recorder's */
    struct recording *next;
};

/* The life of an op. Every change goes through op_set_state, which checks it against
 * op_moves and logs it; the job keeps the ops of each state on a list of their own. */
typedef enum {
    OP_PENDING,    /* waiting for some local ranks to submit */
    OP_HELD,       /* every local rank submitted (multi-node): waits for a ring that takes
                      announcements (forming, or sealed for a graceful change) */
    OP_ANNOUNCED,  /* the other nodes know of it: waits until every node has announced it */
    OP_RING_READY, /* negotiated, bound for the ring: waits for the coordinator's order */
    OP_RUNNING,    /* data moving on the executor or the ring */
    OP_DOOMED,     /* the ring broke under it: its ranks hear the message once the ring is back
                      (their answer then carries the new generation), or when the wait ends */
    OP_UNTOLD,     /* failed here; the other nodes have yet to hear it (told on the next ring) */
    OP_TOLD,       /* failed here and announced: waits until every node has announced it */
    OP_TOMBSTONE,  /* failed, and every node knows: answers the ranks yet to submit it with the
                      same error until all have come, or --stall-abort passes */
    OP_NSTATES
} op_state;

static const char *const op_state_names[OP_NSTATES] = {
    "pending", "held", "announced", "ring-ready", "running", "doomed", "untold", "told",
    "tombstone"};

/* Which state may follow which (bit per state). An op leaves every state by being freed. */
#define B(st) (1u << (st))
static const unsigned op_moves[OP_NSTATES] = {
    [OP_PENDING] = B(OP_HELD) | B(OP_RUNNING) | B(OP_DOOMED) | B(OP_UNTOLD) | B(OP_TOMBSTONE),
    [OP_HELD] = B(OP_ANNOUNCED) | B(OP_DOOMED) | B(OP_UNTOLD),
    [OP_ANNOUNCED] = B(OP_HELD) | B(OP_RING_READY) | B(OP_DOOMED) | B(OP_TOMBSTONE),
    [OP_RING_READY] = B(OP_HELD) | B(OP_RUNNING) | B(OP_DOOMED),
    [OP_RUNNING] = B(OP_DOOMED),
    [OP_DOOMED] = B(OP_UNTOLD) | B(OP_TOMBSTONE),
    [OP_UNTOLD] = B(OP_TOLD),
    [OP_TOLD] = B(OP_UNTOLD) | B(OP_TOMBSTONE),
    [OP_TOMBSTONE] = 0,
};
#undef B

/* 1 for the states of an op that failed here and stays as a tombstone. */
static int op_failed(op_state st)
{
    return st == OP_UNTOLD || st == OP_TOLD || st == OP_TOMBSTONE;
}

/* One local rank's submission of an op. */
typedef struct {
    rd_client *s; /* NULL once the session has gone */
    rd_arena *arena;      /* referenced while submitted */
    uint64_t request_id;
    uint64_t in_off, out_off;
    int64_t submit_us; /* when it submitted (the timeline's) */
    int submitted;
    int answered;
} part;

typedef struct rd_op {
    rd_job *job;
    char *name;
    op_state state;
    uint32_t first_rank; /* the submission the others are checked against */
    rd_op_params p;
    uint32_t nsubmitted;
    part *parts; /* local_size entries */
    ringd_result_t status;
    char *message;
    int warned;       /* the stall inspector has logged it (--stall-warn) */
    int64_t asked_ms; /* when the other nodes were last asked to end it (0: never) */
    uint32_t nparts;  /* the job's local size when it was created */
    int64_t since_ms; /* first submission, or the disruption that doomed it */
    uint64_t seq;     /* creation order: ops of one name are announced in it */
    /* Its path, for the metrics and the timeline (rd_trace_op says what each is): */
    int64_t first_us, ready_us, negotiated_us, started_us;
    int64_t ring_us[RD_PHASES];
    uint64_t pass;     /* the ring pass it rode in */
    uint32_t pass_ops; /* ops in that pass */
    int direct;        /* its result came with the negotiation */
    rd_local_plan plan;
    struct rd_op *next;              /* bucket chain */
    struct rd_op *sprev, *snext;     /* the list of its state */
} rd_op;

struct rd_job {
    rd_engine *e;
    char *name;
    uint32_t world_size; /* ranks the job starts with (Hello) */
    uint32_t min_size;   /* elastic: ranks it keeps running with */
    uint32_t local_cap;  /* local clients it was declared with; slots has this many */
    uint32_t local_size; /* local ranks of the current generation */
    uint32_t nclients;
    uint32_t size;       /* ranks of the current generation, every node's */
    uint32_t first_rank; /* global rank of local rank 0 */
    uint64_t generation;
    uint64_t sync_generation; /* Submits tagged with an older generation fail: the ring changed */
    char sync_why[512];       /* what changed then */
    int started;              /* welcomed its clients once */
    int draining;             /* leaving: new Submits are refused */
    int disrupted;            /* the ring broke: ops it fails are answered once it is back */
    int renumbered;           /* local ranks changed since the ring was last up: clients learn
                                 them, with their ranks and size, when it is up again */
    char lost[512];           /* "": a ring may come back; else no ring will come soon, why:
                                 what a retiring ring fails now fails at once */
    int left;                 /* drained: has left its ring */
    int64_t wait_ms;          /* how long ops wait for a ring to come back */
    struct event *ev_tick;    /* stall inspector and wait deadlines */
    rd_world *world;          /* jobs spanning nodes */
    struct event *ev_free;    /* frees the job on a later turn, out of any callback */
    struct event *ev_settle;  /* tells the world, on a later turn, that device passes ended */
    rd_sched *sched;          /* with world: announcements, orders, fusion */
    rd_devcomm *devcomm;      /* with world: the device transport of each generation */
    uint64_t epoch;           /* rings this job has seen end: a device pass crosses on its own */
    uint32_t ndev;            /* device passes under way */
    uint32_t ncrossing;       /* of those, the ones their transport has (it bounds them) */
    struct crossing *cross_head, *cross_tail; /* to cross nodes, in the coordinator's order */
    int cross_blocked;        /* this node asked for a re-form over a crossing it will not make:
                                 nothing more crosses on this ring (it would pair wrongly) */
    int freeing;
    uid_t uid;                 /* of the first client: only that user's processes may join */
    rd_client **slots; /* by local rank */
    rd_client **order; /* slots_arrange's scratch, as many */
    rd_op **buckets;
    size_t nbuckets, nops;
    rd_op *first[OP_NSTATES], *last[OP_NSTATES]; /* ops by state, each list in order of arrival */
    size_t count[OP_NSTATES];
    uint64_t next_seq;
    uint32_t nrunning; /* ops on the executor: the job outlives its clients until they end */
    uint64_t ops_completed, ops_failed;
    rd_job_metrics *m;  /* its series (NULL: none) */
    rd_timeline *tl;    /* a recording of its timeline, or NULL */
    uint32_t ntraced;   /* clients whose Completes carry their op's trace (RINGD_TIMELINE) */
    uint32_t ring_size; /* ranks of its last ring (0: none yet): the cause of the next change */
    uint64_t passes;    /* ring passes started */
    rd_job *next;
};

static void state_list_add(rd_job *j, rd_op *o)
{
    o->snext = NULL;
    o->sprev = j->last[o->state];
    if (o->sprev != NULL)
        o->sprev->snext = o;
    else
        j->first[o->state] = o;
    j->last[o->state] = o;
    j->count[o->state]++;
}

static void state_list_del(rd_job *j, rd_op *o)
{
    if (o->sprev != NULL)
        o->sprev->snext = o->snext;
    else
        j->first[o->state] = o->snext;
    if (o->snext != NULL)
        o->snext->sprev = o->sprev;
    else
        j->last[o->state] = o->sprev;
    j->count[o->state]--;
    o->sprev = o->snext = NULL;
}

/* The one place an op changes state: the move must be one op_moves allows (a programmer error
 * otherwise: an assertion, and an error in the log where assertions are compiled out), and is
 * logged. */
static void op_set_state(rd_op *o, op_state st)
{
    rd_job *j = o->job;
    if (!(op_moves[o->state] & (1u << st))) {
        rd_log(RD_LOG_ERROR, "job", "job '%s': tensor '%s': illegal move %s -> %s", j->name,
               o->name, op_state_names[o->state], op_state_names[st]);
        assert(!"illegal op state move");
    }
    rd_log(RD_LOG_DEBUG, "job", "job '%s': tensor '%s' #%" PRIu64 ": %s -> %s", j->name, o->name,
           o->seq, op_state_names[o->state], op_state_names[st]);
    state_list_del(j, o);
    o->state = st;
    state_list_add(j, o);
}

/* Tells client c how its request ended (with the op's trace when c asked for traces and there
 * is one). */
static void answer(const rd_job *j, rd_client *c, uint64_t request_id, ringd_result_t status,
                   const char *message, const rd_trace_op *trace)
{
    j->e->ev.complete(c, request_id, status, message, c->timeline ? trace : NULL);
}

const char *rd_job_name(const rd_job *j)
{
    return j->name;
}

/* The op named name that rank should join: the oldest one it has not submitted to (a failed
 * op's ranks may already submit the name again while others have yet to see the failure).
 * *dup is set when rank already has that name pending or running. */
static rd_op *op_find(rd_job *j, const char *name, uint32_t rank, int *dup)
{
    *dup = 0;
    for (rd_op *o = j->buckets[rd_name_hash(name) & (j->nbuckets - 1)]; o != NULL; o = o->next) {
        /* An op of an earlier local size (still moving data) is not this rank's to join. */
        if (strcmp(o->name, name) != 0 || rank >= o->nparts || o->nparts != j->local_size)
            continue;
        if (!o->parts[rank].submitted)
            return o;
        if (!op_failed(o->state))
            *dup = 1;
    }
    return NULL;
}

/* Doubles the bucket array when the table gets crowded; on allocation failure keeps chaining. */
static void op_table_grow(rd_job *j)
{
    size_t nb = j->nbuckets * 2;
    rd_op **b = calloc(nb, sizeof(*b));
    if (b == NULL)
        return;
    for (size_t i = 0; i < j->nbuckets; i++) {
        rd_op *o = j->buckets[i];
        while (o != NULL) {
            rd_op *next = o->next, **pp = &b[rd_name_hash(o->name) & (nb - 1)];
            while (*pp != NULL)
                pp = &(*pp)->next;
            o->next = NULL;
            *pp = o;
            o = next;
        }
    }
    free(j->buckets);
    j->buckets = b;
    j->nbuckets = nb;
}

static void op_insert(rd_job *j, rd_op *o)
{
    if (j->nops >= j->nbuckets * 2)
        op_table_grow(j);
    /* Appended, so ops of one name stay in submission order. */
    rd_op **pp = &j->buckets[rd_name_hash(o->name) & (j->nbuckets - 1)];
    while (*pp != NULL)
        pp = &(*pp)->next;
    o->next = NULL;
    *pp = o;
    j->nops++;
    state_list_add(j, o);
}

static void op_unlink(rd_job *j, rd_op *o)
{
    rd_op **pp = &j->buckets[rd_name_hash(o->name) & (j->nbuckets - 1)];
    while (*pp != o)
        pp = &(*pp)->next;
    *pp = o->next;
    j->nops--;
    state_list_del(j, o);
}

/* Releases an op that is already unlinked: arena references, buffers, strings. */
static void op_free(rd_op *o)
{
    for (uint32_t k = 0; k < o->nparts; k++)
        rd_arena_unref(o->parts[k].arena);
    free(o->parts);
    free(o->plan.in);
    free(o->plan.out);
    free(o->message);
    free(o->name);
    free(o);
}

static void cross_drop(rd_job *j);

static void job_free(rd_job *j)
{
    rd_engine *d = j->e;
    j->freeing = 1;
    rd_world_free(j->world);
    j->world = NULL;
    cross_drop(j);
    rd_devcomm_free(j->devcomm);
    j->devcomm = NULL;
    rd_sched_free(j->sched);
    j->sched = NULL;
    for (size_t i = 0; i < j->nbuckets; i++) {
        while (j->buckets[i] != NULL) {
            rd_op *o = j->buckets[i];
            j->buckets[i] = o->next;
            if (!op_failed(o->state) && d->counters->ops_in_flight > 0)
                d->counters->ops_in_flight--;
            op_free(o);
        }
    }
    rd_job **pp = &d->jobs;
    while (*pp != NULL && *pp != j)
        pp = &(*pp)->next;
    if (*pp == j)
        *pp = j->next;
    if (j->ev_free != NULL)
        event_free(j->ev_free);
    if (j->ev_settle != NULL)
        event_free(j->ev_settle);
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
    if (j->draining && !j->left)
        return;
    if (j->nclients == 0 && j->nrunning == 0 && !j->freeing) {
        rd_log(RD_LOG_INFO, "job", "job '%s': last client left", j->name);
        job_free(j);
    }
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

/* Sends the op's outcome to every rank still there that submitted (with trace, to those that
 * asked for it). */
static void op_answer(rd_op *o, ringd_result_t status, const char *message,
                      const rd_trace_op *trace)
{
    for (uint32_t k = 0; k < o->nparts; k++) {
        part *pt = &o->parts[k];
        if (pt->submitted && pt->s != NULL && !pt->answered) {
            answer(o->job, pt->s, pt->request_id, status, message, trace);
            pt->answered = 1;
        }
    }
}

static uint64_t result_bytes(const rd_op *o);
static void job_changed(rd_job *j, uint64_t generation, uint32_t size, int sync, const char *why);

/* The op's end, seen once (op_finish, op_tombstone): counted in its job's metrics, recorded in
 * its timeline, and its trace into *tr (tr->submit_us malloc'd: free it) when a recording or a
 * client wants it. Returns tr then, else NULL. */
static const rd_trace_op *op_ended(rd_op *o, ringd_result_t status, rd_trace_op *tr)
{
    rd_job *j = o->job;
    int64_t now = rd_now_us();
    uint64_t size = o->p.count * rd_dtype_size((rd_dtype)o->p.dtype);
    rd_metrics_op(j->m, o->p.coll, status, size,
                  status == RINGD_OK ? result_bytes(o) * o->nparts : 0, now - o->first_us);
    if (j->m != NULL && status == RINGD_E_STALLED)
        j->m->stall_aborts++;
    if (j->tl == NULL && j->ntraced == 0)
        return NULL;
    *tr = (rd_trace_op){
        .seq = o->seq,
        .name = o->name,
        .kind = o->p.coll,
        .status = status,
        .bytes = size,
        .generation = j->generation,
        .first_rank = j->first_rank,
        .nranks = o->nparts,
        .submit_us = calloc(o->nparts ? o->nparts : 1, sizeof(int64_t)),
        .ready_us = o->ready_us,
        .negotiated_us = o->negotiated_us,
        .started_us = o->started_us,
        .end_us = now,
        .pass = o->pass,
        .pass_ops = o->pass_ops,
        .direct = o->direct,
    };
    if (tr->submit_us == NULL)
        return NULL;
    for (uint32_t k = 0; k < o->nparts; k++)
        tr->submit_us[k] = o->parts[k].submitted ? o->parts[k].submit_us : 0;
    memcpy(tr->ring_us, o->ring_us, sizeof(tr->ring_us));
    if (j->tl != NULL)
        rd_timeline_op(j->tl, tr);
    return tr;
}

/* Ends an op: answers its ranks, updates counters, removes and frees it. */
static void op_finish(rd_op *o, ringd_result_t status, const char *message)
{
    rd_job *j = o->job;
    rd_engine *d = j->e;
    rd_trace_op tr;
    const rd_trace_op *trace = op_ended(o, status, &tr);
    op_answer(o, status, message, trace);
    if (trace != NULL)
        free(tr.submit_us);
    if (d->counters->ops_in_flight > 0)
        d->counters->ops_in_flight--;
    if (status == RINGD_OK) {
        d->counters->ops_completed++;
        j->ops_completed++;
        uint64_t written = result_bytes(o) * o->nparts;
        d->counters->bytes_reduced += written;
        const rd_arena *a = o->nparts > 0 ? o->parts[0].arena : NULL;
        if (a != NULL && a->backend->device_memory && a->mem.device >= 0 &&
            a->mem.device < RD_COUNTERS_DEVICES)
            d->counters->device_bytes[a->mem.device] += written;
    } else {
        d->counters->ops_failed++;
        j->ops_failed++;
    }
    op_unlink(j, o);
    op_free(o);
}

/* A tombstone every node knows of goes once all its ranks have come. Returns 1 when o is gone. */
static int tombstone_maybe_free(rd_op *o)
{
    if (o->state != OP_TOMBSTONE || o->nsubmitted < o->nparts)
        return 0;
    op_unlink(o->job, o);
    op_free(o);
    return 1;
}

/* Rank `rank` (client c, request_id) came to a failed op: it hears status and message. */
static void tombstone_visit(rd_op *o, rd_client *c, uint32_t rank, uint64_t request_id,
                            ringd_result_t status, const char *message)
{
    o->parts[rank].submitted = 1;
    o->nsubmitted++;
    answer(o->job, c, request_id, status, message, NULL);
    tombstone_maybe_free(o);
}

/* Ends a pending op for good: the ranks that submitted it hear status and msg now, and the op
 * stays as a tombstone that gives the ranks yet to submit it the same answer, until all have
 * come and the other nodes know (UNTOLD, TOLD), or --stall-abort passes. */
static void op_tombstone(rd_op *o, ringd_result_t status, const char *msg)
{
    rd_trace_op tr;
    const rd_trace_op *trace = op_ended(o, status, &tr);
    op_answer(o, status, msg, trace);
    if (trace != NULL)
        free(tr.submit_us);
    /* A failure found here is news for the other nodes; one the negotiation brought (the op was
     * announced) every node has already. */
    int news = o->job->world != NULL && o->state != OP_ANNOUNCED;
    op_set_state(o, news ? OP_UNTOLD : OP_TOMBSTONE);
    o->status = status;
    free(o->message);
    o->message = strdup(msg);
    o->since_ms = rd_now_ms();
    rd_engine *d = o->job->e;
    if (d->counters->ops_in_flight > 0)
        d->counters->ops_in_flight--;
    d->counters->ops_failed++;
    o->job->ops_failed++;
    for (uint32_t k = 0; k < o->nparts; k++) {
        rd_arena_unref(o->parts[k].arena);
        o->parts[k].arena = NULL;
    }
    tombstone_maybe_free(o); /* nobody left to tell */
}

/* Fails a pending op. A mismatch leaves a tombstone (op_tombstone); any other failure removes
 * the op at once. */
static void op_fail(rd_op *o, ringd_result_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void op_fail(rd_op *o, ringd_result_t status, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    rd_log(RD_LOG_WARN, "job", "job '%s': %s", o->job->name, msg);
    if (status != RINGD_E_MISMATCH)
        op_finish(o, status, msg);
    else
        op_tombstone(o, status, msg);
}

/* Runs a range of an op's data movement on a worker. */
static void op_run(void *ctx, size_t begin, size_t end)
{
    rd_local_run(&((rd_op *)ctx)->plan, begin, end);
}

/* The op's local data movement has run: it succeeded, or its backend (a device) failed. */
static void op_ran(rd_op *o)
{
    char msg[768];
    if (!o->plan.failed) {
        op_finish(o, RINGD_OK, NULL);
        return;
    }
    snprintf(msg, sizeof(msg), "tensor '%s' on node %s: %s", o->name, o->job->e->cfg->node,
             o->plan.why);
    rd_log(RD_LOG_ERROR, "job", "job '%s': %s", o->job->name, msg);
    op_finish(o, RINGD_E_SYSTEM, msg);
}

static void on_op_done(void *ctx)
{
    rd_op *o = ctx;
    rd_job *j = o->job;
    j->nrunning--;
    op_ran(o);
    job_maybe_free(j);
}

/* Points the op's plan at its ranks' buffers, with the divisor of the job's current size. An
 * allgather whose input lies in another slot of its output (in place: the first) is moved to the
 * rank's own slot first, so that writing the result never overwrites an input not yet read. */
static void op_resolve(rd_op *o)
{
    rd_job *j = o->job;
    o->plan.args.divisor = o->p.redop == RD_OP_AVG ? j->size : 1;
    /* The backend that imported the ranks' memory moves it (one for all ranks of an op). */
    o->plan.backend = o->parts[0].arena->backend;
    o->plan.device = o->parts[0].arena->mem.device;
    o->plan.failed = 0;
    if (o->plan.backend->bind != NULL && o->plan.backend->bind(o->plan.device) != 0) {
        o->plan.failed = 1;
        snprintf(o->plan.why, sizeof(o->plan.why), "using the GPU: %s",
                 o->plan.backend->error());
    }
    for (uint32_t k = 0; k < o->nparts; k++) {
        part *pt = &o->parts[k];
        if (o->p.coll == RD_COLL_ALLGATHER) {
            uint64_t per = o->p.count * rd_dtype_size((rd_dtype)o->p.dtype);
            uint64_t own = pt->out_off + per * (j->first_rank + k);
            int overlaps = pt->in_off < pt->out_off + per * j->size && pt->in_off >= pt->out_off;
            if (overlaps && pt->in_off != own && rd_arena_contains(pt->arena, own, per)) {
                if (pt->arena->backend->copy(pt->arena->base + own, pt->arena->base + pt->in_off,
                                             per) != 0 &&
                    !o->plan.failed) {
                    o->plan.failed = 1;
                    snprintf(o->plan.why, sizeof(o->plan.why), "moving the input: %s",
                             pt->arena->backend->error());
                }
                pt->in_off = own;
            }
        }
        assert(pt->arena->backend == o->plan.backend);
        o->plan.in[k] = pt->arena->base + pt->in_off;
        o->plan.out[k] = pt->arena->base + pt->out_off;
    }
}

/* Every rank has submitted: resolve arena pointers and move the data. */
static void op_start(rd_op *o)
{
    rd_job *j = o->job;
    rd_engine *d = j->e;
    rd_local_plan *p = &o->plan;

    op_resolve(o);
    o->started_us = rd_now_us();
    size_t units = rd_local_units(p);
    /* device ops always go to the executor: the loop never waits for a kernel */
    if ((rd_local_bytes(p) < d->cfg->inline_bytes && !p->backend->device_memory) || units == 0 ||
        p->failed) {
        if (!p->failed)
            rd_local_run(p, 0, units);
        op_ran(o);
        return;
    }
    if (rd_exec_submit(d->exec, op_run, on_op_done, o, units, RD_GRAIN) != 0) {
        op_fail(o, RINGD_E_NOMEM, "tensor '%s': out of memory queueing the op", o->name);
        return;
    }
    op_set_state(o, OP_RUNNING);
    j->nrunning++;
}

/* The parameters of a validated Submit that ranks must agree on. */
static rd_op_params params_of(const rd_submit *m)
{
    rd_op_params p = {0};
    p.coll = (int)m->op;
    p.dtype = m->op == RD_COLL_BARRIER ? RD_DT_U8 : (int)m->dtype;
    p.redop = m->op == RD_COLL_ALLREDUCE ? (int)m->redop : RD_OP_SUM;
    p.root = m->op == RD_COLL_BROADCAST ? m->root : 0;
    p.count = m->op == RD_COLL_BARRIER ? 0 : m->count;
    p.prescale = m->op == RD_COLL_ALLREDUCE ? m->prescale : 1.0;
    p.postscale = m->op == RD_COLL_ALLREDUCE ? m->postscale : 1.0;
    return p;
}

/* The arena a Submit's buffers lie in: the host arena, or the client's device arena when its
 * descriptors say MEM_DEVICE (validate checks that it has one). */
static rd_arena *submit_arena(const rd_client *s, const rd_submit *m)
{
    if (m->op != RD_COLL_BARRIER && m->input.present && m->input.kind == RD_MEM_DEVICE)
        return s->device_arena;
    return s->arena;
}

/* Checks a Submit with a valid name on its own: enums, sizes, and that its buffers lie in the
 * arena.
 * Returns RINGD_OK, or RINGD_E_INVALID with err set. */
static ringd_result_t validate(const rd_client *s, const rd_submit *m, char *err,
                               size_t errlen)
{
    const rd_job *j = s->job;
    if ((int)m->op < RD_COLL_ALLREDUCE || (int)m->op > RD_COLL_BARRIER) {
        snprintf(err, errlen, "tensor '%s': unknown op %d", m->name, (int)m->op);
        return RINGD_E_INVALID;
    }
    if (m->op == RD_COLL_BARRIER)
        return RINGD_OK;
    const rd_tensor_ref *refs[2] = {&m->input, &m->output};
    const uint64_t offs[2] = {m->in_offset, m->out_offset};
    for (int k = 0; k < 2; k++) {
        const rd_tensor_ref *t = refs[k];
        const char *which = k == 0 ? "input" : "output";
        if (!t->present)
            continue; /* a library that predates tensor descriptors: the arena offsets */
        if (t->kind == RD_MEM_DEVICE) {
            if (s->device_arena == NULL) {
                snprintf(err, errlen,
                         "tensor '%s': its %s is in device memory, and this session has no "
                         "device arena on node %s: open it with device_arena_size "
                         "(RINGD_DEVICE_ARENA) on a ringd that serves a GPU",
                         m->name, which, j->e->cfg->node);
                return RINGD_E_INVALID;
            }
            if (t->device != (uint32_t)s->device || t->handle != 1 || t->offset != offs[k]) {
                snprintf(err, errlen,
                         "tensor '%s': the %s's descriptor (device %u, handle %" PRIu64
                         ", offset %" PRIu64 ") does not describe offset %" PRIu64
                         " of the session's device arena (device %d, handle 1)",
                         m->name, which, t->device, t->handle, t->offset, offs[k], s->device);
                return RINGD_E_INVALID;
            }
            continue;
        }
        if (t->kind != RD_MEM_ARENA) {
            snprintf(err, errlen, "tensor '%s': its %s is in unknown memory (kind %d)", m->name,
                     which, (int)t->kind);
            return RINGD_E_INVALID;
        }
        if (t->device != 0 || t->handle != 0 || t->offset != offs[k]) {
            snprintf(err, errlen,
                     "tensor '%s': the %s's descriptor (device %u, handle %" PRIu64
                     ", offset %" PRIu64 ") does not describe arena offset %" PRIu64,
                     m->name, which, t->device, t->handle, t->offset, offs[k]);
            return RINGD_E_INVALID;
        }
    }
    if (m->input.present != m->output.present ||
        (m->input.present && m->input.kind != m->output.kind)) {
        snprintf(err, errlen,
                 "tensor '%s': input and output are in different kinds of memory: pass both on "
                 "the device or both in host memory",
                 m->name);
        return RINGD_E_INVALID;
    }
    if ((int)m->dtype < 0 || (int)m->dtype >= RD_DT_COUNT) {
        snprintf(err, errlen, "tensor '%s': unknown dtype %d", m->name, (int)m->dtype);
        return RINGD_E_INVALID;
    }
    if (m->op == RD_COLL_ALLREDUCE) {
        if ((int)m->redop < 0 || (int)m->redop >= RD_OP_COUNT) {
            snprintf(err, errlen, "tensor '%s': unknown reduce op %d", m->name, (int)m->redop);
            return RINGD_E_INVALID;
        }
        if (!isfinite(m->prescale) || !isfinite(m->postscale)) {
            snprintf(err, errlen, "tensor '%s': prescale and postscale must be finite", m->name);
            return RINGD_E_INVALID;
        }
        if (!rd_dtype_is_float((rd_dtype)m->dtype) && (m->prescale != 1.0 || m->postscale != 1.0)) {
            snprintf(err, errlen, "tensor '%s': prescale/postscale need a floating dtype, not %s",
                     m->name, rd_dtype_name((rd_dtype)m->dtype));
            return RINGD_E_INVALID;
        }
    }
    if (m->op == RD_COLL_BROADCAST && m->root >= j->size) {
        snprintf(err, errlen, "tensor '%s': root %u is not a rank of a job of size %u", m->name,
                 m->root, j->size);
        return RINGD_E_INVALID;
    }
    uint64_t esz = rd_dtype_size((rd_dtype)m->dtype);
    const rd_arena *ar = submit_arena(s, m);
    uint64_t size = ar->size, data = ar == s->arena ? RD_CTRL_BYTES : 0;
    if (m->count == 0 || m->count > size / esz) {
        snprintf(err, errlen,
                 "tensor '%s': count %" PRIu64 " of %s does not fit an arena of %" PRIu64 " bytes",
                 m->name, m->count, rd_dtype_name((rd_dtype)m->dtype), size);
        return RINGD_E_INVALID;
    }
    uint64_t in_len = m->count * esz, out_len = in_len;
    if (m->op == RD_COLL_ALLGATHER) {
        if (m->count > size / esz / j->size) {
            snprintf(err, errlen,
                     "tensor '%s': gathering %u x %" PRIu64 " elements does not fit the arena",
                     m->name, j->size, m->count);
            return RINGD_E_INVALID;
        }
        out_len = in_len * j->size;
    }
    if (!rd_arena_contains(ar, m->in_offset, in_len) ||
        !rd_arena_contains(ar, m->out_offset, out_len) || m->in_offset < data ||
        m->out_offset < data) {
        snprintf(err, errlen,
                 "tensor '%s': input [%" PRIu64 ", +%" PRIu64 ") or output [%" PRIu64 ", +%" PRIu64
                 ") lies outside the %sarena's data area [%" PRIu64 ", %" PRIu64 ")",
                 m->name, m->in_offset, in_len, m->out_offset, out_len,
                 ar == s->arena ? "" : "device ", data, size);
        return RINGD_E_INVALID;
    }
    if (m->in_offset % esz != 0 || m->out_offset % esz != 0) {
        snprintf(err, errlen,
                 "tensor '%s': input offset %" PRIu64 " or output offset %" PRIu64
                 " is not a multiple of the %s element size (%" PRIu64 " bytes)",
                 m->name, m->in_offset, m->out_offset, rd_dtype_name((rd_dtype)m->dtype), esz);
        return RINGD_E_INVALID;
    }
    /* Input and output are the same place (in place), or apart. An allgather's input may be
     * any whole slot of its output: the start (sendbuf == recvbuf) or this rank's own slot (MPI's
     * form). Which slot is its own is decided when data moves (op_resolve): ranks may shift in
     * between, and a client may not have heard of it yet. */
    uint64_t a = m->in_offset, b = m->out_offset;
    int apart = a + in_len <= b || b + out_len <= a;
    int in_place = a == b && m->op != RD_COLL_ALLGATHER;
    int in_slot = m->op == RD_COLL_ALLGATHER && a >= b && (a - b) % in_len == 0;
    if (!apart && !in_place && !in_slot) {
        snprintf(err, errlen, "tensor '%s': input and output overlap without being in place",
                 m->name);
        return RINGD_E_INVALID;
    }
    return RINGD_OK;
}

/* A pending op named name with parameters p, first submitted by rank, not yet in the table.
 * Returns NULL when out of memory. */
static rd_op *op_alloc(rd_job *j, const char *name, const rd_op_params *p, uint32_t rank)
{
    rd_op *o = calloc(1, sizeof(*o));
    if (o == NULL)
        return NULL;
    o->job = j;
    o->name = strdup(name);
    o->nparts = j->local_size;
    o->since_ms = rd_now_ms();
    o->first_us = rd_now_us();
    o->parts = calloc(o->nparts, sizeof(part));
    o->plan.in = calloc(o->nparts, sizeof(*o->plan.in));
    o->plan.out = calloc(o->nparts, sizeof(*o->plan.out));
    if (o->name == NULL || o->parts == NULL || o->plan.in == NULL || o->plan.out == NULL) {
        free(o->name);
        free(o->parts);
        free(o->plan.in);
        free(o->plan.out);
        free(o);
        return NULL;
    }
    o->state = OP_PENDING;
    o->seq = j->next_seq++;
    o->first_rank = rank;
    o->p = *p;

    rd_local_plan *lp = &o->plan;
    lp->backend = rd_backend_cpu();
    lp->coll = (rd_coll)o->p.coll;
    lp->dtype = (rd_dtype)o->p.dtype;
    lp->redop = o->p.redop == RD_OP_AVG ? RD_OP_SUM : (rd_redop)o->p.redop;
    lp->args = (rd_reduce_args)RD_REDUCE_ARGS_INIT;
    lp->args.prescale = o->p.prescale;
    lp->args.postscale = o->p.postscale;
    lp->root = o->p.root;
    lp->count = o->p.count;
    lp->n = (int)o->nparts;
    return o;
}

/* Creates a pending op (op_alloc) in the job's table, counted in flight. Returns NULL when out
 * of memory. */
static rd_op *op_new(rd_job *j, const char *name, const rd_op_params *p, uint32_t rank)
{
    rd_op *o = op_alloc(j, name, p, rank);
    if (o == NULL)
        return NULL;
    op_insert(j, o);
    j->e->counters->ops_in_flight++;
    return o;
}

/* Compares a submission with the op's first one. Returns 1 when they agree, else 0 with a
 * message naming both ranks and what differs. */
static int op_matches(const rd_op *o, const rd_submit *m, uint32_t rank, char *msg, size_t len)
{
    rd_op_params q = params_of(m);
    char a[160], b[160], fields[96];
    if (rd_op_params_compare(&o->p, &q, fields, sizeof(fields)))
        return 1;
    rd_op_params_describe(a, sizeof(a), &o->p);
    rd_op_params_describe(b, sizeof(b), &q);
    const rd_job *j = o->job;
    if (j->world == NULL)
        snprintf(
            msg, len,
            "tensor '%s' mismatch (%s): local rank %u submitted %s; local rank %u submitted %s",
            o->name, fields, o->first_rank, a, rank, b);
    else
        snprintf(
            msg, len,
            "tensor '%s' mismatch (%s): rank %u (node %.64s) submitted %s; rank %u (node %.64s) "
            "submitted %s",
            o->name, fields, j->first_rank + o->first_rank, j->e->cfg->node, a, j->first_rank + rank,
            j->e->cfg->node, b);
    return 0;
}

/* Checks that local rank `rank`'s memory can be moved with the other local ranks' of o: one
 * backend for all (host memory everywhere, or device memory everywhere, on any GPUs of the
 * node), and no more ranks than a device reduce takes. Returns 1, or 0 with a message naming the ranks. */
static int op_memory_agrees(const rd_op *o, uint32_t rank, char *msg, size_t len)
{
    const rd_arena *a = o->parts[rank].arena;
    const rd_job *j = o->job;
    if (a->backend->max_sources > 0 && o->nparts > (uint32_t)a->backend->max_sources) {
        snprintf(msg, len,
                 "tensor '%s': %u local ranks on node %s pass device memory; ringd reduces at "
                 "most %d on one device: pass host memory, or run fewer ranks per node",
                 o->name, o->nparts, j->e->cfg->node, a->backend->max_sources);
        return 0;
    }
    for (uint32_t k = 0; k < o->nparts; k++) {
        const rd_arena *b = o->parts[k].arena;
        if (k == rank || !o->parts[k].submitted || b == NULL)
            continue;
        if (b->backend != a->backend) {
            snprintf(msg, len,
                     "tensor '%s' mismatch (memory): local rank %u on node %s passed it in %s, "
                     "local rank %u in %s: every rank of a node passes device memory with a "
                     "device arena (RINGD_DEVICE_ARENA), or every rank host memory",
                     o->name, k, j->e->cfg->node,
                     b->backend->device_memory ? "its device arena" : "host memory",
                     rank, a->backend->device_memory ? "its device arena" : "host memory");
            return 0;
        }
    }
    return 1;
}

/* Bytes of an op's result on each rank. */
static uint64_t result_bytes(const rd_op *o)
{
    uint64_t per = o->p.count * rd_dtype_size((rd_dtype)o->p.dtype);
    return o->p.coll == RD_COLL_ALLGATHER ? per * o->job->size : per;
}

/* Announces o to the other nodes (which may end it at once), or marks it held when the ring
 * cannot take announcements now: it is announced when the next ring is up. */
static void tell(rd_op *o, ringd_result_t status, const char *message, int direct,
                 const uint8_t *data, size_t len)
{
    op_state held = o->state; /* HELD, or UNTOLD for a failure */
    op_set_state(o, held == OP_HELD ? OP_ANNOUNCED : OP_TOLD);
    if (!rd_sched_announce(o->job->sched, o->name, &o->p, status, message, direct, data, len, o))
        op_set_state(o, held); /* held: o is untouched */
}

/* Every local rank submitted an op of a multi-node job: tells the coordinator, with this node's
 * contribution when the op is small enough to travel with the negotiation (--direct-bytes). */
static void announce(rd_op *o)
{
    rd_job *j = o->job;
    uint32_t L = o->nparts;
    if (o->p.coll == RD_COLL_BROADCAST && o->p.root >= j->size) {
        op_fail(o, RINGD_E_MEMBERSHIP,
                "tensor '%s': root %u left job '%s' (now %u ranks, generation %" PRIu64 ")",
                o->name, o->p.root, j->name, j->size, j->generation);
        return;
    }
    const rd_backend *b = o->parts[0].arena->backend;
    /* every node must pass it in the same memory: it crosses on one transport */
    o->p.device = b->device_memory && o->p.coll != RD_COLL_BARRIER;
    if (o->p.coll == RD_COLL_BARRIER || result_bytes(o) > j->e->cfg->direct_bytes ||
        b->device_memory) {
        tell(o, RINGD_OK, NULL, 0, NULL, 0);
        return;
    }
    op_resolve(o);
    uint64_t per = o->p.count * rd_dtype_size((rd_dtype)o->p.dtype), len = 0;
    uint8_t *buf = malloc(per * L > 0 ? per * L : 1);
    if (buf == NULL) {
        tell(o, RINGD_E_NOMEM, "out of memory", 0, NULL, 0);
        return;
    }
    if (o->p.coll == RD_COLL_ALLREDUCE) {
        rd_reduce_args a = RD_REDUCE_ARGS_INIT;
        a.prescale = o->p.prescale;
        o->plan.backend->reduce(o->plan.dtype, o->plan.redop, buf,
                                (const void *const *)o->plan.in, (int)L, o->p.count, &a);
        len = per;
    } else if (o->p.coll == RD_COLL_BROADCAST) {
        if (o->p.root >= j->first_rank && o->p.root < j->first_rank + L) {
            o->plan.backend->copy(buf, o->plan.in[o->p.root - j->first_rank], per);
            len = per;
        }
    } else {
        for (uint32_t k = 0; k < L; k++)
            o->plan.backend->copy(buf + k * per, o->plan.in[k], per);
        len = per * L;
    }
    tell(o, RINGD_OK, NULL, 1, buf, len);
    free(buf);
}

/* Local rank `rank` could not submit its part of the op named name (why: from this daemon or
 * the client's library): the op fails with rc on every rank that submits it. Ranks here that
 * already have hear it now, ranks yet to submit it when they do (a tombstone), and the other
 * nodes as soon as the announcement reaches them. s, the refused session, is answered too. */
static void op_refuse(rd_job *j, rd_client *s, uint32_t rank, uint64_t request_id,
                      const char *name, const rd_op_params *params, ringd_result_t rc,
                      const char *why)
{
    char msg[768];
    int dup;
    /* The refused submission is this rank's part of the next op of that name (an earlier one
     * it is in goes on): that op fails for every rank, so none waits for this one. */
    rd_op *o = op_find(j, name, rank, &dup);
    rd_log(RD_LOG_INFO, "job", "job '%s' local rank %u: %s", j->name, rank, why);
    if (o != NULL && op_failed(o->state)) { /* failed already: this rank hears its own why */
        tombstone_visit(o, s, rank, request_id, rc, why);
        return;
    }
    if (o == NULL) {
        rd_op_params p = rd_op_params_announceable(*params);
        o = op_new(j, name, &p, rank);
        if (o == NULL) {
            answer(j, s, request_id, RINGD_E_NOMEM, "out of memory", NULL);
            return;
        }
    }
    part *pt = &o->parts[rank];
    pt->s = s;
    pt->submitted = 1;
    pt->request_id = request_id;
    o->nsubmitted++;
    snprintf(msg, sizeof(msg), "rank %u (node %.64s) could not run it: %.600s",
             j->first_rank + rank, j->e->cfg->node, why);
    op_tombstone(o, rc, msg);
    if (j->world != NULL && rd_world_up(j->world))
        tell(o, rc, msg, 0, NULL, 0);
}

void rd_job_submit(rd_client *s, const rd_submit *m)
{
    rd_job *j = s->job;
    uint32_t rank = s->local_rank;
    char err[768];

    if (!rd_name_valid(m->name)) { /* nothing to match it with: only this rank can hear of it */
        snprintf(err, sizeof(err), "tensor names are 1..%d printable ASCII bytes", RD_NAME_MAX);
        answer(j, s, m->request_id, RINGD_E_INVALID, err, NULL);
        return;
    }
    if (j->draining) {
        /* Not told to the other nodes: they carry the op over to a ring without this node. */
        snprintf(err, sizeof(err),
                 "tensor '%s': node %s drained: job '%s' goes on without it; this session "
                 "runs no more collectives (close it, and open a new one to join again)",
                 m->name, j->e->cfg->node, j->name);
        answer(j, s, m->request_id, RINGD_E_CLOSED, err, NULL);
        return;
    }
    if (m->generation != 0 && m->generation < j->sync_generation) {
        /* Before any check that depends on the job's size, the library's too: they judged by
         * the wrong one. Only this rank hears it: every rank re-synchronises, and the op it
         * belongs to is of an earlier generation (a tombstone would fail the next one). */
        snprintf(err, sizeof(err),
                 "tensor '%s': %s (this rank is now %u of %u, generation %" PRIu64
                 "): restore the last committed state and broadcast it from rank 0",
                 m->name, j->sync_why, j->first_rank + rank, j->size, j->generation);
        answer(j, s, m->request_id, RINGD_E_MEMBERSHIP, err, NULL);
        return;
    }
    ringd_result_t rc;
    if (m->refused != 0) {
        rc = m->refused < RINGD_RESULT_COUNT ? (ringd_result_t)m->refused : RINGD_E_INVALID;
        snprintf(err, sizeof(err), "%.700s",
                 m->refusal != NULL && m->refusal[0] ? m->refusal : "refused by the library");
    } else {
        rc = validate(s, m, err, sizeof(err));
    }
    if (rc == RINGD_OK && s->ops_in_flight > (uint64_t)j->e->cfg->max_pending) {
        snprintf(err, sizeof(err),
                 "tensor '%s': local rank %u already has %" PRIu64
                 " collectives outstanding (--max-pending)",
                 m->name, rank, s->ops_in_flight - 1);
        rc = RINGD_E_INVALID;
    }
    if (rc != RINGD_OK) {
        rd_op_params p = params_of(m);
        op_refuse(j, s, rank, m->request_id, m->name, &p, rc, err);
        return;
    }

    int dup;
    rd_op *o = op_find(j, m->name, rank, &dup);
    if (dup) { /* refused here, and failed for the other ranks too (op_refuse) */
        snprintf(err, sizeof(err),
                 "tensor '%s' is already submitted by local rank %u and not yet complete: one "
                 "collective of a name at a time per rank",
                 m->name, rank);
        rd_op_params p = params_of(m);
        op_refuse(j, s, rank, m->request_id, m->name, &p, RINGD_E_INVALID, err);
        return;
    }
    if (o != NULL && op_failed(o->state)) {
        tombstone_visit(o, s, rank, m->request_id, o->status, o->message);
        return;
    }
    if (o == NULL) {
        rd_op_params p = params_of(m);
        o = op_new(j, m->name, &p, rank);
        if (o == NULL) {
            answer(j, s, m->request_id, RINGD_E_NOMEM, "out of memory", NULL);
            return;
        }
    }

    part *pt = &o->parts[rank];
    pt->s = s;
    pt->submitted = 1;
    pt->request_id = m->request_id;
    pt->in_off =
        m->op == RD_COLL_BROADCAST && rank != o->p.root ? m->out_offset : m->in_offset;
    pt->out_off = m->out_offset;
    pt->arena = submit_arena(s, m);
    rd_arena_ref(pt->arena);
    pt->submit_us = rd_now_us();
    o->nsubmitted++;

    if (!op_matches(o, m, rank, err, sizeof(err)) || !op_memory_agrees(o, rank, err, sizeof(err))) {
        /* A tombstone first; then the other nodes learn of it (which may end it at once). */
        op_fail(o, RINGD_E_MISMATCH, "%s", err);
        if (j->world != NULL && rd_world_up(j->world))
            tell(o, RINGD_E_MISMATCH, err, 0, NULL, 0);
        return;
    }
    if (o->nsubmitted < o->nparts || o->state == OP_DOOMED) /* doomed: answered later */
        return;
    o->ready_us = pt->submit_us;
    if (j->world != NULL) {
        op_set_state(o, OP_HELD);
        if (rd_world_up(j->world))
            announce(o);
        return;
    }
    op_start(o);
}

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

/* Ends every op that is not moving data with why. The job moved to a generation its clients
 * must re-synchronise with: tombstones go too, as the ops they stand for are of the last one (a
 * rank that submits one late is refused for its old generation). */
static void fail_unstarted(rd_job *j, const char *why)
{
    static const op_state live[] = {OP_PENDING, OP_HELD, OP_ANNOUNCED, OP_RING_READY, OP_DOOMED};
    static const op_state failed[] = {OP_UNTOLD, OP_TOLD, OP_TOMBSTONE};
    for (size_t k = 0; k < sizeof(live) / sizeof(live[0]); k++)
        while (j->first[live[k]] != NULL)
            op_fail(j->first[live[k]], RINGD_E_MEMBERSHIP, "tensor '%s': %s",
                    j->first[live[k]]->name, why);
    for (size_t k = 0; k < sizeof(failed) / sizeof(failed[0]); k++) {
        while (j->first[failed[k]] != NULL) {
            rd_op *o = j->first[failed[k]];
            op_unlink(j, o);
            op_free(o);
        }
    }
}

/* The ring failed under o: its ranks hear why once the job is back (their answer then carries
 * the new generation, rank and size), or when the wait for it ends. */
static void op_doom(rd_op *o, const char *why)
{
    char msg[768];
    snprintf(msg, sizeof(msg), "tensor '%s': %s", o->name, why);
    free(o->message);
    o->message = strdup(msg);
    op_set_state(o, OP_DOOMED);
    o->since_ms = rd_now_ms();
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

/* A running job's local membership changed (a client joined or left): every op not moving data
 * fails, and the job goes on at a new generation with the clients it has: at once on one node,
 * through the rendezvous across nodes. */
static void job_reshape(rd_job *j, const char *why)
{
    /* Mismatch tombstones index the old local ranks: the ranks they wait for are renumbered. */
    static const op_state failed[] = {OP_UNTOLD, OP_TOLD, OP_TOMBSTONE};
    for (size_t k = 0; k < sizeof(failed) / sizeof(failed[0]); k++) {
        while (j->first[failed[k]] != NULL) {
            rd_op *o = j->first[failed[k]];
            op_unlink(j, o);
            op_free(o);
        }
    }
    slots_compact(j);
    j->local_size = j->nclients;
    if (j->world != NULL) {
        j->renumbered = 1;
        if (j->nclients > 0)
            rd_world_resize(j->world, j->local_size, why);
        return;
    }
    j->generation++;
    j->size = j->local_size;
    j->sync_generation = j->generation;
    snprintf(j->sync_why, sizeof(j->sync_why), "%s", why);
    fail_unstarted(j, why);
    if (j->nclients > 0)
        job_changed(j, j->generation, j->size, 1, why);
    job_welcome(j);
    rd_log(RD_LOG_INFO, "job", "job '%s': %s; generation %" PRIu64 ", %u ranks", j->name, why,
           j->generation, j->size);
}

/* How often the job looks for stalls and ops waiting too long for a ring: a quarter of the
 * shortest limit, between 10 ms and 1 s. */
static int64_t tick_ms(const rd_job *j)
{
    const rd_config *c = j->e->cfg;
    int64_t t = c->stall_warn;
    if (c->stall_abort > 0 && c->stall_abort < t)
        t = c->stall_abort;
    if (j->wait_ms < t)
        t = j->wait_ms;
    t /= 4;
    return t < 10 ? 10 : t > 1000 ? 1000 : t;
}

/* Who has not submitted o yet: this node's ranks that have not, then the nodes that have not
 * announced it ("rank 1 (node n0); ranks 4-5 (node n2)"). */
static void op_missing(const rd_op *o, char *buf, size_t len)
{
    const rd_job *j = o->job;
    char local[256] = "", remote[256] = "";
    size_t n = 0;
    for (uint32_t k = 0; o->state == OP_PENDING && k < o->nparts && n + 48 < sizeof(local); k++)
        if (!o->parts[k].submitted)
            n += (size_t)snprintf(local + n, sizeof(local) - n, "%s%u", n ? ", " : "rank ",
                                  j->first_rank + k);
    if (n > 0)
        snprintf(local + n, sizeof(local) - n, " (node %s)", j->e->cfg->node);
    if (j->world != NULL)
        rd_sched_missing(j->sched, o->name,
                         o->state == OP_HELD || o->state == OP_ANNOUNCED ||
                                 o->state == OP_RING_READY
                             ? o
                             : NULL,
                         remote, sizeof(remote));
    snprintf(buf, len, "%s%s%s", local, local[0] && remote[0] ? "; " : "", remote);
    if (buf[0] == '\0')
        snprintf(buf, len, "ranks this node has not heard from");
}

/* An op that waits for some ranks: warned about after --stall-warn, failed with RINGD_E_STALLED
 * after --stall-abort. Every node must end it alike, so it ends only through the negotiation: a
 * node whose ranks have not all submitted it (PENDING) announces it failed, which every node sees;
 * a node that has announced it never fails it on its own clock, but asks the nodes that have not
 * to announce it failed (rd_sched_stalled), again every --peer-timeout; past --stall-abort plus
 * three --peer-timeout, nobody having answered, the ring re-forms (rd_world_reform). */
static void op_inspect(rd_op *o, int64_t now)
{
    rd_job *j = o->job;
    const rd_config *c = j->e->cfg;
    int64_t age = now - o->since_ms;
    if (age < c->stall_warn)
        return;
    /* Negotiated for the ring: the coordinator orders it within a turn. Past --stall-abort plus
     * --peer-timeout, nothing will order it. */
    if (o->state == OP_RING_READY) {
        if (c->stall_abort > 0 && age >= c->stall_abort + c->peer_timeout &&
            !rd_sched_held(j->sched)) /* held: the device transport's agreement, bounded */
            op_fail(o, RINGD_E_STALLED,
                    "tensor '%s' stalled: the ring's coordinator never ordered it (--stall-abort)",
                    o->name);
        return;
    }
    char missing[512];
    op_missing(o, missing, sizeof(missing));
    if (!o->warned) {
        o->warned = 1;
        if (j->m != NULL)
            j->m->stall_warnings++;
        rd_log(RD_LOG_WARN, "stall",
               "job '%s': tensor '%s' has waited %" PRId64 " ms for %s (--stall-abort %" PRId64
               " ms)",
               j->name, o->name, age, missing, c->stall_abort);
    }
    if (c->stall_abort <= 0 || age < c->stall_abort)
        return;
    char msg[768];
    snprintf(msg, sizeof(msg), "tensor '%s' stalled: %s never submitted it within %" PRId64 " ms",
             o->name, missing, c->stall_abort);
    if (o->state == OP_PENDING) {
        rd_log(RD_LOG_WARN, "job", "job '%s': %s", j->name, msg);
        op_tombstone(o, RINGD_E_STALLED, msg);
        if (j->world != NULL)
            tell(o, RINGD_E_STALLED, msg, 0, NULL, 0);
        return;
    }
    if (o->state != OP_ANNOUNCED)
        return;
    /* Asked at --stall-abort, again every --peer-timeout. A node that does not answer twice is
     * in no state to: past that only a new ring ends the op, alike everywhere. */
    if (age >= c->stall_abort + 3 * c->peer_timeout) {
        rd_world_reform(j->world, msg);
        return;
    }
    if (o->asked_ms == 0 || now - o->asked_ms >= c->peer_timeout) {
        o->asked_ms = now;
        rd_sched_stalled(j->sched, o->name, o, msg);
    }
}

/* Ops that have waited --open-timeout for a ring that is not there end: doomed ones with their
 * membership error, held ones with a timeout saying what the job lacks. */
static void op_wait_over(rd_op *o)
{
    rd_job *j = o->job;
    char detail[384] = "";
    if (j->world != NULL)
        rd_world_detail(j->world, detail, sizeof(detail));
    if (o->state == OP_DOOMED) {
        op_fail(o, RINGD_E_MEMBERSHIP, "%s (the ring has not re-formed within %" PRId64 " ms: %s)",
                o->message, j->wait_ms, detail);
        return;
    }
    op_fail(o, RINGD_E_TIMEOUT,
            "tensor '%s': job '%s' has had no complete ring for %" PRId64 " ms: %s", o->name,
            j->name, j->wait_ms, detail);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    rd_job *j = arg;
    (void)fd;
    (void)what;
    const rd_config *c = j->e->cfg;
    int64_t now = rd_now_ms();
    int up = j->world == NULL || rd_world_up(j->world);
    rd_op *o, *next;
    /* A tombstone some rank never came to: gone after --stall-abort. */
    for (o = j->first[OP_TOMBSTONE]; o != NULL; o = next) {
        next = o->snext;
        if (c->stall_abort > 0 && now - o->since_ms >= c->stall_abort) {
            op_unlink(j, o);
            op_free(o);
        }
    }
    /* Ops waiting for a ring: they end once the job's wait is over. */
    for (o = j->first[OP_DOOMED]; o != NULL; o = next) {
        next = o->snext;
        if (now - o->since_ms >= j->wait_ms)
            op_wait_over(o);
    }
    if (!up) {
        for (o = j->first[OP_HELD]; o != NULL; o = next) {
            next = o->snext;
            if (now - o->since_ms >= j->wait_ms)
                op_wait_over(o);
        }
        return;
    }
    /* The ring is up: ops that wait for ranks are inspected for stalls. */
    static const op_state waiting[] = {OP_PENDING, OP_HELD, OP_ANNOUNCED, OP_RING_READY};
    for (size_t k = 0; k < sizeof(waiting) / sizeof(waiting[0]); k++) {
        for (o = j->first[waiting[k]]; o != NULL; o = next) {
            next = o->snext;
            op_inspect(o, now);
        }
    }
}

int rd_job_drain(rd_job *j, int force)
{
    if (!j->draining) {
        j->draining = 1;
        /* Ops some local ranks have not submitted can no longer complete here: they fail, and
         * the other nodes, never having heard of them, carry them over without this node. */
        static const op_state unannounced[] = {OP_PENDING, OP_HELD, OP_DOOMED};
        for (size_t k = 0; k < sizeof(unannounced) / sizeof(unannounced[0]); k++)
            while (j->first[unannounced[k]] != NULL)
                op_fail(j->first[unannounced[k]], RINGD_E_CLOSED,
                        "tensor '%s': node %s is draining; job '%s' goes on without it",
                        j->first[unannounced[k]]->name, j->e->cfg->node, j->name);
    }
    if (force) {
        char why[512];
        snprintf(why, sizeof(why), "node %s drained before the op could end (--drain-timeout)",
                 j->e->cfg->node);
        fail_unstarted(j, why);
        if (j->world != NULL)
            rd_world_unregister(j->world);
        if (!j->left) {
            j->left = 1;
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
    if (!j->left) {
        j->left = 1;
        event_active(j->ev_free, 0, 0); /* a job without clients goes, off the caller's loop */
    }
    return 1;
}

rd_job *rd_job_next(const rd_job *j)
{
    return j->next;
}

static const rd_world_events world_events;
static const rd_sched_events sched_events;
static const rd_devcomm_events devcomm_events;

ringd_result_t rd_job_join(rd_client *s, const rd_hello *h, char *err, size_t errlen)
{
    rd_engine *d = s->engine;
    if (h->protocol != RD_PROTOCOL_VERSION) {
        snprintf(err, errlen, "protocol %u is not supported (this daemon speaks %d)", h->protocol,
                 RD_PROTOCOL_VERSION);
        return RINGD_E_PROTOCOL;
    }
    if (d->draining) {
        snprintf(err, errlen, "node %s is draining: it takes no new clients", d->cfg->node);
        return RINGD_E_REFUSED;
    }
    if (!rd_name_valid(h->job)) {
        snprintf(err, errlen, "job names are 1..%d printable ASCII bytes", RD_NAME_MAX);
        return RINGD_E_INVALID;
    }
    if (h->local_size < 1 || h->local_size > RD_LOCAL_SIZE_MAX) {
        snprintf(err, errlen, "job '%s': local_size %u is outside 1..%d", h->job, h->local_size,
                 RD_LOCAL_SIZE_MAX);
        return RINGD_E_INVALID;
    }
    if (h->world_size < h->local_size || (h->world_size > h->local_size && d->net == NULL)) {
        snprintf(err, errlen,
                 "job '%s': world_size %u differs from local_size %u, but this daemon runs "
                 "without --redis and serves this node alone",
                 h->job, h->world_size, h->local_size);
        return RINGD_E_REFUSED;
    }
    uint32_t min_size = h->min_size ? h->min_size : 1;
    if (min_size > h->world_size) {
        snprintf(err, errlen, "job '%s': min_size %u is larger than world_size %u", h->job,
                 min_size, h->world_size);
        return RINGD_E_INVALID;
    }
    uint64_t want = h->arena_size ? h->arena_size : d->cfg->arena_size;
    if (want < RD_ARENA_MIN || want > d->cfg->arena_max) {
        snprintf(err, errlen, "arena of %" PRIu64 " bytes is outside %u..%" PRIu64 " (--arena-max)",
                 want, RD_ARENA_MIN, d->cfg->arena_max);
        return RINGD_E_INVALID;
    }

    rd_job *j = d->jobs;
    while (j != NULL && strcmp(j->name, h->job) != 0)
        j = j->next;
    if (j != NULL && (j->world_size != h->world_size || j->local_cap != h->local_size ||
                      j->min_size != min_size)) {
        snprintf(err, errlen,
                 "job '%s' runs with world_size %u local_size %u min_size %u; this client asked "
                 "for %u, %u and %u",
                 h->job, j->world_size, j->local_cap, j->min_size, h->world_size, h->local_size,
                 min_size);
        return RINGD_E_REFUSED;
    }
    if (j != NULL && j->uid != s->uid) {
        snprintf(err, errlen, "job '%s' belongs to uid %u; this client runs as uid %u", h->job,
                 (unsigned)j->uid, (unsigned)s->uid);
        return RINGD_E_REFUSED;
    }
    if (j != NULL && (j->nclients == j->local_cap || j->draining)) {
        char pids[256] = "";
        for (uint32_t k = 0; k < j->local_cap && strlen(pids) < sizeof(pids) - 16; k++)
            if (j->slots[k] != NULL)
                snprintf(pids + strlen(pids), sizeof(pids) - strlen(pids), "%s%d",
                         pids[0] ? ", " : "", (int)j->slots[k]->pid);
        snprintf(err, errlen, "job '%s' already has its %u local clients (pids %s)", h->job,
                 j->local_cap, pids);
        return RINGD_E_REFUSED;
    }
    if (h->local_rank >= (int64_t)h->local_size) {
        snprintf(err, errlen, "job '%s': local rank %" PRId64 " asked for is not below local_size %u",
                 h->job, h->local_rank, h->local_size);
        return RINGD_E_INVALID;
    }
    for (uint32_t k = 0; j != NULL && h->local_rank >= 0 && k < j->local_cap; k++) {
        if (j->slots[k] != NULL && j->slots[k]->asked_rank == h->local_rank) {
            snprintf(err, errlen,
                     "job '%s': local rank %" PRId64 " on node %s is taken by pid %d, which asked "
                     "for it first: give each process of the node its own local rank "
                     "(RINGD_LOCAL_RANK, LOCAL_RANK)",
                     h->job, h->local_rank, d->cfg->node, (int)j->slots[k]->pid);
            return RINGD_E_REFUSED;
        }
    }

    s->arena = rd_arena_new(want, err, errlen);
    if (s->arena == NULL)
        return RINGD_E_NOMEM;
    if (j == NULL) {
        j = calloc(1, sizeof(*j));
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
            return RINGD_E_NOMEM;
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
        j->ev_tick = event_new(d->base, -1, EV_PERSIST, on_tick, j);
        int64_t every = tick_ms(j);
        struct timeval tv = {every / 1000, (every % 1000) * 1000};
        if (j->ev_free == NULL || j->ev_settle == NULL || j->ev_tick == NULL || event_add(j->ev_tick, &tv) != 0 ||
            (j->world_size > j->local_size && ((j->world = rd_world_new(d->net, j->name, j->world_size, j->min_size,
                                               j->local_size, &world_events, j)) == NULL ||
             (j->sched = rd_sched_new(d->base, d->cfg, j->world, j->name, &sched_events, j)) ==
                 NULL ||
             (j->devcomm = rd_devcomm_new(d->base, d->cfg, &d->gpus, j->world, j->name,
                                          &devcomm_events, j)) == NULL))) {
            job_free(j); /* not linked yet, no ops: only what was made */
            snprintf(err, errlen, "out of memory creating job '%s'", h->job);
            return RINGD_E_NOMEM;
        }
        j->next = d->jobs;
        d->jobs = j;
        j->m = d->metrics != NULL ? rd_metrics_acquire(d->metrics, j->name) : NULL;
        for (struct recording *r = d->recordings; r != NULL; r = r->next)
            if (strcmp(r->job, j->name) == 0)
                j->tl = r->tl;
        rd_log(RD_LOG_INFO, "job", "job '%s': created, %u local clients expected", j->name,
               j->local_size);
    }
    uint32_t k = 0;
    while (j->slots[k] != NULL) /* a free slot: nclients < local_cap */
        k++;
    j->slots[k] = s;
    j->nclients++;
    j->ntraced += s->timeline != 0;
    s->job = j;
    s->asked_rank = h->local_rank;
    /* A running job renumbers its clients as it reshapes; one that forms holds every slot. */
    slots_arrange(j, j->started ? j->nclients : j->local_cap);
    rd_log(RD_LOG_INFO, "job", "job '%s': pid %d joined as local rank %u%s (%u of %u)", j->name,
           (int)s->pid, s->local_rank, s->asked_rank >= 0 ? ", which it asked for" : "",
           j->nclients, j->local_cap);
    if (j->started) {
        char why[640];
        snprintf(why, sizeof(why), "pid %d joined job '%s' on node %s", (int)s->pid, j->name,
                 d->cfg->node);
        job_reshape(j, why);
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
        j->started = 1;
        job_welcome(j);
    }
    return RINGD_OK;
}

void rd_job_leave(rd_client *s)
{
    rd_job *j = s->job;
    uint32_t rank = s->local_rank;
    char why[640];

    if (j->started)
        snprintf(why, sizeof(why), "rank %u (pid %d, node %s) left job '%s'", j->first_rank + rank,
                 (int)s->pid, j->e->cfg->node, j->name);
    else
        snprintf(why, sizeof(why), "local rank %u (pid %d) left job '%s'", rank, (int)s->pid,
                 j->name);
    j->slots[rank] = NULL;
    j->nclients--;
    j->ntraced -= s->timeline != 0 && j->ntraced > 0;
    s->job = NULL;
    rd_log(RD_LOG_INFO, "job", "%s; %u local clients remain", why, j->nclients);

    for (size_t i = 0; i < j->nbuckets; i++)
        for (rd_op *o = j->buckets[i]; o != NULL; o = o->next)
            for (uint32_t k = 0; k < o->nparts; k++)
                if (o->parts[k].s == s)
                    o->parts[k].s = NULL;
    if (j->started && !j->draining && j->nclients > 0) {
        job_reshape(j, why);
        job_maybe_free(j);
        return;
    }
    if (j->draining) { /* what it submitted still ends; the drain leaves the ring */
        slots_compact(j);
        job_maybe_free(j);
        return;
    }
    slots_compact(j);
    if (!j->started)
        j->local_size = j->local_cap;
    fail_unstarted(j, why);
    if (j->world != NULL) /* fails what was negotiating; ring completions free the job later */
        rd_world_unregister(j->world);
    job_maybe_free(j);
}

/* 1 when o waits for ranks past --stall-warn. */
static int stalled(const rd_op *o)
{
    return o->warned && !op_failed(o->state) && o->state != OP_RUNNING;
}

/* The job's ops that have waited past --stall-warn, into js->stalls (at most 64). Returns 0, or
 * -1 when out of memory. */
static int describe_stalls(const rd_job *j, rd_job_status *js)
{
    int64_t now = rd_now_ms();
    size_t n = 0;
    for (size_t b = 0; b < j->nbuckets; b++)
        for (const rd_op *o = j->buckets[b]; o != NULL; o = o->next)
            n += stalled(o);
    if (n == 0)
        return 0;
    n = n < 64 ? n : 64;
    if ((js->stalls = calloc(n, sizeof(*js->stalls))) == NULL)
        return -1;
    for (size_t b = 0; b < j->nbuckets; b++) {
        for (const rd_op *o = j->buckets[b]; o != NULL && js->nstalls < n; o = o->next) {
            if (!stalled(o))
                continue;
            rd_stall_status *si = &js->stalls[js->nstalls++];
            op_missing(o, si->missing, sizeof(si->missing));
            si->name = o->name;
            si->age_ms = (uint64_t)(now - o->since_ms);
        }
    }
    return 0;
}

/* Describes j into js (zeroed); what it allocates belongs to js, also when it fails. Returns 0,
 * or -1 when out of memory. */
static int describe_job(const rd_job *j, rd_job_status *js)
{
    js->name = j->name;
    js->world_size = j->world_size;
    js->local_size = j->local_size;
    js->min_size = j->min_size;
    js->size = j->size;
    js->clients = j->nclients;
    js->generation = j->generation;
    js->ops_completed = j->ops_completed;
    js->ops_failed = j->ops_failed;
    if (describe_stalls(j, js) != 0)
        return -1;
    if (j->world != NULL) {
        if ((js->ring = calloc(1, sizeof(*js->ring))) == NULL ||
            rd_world_describe(j->world, js->ring) != 0)
            return -1;
        rd_devcomm_describe(j->devcomm, &js->ring->gpu_transport, &js->ring->gpu_transport_why);
        rd_sched_describe(j->sched, js->ring);
    }
    size_t pending = 0;
    for (int st = 0; st < OP_NSTATES; st++)
        pending += op_failed((op_state)st) ? 0 : j->count[st];
    js->ops_in_flight = pending;
    size_t show = pending < 64 ? pending : 64;
    if (show > 0 && (js->pending = calloc(show, sizeof(*js->pending))) == NULL)
        return -1;
    for (const rd_op *o = j->first[OP_PENDING]; o != NULL && js->npending < show; o = o->snext)
        js->pending[js->npending++] = o->name;
    return 0;
}

rd_status rd_job_describe(rd_engine *d, rd_daemon_status *st)
{
    size_t n = 0;
    for (rd_job *j = d->jobs; j != NULL; j = j->next)
        n++;
    if (n == 0)
        return RINGD_OK;
    if ((st->jobs = calloc(n, sizeof(*st->jobs))) == NULL)
        return RINGD_E_NOMEM;
    st->njobs = n;
    size_t i = 0;
    for (rd_job *j = d->jobs; j != NULL; j = j->next, i++)
        if (describe_job(j, &st->jobs[i]) != 0)
            return RINGD_E_NOMEM;
    return RINGD_OK;
}

rd_engine *rd_engine_new(struct event_base *base, const rd_config *cfg, rd_counters *counters,
                         rd_metrics *metrics, rd_exec *exec, rd_net *net,
                         const rd_client_events *ev)
{
    rd_engine *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return NULL;
    e->base = base;
    e->cfg = cfg;
    e->counters = counters;
    e->metrics = metrics;
    e->exec = exec;
    e->net = net;
    e->ev = *ev;
    return e;
}

void rd_engine_free(rd_engine *e)
{
    if (e == NULL)
        return;
    while (e->jobs != NULL)
        job_free(e->jobs);
    while (e->recordings != NULL) {
        struct recording *r = e->recordings;
        e->recordings = r->next;
        free(r->job);
        free(r);
    }
    free(e);
}

rd_status rd_engine_record(rd_engine *e, const char *job, rd_timeline *tl)
{
    struct recording **pp = &e->recordings;
    while (*pp != NULL && strcmp((*pp)->job, job) != 0)
        pp = &(*pp)->next;
    if (tl == NULL) { /* stop */
        struct recording *r = *pp;
        if (r == NULL)
            return RINGD_OK;
        *pp = r->next;
        free(r->job);
        free(r);
    } else {
        if (*pp != NULL)
            return RINGD_E_REFUSED;
        struct recording *r = calloc(1, sizeof(*r));
        if (r == NULL || (r->job = strdup(job)) == NULL) {
            free(r);
            return RINGD_E_NOMEM;
        }
        r->tl = tl;
        *pp = r;
    }
    for (rd_job *j = e->jobs; j != NULL; j = j->next)
        if (strcmp(j->name, job) == 0)
            j->tl = tl;
    return RINGD_OK;
}

void rd_engine_set_draining(rd_engine *e)
{
    e->draining = 1;
}

int rd_engine_draining(const rd_engine *e)
{
    return e->draining;
}

rd_job *rd_engine_jobs(const rd_engine *e)
{
    return e->jobs;
}

int rd_job_client_view(const rd_job *j, uint32_t local_rank, rd_client_view *v)
{
    if (!j->started || j->renumbered) /* a new local rank with the old ranks would not add up */
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
    job_changed(j, generation, size, sync, why);
    j->first_rank = first_rank;
    j->generation = generation;
    j->size = size;
    j->disrupted = 0;
    j->renumbered = 0;
    j->lost[0] = '\0';
    if (sync || !j->started) {
        j->sync_generation = generation;
        snprintf(j->sync_why, sizeof(j->sync_why), "%s", why);
        fail_unstarted(j, why);
    }
    /* Ops the last ring failed under are never carried over: their data may be half reduced. */
    while (j->first[OP_DOOMED] != NULL) {
        rd_op *o = j->first[OP_DOOMED];
        op_fail(o, RINGD_E_MEMBERSHIP, "%s", o->message ? o->message : why);
    }
    job_welcome(j);
    j->started = 1;
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
        if (ops[k]->state == OP_HELD)
            announce(ops[k]);
        else
            tell(ops[k], ops[k]->status, ops[k]->message, 0, NULL, 0);
    }
    free(ops);
    /* Failures other nodes announced while this node still connected end its ops now. */
    rd_sched_ring_up(j->sched);
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
        op_set_state(j->first[OP_TOLD], OP_UNTOLD);
    if (!carry) {
        j->disrupted = 1;
        static const op_state live[] = {OP_PENDING, OP_HELD, OP_ANNOUNCED, OP_RING_READY};
        for (size_t k = 0; k < sizeof(live) / sizeof(live[0]); k++)
            while (j->first[live[k]] != NULL)
                op_doom(j->first[live[k]], why);
        return;
    }
    /* A graceful change: what was under negotiation is announced again on the next ring. */
    for (o = j->first[OP_ANNOUNCED]; o != NULL; o = next) {
        next = o->snext;
        op_set_state(o, OP_HELD);
    }
    for (o = j->first[OP_RING_READY]; o != NULL; o = next) {
        next = o->snext;
        op_set_state(o, OP_HELD);
    }
}

static void on_disrupted(void *arg)
{
    rd_job *j = arg;
    j->disrupted = 1;
}

static void on_ring_lost(void *arg, const char *why)
{
    rd_job *j = arg;
    snprintf(j->lost, sizeof(j->lost), "%s", why);
    fail_unstarted(j, why);
}

/* A ring task and the ops it carries (several when fused). */
typedef struct {
    rd_xfer_task t;
    struct devpass *dp; /* a device op staged through host memory: its pass goes on */
    size_t nops;
    rd_op *ops[];
} ring_task;

/* A device op crossing nodes, in three steps:
 *   gather (executor): local ranks reduced on the GPU (prescaled) into local rank 0's output,
 *     or the root's input / every rank's part put there; under TCP each rank's input is
 *     copied to host memory instead;
 *   cross (loop): that buffer on NCCL, one rank per node (the hierarchy: local ranks are
 *     reduced on the node first); or the host copies on the TCP ring, as host ops go;
 *   scatter (executor): the result finished (divisor, postscale) and copied to every local
 *     rank's output, from the device or from host memory.
 * The generation's transport was settled before the coordinator ordered the op. */
typedef enum { DP_GATHER, DP_SCATTER } dev_step;

typedef struct devpass {
    rd_op *o;
    int nccl;
    dev_step step;
    uint64_t epoch;       /* the job's ring epoch when it started */
    int queued;           /* in the job's crossing queue */
    int gathered;         /* its gather ran (failed or not): it may cross */
    uint8_t *host;        /* TCP: the staging block, each rank's input then its output */
    const uint8_t **hin;  /* TCP: rank k's input in host memory */
    uint8_t **hout;       /* TCP: rank k's output in host memory */
    int failed;
    char why[256];
} devpass;

/* What crosses nodes, in the coordinator's order: a device pass (once gathered) or host ops'
 * ring task. Every node hands them to NCCL and the TCP ring in this order, so the n-th
 * collective of a generation is the same tensor everywhere. */
typedef struct crossing {
    devpass *dp;
    ring_task *rt;
    struct crossing *next;
} crossing;

static void dev_fail(devpass *dp, const char *what)
{
    if (dp->failed)
        return;
    dp->failed = 1;
    snprintf(dp->why, sizeof(dp->why), "%s: %s", what, dp->o->plan.backend->error());
}

/* One step of the pass on an executor thread: the GPU's work waits here, off the loop. */
static void dev_run(void *ctx, size_t begin, size_t end)
{
    devpass *dp = ctx;
    rd_op *o = dp->o;
    const rd_local_plan *p = &o->plan;
    const rd_backend *b = p->backend;
    uint32_t L = o->nparts, first = o->job->first_rank;
    uint64_t per = o->p.count * rd_dtype_size(p->dtype), out_bytes = result_bytes(o);
    (void)begin;
    (void)end;
    if (b->bind != NULL && b->bind(p->device) != 0) {
        dev_fail(dp, "using the GPU");
        return;
    }
    if (dp->step == DP_GATHER && !dp->nccl) {
        for (uint32_t k = 0; k < L && !dp->failed; k++)
            if (b->copy((void *)dp->hin[k], p->in[k], per) != 0)
                dev_fail(dp, "copying an input to host memory");
    } else if (dp->step == DP_GATHER && o->p.coll == RD_COLL_ALLREDUCE) {
        rd_reduce_args a = RD_REDUCE_ARGS_INIT;
        a.prescale = p->args.prescale;
        if (b->reduce(p->dtype, p->redop, p->out[0], (const void *const *)p->in, (int)L,
                      o->p.count, &a) != 0)
            dev_fail(dp, "reducing the local ranks");
    } else if (dp->step == DP_GATHER && o->p.coll == RD_COLL_BROADCAST) {
        if (o->p.root >= first && o->p.root - first < L &&
            b->copy(p->out[0], p->in[o->p.root - first], per) != 0)
            dev_fail(dp, "copying the root's input");
    } else if (dp->step == DP_GATHER) { /* allgather: each part at its global rank's place */
        for (uint32_t k = 0; k < L && !dp->failed; k++)
            if (b->copy(p->out[0] + (uint64_t)(first + k) * per, p->in[k], per) != 0)
                dev_fail(dp, "placing a local part");
    } else if (!dp->nccl) {
        for (uint32_t k = 0; k < L && !dp->failed; k++)
            if (b->copy(p->out[k], dp->hout[k], out_bytes) != 0)
                dev_fail(dp, "copying the result from host memory");
    } else {
        if (o->p.coll == RD_COLL_ALLREDUCE &&
            (p->args.divisor > 1 || p->args.postscale != 1.0)) {
            rd_reduce_args a = p->args;
            a.prescale = 1.0; /* applied when the local ranks were reduced */
            const void *src = p->out[0];
            if (b->reduce(p->dtype, RD_OP_SUM, p->out[0], &src, 1, o->p.count, &a) != 0)
                dev_fail(dp, "scaling the result");
        }
        for (uint32_t k = 1; k < L && !dp->failed; k++)
            if (b->copy(p->out[k], p->out[0], out_bytes) != 0)
                dev_fail(dp, "copying the result to a local rank");
    }
}

static void dev_free(devpass *dp)
{
    free(dp->host);
    free(dp->hin);
    free(dp->hout);
    free(dp);
}

/* The pass of o ends (status, message): its ranks hear it. One cut short by the ring's end
 * (cut: 1) waits for the next ring, as ring ops do. Called from the transports' callbacks too:
 * the job is freed on a later turn, never here. */
static void dev_end(devpass *dp, ringd_result_t status, const char *message, int cut)
{
    rd_op *o = dp->o;
    rd_job *j = o->job;
    char where[640] = "", msg[768];
    j->nrunning--;
    j->ndev--;
    if (status != RINGD_OK)
        snprintf(where, sizeof(where), "on node %.64s: %.560s", j->e->cfg->node, message);
    snprintf(msg, sizeof(msg), "tensor '%.100s' %s", o->name, where);
    if (status != RINGD_OK && j->lost[0] != '\0')
        op_fail(o, RINGD_E_MEMBERSHIP, "tensor '%s': %s", o->name, j->lost);
    else if (cut && dp->epoch != j->epoch && rd_world_up(j->world)) /* the next ring is up */
        op_fail(o, RINGD_E_MEMBERSHIP, "tensor '%s' %s", o->name, where);
    else if (cut)
        op_doom(o, where);
    else
        op_finish(o, status, status == RINGD_OK ? NULL : msg);
    dev_free(dp);
    if (j->nclients == 0 && j->nrunning == 0)
        event_active(j->ev_free, 0, 0);
    if (j->ndev == 0)
        event_active(j->ev_settle, 0, 0);
}

/* A device op that failed on this node before it crossed (why): the other nodes would wait
 * for it in NCCL or on the ring, so the ring re-forms; the op fails when it is back. */
static void dev_fail_here(devpass *dp, const char *why)
{
    rd_job *j = dp->o->job;
    char msg[512];
    snprintf(msg, sizeof(msg), "tensor '%.200s' failed on node %.64s: %.200s", dp->o->name,
             j->e->cfg->node, why);
    rd_log(RD_LOG_ERROR, "job", "job '%s': %s", j->name, msg);
    if (dp->epoch == j->epoch) {
        j->cross_blocked = 1;
        rd_world_reform(j->world, msg);
    }
    dev_end(dp, RINGD_E_SYSTEM, why, 1);
}

static void on_dev_step(void *ctx);

/* Queues the pass's next step on the executor. Returns 0, or -1 when it cannot be queued. */
static int dev_step_next(devpass *dp, dev_step step)
{
    dp->step = step;
    return rd_exec_submit(dp->o->job->e->exec, dev_run, on_dev_step, dp, 1, 1) == RINGD_OK ? 0
                                                                                          : -1;
}

/* The crossing ended (status 0, or why it failed). */
static void dev_crossed(devpass *dp, ringd_result_t status, const char *why)
{
    rd_job *j = dp->o->job;
    j->ncrossing--;
    if (status == RINGD_OK) {
        if (dev_step_next(dp, DP_SCATTER) != 0)
            dev_end(dp, RINGD_E_NOMEM, "out of memory queueing the op", 0);
        return;
    }
    dev_end(dp, status, why, j->disrupted || dp->epoch != j->epoch ||
                                 !rd_world_up(j->world));
}

/* NCCL's done: the collective ran, or failed (a communicator that failed re-forms the ring,
 * and the op fails when the ring is back, as on every other node). */
static void on_nccl_done(void *arg, int status, const char *why)
{
    devpass *dp = arg;
    rd_job *j = dp->o->job;
    if (status == 0) {
        rd_devcomm_outcome(j->devcomm, 1, NULL);
        dev_crossed(dp, RINGD_OK, NULL);
        return;
    }
    j->ncrossing--;
    char msg[512];
    snprintf(msg, sizeof(msg), "NCCL failed: %.480s", why);
    if (dp->epoch == j->epoch) { /* not an abort of ours: the ring's end moves the epoch on */
        rd_devcomm_outcome(j->devcomm, 0, msg);
        j->cross_blocked = 1;
        rd_world_reform(j->world, msg);
    }
    dev_end(dp, RINGD_E_MEMBERSHIP, msg, 1);
}

/* The crossing: on NCCL, or on the TCP ring from the host copies. */
static void dev_cross(devpass *dp)
{
    rd_op *o = dp->o;
    rd_job *j = o->job;
    const rd_local_plan *p = &o->plan;
    char err[512] = "";
    if (dp->failed) {
        dev_fail_here(dp, dp->why);
        return;
    }
    /* a ring sealed, or left, still runs what every node announced until it ends */
    if (dp->epoch != j->epoch || (!rd_world_up(j->world) && !rd_world_sealed(j->world))) {
        dev_end(dp, RINGD_E_MEMBERSHIP, "the ring re-formed before it crossed nodes", 1);
        return;
    }
    j->ncrossing++;
    if (dp->nccl) {
        uint32_t L = o->nparts;
        uint64_t per = o->p.count * rd_dtype_size(p->dtype);
        int rc;
        if (o->p.coll == RD_COLL_ALLREDUCE)
            rc = rd_devcomm_run(j->devcomm, j->e->base, RD_COLL_ALLREDUCE, p->dtype, p->redop,
                                p->out[0], p->out[0], o->p.count, 0, on_nccl_done, dp, err,
                                sizeof(err));
        else if (o->p.coll == RD_COLL_BROADCAST)
            rc = rd_devcomm_run(j->devcomm, j->e->base, RD_COLL_BROADCAST, p->dtype, RD_OP_SUM,
                                p->out[0], p->out[0], o->p.count,
                                rd_devcomm_position_of(j->devcomm, o->p.root), on_nccl_done, dp,
                                err, sizeof(err));
        else
            rc = rd_devcomm_run(j->devcomm, j->e->base, RD_COLL_ALLGATHER, p->dtype, RD_OP_SUM,
                                p->out[0] + (uint64_t)j->first_rank * per, p->out[0],
                                (size_t)o->p.count * L, 0, on_nccl_done, dp, err, sizeof(err));
        if (rc != 0) {
            j->ncrossing--;
            dev_fail_here(dp, err);
        }
        return;
    }
    ring_task *rt = calloc(1, sizeof(*rt));
    rd_xfer_member *mem = calloc(1, sizeof(*mem));
    if (rt == NULL || mem == NULL) {
        free(rt);
        free(mem);
        j->ncrossing--;
        dev_fail_here(dp, "out of memory starting the op");
        return;
    }
    *mem = (rd_xfer_member){dp->hin, dp->hout, o->p.count};
    rt->t = (rd_xfer_task){.backend = rd_backend_cpu(),
                           .coll = p->coll,
                           .dtype = p->dtype,
                           .redop = p->redop,
                           .args = p->args,
                           .root = o->p.root,
                           .nmembers = 1,
                           .members = mem,
                           .ctx = rt};
    rt->dp = dp;
    rd_world_submit(j->world, &rt->t);
}

/* Hands what heads the crossing queue to its transport, in order, while it is ready. */
static void cross_pump(rd_job *j)
{
    while (j->cross_head != NULL && !j->cross_blocked) {
        crossing *c = j->cross_head;
        if (c->dp != NULL && !c->dp->gathered)
            return;
        if ((j->cross_head = c->next) == NULL)
            j->cross_tail = NULL;
        if (c->dp != NULL) {
            c->dp->queued = 0;
            dev_cross(c->dp);
        } else {
            rd_world_submit(j->world, &c->rt->t);
        }
        free(c);
    }
}

/* Queues dp or rt behind what is still to cross. Returns 0, or -1 out of memory. */
static int cross_queue(rd_job *j, devpass *dp, ring_task *rt)
{
    crossing *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -1;
    c->dp = dp;
    c->rt = rt;
    if (j->cross_tail != NULL)
        j->cross_tail->next = c;
    else
        j->cross_head = c;
    j->cross_tail = c;
    if (dp != NULL)
        dp->queued = 1;
    return 0;
}

/* The ring ended: what has not crossed yet never will on it. Host ops wait for the next ring
 * (doomed); device passes still gathering end when their gather does. */
static void cross_flush(rd_job *j, const char *why)
{
    while (j->cross_head != NULL) {
        crossing *c = j->cross_head;
        j->cross_head = c->next;
        if (c->dp != NULL && c->dp->gathered) { /* no callback of its own will come */
            dev_end(c->dp, c->dp->failed ? RINGD_E_SYSTEM : RINGD_E_MEMBERSHIP,
                    c->dp->failed ? c->dp->why : why, 1);
        } else if (c->dp != NULL) {
            c->dp->queued = 0; /* it ends when its gather does */
        } else {
            for (size_t i = 0; i < c->rt->nops; i++) {
                j->nrunning--;
                op_doom(c->rt->ops[i], why);
            }
            free(c->rt->t.members);
            free(c->rt);
        }
        free(c);
    }
    j->cross_tail = NULL;
    j->cross_blocked = 0;
    if (j->nclients == 0 && j->nrunning == 0)
        event_active(j->ev_free, 0, 0);
}

/* At shutdown: the queue's entries go with the job (its ops are freed with it). */
static void cross_drop(rd_job *j)
{
    while (j->cross_head != NULL) {
        crossing *c = j->cross_head;
        j->cross_head = c->next;
        if (c->rt != NULL) {
            free(c->rt->t.members);
            free(c->rt);
        }
        free(c);
    }
    j->cross_tail = NULL;
}

static void on_dev_step(void *ctx)
{
    devpass *dp = ctx;
    rd_job *j = dp->o->job;
    if (dp->step == DP_GATHER) {
        dp->gathered = 1;
        if (dp->queued)
            cross_pump(j);
        else /* flushed: the ring it was ordered on ended */
            dev_end(dp, RINGD_E_MEMBERSHIP, "the ring re-formed before it crossed nodes", 1);
        return;
    }
    if (dp->failed) {
        rd_log(RD_LOG_ERROR, "job", "job '%s': tensor '%s': %s", j->name, dp->o->name, dp->why);
        dev_end(dp, RINGD_E_SYSTEM, dp->why, 0);
        return;
    }
    dev_end(dp, RINGD_OK, NULL, 0);
}

/* o cannot start here (why): the other nodes would wait for it, so the ring re-forms and o
 * fails when it is back, with the others' copies. */
static void dev_refuse_here(rd_op *o, const char *why)
{
    rd_job *j = o->job;
    char where[640], msg[768];
    snprintf(where, sizeof(where), "on node %.64s: %.560s", j->e->cfg->node, why);
    snprintf(msg, sizeof(msg), "tensor '%.100s' %s", o->name, where);
    rd_log(RD_LOG_ERROR, "job", "job '%s': %s", j->name, msg);
    j->cross_blocked = 1;
    rd_world_reform(j->world, msg);
    op_doom(o, where);
}

/* Starts device op o across nodes on the generation's transport, queued to cross in the
 * coordinator's order. */
static void dev_start(rd_op *o)
{
    rd_job *j = o->job;
    const char *refusal = rd_devcomm_refusal(j->devcomm);
    int nccl = rd_devcomm_nccl(j->devcomm);
    uint32_t L = o->nparts;
    /* the same answer on every node: each knows the plan and the ring's sizes */
    if (refusal != NULL) {
        op_finish(o, RINGD_E_REFUSED, refusal);
        return;
    }
    if (nccl && o->p.coll == RD_COLL_ALLGATHER && rd_devcomm_even(j->devcomm) != L) {
        op_finish(o, RINGD_E_INVALID,
                  "an allgather of device memory across nodes on NCCL needs as many ranks on "
                  "every node; this ring's nodes differ");
        return;
    }
    op_resolve(o);
    if (o->plan.failed) {
        dev_refuse_here(o, o->plan.why);
        return;
    }
    devpass *dp = calloc(1, sizeof(*dp));
    if (dp == NULL) {
        dev_refuse_here(o, "out of memory starting the op");
        return;
    }
    dp->o = o;
    dp->nccl = nccl;
    dp->epoch = j->epoch;
    o->started_us = rd_now_us();
    if (!nccl) { /* staging: each rank's input, then its output */
        uint64_t per = o->p.count * rd_dtype_size(o->plan.dtype), out = result_bytes(o);
        dp->host = malloc((size_t)(L * (per + out)) + 1);
        dp->hin = calloc(L, sizeof(*dp->hin));
        dp->hout = calloc(L, sizeof(*dp->hout));
        if (dp->host == NULL || dp->hin == NULL || dp->hout == NULL) {
            dev_free(dp);
            dev_refuse_here(o, "out of memory staging a device tensor in host memory");
            return;
        }
        for (uint32_t k = 0; k < L; k++) {
            dp->hin[k] = dp->host + (uint64_t)k * per;
            dp->hout[k] = dp->host + (uint64_t)L * per + (uint64_t)k * out;
        }
    }
    if (cross_queue(j, dp, NULL) != 0) {
        dev_free(dp);
        dev_refuse_here(o, "out of memory queueing the op");
        return;
    }
    op_set_state(o, OP_RUNNING);
    j->nrunning++;
    j->ndev++;
    if (dev_step_next(dp, DP_GATHER) != 0) { /* it crosses as a failure: the ring re-forms */
        dp->failed = 1;
        snprintf(dp->why, sizeof(dp->why), "out of memory queueing the op");
        dp->gathered = 1;
        cross_pump(j);
    }
}

/* Hands ops[0..n) (one op, or allreduces that fuse) to the ring in the segments and over the
 * connections of tuning u (rd_sched_events.start). */
static void on_start(void *arg, void **owns, size_t n, const rd_tuning *u)
{
    rd_job *j = arg;
    rd_op **ops = (rd_op **)owns;
    if (n == 0)
        return;
    if (rd_world_solo(j->world)) { /* the job's last node: the local reduction is the result */
        for (size_t i = 0; i < n; i++)
            op_start(ops[i]);
        return;
    }
    if (ops[0]->p.device) { /* device ops never fuse: n is 1 */
        dev_start(ops[0]);
        return;
    }
    ring_task *rt = calloc(1, sizeof(*rt) + n * sizeof(rd_op *));
    rd_xfer_member *mem = calloc(n, sizeof(*mem));
    if (rt == NULL || mem == NULL) { /* the others would pair their next pass with this one */
        free(rt);
        free(mem);
        j->cross_blocked = 1;
        rd_world_reform(j->world, "out of memory starting ops on the ring");
        for (size_t i = 0; i < n; i++)
            op_doom(ops[i], "out of memory starting the op");
        return;
    }
    for (size_t i = 0; i < n; i++)
        op_resolve(ops[i]);
    const rd_local_plan *p0 = &ops[0]->plan;
    rt->t.backend = p0->backend;
    rt->t.coll = p0->coll;
    rt->t.dtype = p0->dtype;
    rt->t.redop = p0->redop;
    rt->t.args = p0->args;
    rt->t.root = ops[0]->p.root;
    rt->t.segment_size = u->segment_size;
    rt->t.conns = (int)u->conns;
    rt->t.members = mem;
    rt->t.nmembers = n;
    rt->t.ctx = rt;
    rt->nops = n;
    j->passes++;
    if (j->m != NULL)
        rd_histogram_observe(&j->m->pass_ops, rd_metrics_pass_bounds, RD_METRICS_PASS_BUCKETS,
                             (double)n);
    int64_t now = rd_now_us();
    for (size_t i = 0; i < n; i++) {
        rd_op *o = ops[i];
        o->started_us = now;
        o->pass = j->passes;
        o->pass_ops = (uint32_t)n;
        mem[i] = (rd_xfer_member){(const uint8_t **)o->plan.in, o->plan.out, o->p.count};
        op_set_state(o, OP_RUNNING);
        rt->ops[i] = o;
        j->nrunning++;
    }
    if (j->cross_head == NULL && !j->cross_blocked) {
        rd_world_submit(j->world, &rt->t);
    } else if (cross_queue(j, NULL, rt) != 0) { /* behind device ops still gathering */
        for (size_t i = 0; i < n; i++)
            j->nrunning--;
        j->cross_blocked = 1;
        rd_world_reform(j->world, "out of memory queueing ops for the ring");
        for (size_t i = 0; i < n; i++)
            op_doom(ops[i], "out of memory queueing ops for the ring");
        free(mem);
        free(rt);
    }
}

static void on_task_done(void *arg, struct rd_xfer_task *t)
{
    rd_job *j = arg;
    ring_task *rt = t->ctx;
    j->e->counters->activity++;
    if (rt->dp != NULL) {
        dev_crossed(rt->dp, t->status, t->message);
        free(t->members);
        free(rt);
        return;
    }
    for (size_t i = 0; i < rt->nops; i++) {
        rd_op *o = rt->ops[i];
        memcpy(o->ring_us, t->phase_us, sizeof(o->ring_us));
        j->nrunning--;
        if (t->status != RINGD_OK && j->lost[0] != '\0') { /* no ring to wait for */
            op_fail(o, RINGD_E_MEMBERSHIP, "tensor '%s': %s", o->name, j->lost);
            continue;
        }
        if (t->status != RINGD_OK && j->disrupted) { /* answered once the ring is back */
            op_doom(o, t->message);
            continue;
        }
        op_finish(o, t->status, t->status == RINGD_OK ? NULL : t->message);
    }
    free(t->members);
    free(rt);
    /* Called from the data plane's completion callback, which a job freed now would free too. */
    if (j->nclients == 0 && j->nrunning == 0)
        event_active(j->ev_free, 0, 0);
}

/* The oldest op of that name negotiated for the ring here and not yet started, skipping the
 * first skip of them (a batch may order one name several times). */
static void *on_ring_ready(void *arg, const char *name, size_t skip, rd_op_params *p)
{
    rd_job *j = arg;
    for (rd_op *o = j->buckets[rd_name_hash(name) & (j->nbuckets - 1)]; o != NULL; o = o->next) {
        if (o->state == OP_RING_READY && strcmp(o->name, name) == 0 && skip-- == 0) {
            *p = o->p;
            return o;
        }
    }
    return NULL;
}

static rd_world_await on_awaits_order(void *arg)
{
    rd_job *j = arg;
    if (j->ncrossing > 0)
        return RD_AWAIT_CROSSING; /* on NCCL or the ring: their transport bounds them */
    if (rd_sched_orders_waiting(j->sched) || j->ndev > 0 || j->cross_head != NULL)
        return RD_AWAIT_NEGOTIATION; /* device passes, and what waits behind them, cross first */
    return j->count[OP_RING_READY] > 0 ? RD_AWAIT_ORDER : RD_AWAIT_NOTHING;
}

static void on_failed_elsewhere(void *arg, const char *name, const rd_op_params *p, uint32_t status,
                             const char *message)
{
    rd_job *j = arg;
    char msg[768];
    ringd_result_t rc = status < RINGD_RESULT_COUNT ? (ringd_result_t)status : RINGD_E_PROTOCOL;
    snprintf(msg, sizeof(msg), "%s", message); /* message may go with the negotiation's record */
    /* The oldest op of that name this node has not announced is the one the failure is for. */
    rd_op *o = NULL;
    for (rd_op *x = j->buckets[rd_name_hash(name) & (j->nbuckets - 1)]; x != NULL; x = x->next) {
        if (strcmp(x->name, name) != 0 ||
            (x->state != OP_PENDING && x->state != OP_HELD && x->state != OP_UNTOLD))
            continue;
        o = x;
        break;
    }
    if (o != NULL && o->state != OP_PENDING)
        return; /* held (its announcement follows) or failed here already */
    if (o == NULL) { /* none of this node's ranks has submitted it yet */
        o = op_new(j, name, p, 0);
        if (o == NULL)
            return; /* this node's announcement of the failure waits for its ranks */
    }
    rd_log(RD_LOG_INFO, "job", "job '%s': %s", j->name, msg);
    op_tombstone(o, rc, msg);
    tell(o, rc, msg, 0, NULL, 0);
}

static void on_negotiated(void *arg, void *own, const rd_neg_outcome *e)
{
    rd_job *j = arg;
    rd_op *o = own;
    if (o->state == OP_TOLD) { /* failed here already; the others now know */
        op_set_state(o, OP_TOMBSTONE);
        tombstone_maybe_free(o);
        return;
    }
    assert(o->state == OP_ANNOUNCED);
    /* Once: an op a graceful ring change carried over is negotiated again on the next ring. */
    if (o->negotiated_us == 0) {
        o->negotiated_us = rd_now_us();
        if (j->m != NULL && o->ready_us != 0)
            rd_histogram_observe(&j->m->negotiation, rd_metrics_latency_bounds,
                                 RD_METRICS_LATENCY_BUCKETS,
                                 (double)(o->negotiated_us - o->ready_us) / 1e6);
    }
    if (e->status != RINGD_OK) {
        op_fail(o, e->status <= RINGD_E_REFUSED ? (ringd_result_t)e->status : RINGD_E_PROTOCOL,
                "%s", e->message);
        return;
    }
    if (o->p.coll == RD_COLL_BARRIER) { /* every rank has arrived */
        op_finish(o, RINGD_OK, NULL);
        return;
    }
    if (e->direct) {
        o->direct = 1;
        if (e->len != result_bytes(o)) {
            op_fail(o, RINGD_E_PROTOCOL,
                    "tensor '%s': the negotiated result has %zu bytes, %" PRIu64 " expected",
                    o->name, e->len, result_bytes(o));
            return;
        }
        for (uint32_t k = 0; k < o->nparts; k++)
            if (o->plan.failed || o->plan.backend->copy(o->plan.out[k], e->data, e->len) != 0) {
                char msg[512];
                snprintf(msg, sizeof(msg), "tensor '%s': writing the result: %s", o->name,
                         o->plan.failed ? o->plan.why : o->plan.backend->error());
                op_finish(o, RINGD_E_SYSTEM, msg);
                return;
            }
        op_finish(o, RINGD_OK, NULL);
        return;
    }
    op_set_state(o, OP_RING_READY);
    rd_sched_run(j->sched);
}

static rd_status on_ring_forming(void *arg, uint64_t generation, int nnodes, int position,
                                 const rd_ring_node *nodes)
{
    rd_job *j = arg;
    if (j->sched == NULL || j->devcomm == NULL) /* they could not be made */
        return RINGD_E_NOMEM;
    rd_status st = rd_sched_ring_forming(j->sched, nnodes, position, nodes);
    return st == RINGD_OK ? rd_devcomm_ring_forming(j->devcomm, generation, nnodes, position, nodes)
                          : st;
}

static void on_ring_ended(void *arg)
{
    rd_job *j = arg;
    rd_sched_ring_ended(j->sched);
    j->epoch++;
    cross_flush(j, "the ring re-formed before it crossed nodes");
    rd_devcomm_ring_ended(j->devcomm); /* what it cuts short reports later, of an old epoch */
}

/* The generation's device transport is settled: the coordinator may order ops. */
static void on_dev_settled(void *arg, int nccl)
{
    rd_job *j = arg;
    (void)nccl;
    rd_sched_hold(j->sched, 0);
}

static const rd_devcomm_events devcomm_events = {.settled = on_dev_settled};

static void on_message(void *arg, int from, const rd_schedmsg *m)
{
    rd_job *j = arg;
    if (m->kind == RD_SCHEDMSG_DEV_OFFER || m->kind == RD_SCHEDMSG_DEV_PLAN ||
        m->kind == RD_SCHEDMSG_DEV_CONFIRM)
        rd_devcomm_message(j->devcomm, from, m);
    else
        rd_sched_message(j->sched, from, m);
}

static void on_flush(void *arg)
{
    rd_job *j = arg;
    rd_sched_flush(j->sched);
}

static const rd_world_events world_events = {
    .ring_up = on_ring_up,
    .ring_waiting = on_ring_waiting,
    .ring_down = on_ring_down,
    .ring_lost = on_ring_lost,
    .disrupted = on_disrupted,
    .ring_forming = on_ring_forming,
    .ring_ended = on_ring_ended,
    .message = on_message,
    .flush = on_flush,
    .awaits_order = on_awaits_order,
    .task_done = on_task_done,
};

static const rd_sched_events sched_events = {
    .negotiated = on_negotiated,
    .failed_elsewhere = on_failed_elsewhere,
    .ring_ready = on_ring_ready,
    .start = on_start,
};
