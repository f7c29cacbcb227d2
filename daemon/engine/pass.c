/* Passes: how ops the coordinator ordered cross nodes. Host ops go to the ring's data plane as
 * one ring task (fused allreduces share one); device ops as a device pass (gathered on the GPU,
 * crossed on NCCL or staged through host memory onto the TCP ring, scattered); both through one
 * crossing queue kept in the coordinator's order, so the n-th collective of a generation is the
 * same tensor on every node. */
#include "pass.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "counters.h"
#include "log.h"
#include "metrics.h"
#include "ops.h"
#include "optab.h"
#include "xfer.h"

/* A ring task and the ops it carries (several when fused). */
typedef struct {
    rd_xfer_task t;
    struct devpass *dp;  /* a device op staged through host memory: its pass goes on */
    uint64_t generation; /* the job's when it started */
    size_t nops;
    rd_op *ops[];
} ring_task;

/* A device op crossing nodes, in three steps:
 *   gather (executor): local ranks reduced on the GPU (prescaled) into local rank 0's output,
 *     or the root's input / every rank's part put there; under TCP, and for the collectives of
 *     per-rank counts on either transport, each rank's input is copied to host memory instead;
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
    uint64_t epoch; /* the job's ring epoch when it started */
    /* TCP: the order's tuning, as a host op's ring task takes it (the same alltoall or
     * allgatherv may be a host op on another node: their ring passes must pair) */
    uint64_t segment_size;
    uint64_t doubling_bytes;
    int conns;
    int queued;                 /* in the job's crossing queue */
    int gathered;               /* its gather ran (failed or not): it may cross */
    uint32_t first;             /* the job's first rank here when it started */
    uint8_t *host;              /* TCP: the staging block, each rank's input then its output */
    const uint8_t **hin;        /* TCP: rank k's input in host memory, in_len[k] bytes */
    uint8_t **hout;             /* TCP: rank k's output in host memory, out_len[k] bytes */
    uint64_t *in_len, *out_len; /* fixed when it started: the steps run off the loop, where the
                                   job's ranks may be renumbered meanwhile */
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
    uint32_t L = o->nparts, first = dp->first;
    uint64_t per = o->p.count * rd_dtype_size(p->dtype), out_bytes = rd_optab_result_bytes(o);
    (void)begin;
    (void)end;
    if (b->bind != NULL && b->bind(p->device) != 0) {
        dev_fail(dp, "using the GPU");
        return;
    }
    if (dp->step == DP_GATHER && !dp->nccl) {
        for (uint32_t k = 0; k < L && !dp->failed; k++)
            if (dp->in_len[k] > 0 && b->copy((void *)dp->hin[k], p->in[k], dp->in_len[k]) != 0)
                dev_fail(dp, "copying an input to host memory");
    } else if (dp->step == DP_GATHER && o->p.coll == RD_COLL_ALLREDUCE) {
        rd_reduce_args a = RD_REDUCE_ARGS_INIT;
        a.prescale = p->args.prescale;
        if (b->reduce(p->dtype, p->redop, p->out[0], (const void *const *)p->in, (int)L, o->p.count,
                      &a) != 0)
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
            if (dp->out_len[k] > 0 && b->copy(p->out[k], dp->hout[k], dp->out_len[k]) != 0)
                dev_fail(dp, "copying the result from host memory");
    } else {
        if (o->p.coll == RD_COLL_ALLREDUCE && (p->args.divisor > 1 || p->args.postscale != 1.0)) {
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
    free(dp->in_len);
    free(dp);
}

/* The pass of o ends (status, message): its ranks hear it. One cut short by the ring's end
 * (cut: 1) waits for the next ring, as ring ops do. Called from the transports' callbacks too:
 * the job is freed on a later turn, never here. */
static void dev_end(devpass *dp, rd_status status, const char *message, int cut)
{
    rd_op *o = dp->o;
    rd_job *j = o->job;
    char where[640] = "", msg[768];
    j->nrunning--;
    j->ndev--;
    if (status != RINGD_OK)
        snprintf(where, sizeof(where), "on node %.64s: %.560s", j->e->cfg->node, message);
    snprintf(msg, sizeof(msg), "tensor '%.100s' %s", o->name, where);
    if (status != RINGD_OK && j->ring == RING_LOST)
        rd_optab_fail(o, RINGD_E_MEMBERSHIP, "tensor '%s': %s", o->name, j->lost);
    else if (cut && dp->epoch != j->epoch && rd_world_up(j->world)) /* the next ring is up */
        rd_optab_fail(o, RINGD_E_MEMBERSHIP, "tensor '%s' %s", o->name, where);
    else if (cut)
        rd_optab_doom(o, where);
    else
        rd_optab_finish(o, status, status == RINGD_OK ? NULL : msg);
    dev_free(dp);
    rd_job_free_later(j);
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
        j->cross = CROSS_BLOCKED;
        rd_world_reform(j->world, msg);
    }
    dev_end(dp, RINGD_E_SYSTEM, why, 1);
}

