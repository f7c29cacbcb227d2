/* The path of an op from Submit to start: a Submit is checked (check.h) and matched by name
 * with the other local ranks' into the op table; once all have submitted, a one-node op runs
 * here (inline or on the executor), a multi-node one is announced to the other nodes and runs
 * as the negotiation and the coordinator's order say (pass.c). */
#include "ops.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "check.h"
#include "counters.h"
#include "frame.h"
#include "log.h"
#include "metrics.h"
#include "optab.h"
#include "group.h"

#define RD_GRAIN 4096 /* elements: worker ranges start on multiples of this */

/* Runs a range of an op's data movement on a worker. */
static void op_run(void *ctx, size_t begin, size_t end)
{
    rd_local_run(&((rd_op *)ctx)->plan, begin, end);
}

/* The op's local data movement has run: it succeeded, or its backend (a device) failed. */
static void op_ran(rd_op *o)
{
    char msg[768];
    if (o->outran_loss) {
        rd_optab_finish(o, RINGD_E_MEMBERSHIP,
                        o->message != NULL ? o->message
                                           : "a rank of the job was lost while it ran");
        return;
    }
    if (!o->plan.failed) {
        rd_optab_finish(o, RINGD_OK, NULL);
        return;
    }
    snprintf(msg, sizeof(msg), "tensor '%s' on node %s: %s", o->name, o->job->e->cfg->node,
             o->plan.why);
    rd_log(RD_LOG_ERROR, "job", "job '%s': %s", o->job->name, msg);
    rd_optab_finish(o, RINGD_E_SYSTEM, msg);
}

static void on_op_done(void *ctx)
{
    rd_op *o = ctx;
    rd_job *j = o->job;
    j->nrunning--;
    op_ran(o);
    rd_job_free_later(j);
}

/* The arena of o's first rank that came with buffers (a rank that joined has none) and moves
 * bytes, else of its first that came at all, or NULL: what memory the op moves. */
static const rd_arena *op_arena(const rd_op *o)
{
    const rd_arena *any = NULL;
    for (uint32_t k = 0; k < o->nparts; k++) {
        if (o->parts[k].arena != NULL && !o->parts[k].empty)
            return o->parts[k].arena;
        if (any == NULL)
            any = o->parts[k].arena;
    }
    return any;
}

/* Points local rank k's part of o, an allreduce the rank joined out of, at zeros and at a
 * scratch output (one pair for all of o's joined ranks, host memory, made by join_mark). */
static void join_buffers(rd_op *o, uint32_t k)
{
    uint64_t bytes = o->p.count * rd_dtype_size((rd_dtype)o->p.dtype);
    o->plan.in[k] = o->zeros;
    o->plan.out[k] = o->zeros + bytes;
}

/* Points the op's plan at its ranks' buffers, with the divisor of the job's current size. An
 * allgather whose input lies in another slot of its output (in place: the first) is moved to the
 * rank's own slot first, so that writing the result never overwrites an input not yet read. */
void rd_ops_resolve(rd_op *o)
{
    rd_job *j = o->job;
    o->plan.args.divisor = o->p.redop == RD_OP_AVG ? j->size : 1;
    /* The backend that imported the ranks' memory moves it (one for all ranks of an op; joined
     * ranks have none, and only host ops run with them). */
    const rd_arena *a0 = op_arena(o);
    o->plan.backend = a0 != NULL ? a0->backend : rd_backend_cpu();
    o->plan.device = a0 != NULL ? a0->mem.device : -1;
    o->plan.failed = 0;
    if (o->plan.backend->bind != NULL && o->plan.backend->bind(o->plan.device) != 0) {
        o->plan.failed = 1;
        snprintf(o->plan.why, sizeof(o->plan.why), "using the GPU: %s", o->plan.backend->error());
    }
    /* the local ranks' counts: a one-node op's, or one of the last node's of a ring */
    o->plan.counts =
        o->counts != NULL && j->first_rank < o->ncounts && o->p.coll != RD_COLL_ALLTOALL
            ? o->counts + j->first_rank
            : o->counts;
    o->plan.serial = 0;
    for (uint32_t k = 0; k < o->nparts; k++) {
        part *pt = &o->parts[k];
        if (pt->joined) {
            join_buffers(o, k);
            continue;
        }
        /* MPI's in-place reducescatter writes each block to the start of the buffer it reads:
         * only one pass in order keeps its writes behind its reads */
        if (o->p.coll == RD_COLL_REDUCESCATTER && pt->in_off == pt->out_off)
            o->plan.serial = 1;
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
        assert(pt->empty || pt->arena->backend == o->plan.backend);
        o->plan.in[k] = pt->arena->base + pt->in_off; /* an empty part's: never touched */
        o->plan.out[k] = pt->arena->base + pt->out_off;
    }
}

