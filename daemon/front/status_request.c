/* Status queries: the front's part of the daemon's status (daemon-wide values, clients), the
 * engine's jobs, sent as one StatusReply. */
#include "status_request.h"

#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "arena.h"
#include "front.h"
#include "job.h"
#include "ringd_build.h"
#include "session.h"
#include "report.h"
#include "world.h"

/* The daemon-wide values of d into st. */
static void describe_daemon(const rd_front *d, rd_daemon_status *st)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    st->version = RINGD_VERSION;
    st->pid = (uint32_t)getpid();
    st->uptime_ms = (uint64_t)(now.tv_sec - d->started.tv_sec) * 1000 +
                    (uint64_t)((now.tv_nsec - d->started.tv_nsec) / 1000000);
    st->ops_in_flight = d->counters->ops_in_flight;
    st->ops_completed = d->counters->ops_completed;
    st->ops_failed = d->counters->ops_failed;
    st->bytes_reduced = d->counters->bytes_reduced;
    st->node = d->cfg->node;
    st->listen = rd_net_address(d->net);
    st->redis = d->cfg->redis_url;
    st->redis_connected = rd_net_redis_connected(d->net);
    st->redis_rtt_us = rd_net_redis_rtt_us(d->net);
    st->metrics = d->metrics_address;
    st->ring_passes = d->counters->ring_passes;
    st->ring_ops = d->counters->ring_ops;
    st->control_sent = d->counters->ctrl_sent;
    st->control_bytes_sent = d->counters->ctrl_bytes_sent;
    st->keepalives_sent = d->counters->ctrl_keepalives;
    st->draining = rd_engine_draining(d->engine);
    st->drain_timeout_ms = (uint32_t)d->cfg->drain_timeout;
}

/* The connections of d that joined a job into st->clients (malloc'd, st's). Returns 0, or -1
 * when out of memory. */
static int describe_clients(const rd_front *d, rd_daemon_status *st)
{
    size_t n = 0;
    for (const struct rd_session *c = d->sessions; c != NULL; c = c->next)
        n += c->c.job != NULL;
    if (n == 0)
        return 0;
    if ((st->clients = calloc(n, sizeof(*st->clients))) == NULL)
        return -1;
    for (const struct rd_session *c = d->sessions; c != NULL; c = c->next) {
        if (c->c.job == NULL)
            continue;
        rd_client_status *ci = &st->clients[st->nclients++];
        ci->job = rd_job_name(c->c.job);
        ci->pid = (uint32_t)c->c.pid;
        ci->uid = (uint32_t)c->c.uid;
        ci->local_rank = c->c.local_rank;
        ci->ops_in_flight = c->c.ops_in_flight;
        ci->ops_completed = c->c.ops_completed;
        ci->arena_size = c->c.arena != NULL ? c->c.arena->size : 0;
        ci->device = c->c.device;
    }
    return 0;
}

/* The GPUs d serves, each with the sessions given it, into st->devices (malloc'd, st's).
 * Returns 0, or -1 when out of memory. */
static int describe_devices(const rd_front *d, rd_daemon_status *st)
{
    const rd_devices *dv = d->devices;
    st->devices_why = dv->why;
    if (dv->n == 0)
        return 0;
    if ((st->devices = calloc((size_t)dv->n, sizeof(*st->devices))) == NULL)
        return -1;
    for (int i = 0; i < dv->n; i++) {
        rd_device_status *ds = &st->devices[st->ndevices++];
        ds->index = (uint32_t)dv->dev[i].index;
        ds->name = dv->dev[i].name;
        ds->uuid = dv->dev[i].uuid;
        ds->memory = dv->dev[i].memory;
        if (dv->dev[i].index >= 0 && dv->dev[i].index < RD_COUNTERS_DEVICES)
            ds->bytes_reduced = d->counters->device_bytes[dv->dev[i].index];
        for (const struct rd_session *c = d->sessions; c != NULL; c = c->next) {
            ds->clients += c->c.job != NULL && c->c.device == dv->dev[i].index;
            if (c->c.device_arena != NULL && c->c.device == dv->dev[i].index)
                ds->arena_bytes += c->c.device_arena->size;
        }
    }
    return 0;
}

rd_daemon_status *rd_front_status_new(rd_front *d)
{
    rd_daemon_status *st = rd_daemon_status_new();
    if (st == NULL)
        return NULL;
    describe_daemon(d, st);
    if (rd_engine_describe(d->engine, st) != 0 || describe_clients(d, st) != 0 ||
        describe_devices(d, st) != 0) {
        rd_daemon_status_free(st);
        return NULL;
    }
    return st;
}

/* What a user may not see of other users' jobs in st (whose arrays st owns): their tensor names
 * and their processes' pids. The jobs, their sizes and rings stay: they share the node. */
static void hide_others(rd_daemon_status *st, uid_t uid)
{
    static const char hidden[] = "(another user's tensor)";
    for (size_t i = 0; i < st->njobs; i++) {
        rd_job_status *js = &st->jobs[i];
        if (js->uid == (uint32_t)uid)
            continue;
        for (size_t k = 0; k < js->npending; k++)
            js->pending[k] = hidden;
        for (size_t k = 0; k < js->nstalls; k++)
            js->stalls[k].name = hidden;
    }
    for (size_t i = 0; i < st->nclients; i++)
        if (st->clients[i].uid != (uint32_t)uid)
            st->clients[i].pid = 0;
}

void rd_status_request(struct rd_session *s, const rd_msg *req)
{
    rd_front *d = s->f;
    (void)req;
    rd_msg m = RINGD__MSG__INIT;
    Ringd__StatusReply *r = NULL;
    rd_daemon_status *st = rd_front_status_new(d);

    if (st == NULL)
        goto fail;
    if (!s->admin)
        hide_others(st, s->c.uid);
    if ((r = rd_report_reply_new(st)) == NULL)
        goto fail;
    m.body_case = RINGD__MSG__BODY_STATUS_REPLY;
    m.status_reply = r;
    if (rd_frame_size(&m) > (64u << 20))
        goto fail;
    rd_session_send(s, &m);
    rd_report_reply_free(r);
    rd_daemon_status_free(st);
    return;

fail:
    rd_report_reply_free(r);
    rd_daemon_status_free(st);
    rd_session_close(s, RINGD_E_NOMEM, "cannot build the status reply");
}
