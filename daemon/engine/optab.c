/* The op table of a job: its ops by name (a hash of chains, each in submission order) and by
 * state (a list per state), the one function that moves an op from state to state, and the ways
 * an op ends: finished, failed, a tombstone for the ranks yet to come, or doomed to wait for the
 * next ring. */
#include "optab.h"

#include <assert.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "counters.h"
#include "group.h"
#include "frame.h"
#include "log.h"
#include "metrics.h"
#include "timeline.h"

static const char *const op_state_names[OP_NSTATES] = {"pending",    "held",    "announced",
                                                       "ring-ready", "running", "doomed",
                                                       "untold",     "told",    "tombstone"};

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
int rd_optab_failed(op_state st)
{
    return st == OP_UNTOLD || st == OP_TOLD || st == OP_TOMBSTONE;
}

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
void rd_optab_set_state(rd_op *o, op_state st)
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
void rd_optab_answer(const rd_job *j, rd_client *c, uint64_t request_id, rd_status status,
                     const char *message, const rd_trace_op *trace, int current)
{
    j->e->ev.complete(c, request_id, status, message, c->timeline ? trace : NULL, current);
}

/* The op named name that rank should join: the oldest one it has not submitted to (a failed
 * op's ranks may already submit the name again while others have yet to see the failure).
 * *dup is set when rank already has that name pending or running. */