int rd_ops_counts_current(rd_op *o)
{
    rd_job *j = o->job;
    if (o->counts == NULL || (o->ncounts == j->size && o->counts_first == j->first_rank))
        return 1;
    char msg[512];
    snprintf(msg, sizeof(msg),
             "tensor '%s': its counts are for %u ranks as they were numbered; job '%s' now has %u "
             "(generation %" PRIu64 "): submit it again with counts for the new ranks",
             o->name, o->ncounts, j->name, j->size, j->generation);
    if (j->world == NULL) {
        rd_optab_fail(o, RINGD_E_MEMBERSHIP, "%s", msg);
        return 0;
    }
    /* the other nodes may have ranks that submitted it with counts for the new size */
    rd_optab_tombstone(o, RINGD_E_MEMBERSHIP, msg);
    rd_ops_tell(o, RINGD_E_MEMBERSHIP, msg, 0, NULL, 0);
    return 0;
}

/* Every rank has submitted: resolve arena pointers and move the data. */
void rd_ops_run_here(rd_op *o)
{
    rd_job *j = o->job;
    rd_engine *d = j->e;
    rd_local_plan *p = &o->plan;

    if (j->world == NULL && !rd_ops_counts_current(o)) /* across nodes: at its announcement */
        return;
    rd_ops_resolve(o);
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
    if (rd_exec_submit(d->exec, op_run, on_op_done, o, units, p->serial ? units : RD_GRAIN) != 0) {
        rd_optab_fail(o, RINGD_E_NOMEM, "tensor '%s': out of memory queueing the op", o->name);
        return;
    }
    rd_optab_set_state(o, OP_RUNNING);
    j->nrunning++;
}

/* Announces o to the other nodes (which may end it at once), or marks it held when the ring
 * cannot take announcements now: it is announced when the next ring is up. */
void rd_ops_tell(rd_op *o, rd_status status, const char *message, int direct, const uint8_t *data,
                 size_t len)
{
    op_state held = o->state; /* HELD, or UNTOLD for a failure */
    rd_optab_set_state(o, held == OP_HELD ? OP_ANNOUNCED : OP_TOLD);
    if (!rd_sched_announce(o->job->sched, o->name, &o->p, status, message, direct, data, len, o))
        rd_optab_set_state(o, held); /* held: o is untouched */
}

/* Every local rank submitted an op of a multi-node job: tells the coordinator, with this node's
 * contribution when the op is small enough to travel with the negotiation (--direct-bytes). */
