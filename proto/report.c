/* The daemon's status: its plain values, and the StatusReply they become. */
#include "report.h"

#include <stdlib.h>

#include "ringd.pb-c.h"

rd_daemon_status *rd_daemon_status_new(void)
{
    return calloc(1, sizeof(rd_daemon_status));
}

void rd_daemon_status_free(rd_daemon_status *s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->njobs; i++) {
        rd_job_status *j = &s->jobs[i];
        free(j->pending);
        free(j->stalls);
        if (j->ring != NULL)
            free(j->ring->members);
        free(j->ring);
    }
    free(s->jobs);
    free(s->clients);
    free(s->devices);
    free(s);
}

/* A borrowed string as a generated message holds it (which never writes through it). */
static char *str(const char *s)
{
    return (char *)(s != NULL ? s : "");
}

/* Room for a repeated field of n messages of size bytes, in one zeroed allocation: the n
 * pointers, then the messages they are to point at. free releases it. NULL when n is 0 or out
 * of memory. */
static void *repeated_new(size_t n, size_t size)
{
    return n > 0 ? calloc(1, n * (sizeof(void *) + size)) : NULL;
}

/* The messages of a repeated field of n made by repeated_new (NULL when n is 0). */
static void *repeated_messages(void *ptrs, size_t n)
{
    return n > 0 ? (void **)ptrs + n : NULL;
}

/* Frees a RingInfo of ring_info_new. NULL is a no-op. */
static void ring_info_free(Ringd__RingInfo *ri)
{
    if (ri == NULL)
        return;
    free(ri->members);
    free(ri->links);
    free(ri);
}

/* A RingInfo and the Tuning it may point at, in one allocation. */
typedef struct {
    Ringd__RingInfo ri;
    Ringd__Tuning tuning;
} ring_info_block;

/* The RingInfo of r (ring_info_free releases it). NULL when out of memory. */
static Ringd__RingInfo *ring_info_new(const rd_world_status *r)
{
    size_t n = r->nmembers, nl = r->nlinks;
    ring_info_block *blk = calloc(1, sizeof(*blk));
    if (blk == NULL)
        return NULL;
    Ringd__RingInfo *ri = &blk->ri;
    ringd__ring_info__init(ri);
    if (r->has_tuning) {
        ringd__tuning__init(&blk->tuning);
        blk->tuning.fusion_threshold = r->tuning.fusion_threshold;
        blk->tuning.segment_size = r->tuning.segment_size;
        blk->tuning.conns = r->tuning.conns;
        blk->tuning.cycle_us = r->tuning.cycle_us;
        blk->tuning.autotune = (uint32_t)r->tuning.autotune;
        blk->tuning.doubling_bytes = r->tuning.doubling_bytes;
        ri->tuning = &blk->tuning;
        ri->autotune_trials = r->autotune_trials;
        ri->autotune_best_bps = r->autotune_best_bps;
    }
    ri->members = repeated_new(n, sizeof(Ringd__MemberInfo));
    ri->links = repeated_new(nl, sizeof(Ringd__LinkInfo));
    if ((n > 0 && ri->members == NULL) || (nl > 0 && ri->links == NULL)) {
        ring_info_free(ri);
        return NULL;
    }
    Ringd__MemberInfo *mi = repeated_messages(ri->members, n);
    Ringd__LinkInfo *li = repeated_messages(ri->links, nl);
    ri->generation = r->generation;
    ri->state = str(r->state);
    ri->position = r->position;
    ri->coordinator = str(r->coordinator);
    ri->gpu_transport = str(r->gpu_transport);
    ri->gpu_transport_why = str(r->gpu_transport_why);
    ri->pair_links = r->pair_links;
    ri->pair_bytes = r->pair_bytes;
    for (size_t i = 0; i < n; i++) {
        const rd_member_status *m = &r->members[i];
        ringd__member_info__init(&mi[i]);
        mi[i].first_rank = m->first_rank;
        mi[i].node = str(m->node);
        mi[i].address = str(m->address);
        mi[i].local_size = m->local_size;
        mi[i].state = str(m->state);
        ri->members[ri->n_members++] = &mi[i];
    }
    for (size_t k = 0; k < nl; k++) {
        const rd_link_status *l = &r->links[k];
        ringd__link_info__init(&li[k]);
        li[k].peer = str(l->peer);
        li[k].direction = str(l->direction);
        li[k].conns = l->conns;
        li[k].bytes = l->bytes;
        li[k].throughput_bps = l->throughput_bps;
        ri->links[ri->n_links++] = &li[k];
    }
    return ri;
}

/* Fills ji (initialised) from j. Its pending names, stalls and ring are allocated, also when it
 * fails: job_info_clear releases them. Returns 0, or -1 when out of memory. */
