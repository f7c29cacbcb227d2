/* A device communicator's queue of collectives (commq.h): ordered hand-over to the library,
 * events reported on the loop, a watchdog on the head of the device's queue, asynchronous errors
 * polled, and aborts on threads of their own. */
#include "commq.h"

#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "gpu_util.h"

/* One collective, from run until it is reported. */
typedef enum {
    RUN_WAITING,  /* not given to the library yet */
    RUN_QUEUEING, /* given to it, which is still queueing it */
    RUN_QUEUED,   /* on the stream, its event recorded after it */
} run_state;

typedef struct pending {
    run_state state;
    rd_commq_coll c;
    void *event;       /* made at run, recorded once queued */
    int64_t issued_ms; /* when the library was given it */
    rd_backend_done_fn done;
    void *arg;
    struct pending *next;
} pending;

/* An abort on its thread, shared by the thread and the loop under lock until one lets go: the
 * thread frees it when the loop abandoned it (or never waited), else the loop does. */
typedef struct ender {
    pthread_mutex_t lock;
    const rd_commq_api *api;
    void *comm, *stream;
    int device;
    int finished;  /* the thread's abort and drain returned */
    int abandoned; /* nobody waits for it on the loop: the thread frees what is left */
    int efd;       /* written by the thread once finished, while the loop waits; else -1 */
} ender;

struct rd_transport {
    const rd_commq_api *api;
    void *comm; /* NULL once ended */
    int device, nranks, rank;
    int64_t timeout_ms; /* a collective's bound from reaching the head of the device's queue */
    uint8_t id[RD_TRANSPORT_ID_MAX];
    size_t id_len;
    int id_told;    /* api->id_done called */
    char dead[512]; /* "": alive; else why it ended */
    void *stream;   /* the transport's own: collectives in the order they were run */
    struct event_base *base;
    struct event *ticker;    /* moves the pending runs along on their loop */
    pending *head, *tail;    /* in run order: QUEUED, then at most one QUEUEING, then WAITING */
    int64_t head_since_ms;   /* when the head became the oldest collective the device has */
    ender *e;                /* the abort whose dones are still to be reported */
    struct event *ev_ended;  /* e's thread finished */
    struct event *ev_wedged; /* e's thread did not finish within timeout_ms */
    int released;            /* the owner aborted it: freed once the dones are reported */
    int reporting;           /* in a done: an abort from there frees t only afterwards */
    int forgotten;           /* the owner went away: no done is called any more */
};

static void tell_id_done(rd_transport *t)
{
    if (!t->id_told && t->api->id_done != NULL)
        t->api->id_done(t->id, t->id_len);
    t->id_told = 1;
}

rd_transport *rd_commq_init(const rd_commq_api *api, const uint8_t *id, size_t id_len, int nranks,
                            int rank, int device, int64_t timeout_ms, char *err, size_t errlen)
{
    char why[256] = "";
    rd_transport *t;
    if (id_len == 0 || id_len > RD_TRANSPORT_ID_MAX || nranks < 1 || rank < 0 || rank >= nranks) {
        rd_gpu_say(err, errlen,
                   "a communicator of %zu-byte id, rank %d of %d: need an id of 1 to %d "
                   "bytes and 0 <= rank < nranks",
                   id_len, rank, nranks, RD_TRANSPORT_ID_MAX);
        return NULL;
    }
    if ((t = calloc(1, sizeof(*t))) == NULL) {
        rd_gpu_say(err, errlen, "out of memory");
        return NULL;
    }
    t->api = api;
    t->device = device;
    t->nranks = nranks;
    t->rank = rank;
    t->timeout_ms = timeout_ms > 0 ? timeout_ms : 1;
    memcpy(t->id, id, id_len);
    t->id_len = id_len;
    if (api->use(device, why, sizeof(why)) != 0 ||
        (t->stream = api->stream_new(device, why, sizeof(why))) == NULL) {
        rd_gpu_say(err, errlen, "a communicator on GPU %d: %s", device, why);
        free(t);
        return NULL;
    }
    if ((t->comm = api->comm_init(id, id_len, nranks, rank, device, err, errlen)) == NULL) {
        api->stream_free(device, t->stream);
        free(t);
        return NULL;
    }
    return t;
}

int rd_commq_poll(rd_transport *t, char *err, size_t errlen)
{
    if (t->comm == NULL) {
        rd_gpu_say(err, errlen, "%s", t->dead);
        return -1;
    }
    if (t->api->use(t->device, err, errlen) != 0)
        return -1;
    int st = t->api->comm_state(t->comm, err, errlen);
    if (st == 0)
        tell_id_done(t); /* formed: every rank has been through the id's root */
    return st;
}

