/* ringctl timeline: a recording per asker, answered when its time is over. */
#include "timeline_request.h"

#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "counters.h"
#include "front.h"
#include "job.h"
#include "log.h"
#include "session.h"
#include "timeline.h"
#include "trace.h"

/* A recording under way for the session that asked. */
typedef struct rd_recording {
    rd_front *f;
    rd_session *s;
    char job[RD_NAME_MAX + 1];
    rd_timeline *tl;
    struct event *timer;
    int64_t start_us;
    struct rd_recording *next;
} rd_recording;

/* Answers s at once with status and msg (no recording). */
static void refuse(rd_session *s, rd_status status, const char *msg)
{
    Ringd__TimelineReply r = RINGD__TIMELINE_REPLY__INIT;
    r.status = (uint32_t)status;
    r.message = (char *)msg;
    r.node = (char *)s->f->cfg->node;
    rd_msg m = RINGD__MSG__INIT;
    m.body_case = RINGD__MSG__BODY_TIMELINE_REPLY;
    m.timeline_reply = &r;
    rd_session_send(s, &m);
}

/* Unlinks and frees rec, stopping its recording. */
static void recording_end(rd_recording *rec)
{
    rd_front *f = rec->f;
    rd_engine_record_stop(f->engine, rec->tl);
    for (rd_recording **pp = &f->recordings; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == rec) {
            *pp = rec->next;
            break;
        }
    }
    if (rec->timer != NULL)
        event_free(rec->timer);
    rd_timeline_free(rec->tl);
    free(rec);
}

/* A record's bytes in a reply, roughly (protobuf's varints at most 10 bytes a field). */
static size_t op_bytes(const rd_trace_op *o)
{
    return strlen(o->name) + 16 * 20 + (size_t)o->nranks * 11;
}

/* The time is over: the recording, its newest ops within RD_TLREQ_REPLY_MAX, to the asker. */
static void on_over(evutil_socket_t fd, short what, void *arg)
{
    rd_recording *rec = arg;
    rd_front *f = rec->f;
    (void)fd;
    (void)what;
    rd_engine_record_stop(f->engine, rec->tl);
    size_t n = rd_timeline_nops(rec->tl), nm = rd_timeline_nmarks(rec->tl), first = n, bytes = 0;
    while (first > 0 && bytes + op_bytes(rd_timeline_ops(rec->tl, first - 1)) < RD_TLREQ_REPLY_MAX)
        bytes += op_bytes(rd_timeline_ops(rec->tl, --first));
    const rd_trace_op **ops = calloc(n - first + 1, sizeof(*ops));
    const rd_trace_mark **marks = calloc(nm + 1, sizeof(*marks));
    Ringd__TimelineReply *r = NULL;
    if (ops != NULL && marks != NULL) {
        for (size_t i = first; i < n; i++)
            ops[i - first] = rd_timeline_ops(rec->tl, i);
        for (size_t i = 0; i < nm; i++)
            marks[i] = rd_timeline_marks(rec->tl, i);
        r = rd_trace_reply_new(ops, n - first, marks, nm);
    }
    if (r == NULL) {
        rd_session_close(rec->s, RINGD_E_NOMEM, "out of memory building the timeline of job '%s'",
                         rec->job);
    } else {
        char msg[640];
        if (n == 0)
            snprintf(msg, sizeof(msg), "job '%s' ran no ops on node %s while it was recorded",
                     rec->job, f->cfg->node);
        else
            snprintf(msg, sizeof(msg), "%zu ops of job '%s' on node %s", n - first, rec->job,
                     f->cfg->node);
        r->status = RINGD_OK;
        r->message = msg;
        r->node = (char *)f->cfg->node;
        r->dropped = rd_timeline_dropped(rec->tl) + first;
        r->start_us = rec->start_us;
        r->end_us = rd_now_us();
        rd_msg m = RINGD__MSG__INIT;
        m.body_case = RINGD__MSG__BODY_TIMELINE_REPLY;
        m.timeline_reply = r;
        rd_log(RD_LOG_INFO, "timeline", "job '%s': sending %zu ops, %zu ring changes", rec->job,
               n - first, nm);
        rd_session_send(rec->s, &m);
    }
    rd_trace_reply_free(r);
    free(ops);
    free(marks);
    recording_end(rec);
}

void rd_tlreq_request(rd_session *s, const rd_msg *req)
{
    rd_front *f = s->f;
    const Ringd__TimelineRequest *q = req->timeline_request;
    const char *job = q->job != NULL ? q->job : "";
    char msg[640];
    if (!rd_name_valid(job)) {
        refuse(s, RINGD_E_INVALID, "a timeline needs a job name: 1..256 printable ASCII bytes");
        return;
    }
    if (q->seconds < 1 || q->seconds > RD_TLREQ_SECONDS_MAX) {
        snprintf(msg, sizeof(msg), "a timeline records 1..%d seconds, not %u", RD_TLREQ_SECONDS_MAX,
                 q->seconds);
        refuse(s, RINGD_E_INVALID, msg);
        return;
    }
    for (const rd_recording *r = f->recordings; r != NULL; r = r->next) {
        if (r->s == s) {
            refuse(s, RINGD_E_INVALID, "this connection already records a timeline");
            return;
        }
    }
    rd_recording *rec = calloc(1, sizeof(*rec));
    if (rec == NULL || (rec->tl = rd_timeline_new((size_t)f->cfg->timeline_max_ops)) == NULL ||
        (rec->timer = evtimer_new(f->base, on_over, rec)) == NULL) {
        if (rec != NULL)
            rd_timeline_free(rec->tl);
        free(rec);
        refuse(s, RINGD_E_NOMEM, "out of memory starting the recording");
        return;
    }
    rec->f = f;
    rec->s = s;
    snprintf(rec->job, sizeof(rec->job), "%s", job);
    rd_viewer who = {s->c.uid, s->admin};
    rd_status st = rd_engine_record(f->engine, job, rec->tl, &who, msg, sizeof(msg));
    struct timeval tv = {(time_t)q->seconds, 0};
    if (st != RINGD_OK || event_add(rec->timer, &tv) != 0) {
        if (st == RINGD_OK) {
            rd_engine_record_stop(f->engine, rec->tl);
            snprintf(msg, sizeof(msg), "out of memory starting the recording");
        }
        event_free(rec->timer);
        rd_timeline_free(rec->tl);
        free(rec);
        refuse(s, st == RINGD_OK ? RINGD_E_NOMEM : st, msg);
        return;
    }
    rec->start_us = rd_now_us();
    rec->next = f->recordings;
    f->recordings = rec;
    rd_log(RD_LOG_INFO, "timeline", "job '%s': recording for %u s (at most %" PRId64 " ops)", job,
           q->seconds, f->cfg->timeline_max_ops);
}

void rd_tlreq_forget(rd_front *f, rd_session *s)
{
    for (rd_recording *r = f->recordings; r != NULL; r = r->next) {
        if (r->s == s) {
            recording_end(r);
            return;
        }
    }
}

void rd_tlreq_free_all(rd_front *f)
{
    while (f->recordings != NULL)
        recording_end(f->recordings);
}
