/* A collective that one rank cannot run fails on every rank at once: one rank's library or daemon
 * refuses it (bad arguments, arena bounds, --max-pending, a root out of range) or the rank closes
 * its session, and every other rank of the op fails within a second with that rank's reason,
 * whether it submitted before the refusal or after it, on one node and across nodes (also when
 * it was its node's last client). Real redis-server and ringd daemons on loopback; clients in
 * forked processes. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"
#include "ringd.h"
#include "th_ring.h"

#define OP_TIMEOUT_MS 30000
#define FAST_MS 1500 /* "at once": well under any stall deadline, with room for ASan on 2 cores */
#define COUNT 16

typedef enum {
    R_INVALID, /* an unknown reduce op (the daemon) and an unknown dtype (the library) */
    R_BOUNDS,  /* too large for the arena, a buffer over its edge, no room to stage */
    R_PENDING, /* --max-pending reached */
    R_ROOT,    /* a broadcast root that is no rank */
    R_CLOSED,  /* the rank closes its session instead of submitting */
} refusal;

typedef struct {
    int nnodes, local; /* local clients on every node */
    refusal kind;
} rcase;

/* What the refusing rank tells the others, in memory every client process shares. */
typedef struct {
    volatile int64_t refused_ms[4]; /* th_now_ms() right before each refusal */
} shared_clock;

static th_ring ring_;
static char job_[64];
static shared_clock *clock_;

static void stop(void)
{
    th_ring_teardown(&ring_);
    if (clock_ != NULL)
        munmap(clock_, sizeof(*clock_));
    clock_ = NULL;
}

TestSuite(refusal, .fini = stop, .timeout = 120);

/* The refusing rank's own call: must fail with want and say why. */
static int expect_refused(ringd_t *r, ringd_result_t rc, ringd_result_t want, const char *why,
                          int line)
{
    if (rc == want && strstr(ringd_errmsg(r), why) != NULL)
        return 0;
    fprintf(stderr, "line %d: refusing rank %d got %s (%s); want %s with '%s'\n", line,
            ringd_rank(r), ringd_strerror(rc), ringd_errmsg(r), ringd_strerror(want), why);
    return 30;
}

/* Another rank's call of the refused op: must fail with want, name the refusing rank and its
 * reason, and end within FAST_MS of the refusal (refused_ms; 0: only the outcome is checked). */
static int expect_told(ringd_t *r, ringd_result_t rc, ringd_result_t want, int bad, const char *why,
                       int64_t refused_ms, int line)
{
    int64_t late = refused_ms > 0 ? th_now_ms() - refused_ms : 0;
    char who[32];
    snprintf(who, sizeof(who), "rank %d", bad);
    if (rc == want && strstr(ringd_errmsg(r), why) != NULL && strstr(ringd_errmsg(r), who) &&
        late < FAST_MS)
        return 0;
    fprintf(stderr,
            "line %d: rank %d got %s (%s) %lld ms after the refusal; want %s naming %s and '%s' "
            "within %d ms\n",
            line, ringd_rank(r), ringd_strerror(rc), ringd_errmsg(r), (long long)late,
            ringd_strerror(want), who, why, FAST_MS);
    return 40;
}

/* The refusing rank's step k: waits a little so the others are surely waiting, stamps the clock,
 * and makes its call. */
static void refuse_now(int k)
{
    th_sleep_ms(200);
    clock_->refused_ms[k] = th_now_ms();
}

static ringd_request_t *pending_[2];

/* The refusing rank's call of step k: it must fail itself, saying why. buf and b1 (two tensors)
 * are its arena buffers. */