static void on_dev_step(void *ctx);

/* Queues the pass's next step on the executor. Returns 0, or -1 when it cannot be queued. */
static int dev_step_next(devpass *dp, dev_step step)
{
    dp->step = step;
    return rd_exec_submit(dp->o->job->e->exec, dev_run, on_dev_step, dp, 1, 1) == RINGD_OK ? 0 : -1;
}

/* The crossing ended (status 0, or why it failed). */
static void dev_crossed(devpass *dp, rd_status status, const char *why)
{
    rd_job *j = dp->o->job;
    j->ncrossing--;
    if (status == RINGD_OK) {
        if (dev_step_next(dp, DP_SCATTER) != 0)
            dev_end(dp, RINGD_E_NOMEM, "out of memory queueing the op", 0);
        return;
    }
    dev_end(dp, status, why,
            j->ring != RING_SOUND || dp->epoch != j->epoch || !rd_world_up(j->world));
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
        j->cross = CROSS_BLOCKED;
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
                           .segment_size = dp->segment_size,
                           .conns = dp->conns,
                           .doubling_bytes = dp->doubling_bytes,
                           .nmembers = 1,
                           .members = mem,
                           .counts = o->counts,
                           .ctx = rt};
    rt->dp = dp;
    rd_world_submit(j->world, &rt->t);
}

/* Hands what heads the crossing queue to its transport, in order, while it is ready. */
static void cross_pump(rd_job *j)
{
    while (j->cross_head != NULL && j->cross == CROSS_OPEN) {
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

void rd_pass_ring_ended(rd_job *j)
{
    const char *why = "the ring re-formed before it crossed nodes";
    j->epoch++;
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
                rd_optab_doom(c->rt->ops[i], why);
            }
            free(c->rt->t.members);
            free(c->rt);
        }
        free(c);
    }
    j->cross_tail = NULL;
    j->cross = CROSS_OPEN;
    rd_job_free_later(j);
}

void rd_pass_drop(rd_job *j)
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
    j->cross = CROSS_BLOCKED;
    rd_world_reform(j->world, msg);
    rd_optab_doom(o, where);
}

/* Starts device op o across nodes on the generation's transport, queued to cross in the
 * coordinator's order, under tuning u. */
static void dev_start(rd_op *o, const rd_tuning *u)
{
    rd_job *j = o->job;
    const char *refusal = rd_devcomm_refusal(j->devcomm);
    /* the collectives of per-rank counts cross through host memory on the TCP ring, also in a
     * generation on NCCL (see docs/gpu.md) */
    int nccl = rd_devcomm_nccl(j->devcomm) && o->counts == NULL;
    uint32_t L = o->nparts;
    /* the same answer on every node: each knows the plan and the ring's sizes (the collectives
     * of per-rank counts cross through host memory whatever the plan: nodes that pass host
     * memory run them too) */
    if (refusal != NULL && o->counts == NULL) {
        rd_optab_finish(o, RINGD_E_REFUSED, refusal);
        return;
    }
    if (nccl && o->p.coll == RD_COLL_ALLGATHER && rd_devcomm_even(j->devcomm) != L) {
        rd_optab_finish(o, RINGD_E_INVALID,
                        "an allgather of device memory across nodes on NCCL needs as many ranks on "
                        "every node; this ring's nodes differ");
        return;
    }
    rd_ops_resolve(o);
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
    dp->first = j->first_rank;
    dp->segment_size = u->segment_size;
    dp->conns = (int)u->conns;
    dp->doubling_bytes = u->doubling_bytes;
    o->started_us = rd_now_us();
    if (!nccl) { /* staging: each rank's input, then its output */
        uint64_t total = 0;
        dp->in_len = calloc(2 * (size_t)L + 1, sizeof(*dp->in_len));
        dp->out_len = dp->in_len != NULL ? dp->in_len + L : NULL;
        for (uint32_t k = 0; k < L && dp->in_len != NULL; k++) {
            rd_optab_part_bytes(o, k, &dp->in_len[k], &dp->out_len[k]);
            total += dp->in_len[k] + dp->out_len[k];
        }
        dp->host = malloc((size_t)total + 1);
        dp->hin = calloc(L, sizeof(*dp->hin));
        dp->hout = calloc(L, sizeof(*dp->hout));
        if (dp->in_len == NULL || dp->host == NULL || dp->hin == NULL || dp->hout == NULL) {
            dev_free(dp);
            dev_refuse_here(o, "out of memory staging a device tensor in host memory");
            return;
        }
        uint8_t *at = dp->host;
        for (uint32_t k = 0; k < L; k++) {
            dp->hin[k] = at;
            dp->hout[k] = at + dp->in_len[k];
            at += dp->in_len[k] + dp->out_len[k];
        }
    }
    if (cross_queue(j, dp, NULL) != 0) {
        dev_free(dp);
        dev_refuse_here(o, "out of memory queueing the op");
        return;
    }
    rd_optab_set_state(o, OP_RUNNING);
    j->nrunning++;
    j->ndev++;
    if (dev_step_next(dp, DP_GATHER) != 0) { /* it crosses as a failure: the ring re-forms */
        dp->failed = 1;
        snprintf(dp->why, sizeof(dp->why), "out of memory queueing the op");
        dp->gathered = 1;
        cross_pump(j);
    }
}