/* Reports the oldest pending run with status (why for a failure) and forgets it; the next one
 * is now the oldest the device has. The done may abort t (then released is set). */
static void finish_head(rd_transport *t, int status, const char *why, int free_event)
{
    pending *p = t->head;
    t->head = p->next;
    if (t->head == NULL)
        t->tail = NULL;
    t->head_since_ms = rd_gpu_now_ms();
    if (free_event)
        t->api->event_free(t->device, p->event);
    t->reporting++;
    if (!t->forgotten)
        p->done(p->arg, status, status != 0 ? why : NULL);
    t->reporting--;
    free(p);
}

static void ender_free(ender *e)
{
    pthread_mutex_destroy(&e->lock);
    if (e->efd >= 0)
        close(e->efd);
    free(e);
}

/* Abort, then the stream drained, so the device no longer touches a pending run's buffers. */
static void abort_and_drain(const rd_commq_api *api, int device, void *comm, void *stream)
{
    api->use(device, NULL, 0);
    api->comm_abort(comm);
    api->stream_sync(device, stream, NULL, 0);
}

/* The ending thread: abort and drain; then the loop is told, or, when nobody waits, what is
 * left is freed here. */
static void *ender_main(void *arg)
{
    ender *e = arg;
    abort_and_drain(e->api, e->device, e->comm, e->stream);
    pthread_mutex_lock(&e->lock);
    e->finished = 1;
    int abandoned = e->abandoned, efd = e->efd;
    pthread_mutex_unlock(&e->lock);
    if (abandoned) {
        e->api->stream_free(e->device, e->stream);
        ender_free(e);
        return NULL;
    }
    /* the loop frees e once it has seen this: the thread's last touch of it (finished is set,
     * so the loop no longer abandons it) */
    uint64_t one = 1;
    ssize_t w = write(efd, &one, sizeof(one));
    (void)w; /* an eventfd written once cannot be full */
    return NULL;
}

static void transport_free(rd_transport *t)
{
    if (t->ticker != NULL)
        event_free(t->ticker);
    free(t);
}

/* Frees t once its owner let go of it and nothing of it is left to report. Returns 1 then. */
static int maybe_free(rd_transport *t)
{
    if (!t->released || t->reporting > 0 || t->e != NULL || t->head != NULL)
        return 0;
    transport_free(t);
    return 1;
}

/* Every pending run reported (done if its event had happened, when the device may be asked),
 * with why for the others; t freed if its owner let go of it. */
static void report_all(rd_transport *t, int ask_device, const char *why)
{
    while (t->head != NULL) {
        int ok = ask_device && t->head->state == RUN_QUEUED &&
                 t->api->event_done(t->device, t->head->event, NULL, 0) > 0;
        finish_head(t, ok ? 0 : -1, why, ask_device);
    }
    maybe_free(t);
}

/* The loop's side of an ender that finished: the dones, the stream, the ender. */
static void on_ended(evutil_socket_t fd, short what, void *arg)
{
    rd_transport *t = arg;
    ender *e = t->e;
    (void)fd;
    (void)what;
    event_free(t->ev_ended);
    event_free(t->ev_wedged);
    t->ev_ended = t->ev_wedged = NULL;
    t->e = NULL;
    t->api->stream_free(e->device, e->stream);
    ender_free(e);
    report_all(t, 1, t->dead);
}

/* The ender did not finish in time: the dones fail now, saying so; the thread is left to free
 * what is left whenever its abort returns (the events too: the device may be wedged). */
static void on_wedged(evutil_socket_t fd, short what, void *arg)
{
    rd_transport *t = arg;
    ender *e = t->e;
    char why[768];
    (void)fd;
    (void)what;
    pthread_mutex_lock(&e->lock);
    if (e->finished) { /* on_ended comes next */
        pthread_mutex_unlock(&e->lock);
        return;
    }
    e->abandoned = 1;
    pthread_mutex_unlock(&e->lock);
    event_free(t->ev_ended);
    event_free(t->ev_wedged);
    t->ev_ended = t->ev_wedged = NULL;
    t->e = NULL;
    rd_gpu_say(why, sizeof(why),
               "%.400s; the abort did not return within %lld ms: GPU %d may be wedged "
               "(its buffers stay in use by it; the device needs a reset)",
               t->dead, (long long)t->timeout_ms, t->device);
    report_all(t, 0, why);
}

/* Stops waiting for e on the loop (its events freed, its eventfd closed). */
static void unwait(rd_transport *t, ender *e)
{
    if (t->ev_ended != NULL)
        event_free(t->ev_ended);
    if (t->ev_wedged != NULL)
        event_free(t->ev_wedged);
    t->ev_ended = t->ev_wedged = NULL;
    if (e->efd >= 0)
        close(e->efd);
    e->efd = -1;
}