static int refusing_call(ringd_t *r, const rcase *c, const char *name, int k, float *buf, float *b1)
{
    int n = ringd_size(r);
    ringd_result_t rc;
    if (c->kind == R_PENDING) { /* two ops the others have not submitted yet, then one more */
        TH_CHECK_OK(r, ringd_allreduce_async(r, "pending.0", buf, buf, COUNT, RINGD_F32, RINGD_SUM,
                                             &pending_[0]));
        TH_CHECK_OK(r, ringd_allreduce_async(r, "pending.1", b1, b1, COUNT, RINGD_F32, RINGD_SUM,
                                             &pending_[1]));
    }
    refuse_now(k);
    switch (c->kind) {
    case R_INVALID:
        if (k % 2 == 0) {
            rc = ringd_allreduce(r, name, buf, buf, COUNT, RINGD_F32, (ringd_redop_t)42);
            return expect_refused(r, rc, RINGD_E_INVALID, "unknown reduce op", __LINE__);
        }
        rc = ringd_allreduce(r, name, buf, buf, COUNT, (ringd_dtype_t)99, RINGD_SUM);
        return expect_refused(r, rc, RINGD_E_INVALID, "unknown dtype", __LINE__);
    case R_BOUNDS:
        if (k % 3 == 0) {
            float *heap = calloc(1, 16);
            rc = ringd_allreduce(r, name, heap, heap, (size_t)1 << 40, RINGD_F32, RINGD_SUM);
            free(heap);
            return expect_refused(r, rc, RINGD_E_INVALID, "do not fit the arena", __LINE__);
        }
        if (k % 3 == 1) { /* fills the arena, then starts a tensor in its last block */
            uint8_t *end = NULL;
            for (size_t sz = 1 << 20; sz >= 64;) {
                void *p = ringd_alloc(r, sz);
                if (p != NULL)
                    end = p;
                else
                    sz /= 2;
            }
            if (end == NULL)
                return 31;
            rc = ringd_allreduce(r, name, end, end, (1 << 20) / 8, RINGD_F32, RINGD_SUM);
            return expect_refused(r, rc, RINGD_E_INVALID, "straddles the arena's edge", __LINE__);
        }
        { /* the arena is full (the last step filled it): nowhere to stage a heap buffer */
            float heap[COUNT] = {0};
            while (ringd_alloc(r, 64) != NULL)
                ;
            rc = ringd_allreduce(r, name, heap, heap, COUNT, RINGD_F32, RINGD_SUM);
            return expect_refused(r, rc, RINGD_E_NOMEM, "no room in the arena to stage", __LINE__);
        }
    case R_PENDING:
        rc = ringd_allreduce(r, name, b1 + COUNT, b1 + COUNT, COUNT, RINGD_F32, RINGD_SUM);
        return expect_refused(r, rc, RINGD_E_INVALID, "--max-pending", __LINE__);
    case R_ROOT:
        rc = ringd_broadcast(r, name, buf, COUNT, RINGD_F32, n + 3);
        return expect_refused(r, rc, RINGD_E_INVALID, "is not a rank", __LINE__);
    case R_CLOSED: ringd_close(r); return 0;
    }
    return 14;
}

/* Step k: a refusal of kind c->kind by the last rank on op name while the others wait in an
 * allreduce (a broadcast for R_ROOT) of name (others_first), or before they submit it. buf and
 * b1 are arena buffers (COUNT and 2 * COUNT floats). Returns 0 when this rank saw what it
 * should. */
static int round_of(ringd_t *r, const rcase *c, const char *name, int k, int others_first,
                    float *buf, float *b1)
{
    int me = ringd_rank(r), n = ringd_size(r), bad = n - 1;
    for (int i = 0; i < COUNT; i++)
        buf[i] = 1.0f;
    if (me == bad) {
        int rc = refusing_call(r, c, name, k, buf, b1);
        if (rc == 0 && !others_first && c->kind != R_CLOSED)
            TH_CHECK_OK(r, ringd_barrier(r, "after-refusal"));
        if (rc == 0 && c->kind == R_PENDING) { /* its two earlier ops still complete */
            TH_CHECK_OK(r, ringd_wait(pending_[0]));
            TH_CHECK_OK(r, ringd_wait(pending_[1]));
        }
        return rc;
    }
    if (!others_first) /* the refusal is done when this barrier ends */
        TH_CHECK_OK(r, ringd_barrier(r, "after-refusal"));
    ringd_result_t rc;
    if (c->kind == R_ROOT)
        rc = ringd_broadcast(r, name, buf, COUNT, RINGD_F32, 0);
    else
        rc = ringd_allreduce(r, name, buf, buf, COUNT, RINGD_F32, RINGD_SUM);
    int64_t t = others_first ? clock_->refused_ms[k] : 0;
    switch (c->kind) {
    case R_INVALID:
        return expect_told(r, rc, RINGD_E_INVALID, bad,
                           k % 2 ? "unknown dtype" : "unknown reduce op", t, __LINE__);
    case R_BOUNDS:
        return expect_told(r, rc, k % 3 == 2 ? RINGD_E_NOMEM : RINGD_E_INVALID, bad,
                           k % 3 == 0   ? "do not fit the arena"
                           : k % 3 == 1 ? "straddles the arena's edge"
                                        : "no room in the arena to stage",
                           t, __LINE__);
    case R_PENDING: {
        int bad_rc = expect_told(r, rc, RINGD_E_INVALID, bad, "--max-pending", t, __LINE__);
        if (bad_rc != 0)
            return bad_rc;
        TH_CHECK_OK(r, ringd_allreduce(r, "pending.0", buf, buf, COUNT, RINGD_F32, RINGD_SUM));
        TH_CHECK_OK(r, ringd_allreduce(r, "pending.1", b1, b1, COUNT, RINGD_F32, RINGD_SUM));
        return 0;
    }
    case R_ROOT: return expect_told(r, rc, RINGD_E_INVALID, bad, "is not a rank", t, __LINE__);
    case R_CLOSED:
        /* A session closed without a drain is a loss to the others, on its node or another
         * (also when it was its node's last): told once, naming who left. */
        return expect_told(r, rc, RINGD_E_MEMBERSHIP, bad, "left", t, __LINE__);
    }
    return 12;
}