void rd_pass_start(void *arg, void **owns, size_t n, const rd_tuning *u)
{
    rd_job *j = arg;
    rd_op **ops = (rd_op **)owns;
    if (n == 0)
        return;
    if (rd_world_solo(j->world)) { /* the job's last node: the local reduction is the result */
        for (size_t i = 0; i < n; i++)
            rd_ops_run_here(ops[i]);
        return;
    }
    if (ops[0]->p.device) { /* device ops never fuse: n is 1 */
        dev_start(ops[0], u);
        return;
    }
    ring_task *rt = calloc(1, sizeof(*rt) + n * sizeof(rd_op *));
    rd_xfer_member *mem = calloc(n, sizeof(*mem));
    if (rt == NULL || mem == NULL) { /* the others would pair their next pass with this one */
        free(rt);
        free(mem);
        j->cross = CROSS_BLOCKED;
        rd_world_reform(j->world, "out of memory starting ops on the ring");
        for (size_t i = 0; i < n; i++)
            rd_optab_doom(ops[i], "out of memory starting the op");
        return;
    }
    for (size_t i = 0; i < n; i++)
        rd_ops_resolve(ops[i]);
    const rd_local_plan *p0 = &ops[0]->plan;
    rt->t.backend = p0->backend;
    rt->t.coll = p0->coll;
    rt->t.dtype = p0->dtype;
    rt->t.redop = p0->redop;
    rt->t.args = p0->args;
    rt->t.root = ops[0]->p.root;
    rt->t.segment_size = u->segment_size;
    rt->t.conns = (int)u->conns;
    rt->t.doubling_bytes = u->doubling_bytes;
    rt->t.members = mem;
    rt->t.nmembers = n;
    rt->t.counts = ops[0]->counts; /* a reducescatter or allgatherv runs alone */
    rt->t.ctx = rt;
    rt->generation = j->generation;
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
        rd_optab_set_state(o, OP_RUNNING);
        rt->ops[i] = o;
        j->nrunning++;
    }
    if (j->cross_head == NULL && j->cross == CROSS_OPEN) {
        rd_world_submit(j->world, &rt->t);
    } else if (cross_queue(j, NULL, rt) != 0) { /* behind device ops still gathering */
        for (size_t i = 0; i < n; i++)
            j->nrunning--;
        j->cross = CROSS_BLOCKED;
        rd_world_reform(j->world, "out of memory queueing ops for the ring");
        for (size_t i = 0; i < n; i++)
            rd_optab_doom(ops[i], "out of memory queueing ops for the ring");
        free(mem);
        free(rt);
    }
}

void rd_pass_done(void *arg, struct rd_xfer_task *t)
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
        if (t->status != RINGD_OK && j->ring == RING_LOST) { /* no ring to wait for */
            rd_optab_fail(o, RINGD_E_MEMBERSHIP, "tensor '%s': %s", o->name, j->lost);
            continue;
        }
        if (t->status != RINGD_OK && j->ring != RING_SOUND) { /* answered once the ring is back */
            rd_optab_doom(o, t->message);
            continue;
        }
        /* The next ring came up, for a change its clients must re-synchronise with, before this
         * one's thread saw its links go: the answer names the change, as a doomed op's does. */
        if (t->status != RINGD_OK && j->sync_generation > rt->generation && j->sync_why[0]) {
            rd_optab_fail_changed(o, j->sync_why, t->message);
            continue;
        }
        rd_optab_finish(o, t->status, t->status == RINGD_OK ? NULL : t->message);
    }
    free(t->members);
    free(rt);
    /* Called from the data plane's completion callback, which a job freed now would free too. */
    rd_job_free_later(j);
}

rd_world_await rd_pass_awaits(void *arg)
{
    rd_job *j = arg;
    if (j->ncrossing > 0)
        return RD_AWAIT_CROSSING;
    if (rd_sched_orders_waiting(j->sched) || j->ndev > 0 || j->cross_head != NULL)
        return RD_AWAIT_NEGOTIATION; /* device passes, and what waits behind them, cross first */
    return j->count[OP_RING_READY] > 0 ? RD_AWAIT_ORDER : RD_AWAIT_NOTHING;
}