/* Makes the loop wait for e: its eventfd, then a timer at timeout_ms. Returns 0, or -1 with err
 * set (nothing left waiting). */
static int wait_on_loop(rd_transport *t, ender *e, char *err, size_t errlen)
{
    struct timeval tv = {t->timeout_ms / 1000, (t->timeout_ms % 1000) * 1000};
    if ((e->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
        rd_gpu_say(err, errlen, "eventfd: %s", strerror(errno));
        return -1;
    }
    t->ev_ended = event_new(t->base, e->efd, EV_READ, on_ended, t);
    t->ev_wedged = evtimer_new(t->base, on_wedged, t);
    if (t->ev_ended == NULL || t->ev_wedged == NULL || event_add(t->ev_ended, NULL) != 0 ||
        evtimer_add(t->ev_wedged, &tv) != 0) {
        unwait(t, e);
        rd_gpu_say(err, errlen, "out of memory for the loop's events");
        return -1;
    }
    return 0;
}

/* Ends the communicator (why): an ender aborts it and drains the stream off the loop, and the
 * pending runs are reported once it did (or not within timeout_ms). Where no thread can be had
 * (out of memory, of threads, of files), the abort runs on the loop as the last resort, and the
 * message says so. Loop thread. */
static void end_comm(rd_transport *t, const char *why)
{
    if (t->comm == NULL)
        return;
    if (t->dead[0] == '\0')
        rd_gpu_say(t->dead, sizeof(t->dead), "%s", why[0] ? why : "the communicator ended");
    if (t->ticker != NULL)
        event_del(t->ticker);
    tell_id_done(t);
    void *comm = t->comm, *stream = t->stream;
    t->comm = NULL;
    t->stream = NULL;
    int wait = t->head != NULL; /* dones to report, on the loop of the runs */
    char no[160] = "";
    ender *e = calloc(1, sizeof(*e));
    if (e == NULL) {
        rd_gpu_say(no, sizeof(no), "out of memory");
    } else {
        e->api = t->api;
        e->comm = comm;
        e->stream = stream;
        e->device = t->device;
        e->efd = -1;
        e->abandoned = !wait;
        pthread_mutex_init(&e->lock, NULL);
        if (!wait || wait_on_loop(t, e, no, sizeof(no)) == 0) {
            pthread_t th;
            pthread_attr_t attr;
            pthread_attr_init(&attr);
            pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            t->e = wait ? e : NULL;
            int rc = pthread_create(&th, &attr, ender_main, e);
            pthread_attr_destroy(&attr);
            if (rc == 0)
                return;
            t->e = NULL;
            unwait(t, e);
            rd_gpu_say(no, sizeof(no), "pthread_create: %s", strerror(rc));
        }
        ender_free(e);
    }
    abort_and_drain(t->api, t->device, comm, stream);
    t->api->stream_free(t->device, stream);
    size_t used = strlen(t->dead);
    rd_gpu_say(t->dead + used, sizeof(t->dead) - used, " (aborted on the event loop: %s)", no);
    if (wait)
        report_all(t, 1, t->dead);
}

/* How long p may take from reaching the head of the device's queue: the timeout, plus its
 * bytes at 100 MB/s, so that a large tensor on a slow network is not taken for a peer that
 * never came. */
static int64_t bound_ms(const rd_transport *t, const pending *p)
{
    uint64_t bytes = (uint64_t)p->c.count * rd_dtype_size(p->c.dt);
    if (p->c.coll == RD_COLL_ALLGATHER)
        bytes *= (uint64_t)t->nranks;
    return t->timeout_ms + (int64_t)(bytes / 100000);
}

/* Moves the runs along as far as the library lets them: records the event of the one it
 * finished queueing, gives it the next. Returns 0, or -1 with err set when the communicator
 * failed. */
static int advance(rd_transport *t, char *err, size_t errlen)
{
    for (;;) {
        pending *p = t->head;
        while (p != NULL && p->state == RUN_QUEUED)
            p = p->next;
        if (p == NULL)
            return 0;
        int st = t->api->comm_state(t->comm, err, errlen);
        if (st != 0)
            return st < 0 ? -1 : 0; /* still queueing: next tick */
        if (p->state == RUN_QUEUEING) {
            if (t->api->event_record(t->device, p->event, t->stream, err, errlen) != 0)
                return -1;
            p->state = RUN_QUEUED;
            continue;
        }
        if (t->api->comm_issue(t->comm, t->stream, &p->c, err, errlen) != 0)
            return -1;
        p->state = RUN_QUEUEING;
        p->issued_ms = rd_gpu_now_ms();
    }
}

static void arm(rd_transport *t)
{
    if (t->head != NULL && t->comm != NULL && !event_pending(t->ticker, EV_TIMEOUT, NULL)) {
        struct timeval tv = {0, RD_COMMQ_TICK_US};
        event_add(t->ticker, &tv);
    }
}

/* On the loop while runs are pending: the library's own errors first (a peer that died while
 * everything waits on the stream), then the runs moved along and those whose event happened
 * reported in order, then the watchdog on the head. A failure ends the communicator. */
static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    rd_transport *t = arg;
    char err[400] = "", why[512];
    (void)fd;
    (void)what;
    if (t->comm == NULL)
        return;
    if (t->api->use(t->device, err, sizeof(err)) != 0 ||
        t->api->comm_state(t->comm, err, sizeof(err)) < 0 || advance(t, err, sizeof(err)) != 0) {
        rd_gpu_say(why, sizeof(why), "the communicator failed: %s", err);
        end_comm(t, why);
        return;
    }
    while (t->head != NULL && t->head->state == RUN_QUEUED) {
        int done = t->api->event_done(t->device, t->head->event, err, sizeof(err));
        if (done == 0)
            break;
        finish_head(t, done > 0 ? 0 : -1, err, 1);
        if (t->comm == NULL) { /* that done aborted t */
            maybe_free(t);
            return;
        }
    }
    pending *h = t->head;
    if (h != NULL && h->state != RUN_WAITING) {
        int64_t since = h->issued_ms > t->head_since_ms ? h->issued_ms : t->head_since_ms;
        if (rd_gpu_now_ms() - since > bound_ms(t, h)) {
            rd_gpu_say(why, sizeof(why),
                       "a collective did not finish within %lld ms of reaching the "
                       "head of GPU %d's queue (a peer that never came, or a wedged GPU)",
                       (long long)bound_ms(t, h), t->device);
            end_comm(t, why);
            return;
        }
    }
    arm(t);
}