static int job_info_of(const rd_job_status *j, Ringd__JobInfo *ji)
{
    ji->name = str(j->name);
    ji->world_size = j->world_size;
    ji->local_size = j->local_size;
    ji->min_size = j->min_size;
    ji->uid = j->uid;
    ji->clients = j->clients;
    ji->generation = j->generation;
    ji->ops_in_flight = j->ops_in_flight;
    ji->ops_completed = j->ops_completed;
    ji->ops_failed = j->ops_failed;
    if (j->npending > 0 && (ji->pending = calloc(j->npending, sizeof(char *))) == NULL)
        return -1;
    for (size_t k = 0; k < j->npending; k++)
        ji->pending[ji->n_pending++] = str(j->pending[k]);
    ji->stalls = repeated_new(j->nstalls, sizeof(Ringd__StallInfo));
    if (j->nstalls > 0 && ji->stalls == NULL)
        return -1;
    Ringd__StallInfo *si = repeated_messages(ji->stalls, j->nstalls);
    for (size_t k = 0; k < j->nstalls; k++) {
        ringd__stall_info__init(&si[k]);
        si[k].name = str(j->stalls[k].name);
        si[k].age_ms = j->stalls[k].age_ms;
        si[k].missing = str(j->stalls[k].missing);
        ji->stalls[ji->n_stalls++] = &si[k];
    }
    if (j->ring != NULL && (ji->ring = ring_info_new(j->ring)) == NULL)
        return -1;
    return 0;
}

/* Frees what job_info_of allocated for ji (not ji). */
static void job_info_clear(Ringd__JobInfo *ji)
{
    free(ji->pending);
    free(ji->stalls);
    ring_info_free(ji->ring);
}

/* Fills ci (initialised) from c. */
static void client_info_of(const rd_client_status *c, Ringd__ClientInfo *ci)
{
    ci->job = str(c->job);
    ci->pid = c->pid;
    ci->uid = c->uid;
    ci->local_rank = c->local_rank;
    ci->ops_in_flight = c->ops_in_flight;
    ci->ops_completed = c->ops_completed;
    ci->arena_size = c->arena_size;
    ci->has_device = c->device >= 0;
    ci->device = c->device >= 0 ? (uint32_t)c->device : 0;
}

Ringd__StatusReply *rd_report_reply_new(const rd_daemon_status *s)
{
    size_t nj = s->njobs, nc = s->nclients, nd = s->ndevices;
    Ringd__StatusReply *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    ringd__status_reply__init(r);
    r->jobs = repeated_new(nj, sizeof(Ringd__JobInfo));
    r->clients = repeated_new(nc, sizeof(Ringd__ClientInfo));
    r->devices = repeated_new(nd, sizeof(Ringd__DeviceInfo));
    if ((nj > 0 && r->jobs == NULL) || (nc > 0 && r->clients == NULL) ||
        (nd > 0 && r->devices == NULL))
        goto fail;
    Ringd__JobInfo *ji = repeated_messages(r->jobs, nj);
    Ringd__ClientInfo *ci = repeated_messages(r->clients, nc);
    Ringd__DeviceInfo *di = repeated_messages(r->devices, nd);
    r->version = str(s->version);
    r->pid = s->pid;
    r->uptime_ms = s->uptime_ms;
    r->ops_in_flight = s->ops_in_flight;
    r->ops_completed = s->ops_completed;
    r->ops_failed = s->ops_failed;
    r->bytes_reduced = s->bytes_reduced;
    r->node = str(s->node);
    r->listen = str(s->listen);
    r->redis = str(s->redis);
    r->redis_connected = s->redis_connected != 0;
    r->redis_rtt_us = s->redis_rtt_us;
    r->metrics = str(s->metrics);
    r->ring_passes = s->ring_passes;
    r->ring_ops = s->ring_ops;
    r->control_sent = s->control_sent;
    r->control_bytes_sent = s->control_bytes_sent;
    r->keepalives_sent = s->keepalives_sent;
    r->draining = s->draining != 0;
    r->drain_timeout_ms = s->drain_timeout_ms;
    for (size_t i = 0; i < nj; i++) {
        ringd__job_info__init(&ji[i]);
        r->jobs[r->n_jobs++] = &ji[i];
        if (job_info_of(&s->jobs[i], &ji[i]) != 0)
            goto fail;
    }
    for (size_t i = 0; i < nc; i++) {
        ringd__client_info__init(&ci[i]);
        client_info_of(&s->clients[i], &ci[i]);
        r->clients[r->n_clients++] = &ci[i];
    }
    for (size_t i = 0; i < nd; i++) {
        ringd__device_info__init(&di[i]);
        di[i].index = s->devices[i].index;
        di[i].name = str(s->devices[i].name);
        di[i].uuid = str(s->devices[i].uuid);
        di[i].memory = s->devices[i].memory;
        di[i].clients = s->devices[i].clients;
        di[i].bytes_reduced = s->devices[i].bytes_reduced;
        di[i].arena_bytes = s->devices[i].arena_bytes;
        r->devices[r->n_devices++] = &di[i];
    }
    r->devices_why = str(s->devices_why);
    return r;

fail:
    rd_report_reply_free(r);
    return NULL;
}

void rd_report_reply_free(Ringd__StatusReply *r)
{
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->n_jobs; i++)
        job_info_clear(r->jobs[i]);
    free(r->jobs);
    free(r->clients);
    free(r->devices);
    free(r);
}