rd_op *rd_optab_find(rd_job *j, const char *name, uint32_t rank, int *dup)
{
    *dup = 0;
    for (rd_op *o = j->buckets[rd_name_hash(name) & (j->nbuckets - 1)]; o != NULL; o = o->next) {
        /* An op of an earlier local size (still moving data) is not this rank's to join. */
        if (strcmp(o->name, name) != 0 || rank >= o->nparts || o->nparts != j->local_size)
            continue;
        if (!o->parts[rank].submitted)
            return o;
        if (!rd_optab_failed(o->state))
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
    if (o->state == OP_RING_READY) /* the scheduler holds it for the coordinator's order */
        rd_sched_forget(j->sched, o);
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
    if (o->job->join == o)
        o->job->join = NULL;
    rd_group_leave(o);
    for (uint32_t k = 0; k < o->nparts; k++)
        rd_arena_unref(o->parts[k].arena);
    free(o->parts);
    free(o->plan.in);
    free(o->plan.out);
    free(o->counts);
    free(o->zeros);
    free(o->message);
    free(o->name);
    free(o);
}

void rd_optab_remove(rd_job *j, rd_op *o)
{
    op_unlink(j, o);
    op_free(o);
}

void rd_optab_drop_failed(rd_job *j)
{
    static const op_state failed[] = {OP_UNTOLD, OP_TOLD, OP_TOMBSTONE};
    for (size_t k = 0; k < sizeof(failed) / sizeof(failed[0]); k++)
        while (j->first[failed[k]] != NULL)
            rd_optab_remove(j, j->first[failed[k]]);
}

void rd_optab_clear(rd_job *j)
{
    rd_counters *c = j->e->counters;
    rd_group_drop_all(j);
    for (size_t i = 0; i < j->nbuckets; i++) {
        while (j->buckets[i] != NULL) {
            rd_op *o = j->buckets[i];
            j->buckets[i] = o->next;
            if (!rd_optab_failed(o->state) && c->ops_in_flight > 0)
                c->ops_in_flight--;
            op_free(o);
        }
    }
    j->nops = 0;
    memset(j->first, 0, sizeof(j->first));
    memset(j->last, 0, sizeof(j->last));
    memset(j->count, 0, sizeof(j->count));
}

/* Sends the op's outcome to every rank still there that submitted (with trace, to those that
 * asked for it). */
static void op_answer(rd_op *o, rd_status status, const char *message, const rd_trace_op *trace)
{
    for (uint32_t k = 0; k < o->nparts; k++) {
        part *pt = &o->parts[k];
        if (pt->submitted && pt->s != NULL && !pt->answered) {
            /* after a join it ran through, only a loss failing it tells the ranks the job */
            rd_optab_answer(o->job, pt->s, pt->request_id, status, message, trace,
                            !o->outran_join || o->outran_loss);
            pt->answered = 1;
        }
    }
}

/* The op's end, seen once (rd_optab_finish, rd_optab_tombstone): counted in its job's metrics,
 * recorded in its timeline, and its trace into *tr (tr->submit_us malloc'd: free it) when a
 * recording or a client wants it. Returns tr then, else NULL. */
static const rd_trace_op *op_ended(rd_op *o, rd_status status, rd_trace_op *tr)
{
    rd_job *j = o->job;
    int64_t now = rd_now_us();
    uint64_t size = o->p.count * rd_dtype_size((rd_dtype)o->p.dtype);
    rd_metrics_op(j->m, o->p.coll, status, size,
                  status == RINGD_OK ? rd_optab_result_bytes(o) * o->nparts : 0, now - o->first_us);
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
void rd_optab_finish(rd_op *o, rd_status status, const char *message)
{
    rd_job *j = o->job;
    rd_engine *d = j->e;
    rd_trace_op tr;
    const rd_trace_op *trace = op_ended(o, status, &tr);
    op_answer(o, status, message, trace);
    if (trace != NULL)
        free(tr.submit_us);
    if (o->grp != NULL && status != RINGD_OK) /* its group fails with it */
        rd_optab_group_failed(o, status, message);
    if (d->counters->ops_in_flight > 0)
        d->counters->ops_in_flight--;
    if (status == RINGD_OK) {
        d->counters->ops_completed++;
        j->ops_completed++;
        uint64_t written = rd_optab_result_bytes(o) * o->nparts;
        d->counters->bytes_reduced += written;
        const rd_arena *a = NULL; /* a part that moves bytes tells the op's memory */
        for (uint32_t k = 0; k < o->nparts && (a == NULL || o->parts[k - 1].empty); k++)
            a = o->parts[k].arena;
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
int rd_optab_bury(rd_op *o)
{
    if (o->state != OP_TOMBSTONE || o->nsubmitted < o->nparts)
        return 0;
    op_unlink(o->job, o);
    op_free(o);
    return 1;
}

/* Rank `rank` (client c, request_id) came to a failed op: it hears status and message. */
void rd_optab_visit(rd_op *o, rd_client *c, uint32_t rank, uint64_t request_id, rd_status status,
                    const char *message)
{
    o->parts[rank].submitted = 1;
    o->nsubmitted++;
    rd_optab_answer(o->job, c, request_id, status, message, NULL, 1);
    rd_optab_bury(o);
}

/* Ends a pending op for good: the ranks that submitted it hear status and msg now, and the op
 * stays as a tombstone that gives the ranks yet to submit it the same answer, until all have
 * come and the other nodes know (UNTOLD, TOLD), or --stall-abort passes. */
void rd_optab_tombstone(rd_op *o, rd_status status, const char *msg)
{
    rd_trace_op tr;
    const rd_trace_op *trace = op_ended(o, status, &tr);
    op_answer(o, status, msg, trace);
    if (trace != NULL)
        free(tr.submit_us);
    /* A failure found here is news for the other nodes; one the negotiation brought (the op was
     * announced) every node has already. */
    int news = o->job->world != NULL && o->state != OP_ANNOUNCED;
    rd_optab_set_state(o, news ? OP_UNTOLD : OP_TOMBSTONE);
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
    if (o->grp != NULL) /* its group fails with it */
        rd_optab_group_failed(o, status, msg);
    rd_optab_bury(o); /* nobody left to tell */
}

void rd_optab_group_failed(rd_op *o, rd_status status, const char *message)
{
    rd_group *g = o->grp;
    rd_job *j = o->job;
    if (g == NULL || !rd_group_fail(o, status, message))
        return;
    rd_group_hold(g);
    for (uint32_t i = 0; i < g->size; i++) {
        rd_op *m = g->ops[i]; /* looked up again: an earlier one's end may have ended it */
        if (m == NULL || m == o)
            continue;
        char why[896];
        rd_status gst;
        snprintf(why, sizeof(why), "tensor '%.100s': %s", m->name, rd_group_why(m, &gst));
        if (m->state == OP_PENDING || m->state == OP_HELD) {
            rd_optab_tombstone(m, status, why);
            rd_job_tell_later(j); /* out of this loop: telling one may end others */
        } else if (m->state == OP_ANNOUNCED && m->gagreed) {
            rd_optab_fail(m, status, "%s", why);
        }
    }
    rd_group_unhold(j, g);
}

/* Fails a pending op. A mismatch leaves a tombstone (rd_optab_tombstone); any other failure removes
 * the op at once. */
void rd_optab_fail(rd_op *o, rd_status status, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    rd_log(RD_LOG_WARN, "job", "job '%s': %s", o->job->name, msg);
    if (status != RINGD_E_MISMATCH)
        rd_optab_finish(o, status, msg);
    else
        rd_optab_tombstone(o, status, msg);
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
rd_op *rd_optab_new(rd_job *j, const char *name, const rd_op_params *p, uint32_t rank)
{
    rd_op *o = op_alloc(j, name, p, rank);
    if (o == NULL)
        return NULL;
    op_insert(j, o);
    j->e->counters->ops_in_flight++;
    return o;
}

uint64_t rd_optab_result_bytes(const rd_op *o)
{
    uint64_t per = o->p.count * rd_dtype_size((rd_dtype)o->p.dtype);
    return o->p.coll == RD_COLL_ALLGATHER ? per * o->job->size : per;
}

void rd_optab_part_bytes(const rd_op *o, uint32_t k, uint64_t *in, uint64_t *out)
{
    uint64_t esz = rd_dtype_size((rd_dtype)o->p.dtype), per = o->p.count * esz;
    uint64_t g = (uint64_t)o->counts_first + k, n = o->ncounts, own = 0;
    *in = *out = per;
    if (o->p.coll == RD_COLL_ALLGATHER) {
        *out = per * o->job->size;
        return;
    }
    if (o->counts == NULL)
        return;
    if (g < n && o->p.coll != RD_COLL_ALLTOALL)
        own = o->counts[g] * esz;
    if (o->p.coll == RD_COLL_REDUCESCATTER) {
        *out = own;
    } else if (o->p.coll == RD_COLL_ALLGATHERV) {
        *in = own;
    } else if (o->p.coll == RD_COLL_ALLTOALL) {
        *in = *out = 0;
        for (uint64_t j = 0; g < n && j < n; j++) {
            *in += o->counts[g * n + j] * esz;
            *out += o->counts[j * n + g] * esz;
        }
    }
}

/* Ends every op that is not moving data with why. The job moved to a generation its clients
 * must re-synchronise with: tombstones go too, as the ops they stand for are of the last one (a
 * rank that submits one late is refused for its old generation). */
void rd_optab_fail_unstarted(rd_job *j, const char *why)
{
    static const op_state live[] = {OP_PENDING, OP_HELD, OP_ANNOUNCED, OP_RING_READY, OP_DOOMED};
    /* Groups first: their members all fail here anyway, and the next generation's ops make
     * groups of their own (nothing of this one's is told to its ring). */
    rd_group_drop_all(j);
    for (size_t k = 0; k < sizeof(live) / sizeof(live[0]); k++)
        while (j->first[live[k]] != NULL)
            rd_optab_fail(j->first[live[k]], RINGD_E_MEMBERSHIP, "tensor '%s': %s",
                          j->first[live[k]]->name, why);
    rd_optab_drop_failed(j);
}

/* The ring failed under o: its ranks hear why once the job is back (their answer then carries
 * the new generation, rank and size), or when the wait for it ends. */
void rd_optab_doom(rd_op *o, const char *why)
{
    char msg[768];
    snprintf(msg, sizeof(msg), "tensor '%s': %s", o->name, why);
    free(o->message);
    o->message = strdup(msg);
    rd_optab_set_state(o, OP_DOOMED);
    o->since_ms = rd_now_ms();
}

void rd_optab_fail_changed(rd_op *o, const char *why, const char *how)
{
    char prefix[RD_NAME_MAX + 16];
    size_t n = (size_t)snprintf(prefix, sizeof(prefix), "tensor '%s': ", o->name);
    if (strncmp(how, prefix, n) == 0)
        how += n;
    rd_optab_fail(o, RINGD_E_MEMBERSHIP, "tensor '%s': %s; the ring failed under it: %s", o->name,
                  why, how);
}