int rd_commq_run(rd_transport *t, struct event_base *base, const rd_commq_coll *c,
                 rd_backend_done_fn done, void *arg, char *err, size_t errlen)
{
    pending *p;
    if ((unsigned)c->dt >= RD_DT_COUNT || (unsigned)c->op >= RD_OP_COUNT || c->op == RD_OP_AVG ||
        (c->coll == RD_COLL_BROADCAST && (c->root < 0 || c->root >= t->nranks)) ||
        (c->coll != RD_COLL_ALLREDUCE && c->coll != RD_COLL_BROADCAST &&
         c->coll != RD_COLL_ALLGATHER)) {
        rd_gpu_say(err, errlen,
                   "collective %d of dtype %d, op %d, root %d: not one a communicator "
                   "runs",
                   c->coll, (int)c->dt, (int)c->op, c->root);
        return -1;
    }
    if (t->comm == NULL) {
        rd_gpu_say(err, errlen, "%s", t->dead);
        return -1;
    }
    if (t->base != NULL && t->base != base) {
        rd_gpu_say(err, errlen, "a communicator's collectives report on one event loop");
        return -1;
    }
    if (t->ticker == NULL && (t->ticker = event_new(base, -1, 0, on_tick, t)) == NULL) {
        rd_gpu_say(err, errlen, "out of memory");
        return -1;
    }
    t->base = base;
    if ((p = calloc(1, sizeof(*p))) == NULL) {
        rd_gpu_say(err, errlen, "out of memory");
        return -1;
    }
    /* the event exists before the library has the collective: once it has, only recording is
     * left */
    if (t->api->use(t->device, err, errlen) != 0 ||
        (p->event = t->api->event_new(t->device, err, errlen)) == NULL) {
        free(p);
        return -1;
    }
    p->state = RUN_WAITING;
    p->c = *c;
    p->done = done;
    p->arg = arg;
    if (t->tail != NULL) {
        t->tail->next = p;
    } else {
        t->head = p;
        t->head_since_ms = rd_gpu_now_ms();
    }
    t->tail = p;
    arm(t); /* the library gets it on the next tick, never from within run: done is never
               reentered */
    return 0;
}

void rd_commq_abort(rd_transport *t)
{
    if (t == NULL)
        return;
    if (t->ticker != NULL)
        event_del(t->ticker);
    t->released = 1;
    t->reporting++; /* end_comm may report (without a thread): t stays until it returns */
    end_comm(t, "the communicator was aborted");
    t->reporting--;
    maybe_free(t);
}

void rd_commq_forget(rd_transport *t)
{
    if (t == NULL)
        return;
    t->forgotten = 1;
    rd_commq_abort(t);
}
