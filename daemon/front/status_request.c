/* Status queries: gathers jobs, clients and counters into one StatusReply. */
#include "status_request.h"

#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "arena.h"
#include "front.h"
#include "job.h"
#include "ringd_build.h"
#include "session.h"
#include "world.h"

void rd_status_request(struct rd_session *s, const rd_msg *req)
{
    rd_front *d = s->f;
    (void)req;
    Ringd__StatusReply r = RINGD__STATUS_REPLY__INIT;
    rd_msg m = RINGD__MSG__INIT;
    struct timespec now;
    Ringd__ClientInfo *infos = NULL;
    Ringd__ClientInfo **clients = NULL;
    Ringd__JobInfo **jobs = NULL;
    size_t njobs = 0, n = 0;

    clock_gettime(CLOCK_MONOTONIC, &now);
    r.version = (char *)RINGD_VERSION;
    r.pid = (uint32_t)getpid();
    r.uptime_ms = (uint64_t)(now.tv_sec - d->started.tv_sec) * 1000 +
                  (uint64_t)((now.tv_nsec - d->started.tv_nsec) / 1000000);
    r.ops_in_flight = d->counters->ops_in_flight;
    r.ops_completed = d->counters->ops_completed;
    r.ops_failed = d->counters->ops_failed;
    r.bytes_reduced = d->counters->bytes_reduced;
    r.node = (char *)d->cfg->node;
    r.listen = (char *)rd_net_address(d->net);
    r.redis = (char *)d->cfg->redis_url;
    r.redis_connected = rd_net_redis_connected(d->net);
    r.ring_passes = d->counters->ring_passes;
    r.ring_ops = d->counters->ring_ops;
    r.draining = rd_engine_draining(d->engine);
    r.drain_timeout_ms = (uint32_t)d->cfg->drain_timeout;

    if (rd_job_describe(d->engine, &jobs, &njobs) != 0)
        goto fail;
    r.jobs = jobs;
    r.n_jobs = njobs;

    for (struct rd_session *c = d->sessions; c != NULL; c = c->next)
        n += c->c.job != NULL;
    infos = calloc(n ? n : 1, sizeof(*infos));
    clients = calloc(n ? n : 1, sizeof(*clients));
    if (infos == NULL || clients == NULL)
        goto fail;
    for (struct rd_session *c = d->sessions; c != NULL; c = c->next) {
        if (c->c.job == NULL)
            continue;
        Ringd__ClientInfo *ci = &infos[r.n_clients];
        ringd__client_info__init(ci);
        ci->job = (char *)rd_job_name(c->c.job);
        ci->pid = (uint32_t)c->c.pid;
        ci->uid = (uint32_t)c->c.uid;
        ci->local_rank = c->c.local_rank;
        ci->ops_in_flight = c->c.ops_in_flight;
        ci->ops_completed = c->c.ops_completed;
        ci->arena_size = c->c.arena != NULL ? c->c.arena->size : 0;
        clients[r.n_clients++] = ci;
    }
    r.clients = clients;

    m.body_case = RINGD__MSG__BODY_STATUS_REPLY;
    m.status_reply = &r;
    if (rd_frame_size(&m) > (64u << 20))
        goto fail;
    rd_session_send(s, &m);
    free(clients);
    free(infos);
    rd_job_describe_free(jobs, njobs);
    return;

fail:
    free(clients);
    free(infos);
    rd_job_describe_free(jobs, njobs);
    rd_session_close(s, RINGD_E_NOMEM, "cannot build the status reply");
}
