/* The engine: the daemon's jobs, the timelines being recorded, and the status of every job. */
#include "engine.h"

#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "optab.h"
#include "stall.h"

/* Describes j into js (zeroed); what it allocates belongs to js, also when it fails. Returns 0,
 * or -1 when out of memory. */
static int describe_job(const rd_job *j, rd_job_status *js)
{
    js->name = j->name;
    js->uid = (uint32_t)j->uid;
    js->world_size = j->world_size;
    js->local_size = j->local_size;
    js->min_size = j->min_size;
    js->size = j->size;
    js->clients = j->nclients;
    js->generation = j->generation;
    js->ops_completed = j->ops_completed;
    js->ops_failed = j->ops_failed;
    if (rd_stall_describe(j, js) != 0)
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
        pending += rd_optab_failed((op_state)st) ? 0 : j->count[st];
    js->ops_in_flight = pending;
    size_t show = pending < 64 ? pending : 64;
    if (show > 0 && (js->pending = calloc(show, sizeof(*js->pending))) == NULL)
        return -1;
    for (const rd_op *o = j->first[OP_PENDING]; o != NULL && js->npending < show; o = o->snext)
        js->pending[js->npending++] = o->name;
    return 0;
}

rd_status rd_engine_describe(rd_engine *d, rd_daemon_status *st)
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
        rd_job_free(e->jobs);
    while (e->recordings != NULL) {
        struct recording *r = e->recordings;
        e->recordings = r->next;
        free(r->job);
        free(r);
    }
    free(e);
}

rd_status rd_engine_record(rd_engine *e, const char *job, rd_timeline *tl, const rd_viewer *who,
                           char *err, size_t errlen)
{
    for (const rd_job *j = e->jobs; j != NULL; j = j->next) {
        if (strcmp(j->name, job) != 0)
            continue;
        if (!who->admin && j->uid != who->uid) {
            snprintf(err, errlen,
                     "job '%s' on node %s runs as uid %u: only that user, root and members of "
                     "the daemon's --admin-group may record its timeline",
                     job, e->cfg->node, (unsigned)j->uid);
            return RINGD_E_REFUSED;
        }
    }
    /* One recording per job; another user's of the same name (made before any job came) never
     * takes this user's job, so it does not stand in its way. */
    int taken = 0;
    for (const rd_job *j = e->jobs; j != NULL; j = j->next)
        taken |= strcmp(j->name, job) == 0 && j->tl != NULL;
    for (const struct recording *r = e->recordings; r != NULL; r = r->next)
        taken |= strcmp(r->job, job) == 0 && r->who.uid == who->uid;
    if (taken) {
        snprintf(err, errlen,
                 "job '%s' on node %s is being recorded already (another ringctl timeline); "
                 "try again when that one ends",
                 job, e->cfg->node);
        return RINGD_E_REFUSED;
    }
    struct recording *r = calloc(1, sizeof(*r));
    if (r == NULL || (r->job = strdup(job)) == NULL) {
        free(r);
        snprintf(err, errlen, "out of memory starting the recording");
        return RINGD_E_NOMEM;
    }
    r->tl = tl;
    r->who = *who;
    r->next = e->recordings;
    e->recordings = r;
    for (rd_job *j = e->jobs; j != NULL; j = j->next)
        if (strcmp(j->name, job) == 0)
            j->tl = tl;
    return RINGD_OK;
}

void rd_engine_record_stop(rd_engine *e, const rd_timeline *tl)
{
    for (struct recording **pp = &e->recordings; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->tl != tl)
            continue;
        struct recording *r = *pp;
        *pp = r->next;
        free(r->job);
        free(r);
        break;
    }
    for (rd_job *j = e->jobs; j != NULL; j = j->next)
        if (j->tl == tl)
            j->tl = NULL;
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
