/* NCCL behind the backend's transport seam (backend.h, rd_transport_ops): communicators that
 * never block the event loop (blocking = 0: creation and collectives return at once and are
 * polled), collectives queued on a stream of the transport's own and reported on the loop when
 * their event has happened, and an abort that cuts everything short. libnccl.so.2 is opened
 * with dlopen when first needed, never linked: a machine without it loses this transport only,
 * and make_id says why. */
#include "nccl_transport.h"

#include <dlfcn.h>
#include <event2/event.h>
#include <nccl.h> /* types and constants only: every function comes through dlsym */
#include <pthread.h>
#include <time.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_dev.h"
#include "dl.h"

/* How often the loop looks at queued collectives while any is pending. */
#define RD_NCCL_POLL_US 100

/* The NCCL entry points ringd uses. */
static struct {
    ncclResult_t (*get_version)(int *);
    ncclResult_t (*get_unique_id)(ncclUniqueId *);
    ncclResult_t (*init_rank_config)(ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *);
    ncclResult_t (*get_async_error)(ncclComm_t, ncclResult_t *);
    ncclResult_t (*abort)(ncclComm_t);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                               ncclComm_t, cudaStream_t);
    ncclResult_t (*broadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t,
                              cudaStream_t);
    ncclResult_t (*all_gather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t,
                               cudaStream_t);
    const char *(*error_string)(ncclResult_t);
    const char *(*last_error)(ncclComm_t);
} nccl;

static const rd_dl_symbol nccl_symbols[] = {
#define SYM(field, name)                                                                           \
    {                                                                                              \
        name, offsetof(__typeof__(nccl), field)                                                    \
    }
    SYM(get_version, "ncclGetVersion"),
    SYM(get_unique_id, "ncclGetUniqueId"),
    SYM(init_rank_config, "ncclCommInitRankConfig"),
    SYM(get_async_error, "ncclCommGetAsyncError"),
    SYM(abort, "ncclCommAbort"),
    SYM(all_reduce, "ncclAllReduce"),
    SYM(broadcast, "ncclBroadcast"),
    SYM(all_gather, "ncclAllGather"),
    SYM(error_string, "ncclGetErrorString"),
    SYM(last_error, "ncclGetLastError"),
#undef SYM
};

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int loaded; /* 1: every symbol found */
static char load_why[256];

