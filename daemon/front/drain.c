/* Graceful drain: polls every job until it has left its ring, then answers whoever asked. */
#include "drain.h"

#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "front.h"
#include "job.h"
#include "log.h"
#include "session.h"
#include "world.h"

#define RD_DRAIN_POLL_MS 5
#define RD_DRAIN_LINGER_MS 200 /* SIGTERM: lets the Byes and the rendezvous' leaves go out */

typedef struct waiter {
    rd_session *s;
    struct waiter *next;
} waiter;

struct rd_drain {
    rd_front *d;
    struct event *ev;
    int64_t started_ms, deadline_ms, done_ms;
    uint64_t completed0, failed0;
    uint32_t jobs;
    int exit_after, done, clean;
    waiter *waiters;
};

/* Answers every waiter with the drain's outcome. */
static void reply_all(struct rd_drain *dr)
{
    rd_front *d = dr->d;
    Ringd__DrainReply r = RINGD__DRAIN_REPLY__INIT;
    char msg[512];
    r.status = dr->clean ? RINGD_OK : RINGD_E_TIMEOUT;
    if (dr->clean)
        snprintf(msg, sizeof(msg), "node %s left %u job(s)", d->cfg->node, dr->jobs);
    else
        snprintf(msg, sizeof(msg),
                 "node %s left %u job(s), but ops were still under way after %" PRId64
                 " ms and failed",
                 d->cfg->node, dr->jobs, dr->deadline_ms - dr->started_ms);
    r.message = msg;
    r.jobs = dr->jobs;
    r.ops_finished = d->counters->ops_completed - dr->completed0;
    r.ops_failed = d->counters->ops_failed - dr->failed0;
    r.elapsed_ms = (uint64_t)(dr->done_ms - dr->started_ms);
    rd_msg m = RINGD__MSG__INIT;
    m.body_case = RINGD__MSG__BODY_DRAIN_REPLY;
    m.drain_reply = &r;
    while (dr->waiters != NULL) {
        waiter *w = dr->waiters;
        dr->waiters = w->next;
        rd_session_send(w->s, &m);
        free(w);
    }
}

static void on_poll(evutil_socket_t fd, short what, void *arg)
{
    struct rd_drain *dr = arg;
    rd_front *d = dr->d;
    (void)fd;
    (void)what;
    int64_t now = rd_now_ms();
    if (!dr->done) {
        int all = 1, force = now >= dr->deadline_ms;
        for (struct rd_job *j = rd_engine_jobs(d->engine); j != NULL; j = rd_job_next(j)) {
            if (rd_job_drain(j, 0))
                continue;
            all = 0; /* a job cut at the deadline left, but not cleanly */
            if (force)
                rd_job_drain(j, 1);
        }
        if (!all && !force)
            return;
        dr->done = 1;
        dr->clean = all;
        dr->done_ms = now;
        rd_log(all ? RD_LOG_INFO : RD_LOG_WARN, "drain", "node %s drained in %" PRId64 " ms (%s)",
               d->cfg->node, now - dr->started_ms,
               all ? "every op under way finished" : "ops still under way failed");
        reply_all(dr);
    }
    /* SIGTERM: the daemon ends once the nodes beyond it in the rings' control trees no longer
     * need it to pass their messages on, --peer-timeout at most. */
    int relaying = rd_net_leaving(d->net) > 0 && now - dr->done_ms < d->cfg->peer_timeout;
    if (dr->exit_after && now - dr->done_ms >= RD_DRAIN_LINGER_MS && !relaying) {
        event_del(dr->ev);
        event_base_loopbreak(d->base);
    } else if (!dr->exit_after) {
        event_del(dr->ev);
    }
}

rd_status rd_drain_start(rd_front *d, rd_session *s, int64_t timeout_ms, int exit_after)
{
    struct rd_drain *dr = d->drain;
    if (dr == NULL) {
        if ((dr = calloc(1, sizeof(*dr))) == NULL)
            return RINGD_E_NOMEM;
        dr->ev = event_new(d->base, -1, EV_PERSIST, on_poll, dr);
        if (dr->ev == NULL) {
            free(dr);
            return RINGD_E_NOMEM;
        }
        dr->d = d;
        dr->started_ms = rd_now_ms();
        dr->deadline_ms = dr->started_ms + timeout_ms;
        dr->completed0 = d->counters->ops_completed;
        dr->failed0 = d->counters->ops_failed;
        for (struct rd_job *j = rd_engine_jobs(d->engine); j != NULL; j = rd_job_next(j))
            dr->jobs++;
        d->drain = dr;
        rd_engine_set_draining(d->engine);
        rd_log(RD_LOG_INFO, "drain", "node %s draining %u job(s), waiting up to %" PRId64 " ms",
               d->cfg->node, dr->jobs, timeout_ms);
    }
    if (s != NULL) {
        waiter *w = malloc(sizeof(*w));
        if (w == NULL)
            return RINGD_E_NOMEM;
        w->s = s;
        w->next = dr->waiters;
        dr->waiters = w;
    }
    dr->exit_after |= exit_after;
    struct timeval tv = {0, RD_DRAIN_POLL_MS * 1000};
    if (dr->done && dr->waiters != NULL)
        reply_all(dr); /* drained already: answered at once */
    if (!event_pending(dr->ev, EV_TIMEOUT, NULL))
        event_add(dr->ev, &tv);
    event_active(dr->ev, 0, 0);
    return RINGD_OK;
}

void rd_drain_forget(rd_front *d, rd_session *s)
{
    if (d->drain == NULL)
        return;
    /* Every request s made: a connection may ask more than once. */
    waiter **pp = &d->drain->waiters;
    while (*pp != NULL) {
        if ((*pp)->s == s) {
            waiter *w = *pp;
            *pp = w->next;
            free(w);
        } else {
            pp = &(*pp)->next;
        }
    }
}

void rd_drain_free(rd_front *d)
{
    struct rd_drain *dr = d->drain;
    if (dr == NULL)
        return;
    while (dr->waiters != NULL) {
        waiter *w = dr->waiters;
        dr->waiters = w->next;
        free(w);
    }
    event_free(dr->ev);
    free(dr);
    d->drain = NULL;
}

void rd_drain_request(rd_session *s, const rd_msg *m)
{
    if (s->state != RD_SESSION_NEW) {
        rd_session_close(s, RINGD_E_PROTOCOL, "DrainRequest from a client of a job");
        return;
    }
    if (!s->admin) { /* a drain fails every user's jobs here that cannot finish in time */
        char msg[512];
        snprintf(msg, sizeof(msg),
                 "uid %u may not drain node %s: only root, the daemon's own user and members of "
                 "its --admin-group may",
                 (unsigned)s->c.uid, s->f->cfg->node);
        rd_log(RD_LOG_WARN, "drain", "refused: %s", msg);
        Ringd__DrainReply r = RINGD__DRAIN_REPLY__INIT;
        r.status = RINGD_E_REFUSED;
        r.message = msg;
        rd_msg reply = RINGD__MSG__INIT;
        reply.body_case = RINGD__MSG__BODY_DRAIN_REPLY;
        reply.drain_reply = &r;
        rd_session_send(s, &reply);
        return;
    }
    int64_t ms = m->drain_request->timeout_ms ? (int64_t)m->drain_request->timeout_ms
                                              : s->f->cfg->drain_timeout;
    if (rd_drain_start(s->f, s, ms, 0) != 0)
        rd_session_close(s, RINGD_E_NOMEM, "out of memory starting a drain");
}