/* Client i: refusals with the others waiting first, then with the refusal first (the others
 * then find a tombstone), then an allreduce that must still work. */
static int client(int i, void *arg)
{
    const rcase *c = arg;
    int node = i / c->local;
    ringd_t *r = th_open_world(ring_.d[node].sock, job_, c->nnodes * c->local, c->local, 1u << 20,
                               OP_TIMEOUT_MS);
    if (r == NULL)
        return 10;
    int bad = ringd_size(r) - 1, me = ringd_rank(r);
    float *buf = ringd_alloc(r, COUNT * sizeof(float));
    float *b1 = ringd_alloc(r, 2 * COUNT * sizeof(float));
    int32_t *one = ringd_alloc(r, sizeof(int32_t));
    if (buf == NULL || b1 == NULL || one == NULL)
        return 15;
    int rounds = c->kind == R_INVALID ? 4 : c->kind == R_BOUNDS ? 3 : 2;
    if (c->kind == R_CLOSED || c->kind == R_PENDING) /* what follows would be refused too */
        rounds = 1;
    for (int k = 0; k < rounds; k++) {
        char name[32];
        snprintf(name, sizeof(name), "t.%d", k);
        /* INVALID: daemon, library, daemon, library; BOUNDS: fit, edge, stage (others first, then
         * refusal first for the rest); every other kind: others first, then refusal first */
        int others_first = c->kind == R_BOUNDS ? k < 2 : k % 2 == 0;
        if (c->kind == R_INVALID)
            others_first = k < 2;
        int rc = round_of(r, c, name, k, others_first, buf, b1);
        if (rc != 0)
            return rc;
        if (me == bad && c->kind == R_CLOSED)
            return 0;
    }
    /* the job goes on: every rank that is left sums its ones */
    ringd_result_t rc;
    do {
        *one = 1;
        rc = ringd_allreduce(r, "still-works", one, one, 1, RINGD_I32, RINGD_SUM);
    } while (rc == RINGD_E_MEMBERSHIP);
    TH_CHECK_OK(r, rc);
    if (*one != ringd_size(r)) {
        fprintf(stderr, "rank %d: sum of ones %d, size %d\n", me, *one, ringd_size(r));
        return 16;
    }
    ringd_close(r);
    return 0;
}

