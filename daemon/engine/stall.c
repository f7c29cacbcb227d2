/* The stall inspector of a job's ops: ops that wait for ranks are warned about past
 * --stall-warn and ended alike on every node past --stall-abort; ops that wait for a ring end
 * once the job's wait (--open-timeout) is over; tombstones no rank comes to go. */
#include "stall.h"

#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "log.h"
#include "metrics.h"
#include "ops.h"
#include "optab.h"
#include "group.h"

int64_t rd_stall_period(const rd_job *j)
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
        rd_sched_missing(
            j->sched, o->name,
            o->state == OP_HELD || o->state == OP_ANNOUNCED || o->state == OP_RING_READY ? o : NULL,
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
    if (age < c->stall_warn || (o->grp != NULL && o->gready && !o->grp->released))
        return; /* waiting for its group: groups_inspect's */
    /* Negotiated for the ring: the coordinator orders it within a turn. Past --stall-abort plus
     * --peer-timeout, nothing will order it. */
    if (o->state == OP_RING_READY) {
        if (c->stall_abort > 0 && age >= c->stall_abort + c->peer_timeout &&
            !rd_sched_held(j->sched)) /* held: the device transport's agreement, bounded */
            rd_optab_fail(
                o, RINGD_E_STALLED,
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
        rd_optab_tombstone(o, RINGD_E_STALLED, msg);
        if (j->world != NULL)
            rd_ops_tell(o, RINGD_E_STALLED, msg, 0, NULL, 0);
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

/* Groups some of whose members this node's ranks have not all submitted past --stall-abort fail
 * as stalled (the members here, and every node's copies once told); failed groups long past it
 * are forgotten. */
static void groups_inspect(rd_job *j, int64_t now)
{
    const rd_config *c = j->e->cfg;
    rd_group *g, *next;
    for (g = j->groups; g != NULL; g = next) {
        next = g->next;
        if (rd_group_expire(j, g, now) || g->status != RINGD_OK || g->released ||
            c->stall_abort <= 0 || now - g->since_ms < c->stall_abort)
            continue;
        if (g->seen_n == g->size && g->ready == g->size)
            continue;
        char msg[512];
        size_t n = (size_t)snprintf(msg, sizeof(msg),
                                    "group '%.100s' stalled: this node's ranks had not all "
                                    "submitted its ops within %" PRId64 " ms (places",
                                    g->name, c->stall_abort);
        for (uint32_t i = 0, k = 0; i < g->size && k < 8 && n + 16 < sizeof(msg); i++)
            if (!g->seen[i] || (g->ops[i] != NULL && !g->ops[i]->gready))
                n += (size_t)snprintf(msg + n, sizeof(msg) - n, "%s %u", k++ ? "," : "", i);
        if (n + 2 < sizeof(msg))
            snprintf(msg + n, sizeof(msg) - n, ")");
        rd_op *first = NULL;
        for (uint32_t i = 0; i < g->size && first == NULL; i++)
            first = g->ops[i];
        if (first == NULL)
            continue;
        rd_log(RD_LOG_WARN, "job", "job '%s': %s", j->name, msg);
        /* as a failure of its first member here: the rest fail with it */
        rd_optab_group_failed(first, RINGD_E_STALLED, msg);
        char why[896];
        snprintf(why, sizeof(why), "tensor '%.100s': %s", first->name, msg);
        if (first->state == OP_PENDING || first->state == OP_HELD) {
            rd_optab_tombstone(first, RINGD_E_STALLED, why);
            rd_job_tell_later(j);
        }
        next = j->groups; /* failing members may have ended groups: from the start again */
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
        rd_optab_fail(o, RINGD_E_MEMBERSHIP,
                      "%s (the ring has not re-formed within %" PRId64 " ms: %s)", o->message,
                      j->wait_ms, detail);
        return;
    }
    rd_optab_fail(o, RINGD_E_TIMEOUT,
                  "tensor '%s': job '%s' has had no complete ring for %" PRId64 " ms: %s", o->name,
                  j->name, j->wait_ms, detail);
}

void rd_stall_tick(evutil_socket_t fd, short what, void *arg)
{
    rd_job *j = arg;
    (void)fd;
    (void)what;
    const rd_config *c = j->e->cfg;
    int64_t now = rd_now_ms();
    int up = j->world == NULL || rd_world_up(j->world);
    rd_op *o, *next;
    groups_inspect(j, now);
    /* A tombstone some rank never came to: gone after --stall-abort. */
    for (o = j->first[OP_TOMBSTONE]; o != NULL; o = next) {
        next = o->snext;
        if (c->stall_abort > 0 && now - o->since_ms >= c->stall_abort) {
            rd_optab_remove(j, o);
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

/* 1 when o waits for ranks past --stall-warn. */
static int stalled(const rd_op *o)
{
    return o->warned && !rd_optab_failed(o->state) && o->state != OP_RUNNING;
}

int rd_stall_describe(const rd_job *j, rd_job_status *js)
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