static void say(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void say(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (err == NULL || errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static void load(void)
{
    int version = 0;
    const char *missing;
    char why[256];
    void *lib = rd_dl_open("libnccl.so.2", nccl_symbols,
                           sizeof(nccl_symbols) / sizeof(nccl_symbols[0]), &nccl, sizeof(nccl),
                           &missing, why, sizeof(why));
    if (lib == NULL) {
        if (missing == NULL)
            say(load_why, sizeof(load_why), "no NCCL library: %s", why);
        else
            say(load_why, sizeof(load_why), "libnccl.so.2 lacks %s (NCCL 2.28 or newer needed)",
                missing);
        return;
    }
    /* the communicator config's fields and non-blocking behaviour as nccl.h describes them */
    if (nccl.get_version(&version) != ncclSuccess || version < NCCL_VERSION(2, 28, 0)) {
        say(load_why, sizeof(load_why), "libnccl.so.2 is version %d; ringd needs 2.28 or newer",
            version);
        dlclose(lib);
        return;
    }
    loaded = 1; /* the library stays open: its functions are in use */
}

/* 0 once NCCL is loaded; -1 with err set when it cannot be. */
static int nccl_ready(char *err, size_t errlen)
{
    pthread_once(&load_once, load);
    if (!loaded) {
        say(err, errlen, "%s", load_why);
        return -1;
    }
    return 0;
}

/* One collective of a transport, from run until it is reported. With blocking = 0 NCCL may
 * still be queueing a collective after the call returns (its launch runs on a thread of its
 * own): no other call on the communicator, and no work that must follow it on the stream, may
 * come until the communicator's state is ncclSuccess again. So collectives wait here in order
 * and go to NCCL one at a time, each followed by its event once NCCL is done queueing it. */
typedef enum {
    RUN_WAITING,  /* not given to NCCL yet */
    RUN_QUEUEING, /* given to NCCL, which is still queueing it */
    RUN_QUEUED,   /* on the stream, its event recorded after it */
} run_state;

typedef struct pending {
    run_state state;
    int coll, root;
    rd_dtype dt;
    rd_redop op;
    const void *in;
    void *out;
    size_t count;
    void *event; /* made at run, recorded once queued */
    int64_t issued_ms; /* when NCCL was given it */
    rd_backend_done_fn done;
    void *arg;
    struct pending *next;
} pending;

struct rd_transport {
    ncclComm_t comm;      /* NULL once ended (dead) */
    int device, nranks, rank;
    int64_t timeout_ms;   /* a collective's bound, from NCCL having it to its event */
    char dead[256];       /* "": alive; else why the communicator was ended */
    void *stream;         /* the transport's own: collectives in the order they were run */
    struct event *ticker; /* advances and reports the pending runs on their loop */
    pending *head, *tail; /* in run order: QUEUED ones, then at most one QUEUEING, then WAITING */
};

/* "call: unhandled cuda error (NCCL's last error: ...)" for a failed call's result. NCCL's last
 * error is the process's latest, which may be another communicator's: labelled as such. */
static void nccl_error(const rd_transport *t, ncclResult_t rc, const char *call, char *err,
                       size_t errlen)
{
    const char *last = t != NULL && t->comm != NULL ? nccl.last_error(t->comm) : "";
    say(err, errlen, "%s: %s%s%s%s", call, nccl.error_string(rc),
        last[0] ? " (NCCL's last error: " : "", last, last[0] ? ")" : "");
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int nccl_make_id(uint8_t *id, size_t *id_len, char *err, size_t errlen)
{
    ncclUniqueId u;
    ncclResult_t rc;
    _Static_assert(sizeof(u) <= RD_TRANSPORT_ID_MAX, "an NCCL id fits a transport id");
    if (nccl_ready(err, errlen) != 0)
        return -1;
    if ((rc = nccl.get_unique_id(&u)) != ncclSuccess) {
        nccl_error(NULL, rc, "ncclGetUniqueId", err, errlen);
        return -1;
    }
    memcpy(id, &u, sizeof(u));
    *id_len = sizeof(u);
    return 0;
}

static rd_transport *nccl_init(const uint8_t *id, size_t id_len, int nranks, int rank, int device,
                               int64_t timeout_ms, char *err, size_t errlen)
{
    ncclUniqueId u;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    char why[256];
    rd_transport *t;
    ncclResult_t rc;

    if (nccl_ready(err, errlen) != 0)
        return NULL;
    if (id_len != sizeof(u) || nranks < 1 || rank < 0 || rank >= nranks) {
        say(err, errlen, "an NCCL communicator of %zu-byte id, rank %d of %d: need a %zu-byte id "
            "and 0 <= rank < nranks", id_len, rank, nranks, sizeof(u));
        return NULL;
    }
    if ((t = calloc(1, sizeof(*t))) == NULL) {
        say(err, errlen, "out of memory");
        return NULL;
    }
    t->device = device;
    t->nranks = nranks;
    t->rank = rank;
    t->timeout_ms = timeout_ms > 0 ? timeout_ms : 1;
    memcpy(&u, id, sizeof(u));
    if (rd_cuda_use(device, why, sizeof(why)) != 0 ||
        (t->stream = rd_cuda_stream_new(device, why, sizeof(why))) == NULL) {
        say(err, errlen, "an NCCL communicator on GPU %d: %s", device, why);
        free(t);
        return NULL;
    }
    config.blocking = 0; /* membership changes must never hang the loop in NCCL */
    rc = nccl.init_rank_config(&t->comm, nranks, u, rank, &config);
    if (rc != ncclSuccess && rc != ncclInProgress) {
        nccl_error(t, rc, "ncclCommInitRankConfig", err, errlen);
        if (t->comm != NULL)
            nccl.abort(t->comm);
        rd_cuda_stream_free(device, t->stream);
        free(t);
        return NULL;
    }
    return t;
}

static int nccl_poll(rd_transport *t, char *err, size_t errlen)
{
    ncclResult_t state = ncclSuccess, rc;
    if (t->dead[0] != '\0') {
        say(err, errlen, "%s", t->dead);
        return -1;
    }
    if (rd_cuda_use(t->device, err, errlen) != 0)
        return -1;
    if ((rc = nccl.get_async_error(t->comm, &state)) != ncclSuccess) {
        nccl_error(t, rc, "ncclCommGetAsyncError", err, errlen);
        return -1;
    }
    if (state == ncclInProgress)
        return 1;
    if (state != ncclSuccess) {
        nccl_error(t, state, "the NCCL communicator", err, errlen);
        return -1;
    }
    return 0;
}

/* Ends the oldest pending run with status (why for a failure). */
static void finish_head(rd_transport *t, int status, const char *why)
{
    pending *p = t->head;
    t->head = p->next;
    if (t->head == NULL)
        t->tail = NULL;
    rd_cuda_event_free(t->device, p->event);
    p->done(p->arg, status, status != 0 ? why : NULL);
    free(p);
}

/* Gives p to NCCL. Returns 0, or -1 with err set. */
static int issue(rd_transport *t, pending *p, char *err, size_t errlen)
{
    static const ncclDataType_t types[RD_DT_COUNT] = {
        [RD_DT_F32] = ncclFloat32, [RD_DT_F64] = ncclFloat64, [RD_DT_F16] = ncclFloat16,
        [RD_DT_BF16] = ncclBfloat16, [RD_DT_I32] = ncclInt32, [RD_DT_I64] = ncclInt64,
        [RD_DT_U8] = ncclUint8};
    static const ncclRedOp_t ops[RD_OP_COUNT] = {[RD_OP_SUM] = ncclSum, [RD_OP_MIN] = ncclMin,
                                                 [RD_OP_MAX] = ncclMax, [RD_OP_PROD] = ncclProd};
    ncclResult_t rc;
    switch (p->coll) {
    case RD_COLL_ALLREDUCE:
        rc = nccl.all_reduce(p->in, p->out, p->count, types[p->dt], ops[p->op], t->comm,
                             t->stream);
        break;
    case RD_COLL_BROADCAST:
        rc = nccl.broadcast(p->in, p->out, p->count, types[p->dt], p->root, t->comm, t->stream);
        break;
    default:
        rc = nccl.all_gather(p->in, p->out, p->count, types[p->dt], t->comm, t->stream);
        break;
    }
    if (rc != ncclSuccess && rc != ncclInProgress) {
        nccl_error(t, rc, "queueing an NCCL collective", err, errlen);
        return -1;
    }
    p->state = RUN_QUEUEING;
    p->issued_ms = now_ms();
    return 0;
}

/* Moves the runs along as far as NCCL lets them: records the event of the one NCCL finished
 * queueing, gives it the next. Returns 0, or -1 with err set when the communicator failed. */
static int advance(rd_transport *t, char *err, size_t errlen)
{
    for (;;) {
        pending *p = t->head;
        while (p != NULL && p->state == RUN_QUEUED)
            p = p->next;
        if (p == NULL)
            return 0;
        int st = nccl_poll(t, err, errlen);
        if (st != 0)
            return st < 0 ? -1 : 0; /* NCCL is still queueing: next tick */
        if (p->state == RUN_QUEUEING) {
            if (rd_cuda_event_record(t->device, p->event, t->stream, err, errlen) != 0)
                return -1;
            p->state = RUN_QUEUED;
            continue;
        }
        if (issue(t, p, err, errlen) != 0)
            return -1;
    }
}

static void arm(rd_transport *t)
{
    if (t->head != NULL && !event_pending(t->ticker, EV_TIMEOUT, NULL)) {
        struct timeval tv = {0, RD_NCCL_POLL_US};
        event_add(t->ticker, &tv);
    }
}

/* How long p may take once NCCL has it: the timeout, plus its bytes at 100 MB/s, so that a
 * large tensor on a slow network is not taken for a peer that never came. */
static int64_t bound_ms(const rd_transport *t, const pending *p)
{
    uint64_t bytes = (uint64_t)p->count * rd_dtype_size(p->dt);
    if (p->coll == RD_COLL_ALLGATHER)
        bytes *= (uint64_t)t->nranks;
    return t->timeout_ms + (int64_t)(bytes / 100000);
}

/* Ends the communicator (why): NCCL aborted and the stream drained, so the device no longer
 * touches any pending run's buffers; then each is reported, done if its event had happened. */
static void end_comm(rd_transport *t, const char *why)
{
    rd_cuda_use(t->device, NULL, 0);
    if (t->comm != NULL)
        nccl.abort(t->comm);
    t->comm = NULL;
    rd_cuda_stream_sync(t->device, t->stream, NULL, 0);
    if (t->dead[0] == '\0')
        say(t->dead, sizeof(t->dead), "%s", why[0] ? why : "the NCCL communicator ended");
    while (t->head != NULL) {
        int ok = t->head->state == RUN_QUEUED &&
                 rd_cuda_event_done(t->device, t->head->event, NULL, 0) > 0;
        finish_head(t, ok ? 0 : -1, t->dead);
    }
}

/* On the loop while runs are pending: moves them along, then reports those whose event has
 * happened, in order. A failure of the communicator, or a collective past timeout_ms, ends the
 * communicator (the caller re-forms and aborts it). */
static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    rd_transport *t = arg;
    char why[512] = "";
    (void)fd;
    (void)what;
    if (advance(t, why, sizeof(why)) != 0) {
        end_comm(t, why);
        return;
    }

    while (t->head != NULL && t->head->state == RUN_QUEUED) {
        int done = rd_cuda_event_done(t->device, t->head->event, why, sizeof(why));
        if (done == 0)
            break;
        finish_head(t, done > 0 ? 0 : -1, why);
    }
    /* the oldest collective NCCL has, not yet done, bounds the wait */
    if (t->head != NULL && t->head->state != RUN_WAITING &&
        now_ms() - t->head->issued_ms > bound_ms(t, t->head)) {
        say(why, sizeof(why), "an NCCL collective did not finish within %lld ms of being queued "
            "(a peer that never came, or a wedged GPU)", (long long)bound_ms(t, t->head));
        end_comm(t, why);
        return;
    }
    arm(t);
}

static int nccl_run(rd_transport *t, struct event_base *base, int coll, rd_dtype dt, rd_redop op,
                    const void *in, void *out, size_t count, int root, rd_backend_done_fn done,
                    void *arg, char *err, size_t errlen)
{
    pending *p;

    /* AVG: ringd's engine runs SUM and divides as its own kernels do (NCCL's ncclAvg scales
     * each input first, in the element type) */
    if ((unsigned)dt >= RD_DT_COUNT || (unsigned)op >= RD_OP_COUNT || op == RD_OP_AVG ||
        (coll == RD_COLL_BROADCAST && (root < 0 || root >= t->nranks)) ||
        (coll != RD_COLL_ALLREDUCE && coll != RD_COLL_BROADCAST && coll != RD_COLL_ALLGATHER)) {
        say(err, errlen, "NCCL collective %d of dtype %d, op %d, root %d: not one ringd runs on "
            "NCCL", coll, (int)dt, (int)op, root);
        return -1;
    }
    if (t->dead[0] != '\0') {
        say(err, errlen, "%s", t->dead);
        return -1;
    }
    if (t->ticker == NULL && (t->ticker = event_new(base, -1, 0, on_tick, t)) == NULL) {
        say(err, errlen, "out of memory");
        return -1;
    }
    if ((p = calloc(1, sizeof(*p))) == NULL) {
        say(err, errlen, "out of memory");
        return -1;
    }
    /* the event exists before NCCL has the collective: once it has, only recording is left */
    if (rd_cuda_use(t->device, err, errlen) != 0 ||
        (p->event = rd_cuda_event_new(t->device, err, errlen)) == NULL) {
        free(p);
        return -1;
    }
    p->state = RUN_WAITING;
    p->coll = coll;
    p->root = root;
    p->dt = dt;
    p->op = op;
    p->in = in;
    p->out = out;
    p->count = count;
    p->done = done;
    p->arg = arg;
    if (t->tail != NULL)
        t->tail->next = p;
    else
        t->head = p;
    t->tail = p;
    arm(t); /* NCCL gets it on the next tick, never from within run: done is never reentered */
    return 0;
}

/* ncclCommAbort first (it returns once NCCL's kernels and threads for the communicator have
 * stopped, non-blocking or not), then the stream drained: when a done reports, nothing on the
 * device touches that run's buffers any more. Runs whose event had happened succeeded. */
static void nccl_abort(rd_transport *t)
{
    if (t == NULL)
        return;
    if (t->ticker != NULL)
        event_free(t->ticker);
    t->ticker = NULL;
    end_comm(t, "the NCCL communicator was aborted");
    rd_cuda_stream_free(t->device, t->stream);
    free(t);
}

const rd_transport_ops rd_nccl_ops = {
    .probe = nccl_ready,
    .make_id = nccl_make_id,
    .init = nccl_init,
    .poll = nccl_poll,
    .run = nccl_run,
    .abort = nccl_abort,
};
