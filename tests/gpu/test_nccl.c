/* On a device with NCCL: a one-rank communicator end to end through the transport seam (ringd's
 * NCCL transport, gpu/nccl.c): an id made, the communicator formed without blocking, an
 * allreduce, broadcast and allgather reported on the event loop, an abort with a collective
 * still queued (it returns at once; the done follows on the loop, with a failure or its
 * result), and a new communicator for the next generation from a new id; then 4000 collectives
 * queued back to back under a 10 ms timeout, none taken for late (each is timed from reaching the
 * head of the queue). Without a device, or without libnccl.so.2, it prints one line saying why
 * and exits 77 (meson's skip). */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "cuda_dev.h"
#include "nccl_transport.h"

#define N (1 << 20)
#define QUEUED 4000

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

typedef struct {
    int calls, status;
    char why[256];
} outcome;

static void on_done(void *arg, int status, const char *why)
{
    outcome *o = arg;
    o->calls++;
    o->status = status;
    snprintf(o->why, sizeof(o->why), "%s", why != NULL ? why : "");
}

/* Forms a communicator of one rank from a new id on device 0, waiting (polling) at most 60 s.
 * NULL after printing why. */
static rd_transport *form(const rd_transport_ops *ops, const char *what, int64_t timeout_ms)
{
    uint8_t id[RD_TRANSPORT_ID_MAX];
    size_t len = 0;
    char err[512];
    if (ops->make_id(id, &len, err, sizeof(err)) != 0) {
        printf("FAIL: %s: make_id: %s\n", what, err);
        return NULL;
    }
    rd_transport *t = ops->init(id, len, 1, 0, 0, timeout_ms, err, sizeof(err));
    if (t == NULL) {
        printf("FAIL: %s: init: %s\n", what, err);
        return NULL;
    }
    for (int i = 0; i < 600000; i++) {
        int st = ops->poll(t, err, sizeof(err));
        if (st == 0)
            return t;
        if (st < 0) {
            printf("FAIL: %s: the communicator did not form: %s\n", what, err);
            ops->abort(t);
            return NULL;
        }
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    printf("FAIL: %s: the communicator did not form in 60 s\n", what);
    ops->abort(t);
    return NULL;
}

/* Runs coll on t and turns the loop until its done comes (at most 60 s). */
static int run_one(const rd_transport_ops *ops, rd_transport *t, struct event_base *base, int coll,
                   const void *in, void *out, size_t count, const char *what)
{
    outcome o = {0, 0, ""};
    char err[512];
    if (ops->run(t, base, coll, RD_DT_F32, RD_OP_SUM, in, out, count, 0, on_done, &o, err,
                 sizeof(err)) != 0) {
        printf("FAIL: %s: run: %s\n", what, err);
        return -1;
    }
    for (int i = 0; o.calls == 0 && i < 600000; i++)
        event_base_loop(base, EVLOOP_ONCE);
    if (o.calls != 1 || o.status != 0) {
        printf("FAIL: %s: done called %d times, status %d (%s)\n", what, o.calls, o.status, o.why);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    char why[512];
    const rd_transport_ops *ops = &rd_nccl_ops;
    int helper = rd_nccl_root_main(argc, argv);
    if (helper >= 0)
        return helper; /* started as an id's root */
    int n = rd_cuda_load(why, sizeof(why));
    if (n > 0 && rd_cuda_check(0, why, sizeof(why)) != 0)
        n = 0;
    if (n <= 0) {
        printf("SKIP tests/gpu/test_nccl: no CUDA device ringd can use here (%s)\n", why);
        return n == 0 ? 77 : 1;
    }
    uint8_t id[RD_TRANSPORT_ID_MAX];
    size_t len = 0;
    if (ops->make_id(id, &len, why, sizeof(why)) != 0) {
        printf("SKIP tests/gpu/test_nccl: %s\n", why);
        return strstr(why, "no NCCL library") != NULL ? 77 : 1;
    }
    struct event_base *base = event_base_new();
    float *host = malloc(N * sizeof(float) * 2), *got = host + N;
    float *in = rd_cuda_alloc(0, N * sizeof(float), why, sizeof(why));
    float *out = rd_cuda_alloc(0, N * sizeof(float), why, sizeof(why));
    if (base == NULL || host == NULL || in == NULL || out == NULL) {
        printf("FAIL: setup: %s\n", why);
        return 1;
    }
    for (int i = 0; i < N; i++)
        host[i] = (float)(i % 1000) * 0.5f;
    if (rd_cuda_copy(0, in, host, N * sizeof(float), why, sizeof(why)) != 0) {
        printf("FAIL: %s\n", why);
        return 1;
    }
    int failed = 0;
    for (int generation = 1; generation <= 2 && !failed; generation++) {
        char what[64];
        snprintf(what, sizeof(what), "generation %d", generation);
        rd_transport *t = form(ops, what, 60000);
        if (t == NULL)
            return 1;
        static const int colls[] = {RD_COLL_ALLREDUCE, RD_COLL_BROADCAST, RD_COLL_ALLGATHER};
        for (int c = 0; c < 3 && !failed; c++) {
            if (rd_cuda_fill_async(0, NULL, out, 0, N, why, sizeof(why)) != 0 ||
                rd_cuda_stream_sync(0, NULL, why, sizeof(why)) != 0 ||
                run_one(ops, t, base, colls[c], in, out, N, what) != 0 ||
                rd_cuda_copy(0, got, out, N * sizeof(float), why, sizeof(why)) != 0 ||
                memcmp(got, host, N * sizeof(float)) != 0) {
                printf("FAIL: %s: collective %d of one rank does not give its input back (%s)\n",
                       what, colls[c], why);
                failed = 1;
            }
        }
        /* two runs back to back go to NCCL one after the other, reported in order */
        outcome a = {0, 0, ""}, b = {0, 0, ""};
        if (!failed && (ops->run(t, base, RD_COLL_ALLREDUCE, RD_DT_F32, RD_OP_SUM, in, out, N, 0,
                                 on_done, &a, why, sizeof(why)) != 0 ||
                        ops->run(t, base, RD_COLL_BROADCAST, RD_DT_F32, RD_OP_SUM, in, out, N, 0,
                                 on_done, &b, why, sizeof(why)) != 0)) {
            printf("FAIL: %s: two runs: %s\n", what, why);
            failed = 1;
        }
        for (int i = 0; !failed && b.calls == 0 && i < 600000; i++)
            event_base_loop(base, EVLOOP_ONCE);
        if (!failed && (a.calls != 1 || b.calls != 1 || a.status != 0 || b.status != 0)) {
            printf("FAIL: %s: two runs back to back: %d/%d calls, status %d/%d (%s %s)\n", what,
                   a.calls, b.calls, a.status, b.status, a.why, b.why);
            failed = 1;
        }
        /* an abort with a collective queued: it returns at once (abort and drain run off the
         * loop), and the done follows on the loop */
        outcome o = {0, 0, ""};
        if (!failed && ops->run(t, base, RD_COLL_ALLREDUCE, RD_DT_F32, RD_OP_SUM, in, out, N, 0,
                                on_done, &o, why, sizeof(why)) != 0) {
            printf("FAIL: %s: run before abort: %s\n", what, why);
            failed = 1;
        }
        for (int i = 0; i < 3; i++) /* NCCL has it */
            event_base_loop(base, EVLOOP_NONBLOCK);
        int64_t t0 = now_ms();
        ops->abort(t);
        int64_t took = now_ms() - t0;
        int early = o.calls;
        for (int i = 0; o.calls == 0 && i < 600000; i++)
            event_base_loop(base, EVLOOP_ONCE);
        if (!failed && (o.calls != 1 || early != 0 || took > 100)) {
            printf("FAIL: %s: abort took %lld ms and reported %d times from within, %d in all\n",
                   what, (long long)took, early, o.calls);
            failed = 1;
        }
        if (!failed)
            printf("NCCL %s: a one-rank communicator formed, ran 3 collectives, aborted with one "
                   "queued (%s)\n",
                   what, o.status == 0 ? "it had finished" : o.why);
        /* the next generation's fill must not overtake anything of this one's */
        rd_cuda_stream_sync(0, NULL, why, sizeof(why));
    }
    /* a backward pass's worth of collectives queued at once (about 80 ms of them on an H200),
     * under a 10 ms timeout */
    rd_transport *t = failed ? NULL : form(ops, "queued", 10);
    if (t != NULL) {
        static outcome q[QUEUED];
        int64_t t0 = now_ms();
        for (int k = 0; k < QUEUED && !failed; k++)
            if (ops->run(t, base, RD_COLL_ALLREDUCE, RD_DT_F32, RD_OP_SUM, in, out, 1024, 0,
                         on_done, &q[k], why, sizeof(why)) != 0) {
                printf("FAIL: queued run %d: %s\n", k, why);
                failed = 1;
            }
        for (int i = 0; !failed && q[QUEUED - 1].calls == 0 && i < 6000000; i++)
            event_base_loop(base, EVLOOP_ONCE);
        int bad = 0;
        for (int k = 0; k < QUEUED; k++)
            bad += q[k].calls != 1 || q[k].status != 0;
        if (!failed && bad > 0) {
            printf("FAIL: %d of %d collectives queued under a 10 ms timeout failed (first: %s)\n",
                   bad, QUEUED, q[0].why[0] ? q[0].why : q[QUEUED - 1].why);
            failed = 1;
        } else if (!failed) {
            printf("NCCL queued: %d collectives back to back in %lld ms under a 10 ms timeout, "
                   "none late\n",
                   QUEUED, (long long)(now_ms() - t0));
        }
        ops->abort(t);
    } else if (!failed) {
        failed = 1;
    }
    rd_cuda_free(0, in);
    rd_cuda_free(0, out);
    free(host);
    event_base_free(base);
    return failed;
}