static void run_case(int nnodes, int local, refusal kind)
{
    static const char *const pending[] = {"--max-pending", "2", "--stall-abort", "60000", NULL};
    static const char *const plain[] = {"--stall-abort", "60000", NULL};
    clock_ = mmap(NULL, sizeof(*clock_), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(clock_, MAP_FAILED);
    cr_assert_eq(th_ring_start(&ring_, nnodes, kind == R_PENDING ? pending : plain), 0,
                 "redis-server and %d ringd did not start", nnodes);
    snprintf(job_, sizeof(job_), "refusal.%d", (int)getpid());
    rcase c = {nnodes, local, kind};
    int failed = th_run(nnodes * local, client, &c, 90000);
    if (failed)
        th_ring_dump_logs(&ring_, 8192);
    cr_assert_eq(failed, 0, "client %d failed", failed - 1);
    th_ring_finish(&ring_);
}

#define CASES(kind, label)                                                                         \
    Test(refusal, label##_on_one_rank_fails_both_ranks_of_one_node_at_once)                        \
    {                                                                                              \
        run_case(1, 2, kind);                                                                      \
    }                                                                                              \
    Test(refusal, label##_on_one_rank_fails_the_other_node_s_rank_at_once)                         \
    {                                                                                              \
        run_case(2, 1, kind);                                                                      \
    }                                                                                              \
    Test(refusal, label##_on_one_rank_fails_every_rank_of_two_nodes_of_two_at_once)                \
    {                                                                                              \
        run_case(2, 2, kind);                                                                      \
    }

CASES(R_INVALID, invalid_arguments)
CASES(R_BOUNDS, arena_bounds)
CASES(R_PENDING, too_many_pending)
CASES(R_ROOT, a_root_out_of_range)
CASES(R_CLOSED, a_closed_session)

/* ---- stall-abort is one decision ---- */

typedef struct {
    int late_ms;  /* when the last rank submits, after the others began */
    size_t count; /* f32 elements: small ones go direct, large ones round the ring */
} stall_case;

/* 2 nodes: rank 0 (node n0, the coordinator) submits at once, rank 1 (node n1) 1000 ms later,
 * rank 2 (node n1) at late_ms; --stall-abort is 2000 ms. n0's deadline passes first, n1's would
 * pass later: every rank must get the same outcome, a result or RINGD_E_STALLED. The outcome
 * codes go to clock_->refused_ms[rank]. */
static int stall_client(int i, void *arg)
{
    const stall_case *sc = arg;
    int node = i == 0 ? 0 : 1;
    ringd_t *r =
        th_open_world(ring_.d[node].sock, job_, 3, node == 0 ? 1 : 2, 64u << 20, OP_TIMEOUT_MS);
    if (r == NULL)
        return 10;
    int me = ringd_rank(r);
    float *buf = ringd_alloc(r, sc->count * sizeof(float));
    if (buf == NULL)
        return 11;
    for (size_t k = 0; k < sc->count; k++)
        buf[k] = 1.0f;
    TH_CHECK_OK(r, ringd_barrier(r, "start"));
    th_sleep_ms(me == 0 ? 0 : me == 1 ? 1000 : sc->late_ms);
    ringd_result_t rc = ringd_allreduce(r, "x", buf, buf, sc->count, RINGD_F32, RINGD_SUM);
    clock_->refused_ms[me] = rc == RINGD_OK ? 100 + (int64_t)buf[0] : rc;
    if (rc != RINGD_OK && rc != RINGD_E_STALLED) {
        fprintf(stderr, "rank %d: %s: %s\n", me, ringd_strerror(rc), ringd_errmsg(r));
        return 20;
    }
    if (rc == RINGD_E_STALLED && strstr(ringd_errmsg(r), "stalled") == NULL) {
        fprintf(stderr, "rank %d: stalled without saying so: %s\n", me, ringd_errmsg(r));
        return 21;
    }
    TH_CHECK_OK(r, ringd_barrier(r, "end")); /* the job goes on */
    ringd_close(r);
    return 0;
}

static void run_stall(int late_ms, size_t count, int want)
{
    static const char *const args[] = {"--stall-abort", "2000", "--stall-warn", "500", NULL};
    clock_ = mmap(NULL, sizeof(*clock_), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(clock_, MAP_FAILED);
    cr_assert_eq(th_ring_start(&ring_, 2, args), 0, "redis-server and 2 ringd did not start");
    snprintf(job_, sizeof(job_), "stall.%d", (int)getpid());
    stall_case sc = {late_ms, count};
    int failed = th_run(3, stall_client, &sc, 60000);
    if (failed)
        th_ring_dump_logs(&ring_, 8192);
    cr_assert_eq(failed, 0, "client %d failed", failed - 1);
    for (int k = 0; k < 3; k++)
        cr_expect_eq(clock_->refused_ms[k], want,
                     "rank %d got %lld (1xx: a result of xx; %d: stalled); want %d", k,
                     (long long)clock_->refused_ms[k], RINGD_E_STALLED, want);
    th_ring_finish(&ring_);
}

Test(refusal,
     a_stall_abort_on_the_first_node_fails_a_small_op_on_every_rank_even_if_its_last_rank_comes)
{
    run_stall(2600, 4, RINGD_E_STALLED);
}

Test(refusal,
     a_stall_abort_on_the_first_node_fails_a_ring_op_on_every_rank_even_if_its_last_rank_comes)
{
    run_stall(2600, 1 << 20, RINGD_E_STALLED);
}

Test(refusal, an_op_whose_last_rank_comes_before_every_deadline_completes_on_every_rank)
{
    run_stall(600, 4, 103);
}