void rd_ops_announce(rd_op *o)
{
    rd_job *j = o->job;
    uint32_t L = o->nparts;
    if (o->p.coll == RD_COLL_BROADCAST && o->p.root >= j->size) {
        rd_optab_fail(o, RINGD_E_MEMBERSHIP,
                      "tensor '%s': root %u left job '%s' (now %u ranks, generation %" PRIu64 ")",
                      o->name, o->p.root, j->name, j->size, j->generation);
        return;
    }
    if (!rd_ops_counts_current(o))
        return;
    const rd_arena *a0 = op_arena(o);
    const rd_backend *b = a0 != NULL ? a0->backend : rd_backend_cpu();
    /* every node must pass it in the same memory: it crosses on one transport */
    o->p.device = b->device_memory && o->p.coll != RD_COLL_BARRIER;
    /* an allgatherv's nodes contribute blocks of sizes the negotiation does not know (one of
     * no elements goes direct all the same: a ring pass of nothing would not hold a node
     * until the others have it) */
    /* nor does a group's member: its group goes to the ring as one */
    if (o->p.coll == RD_COLL_BARRIER || o->grp != NULL ||
        ((o->p.coll == RD_COLL_ALLGATHERV || o->p.coll == RD_COLL_ALLTOALL) && o->p.count > 0) ||
        rd_optab_result_bytes(o) > j->e->cfg->direct_bytes || b->device_memory) {
        rd_ops_tell(o, RINGD_OK, NULL, 0, NULL, 0);
        return;
    }
    rd_ops_resolve(o);
    uint64_t per = o->p.count * rd_dtype_size((rd_dtype)o->p.dtype), len = 0;
    uint8_t *buf = malloc(per * L > 0 ? per * L : 1);
    if (buf == NULL) {
        rd_ops_tell(o, RINGD_E_NOMEM, "out of memory", 0, NULL, 0);
        return;
    }
    if (o->p.coll == RD_COLL_ALLREDUCE || o->p.coll == RD_COLL_REDUCESCATTER) {
        rd_reduce_args a = RD_REDUCE_ARGS_INIT;
        a.prescale = o->p.prescale;
        o->plan.backend->reduce(o->plan.dtype, o->plan.redop, buf, (const void *const *)o->plan.in,
                                (int)L, o->p.count, &a);
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
    rd_ops_tell(o, RINGD_OK, NULL, 1, buf, len);
    free(buf);
}

/* Every member of g has all its local ranks' submissions: they go on together, in their order,
 * run here on one node, announced across nodes (once the ring takes announcements: else when
 * it does). One may end at once or fail, failing the rest: each is looked up again. */
static void group_release(rd_job *j, rd_group *g)
{
    rd_group_hold(g);
    for (uint32_t i = 0; i < g->size && g->status == RINGD_OK; i++) {
        rd_op *m = g->ops[i];
        if (m == NULL)
            continue;
        if (j->world == NULL)
            rd_ops_run_here(m);
        else if (rd_world_up(j->world) && m->state == OP_HELD)
            rd_ops_announce(m);
    }
    rd_group_unhold(j, g);
}

/* Every member of g is negotiated alike on every node: they go to the coordinator's order
 * together, in their order. */
static void group_to_ring(rd_job *j, rd_group *g)
{
    rd_group_hold(g);
    for (uint32_t i = 0; i < g->size; i++) {
        rd_op *m = g->ops[i];
        if (m == NULL || m->state != OP_ANNOUNCED)
            continue;
        rd_optab_set_state(m, OP_RING_READY);
        rd_sched_keep(j->sched, m, m->name, &m->p);
    }
    rd_group_unhold(j, g);
}

/* 1 when m says it is one of a group, and how, as rd_check_submit takes groups. */
static int valid_group(const rd_submit *m)
{
    return m->group[0] != '\0' && rd_name_valid(m->group) && m->group_size >= 1 &&
           m->group_size <= RD_GROUP_MAX && m->group_index < m->group_size;
}

/* Local rank `rank` could not submit its part of the op named name (why: from this daemon or
 * the client's library): the op fails with rc on every rank that submits it. Ranks here that
 * already have hear it now, ranks yet to submit it when they do (a tombstone), and the other
 * nodes as soon as the announcement reaches them. s, the refused session, is answered too. */
static void op_refuse(rd_job *j, rd_client *s, uint32_t rank, uint64_t request_id, const char *name,
                      const rd_op_params *params, rd_status rc, const char *why,
                      const rd_submit *grouped)
{
    char msg[768];
    int dup;
    /* The refused submission is this rank's part of the next op of that name (an earlier one
     * it is in goes on): that op fails for every rank, so none waits for this one. */
    rd_op *o = rd_optab_find(j, name, rank, &dup);
    rd_log(RD_LOG_INFO, "job", "job '%s' local rank %u: %s", j->name, rank, why);
    if (o != NULL && rd_optab_failed(o->state)) { /* failed already: this rank hears its own why */
        if (o->grp == NULL && grouped != NULL &&  /* and its group: first, visiting may free o */
            rd_group_join(o, grouped->group, grouped->group_size, grouped->group_index) > 0)
            rd_optab_group_failed(o, o->status, o->message);
        rd_optab_visit(o, s, rank, request_id, rc, why);
        return;
    }
    if (o == NULL) {
        rd_op_params p = rd_op_params_announceable(*params);
        o = rd_optab_new(j, name, &p, rank);
        if (o == NULL) {
            rd_optab_answer(j, s, request_id, RINGD_E_NOMEM, "out of memory", NULL, 1);
            return;
        }
        /* one of a group: the group fails with it, on every rank */
        if (grouped != NULL)
            rd_group_join(o, grouped->group, grouped->group_size, grouped->group_index);
    }
    part *pt = &o->parts[rank];
    pt->s = s;
    pt->submitted = 1;
    pt->request_id = request_id;
    o->nsubmitted++;
    snprintf(msg, sizeof(msg), "rank %u (node %.64s) could not run it: %.600s",
             j->first_rank + rank, j->e->cfg->node, why);
    rd_optab_tombstone(o, rc, msg);
    if (j->world != NULL && rd_world_up(j->world))
        rd_ops_tell(o, rc, msg, 0, NULL, 0);
}

/* Gives a new op of a reducescatter or an allgatherv every rank's count, from its first Submit
 * (checked): as passed, or equal. Returns 0, or -1 when out of memory. */
static int op_take_counts(rd_op *o, const rd_submit *m)
{
    uint32_t n = o->job->size;
    size_t entries = m->op == RD_COLL_ALLTOALL ? (size_t)n * n : n;
    if (m->op != RD_COLL_REDUCESCATTER && m->op != RD_COLL_ALLGATHERV && m->op != RD_COLL_ALLTOALL)
        return 0;
    o->counts = malloc((entries ? entries : 1) * sizeof(*o->counts));
    if (o->counts == NULL)
        return -1;
    o->ncounts = n;
    o->counts_first = o->job->first_rank;
    for (size_t i = 0; i < entries; i++)
        o->counts[i] = m->ncounts > 0 ? m->counts[i] : m->count;
    return 0;
}

/* 1 when m's counts are o's, entry for entry (equal counts taken as their array). */
static int counts_agree(const rd_op *o, const rd_submit *m)
{
    if (o->counts == NULL)
        return 1;
    size_t entries = o->p.coll == RD_COLL_ALLTOALL ? (size_t)o->ncounts * o->ncounts : o->ncounts;
    if (m->ncounts != 0 && m->ncounts != entries)
        return 0;
    for (size_t i = 0; i < entries; i++)
        if (o->counts[i] != (m->ncounts != 0 ? m->counts[i] : m->count))
            return 0;
    return 1;
}

/* Checks local rank `rank`'s Submit m (its part already recorded) against o's first one, and
 * its memory against the other ranks'. Returns 1, or 0 with msg saying what differs. */
static int op_agrees(const rd_op *o, const rd_submit *m, uint32_t rank, char *msg, size_t len)
{
    const rd_job *j = o->job;
    rd_check_first f = {o->name,       &o->p,           o->first_rank, j->world != NULL,
                        j->first_rank, j->e->cfg->node, j->size};
    if (!rd_check_match(&f, m, rank, msg, len))
        return 0;
    if (!counts_agree(o, m)) { /* the digest agreed: so must the counts themselves, which place
                                  every local rank's data in its arena */
        snprintf(msg, len,
                 "tensor '%s' mismatch (counts): local rank %u on node %s passed other counts than "
                 "local rank %u",
                 o->name, rank, j->e->cfg->node, o->first_rank);
        return 0;
    }
    if (o->parts[rank].empty) /* it moves nothing: any memory matches */
        return 1;
    const rd_backend *backends[RD_LOCAL_SIZE_MAX]; /* nparts <= local_size <= this */
    for (uint32_t k = 0; k < o->nparts; k++)
        backends[k] =
            k == rank || (o->parts[k].submitted && o->parts[k].arena != NULL && !o->parts[k].empty)
                ? o->parts[k].arena->backend
                : NULL;
    return rd_check_memory(o->name, j->e->cfg->node, backends, o->nparts, rank, msg, len);
}

/* Submits only rank s hears refused, as they belong to no op this node matches: a bad name, a
 * drained node, a generation the job has left. Returns 1 when s was answered, else 0. */
static int submit_answered_alone(rd_client *s, const rd_submit *m, char *err, size_t errlen)
{
    rd_job *j = s->job;
    uint32_t rank = s->local_rank;
    if (!rd_name_valid(m->name)) { /* nothing to match it with: only this rank can hear of it */
        snprintf(err, errlen, "tensor names are 1..%d printable ASCII bytes", RD_NAME_MAX);
        rd_optab_answer(j, s, m->request_id, RINGD_E_INVALID, err, NULL, 1);
        return 1;
    }
    if (rd_job_draining(j)) {
        /* Not told to the other nodes: they carry the op over to a ring without this node. */
        snprintf(err, errlen,
                 "tensor '%s': node %s drained: job '%s' goes on without it; this session "
                 "runs no more collectives (close it, and open a new one to join again)",
                 m->name, j->e->cfg->node, j->name);
        rd_optab_answer(j, s, m->request_id, RINGD_E_CLOSED, err, NULL, 1);
        return 1;
    }
    if (m->generation != 0 && m->generation < j->sync_generation) {
        /* Before any check that depends on the job's size, the library's too: they judged by
         * the wrong one. Only this rank hears it: every rank re-synchronises, and the op it
         * belongs to is of an earlier generation (a tombstone would fail the next one). */
        snprintf(err, errlen,
                 "tensor '%s': %s (this rank is now %u of %u, generation %" PRIu64
                 "): restore the last committed state and broadcast it from rank 0",
                 m->name, j->sync_why, j->first_rank + rank, j->size, j->generation);
        rd_optab_answer(j, s, m->request_id, RINGD_E_MEMBERSHIP, err, NULL, 1);
        return 1;
    }
    return 0;
}

/* Every local rank has come to o (submitted, or joined): it runs here on one node, or is
 * announced across nodes (held while the ring takes no announcements), or waits for its group.
 * A doomed op is answered later. */
static void op_ready(rd_op *o, int64_t ready_us)
{
    rd_job *j = o->job;
    if (o->nsubmitted < o->nparts || o->state != OP_PENDING)
        return;
    o->ready_us = ready_us;
    if (o->grp != NULL) { /* it goes with its group */
        if (j->world != NULL)
            rd_optab_set_state(o, OP_HELD);
        if (rd_group_ready(o))
            group_release(j, o->grp);
        return;
    }
    if (j->world != NULL) {
        rd_optab_set_state(o, OP_HELD);
        if (rd_world_up(j->world))
            rd_ops_announce(o);
        return;
    }
    rd_ops_run_here(o);
}

/* Joins (ringd_join). A local rank that submitted the job's join under way has joined: until
 * the join ends, the job's allreduces go on without it, its part zeros (Horovod's hvd.join);
 * any other collective that would wait for it fails on every rank. A node whose ranks have all
 * joined takes its part, zeros, in the allreduces the other nodes announce. */

/* j's join while it holds ranks out: until it is negotiated (every node announced it: no rank
 * anywhere works on, and what the ranks submit next is for all of them), or fails. */
static const rd_op *join_in_effect(const rd_job *j)
{
    const rd_op *jo = j->join;
    if (jo == NULL || jo->nparts != j->local_size)
        return NULL;
    return jo->state == OP_PENDING || jo->state == OP_HELD || jo->state == OP_ANNOUNCED ? jo : NULL;
}

/* 1 when local rank k has joined: it submitted the job's join, which is in effect. */
static int rank_joined(const rd_job *j, uint32_t k)
{
    const rd_op *jo = join_in_effect(j);
    return jo != NULL && k < jo->nparts && jo->parts[k].submitted;
}

/* 1 when every local rank of j has joined. */
static int all_joined(const rd_job *j)
{
    const rd_op *jo = join_in_effect(j);
    return jo != NULL && jo->nsubmitted == jo->nparts;
}

/* Counts o's joined ranks that have not come as come, taking no part. Returns how many, and the
 * first into *first. */
static uint32_t join_come(rd_op *o, uint32_t *first)
{
    rd_job *j = o->job;
    uint32_t n = 0;
    if (j->join == NULL || o->joining || o->nparts != j->local_size)
        return 0;
    for (uint32_t k = 0; k < o->nparts; k++) {
        part *pt = &o->parts[k];
        if (pt->submitted || !rank_joined(j, k))
            continue;
        if (n++ == 0)
            *first = k;
        pt->submitted = 1;
        pt->joined = 1;
        o->nsubmitted++;
    }
    return n;
}

/* o, pending, goes on without its joined ranks (zeros in their place). Returns 1 when it may go
 * on, 0 when it failed: it is not an allreduce of host memory outside any group, and fails on
 * every rank, naming the joined rank (told to the other nodes now when tell, else left UNTOLD
 * for the caller to tell in order). */
static int join_mark(rd_op *o, int tell)
{
    rd_job *j = o->job;
    uint32_t first = 0;
    if (o->state != OP_PENDING || join_come(o, &first) == 0)
        return 1;
    const rd_arena *a0 = op_arena(o);
    const char *why = NULL;
    rd_status rc = RINGD_E_INVALID;
    if (o->p.coll != RD_COLL_ALLREDUCE)
        why = "only allreduces run until every rank has joined, as in Horovod";
    else if (o->grp != NULL || o->p.group_digest != 0)
        why = "grouped ops do not run while ranks have joined";
    else if (o->p.device || (a0 != NULL && a0->backend->device_memory))
        why = "allreduces in device memory do not run while ranks have joined: pass host memory";
    else if (o->zeros == NULL &&
             (o->zeros = calloc(1, 2 * o->p.count * rd_dtype_size((rd_dtype)o->p.dtype) + 1)) ==
                 NULL) {
        why = "out of memory for the joined ranks' zeros";
        rc = RINGD_E_NOMEM;
    }
    /* the ranks still at work: the join is not stalled */
    j->join->since_ms = rd_now_ms();
    j->join->warned = 0;
    if (why == NULL)
        return 1;
    char msg[600];
    snprintf(msg, sizeof(msg),
             "tensor '%s': the %s cannot run: rank %u (node %.64s) has joined "
             "(ringd_join); %s",
             o->name, rd_coll_name((rd_coll)o->p.coll), j->first_rank + first, j->e->cfg->node,
             why);
    rd_optab_tombstone(o, rc, msg);
    if (tell && j->world != NULL && rd_world_up(j->world) && o->state == OP_UNTOLD)
        rd_ops_tell(o, rc, msg, 0, NULL, 0);
    return 0;
}

/* Local ops of j named name that this node has yet to announce. */
static size_t unannounced_here(const rd_job *j, const char *name)
{
    size_t n = 0;
    for (const rd_op *x = j->buckets[rd_name_hash(name) & (j->nbuckets - 1)]; x != NULL;
         x = x->next)
        n += strcmp(x->name, name) == 0 &&
             (x->state == OP_PENDING || x->state == OP_HELD || x->state == OP_UNTOLD);
    return n;
}

/* An op the other nodes announced that this node makes its own (join_fill): the record's
 * name, params, and failure if it failed, copied out of the negotiation's table. */
typedef struct {
    char *name;
    rd_op_params p;
    uint32_t status;
    char *message;
} unheard_copy;

/* The op of j in state st made as number seq, or NULL. */
static rd_op *op_by_seq(rd_job *j, op_state st, uint64_t seq)
{
    rd_op *x = j->first[st];
    while (x != NULL && x->seq != seq)
        x = x->snext;
    return x;
}

/* Every local rank of j has joined: each op the ranks still at work announced (on another node)
 * that this node has none of yet becomes one here, every rank joined; each goes on (or fails, as
 * join_mark says, or fails as it failed elsewhere). All are made, from a copy of the table,
 * before any is told to the other nodes, which changes the table; then they are told in the
 * order they were made, that of their announcements, so that each pairs with its record (the
 * join itself may end meanwhile: what was announced before it still has this node's part). */
static void join_fill(rd_job *j)
{
    if (!all_joined(j) || j->world == NULL || !rd_world_up(j->world))
        return;
    size_t n = rd_sched_unannounced(j->sched, NULL, 0), made = 0, want = 0;
    if (n == 0)
        return;
    rd_neg_unheard *u = malloc(n * sizeof(*u));
    unheard_copy *c = calloc(n, sizeof(*c));
    uint64_t *seqs = malloc(n * sizeof(*seqs));
    if (u == NULL || c == NULL || seqs == NULL)
        goto oom;
    n = rd_sched_unannounced(j->sched, u, n);
    for (size_t i = 0; i < n; i++) {
        size_t before = 0; /* the ops of its name announced before it: this node has them? */
        for (size_t k = 0; k < i; k++)
            before += strcmp(u[k].name, u[i].name) == 0;
        if (before < unannounced_here(j, u[i].name))
            continue;
        c[want] = (unheard_copy){strdup(u[i].name), u[i].p, u[i].status, strdup(u[i].message)};
        if (c[want].name == NULL || c[want].message == NULL) {
            want++;
            goto oom;
        }
        want++;
    }
    free(u);
    u = NULL;
    for (size_t i = 0; i < want; i++) {
        rd_op *o = rd_optab_new(j, c[i].name, &c[i].p, 0);
        if (o == NULL) { /* those made still go */
            rd_log(RD_LOG_ERROR, "job", "job '%s': out of memory joining the other nodes' ops",
                   j->name);
            break;
        }
        uint32_t first;
        if (c[i].status != 0) { /* failed elsewhere: it fails here alike */
            join_come(o, &first);
            rd_optab_tombstone(
                o, c[i].status < RINGD_RESULT_COUNT ? (rd_status)c[i].status : RINGD_E_PROTOCOL,
                c[i].message);
        } else {
            join_mark(o, 0);
        }
        seqs[made++] = o->seq;
    }
    for (size_t i = 0; i < made; i++) { /* looked up again: one going on may end another */
        rd_op *x = op_by_seq(j, OP_PENDING, seqs[i]);
        if (x != NULL) {
            op_ready(x, rd_now_us());
        } else if ((x = op_by_seq(j, OP_UNTOLD, seqs[i])) != NULL) {
            char msg[768];
            snprintf(msg, sizeof(msg), "%s", x->message != NULL ? x->message : "");
            rd_ops_tell(x, x->status, msg, 0, NULL, 0);
        }
    }
    goto done;
oom: /* the stall inspector names what then waits */
    rd_log(RD_LOG_ERROR, "job", "job '%s': out of memory joining the other nodes' ops", j->name);
done:
    for (size_t i = 0; c != NULL && i < want; i++) {
        free(c[i].name);
        free(c[i].message);
    }
    free(c);
    free(u);
    free(seqs);
}

/* Local rank joined with o, its job's join: the ops that wait for it go on without it (or fail),
 * failures it will never come to are buried, and once every local rank has joined this node
 * takes its part in what the other nodes announce. */
static void join_arrived(rd_job *j, rd_op *o)
{
    static const op_state failed[] = {OP_UNTOLD, OP_TOLD, OP_TOMBSTONE};
    uint32_t first;
    j->join = o;
    /* Ops are looked up again by their creation number: one going on may end another. */
    size_t n = j->count[OP_PENDING], k = 0;
    uint64_t *seqs = n > 0 ? malloc(n * sizeof(*seqs)) : NULL;
    for (rd_op *x = j->first[OP_PENDING]; x != NULL && seqs != NULL; x = x->snext)
        if (x != o)
            seqs[k++] = x->seq;
    for (size_t i = 0; i < k; i++) {
        rd_op *x = j->first[OP_PENDING];
        while (x != NULL && x->seq != seqs[i])
            x = x->snext;
        if (x != NULL && join_mark(x, 1))
            op_ready(x, rd_now_us());
    }
    free(seqs);
    /* a rank that joined never comes to a failed op: one left waiting for it would fail the
     * next op of its name the rank submits once the join ends */
    for (size_t f = 0; f < sizeof(failed) / sizeof(failed[0]); f++)
        for (rd_op *x = j->first[failed[f]], *next; x != NULL; x = next) {
            next = x->snext;
            if (join_come(x, &first) > 0)
                rd_optab_bury(x);
        }
    join_fill(j);
}

void rd_ops_heard(void *arg)
{
    join_fill(arg);
}

void rd_ops_submit(rd_client *s, const rd_submit *m)
{
    rd_job *j = s->job;
    uint32_t rank = s->local_rank;
    char err[768];

    if (submit_answered_alone(s, m, err, sizeof(err)))
        return;
    if (!m->join && rank_joined(j, rank)) { /* it belongs to no op: the others go on without it */
        snprintf(err, sizeof(err),
                 "tensor '%s': local rank %u has joined (ringd_join): it submits nothing until "
                 "its join returns",
                 m->name, rank);
        rd_optab_answer(j, s, m->request_id, RINGD_E_INVALID, err, NULL, 1);
        return;
    }
    rd_status rc;
    if (m->refused != 0) {
        rc = m->refused < RINGD_RESULT_COUNT ? (rd_status)m->refused : RINGD_E_INVALID;
        snprintf(err, sizeof(err), "%.700s",
                 m->refusal != NULL && m->refusal[0] ? m->refusal : "refused by the library");
    } else {
        rd_check_session cs = {j->e->cfg->node, j->size,   s->arena,
                               s->device_arena, s->device, j->first_rank + rank,
                               j->generation};
        rc = rd_check_submit(&cs, m, err, sizeof(err));
    }
    if (rc == RINGD_OK && m->group[0] != '\0' && m->group_size > j->e->cfg->max_pending) {
        snprintf(err, sizeof(err),
                 "tensor '%s': its group of %u ops is larger than a rank may have outstanding "
                 "(--max-pending %" PRId64 "): it could never be whole",
                 m->name, m->group_size, (int64_t)j->e->cfg->max_pending);
        rc = RINGD_E_INVALID;
    }
    if (rc == RINGD_OK && s->ops_in_flight > (uint64_t)j->e->cfg->max_pending) {
        snprintf(err, sizeof(err),
                 "tensor '%s': local rank %u already has %" PRIu64
                 " collectives outstanding (--max-pending)",
                 m->name, rank, s->ops_in_flight - 1);
        rc = RINGD_E_INVALID;
    }
    if (rc != RINGD_OK) {
        rd_op_params p = rd_check_params(m, j->size);
        op_refuse(j, s, rank, m->request_id, m->name, &p, rc, err, valid_group(m) ? m : NULL);
        return;
    }

    int dup;
    rd_op *o = rd_optab_find(j, m->name, rank, &dup);
    if (dup) { /* refused here, and failed for the other ranks too (op_refuse) */
        snprintf(err, sizeof(err),
                 "tensor '%s' is already submitted by local rank %u and not yet complete: one "
                 "collective of a name at a time per rank",
                 m->name, rank);
        rd_op_params p = rd_check_params(m, j->size);
        op_refuse(j, s, rank, m->request_id, m->name, &p, RINGD_E_INVALID, err,
                  valid_group(m) ? m : NULL);
        return;
    }
    if (o != NULL && rd_optab_failed(o->state)) {
        /* failed before this rank's group heard of it (another rank's refusal): so does the
         * group (first: visiting may free o) */
        if (o->grp == NULL && valid_group(m) &&
            rd_group_join(o, m->group, m->group_size, m->group_index) > 0)
            rd_optab_group_failed(o, o->status, o->message);
        rd_optab_visit(o, s, rank, m->request_id, o->status, o->message);
        return;
    }
    if (o == NULL) {
        rd_op_params p = rd_check_params(m, j->size);
        o = rd_optab_new(j, m->name, &p, rank);
        if (o == NULL) {
            rd_optab_answer(j, s, m->request_id, RINGD_E_NOMEM, "out of memory", NULL, 1);
            return;
        }
        if (op_take_counts(o, m) != 0 ||
            (m->group[0] != '\0' &&
             rd_group_join(o, m->group, m->group_size, m->group_index) < 0)) {
            op_refuse(j, s, rank, m->request_id, m->name, &p, RINGD_E_NOMEM, "out of memory", NULL);
            return;
        }
        o->joining = m->join;
    }

    uint64_t in_len, out_len;
    rd_check_lengths(m, j->size, j->first_rank + rank, &in_len, &out_len);
    part *pt = &o->parts[rank];
    pt->s = s;
    pt->submitted = 1;
    pt->request_id = m->request_id;
    pt->in_off = m->op == RD_COLL_BROADCAST && rank != o->p.root ? m->out_offset : m->in_offset;
    pt->out_off = m->out_offset;
    if (in_len == 0) /* no bytes: its offset was never checked, and nothing reads there */
        pt->in_off = 0;
    if (out_len == 0)
        pt->out_off = 0;
    pt->arena = rd_check_on_device(m) ? s->device_arena : s->arena;
    pt->empty = in_len == 0 && out_len == 0;
    rd_arena_ref(pt->arena);
    pt->submit_us = rd_now_us();
    o->nsubmitted++;

    if (!op_agrees(o, m, rank, err, sizeof(err))) {
        /* A tombstone first; then the other nodes learn of it (which may end it at once). */
        rd_optab_fail(o, RINGD_E_MISMATCH, "%s", err);
        if (j->world != NULL && rd_world_up(j->world))
            rd_ops_tell(o, RINGD_E_MISMATCH, err, 0, NULL, 0);
        return;
    }
    if (o->grp != NULL && o->grp->status != RINGD_OK) { /* its group failed before it came */
        rd_status gst;
        const char *why = rd_group_why(o, &gst);
        snprintf(err, sizeof(err), "tensor '%s': %s", o->name, why);
        rd_optab_tombstone(o, gst, err);
        if (j->world != NULL && rd_world_up(j->world))
            rd_ops_tell(o, gst, err, 0, NULL, 0);
        return;
    }
    if (o->joining) /* this rank has joined: the ops waiting for it go on without it */
        join_arrived(j, o);
    else if (!join_mark(o, 1))
        return;
    op_ready(o, pt->submit_us);
}

void rd_ops_failed_elsewhere(void *arg, const char *name, const rd_op_params *p, uint32_t status,
                             const char *message)
{
    rd_job *j = arg;
    char msg[768];
    rd_status rc = status < RINGD_RESULT_COUNT ? (rd_status)status : RINGD_E_PROTOCOL;
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
        return;      /* held (its announcement follows) or failed here already */
    if (o == NULL) { /* none of this node's ranks has submitted it yet */
        o = rd_optab_new(j, name, p, 0);
        if (o == NULL)
            return; /* this node's announcement of the failure waits for its ranks */
    }
    uint32_t first;
    join_come(o, &first); /* ranks that joined never come to it */
    rd_log(RD_LOG_INFO, "job", "job '%s': %s", j->name, msg);
    rd_optab_tombstone(o, rc, msg);
    rd_ops_tell(o, rc, msg, 0, NULL, 0);
}

int rd_ops_negotiated(void *arg, void *own, const rd_neg_outcome *e, rd_op_params *p)
{
    rd_job *j = arg;
    rd_op *o = own;
    if (o->state == OP_TOLD) { /* failed here already; the others now know */
        rd_optab_set_state(o, OP_TOMBSTONE);
        rd_optab_bury(o);
        return 0;
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
        rd_optab_fail(o, e->status <= RINGD_E_REFUSED ? (rd_status)e->status : RINGD_E_PROTOCOL,
                      "%s", e->message);
        return 0;
    }
    if (o->grp != NULL) { /* it goes to the ring with its group, or fails with it */
        int agreed = rd_group_agreed(o);
        if (agreed == 1)
            group_to_ring(j, o->grp);
        if (agreed >= 0)
            return 2;
        rd_status gst;
        const char *why = rd_group_why(o, &gst);
        rd_optab_fail(o, gst, "tensor '%s': %s", o->name, why);
        return 0;
    }
    if (o->p.coll == RD_COLL_BARRIER) { /* every rank has arrived */
        rd_optab_finish(o, RINGD_OK, NULL);
        return 0;
    }
    if (e->direct) {
        o->direct = 1;
        if (e->len != rd_optab_result_bytes(o)) {
            rd_optab_fail(o, RINGD_E_PROTOCOL,
                          "tensor '%s': the negotiated result has %zu bytes, %" PRIu64 " expected",
                          o->name, e->len, rd_optab_result_bytes(o));
            return 0;
        }
        size_t esz = rd_dtype_size((rd_dtype)o->p.dtype);
        for (uint32_t k = 0; k < o->nparts; k++) {
            const uint8_t *src = e->data;
            size_t len = e->len;
            if (o->p.coll == RD_COLL_REDUCESCATTER) { /* the rank's block of the reduced input */
                uint64_t off = 0;
                for (uint32_t r = 0; r < j->first_rank + k && r < o->ncounts; r++)
                    off += o->counts[r];
                src += off * esz;
                len = j->first_rank + k < o->ncounts ? o->counts[j->first_rank + k] * esz : 0;
            }
            if (len > 0 &&
                (o->plan.failed || o->plan.backend->copy(o->plan.out[k], src, len) != 0)) {
                char msg[512];
                snprintf(msg, sizeof(msg), "tensor '%s': writing the result: %s", o->name,
                         o->plan.failed ? o->plan.why : o->plan.backend->error());
                rd_optab_finish(o, RINGD_E_SYSTEM, msg);
                return 0;
            }
        }
        rd_optab_finish(o, RINGD_OK, NULL);
        return 0;
    }
    rd_optab_set_state(o, OP_RING_READY);
    *p = o->p;
    return 1;
}
