/* Reducescatter, allgatherv, alltoall and counts of 0: one daemon and rings of 2 and 3 real daemons
 * (a real redis-server), clients in forked processes. Every result is checked against a reference
 * computed here from every rank's input: every dtype and reduce op, equal and per-rank counts
 * (0, 1 and primes among them), scaling, both in-place forms, async in rank-specific orders, and
 * counts that differ between ranks failing on every rank. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dtype.h"
#include "harness.h"
#include "ringd.h"
#include "th_ref.h"
#include "th_ring.h"

#define OP_TIMEOUT_MS 30000

static th_ring ring_;
static th_daemon solo_;
static char job_[64];

/* Where each client goes: nnodes daemons (0: one daemon without redis) with local[k] clients. */
typedef struct {
    int nnodes;
    int local[TH_RING_MAX];
    int world;
} topo;

static void stop(void)
{
    th_ring_teardown(&ring_);
    th_daemon_teardown(&solo_);
}

TestSuite(collectives, .fini = stop);

/* Starts what t needs (extra: ringd arguments, may be NULL). */
static void start(topo *t, const char *const *extra)
{
    t->world = 0;
    for (int k = 0; k < (t->nnodes ? t->nnodes : 1); k++)
        t->world += t->local[k];
    if (t->nnodes == 0)
        cr_assert_eq(th_daemon_start(&solo_, extra), 0, "ringd did not start");
    else
        cr_assert_eq(th_ring_start(&ring_, t->nnodes, extra), 0, "the ring did not start");
}

static void finish(const topo *t)
{
    if (t->nnodes == 0)
        th_daemon_finish(&solo_);
    else
        th_ring_finish(&ring_);
}

/* Client i's session; NULL after printing why. */
static ringd_t *join(const topo *t, int i)
{
    if (t->nnodes == 0)
        return th_open(solo_.sock, job_, t->local[0], 0, OP_TIMEOUT_MS);
    int k = 0, first = 0;
    while (k < t->nnodes - 1 && i >= first + t->local[k])
        first += t->local[k++];
    return th_open_world(ring_.d[k].sock, job_, t->world, t->local[k], 0, OP_TIMEOUT_MS);
}

static _Atomic int *submitted_; /* a run's rank has submitted what another waits for (shared) */

/* Runs fn in one client process per rank, as a job of its own (the last one's ranks may
 * still be leaving). */
static int run(const topo *t, int (*fn)(int i, void *arg), int timeout_ms)
{
    static int runs;
    snprintf(job_, sizeof(job_), "coll.%d.%d", (int)getpid(), runs++);
    if (submitted_ == NULL) {
        submitted_ = mmap(NULL, sizeof(*submitted_), PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        cr_assert_neq(submitted_, MAP_FAILED);
    }
    atomic_store(submitted_, 0);
    topo copy = *t;
    int failed = th_run(t->world, fn, &copy, timeout_ms);
    if (failed && t->nnodes > 0)
        th_ring_dump_logs(&ring_, 16384);
    return failed;
}

/* Per-rank counts for a job of n ranks: 0 for rank 1, 1, primes. */
static void counts_of(int n, int shape, size_t *c)
{
    static const size_t pool[] = {5, 0, 1, 13, 7, 0, 3011, 2};
    for (int k = 0; k < n; k++)
        c[k] = pool[(k + shape * 3) % 8];
    if (n > 1)
        c[1] = 0;
}

/* Rank me's reducescatter of counts c (or equal counts each when c is NULL) of dt with op:
 * checks its block against the reference. how: 0 out of place in the arena, 1 MPI's in place,
 * 2 NCCL's in place, 3 out of place outside the arena. */
static int one_reducescatter(ringd_t *r, const char *name, const size_t *c, size_t each,
                             ringd_dtype_t dt, ringd_redop_t op, double pre, double post, int how)
{
    int n = ringd_size(r), me = ringd_rank(r);
    size_t esz = ringd_dtype_size(dt), total = 0, own = 0;
    for (int k = 0; k < n; k++) {
        size_t ck = c != NULL ? c[k] : each;
        own += k < me ? ck : 0;
        total += ck;
    }
    size_t mine = c != NULL ? c[me] : each;
    uint8_t *in = how == 3 ? malloc(total * esz + 1) : ringd_alloc(r, total * esz + 1);
    uint8_t *out = how == 3 ? malloc(mine * esz + 1) : ringd_alloc(r, mine * esz + 1);
    if (in == NULL || out == NULL)
        return 30;
    uint8_t *dst = how == 1 ? in : how == 2 ? in + own * esz : out;
    th_ref_fill(in, me, dt, op, 0, total);
    if (c != NULL)
        TH_CHECK_OK(r, ringd_reducescatterv(r, name, in, dst, c, dt, op, pre, post));
    else
        TH_CHECK_OK(r, ringd_reducescatter(r, name, in, dst, each, dt, op));
    int rc = th_ref_check(r, name, dst, dt, op, own, mine, pre, post);
    if (how == 3) {
        free(in);
        free(out);
    } else {
        ringd_free(r, in);
        ringd_free(r, out);
    }
    return rc;
}

/* Rank me's allgatherv of counts c: every rank's block checked. in_place: MPI's form. */
static int one_allgatherv(ringd_t *r, const char *name, const size_t *c, ringd_dtype_t dt,
                          int in_place)
{
    int n = ringd_size(r), me = ringd_rank(r);
    size_t esz = ringd_dtype_size(dt), total = 0, own = 0;
    for (int k = 0; k < n; k++) {
        own += k < me ? c[k] : 0;
        total += c[k];
    }
    uint8_t *out = ringd_alloc(r, total * esz + 1), *in = malloc(c[me] * esz + 1);
    uint8_t *want = malloc(total * esz + 1);
    if (out == NULL || in == NULL || want == NULL)
        return 30;
    uint8_t *src = in_place ? out + own * esz : in;
    th_ref_fill(src, me, dt, RINGD_SUM, 7 * (size_t)me, c[me]);
    TH_CHECK_OK(r, ringd_allgatherv(r, name, src, c[me], out, c, dt));
    size_t at = 0;
    for (int k = 0; k < n; k++) {
        th_ref_fill(want + at * esz, k, dt, RINGD_SUM, 7 * (size_t)k, c[k]);
        at += c[k];
    }
    for (size_t i = 0; i < total; i++)
        if (memcmp(out + i * esz, want + i * esz, esz) != 0) {
            fprintf(stderr, "rank %d: tensor '%s' element %zu of %zu is %g, want %g\n", me, name, i,
                    total, th_ref_load(out, dt, i), th_ref_load(want, dt, i));
            return 40;
        }
    ringd_free(r, out);
    free(in);
    free(want);
    return 0;
}

/* Every dtype and op of reducescatter (equal and per-rank counts, scaled for floats), every
 * dtype of allgatherv, and collectives of no elements. */
static int every_op(int i, void *arg)
{
    const topo *t = arg;
    ringd_t *r = join(t, i);
    if (r == NULL)
        return 10;
    int n = ringd_size(r), rc;
    size_t c[TH_RING_MAX * 4];
    char name[96];
    for (int dt = RINGD_F32; dt <= RINGD_U8; dt++) {
        for (int op = RINGD_SUM; op <= RINGD_PROD; op++) {
            int how = (dt + op) % 4;
            counts_of(n, dt + op, c);
            snprintf(name, sizeof(name), "rsv.%s.%s", rd_dtype_name((rd_dtype)dt),
                     rd_redop_name((rd_redop)op));
            double pre = th_ref_is_float((ringd_dtype_t)dt) && op <= RINGD_AVG ? 0.5 : 1.0;
            double post = pre == 0.5 ? 3.0 : 1.0;
            rc = one_reducescatter(r, name, c, 0, (ringd_dtype_t)dt, (ringd_redop_t)op, pre, post,
                                   how);
            if (rc != 0)
                return rc;
            for (size_t each = 1; each < 3000; each = each * 31 + 6) { /* 1, 37, 1153 */
                snprintf(name, sizeof(name), "rs.%s.%s.%zu", rd_dtype_name((rd_dtype)dt),
                         rd_redop_name((rd_redop)op), each);
                rc = one_reducescatter(r, name, NULL, each, (ringd_dtype_t)dt, (ringd_redop_t)op,
                                       1.0, 1.0, (how + (int)each) % 4);
                if (rc != 0)
                    return rc;
            }
        }
        counts_of(n, dt, c);
        snprintf(name, sizeof(name), "agv.%s", rd_dtype_name((rd_dtype)dt));
        if ((rc = one_allgatherv(r, name, c, (ringd_dtype_t)dt, dt % 2)) != 0)
            return rc;
    }
    /* nothing at all: every rank passes 0 (NULL buffers are fine then) */
    TH_CHECK_OK(r, ringd_allreduce(r, "zero.allreduce", NULL, NULL, 0, RINGD_F32, RINGD_SUM));
    TH_CHECK_OK(r, ringd_broadcast(r, "zero.broadcast", NULL, 0, RINGD_I64, n - 1));
    TH_CHECK_OK(r, ringd_allgather(r, "zero.allgather", NULL, NULL, 0, RINGD_U8));
    TH_CHECK_OK(r, ringd_reducescatter(r, "zero.rs", NULL, NULL, 0, RINGD_BF16, RINGD_MAX));
    memset(c, 0, sizeof(c));
    TH_CHECK_OK(r, ringd_allgatherv(r, "zero.agv", NULL, 0, NULL, c, RINGD_F64));
    th_close_together(r, t->world);
    return 0;
}

/* Async reducescatters and allgathervs submitted in an order of each rank's own, waited for in
 * another. */
static int async_orders(int i, void *arg)
{
    const topo *t = arg;
    ringd_t *r = join(t, i);
    if (r == NULL)
        return 10;
    enum { K = 12 };
    int n = ringd_size(r), me = ringd_rank(r);
    size_t c[TH_RING_MAX * 4], total = 0, own = 0;
    counts_of(n, 1, c);
    for (int k = 0; k < n; k++) {
        own += k < me ? c[k] : 0;
        total += c[k];
    }
    void *in[K], *out[K];
    ringd_request_t *req[K];
    char name[K][32];
    for (int k = 0; k < K; k++) {
        static const int mult[] = {1, 5, 7, 11}; /* coprime with K: a permutation of its own */
        int x = (k * mult[me % 4] + me) % K;
        snprintf(name[x], sizeof(name[x]), "async.%d", x);
        in[x] = ringd_alloc(r, total * 4 + 4);
        out[x] = ringd_alloc(r, total * 4 + 4);
        if (in[x] == NULL || out[x] == NULL)
            return 30;
        if (x % 2 == 0) {
            th_ref_fill(in[x], me, RINGD_F32, RINGD_SUM, (size_t)x, total);
            TH_CHECK_OK(r, ringd_reducescatterv_async(r, name[x], in[x], out[x], c, RINGD_F32,
                                                      RINGD_SUM, 1.0, 1.0, &req[x]));
        } else {
            th_ref_fill(in[x], me, RINGD_I32, RINGD_SUM, 0, c[me]);
            TH_CHECK_OK(
                r, ringd_allgatherv_async(r, name[x], in[x], c[me], out[x], c, RINGD_I32, &req[x]));
        }
    }
    for (int k = K - 1; k >= 0; k--) {
        int x = (k + me) % K;
        TH_CHECK_OK(r, ringd_wait(req[x]));
        if (x % 2 == 0) {
            int rc = th_ref_check(r, name[x], out[x], RINGD_F32, RINGD_SUM, (size_t)x + own, c[me],
                                  1.0, 1.0);
            if (rc != 0)
                return rc;
            continue;
        }
        size_t at = 0;
        for (int q = 0; q < n; q++) {
            for (size_t e = 0; e < c[q]; e++)
                if (((int32_t *)out[x])[at + e] !=
                    (int32_t)th_ref_input(q, e, RINGD_I32, RINGD_SUM)) {
                    fprintf(stderr, "rank %d: %s: rank %d's element %zu is wrong\n", me, name[x], q,
                            e);
                    return 40;
                }
            at += c[q];
        }
    }
    th_close_together(r, t->world);
    return 0;
}

/* Rank 1 passes other counts than the rest: every rank fails with RINGD_E_MISMATCH naming it; the
 * job goes on. */
static int differing_counts(int i, void *arg)
{
    const topo *t = arg;
    ringd_t *r = join(t, i);
    if (r == NULL)
        return 10;
    int n = ringd_size(r), me = ringd_rank(r);
    size_t c[TH_RING_MAX * 4], total = 0;
    counts_of(n, 2, c);
    if (me == 1) {
        c[0] += 1;
    }
    for (int k = 0; k < n; k++)
        total += c[k];
    float *in = ringd_alloc(r, total * 4 + 4), *out = ringd_alloc(r, total * 4 + 4);
    if (in == NULL || out == NULL)
        return 30;
    memset(in, 0, total * 4);
    ringd_result_t rc =
        ringd_reducescatterv(r, "bad.counts", in, out, c, RINGD_F32, RINGD_SUM, 1, 1);
    if (rc != RINGD_E_MISMATCH || strstr(ringd_errmsg(r), "counts") == NULL ||
        strstr(ringd_errmsg(r), "rank 1") == NULL) {
        fprintf(stderr, "rank %d: want a counts mismatch naming rank 1, got %s: %s\n", me,
                ringd_strerror(rc), ringd_errmsg(r));
        return 50;
    }
    rc = ringd_allgatherv(r, "bad.agv", in, c[me], out, c, RINGD_F32);
    if (rc != RINGD_E_MISMATCH) {
        fprintf(stderr, "rank %d: allgatherv: want a mismatch, got %s: %s\n", me,
                ringd_strerror(rc), ringd_errmsg(r));
        return 51;
    }
    counts_of(n, 2, c);
    TH_CHECK_OK(r, ringd_reducescatterv(r, "good.counts", in, out, c, RINGD_F32, RINGD_SUM, 1, 1));
    /* a binding's refusal: rank 0 will not run it, the others hear why at once */
    if (me == 0) {
        TH_CHECK_OK(r, ringd_refuse(r, "refused", RINGD_E_INVALID, "its splits do not add up"));
    } else {
        rc = ringd_allreduce(r, "refused", in, out, 4, RINGD_F32, RINGD_SUM);
        if (rc != RINGD_E_INVALID || strstr(ringd_errmsg(r), "rank 0") == NULL ||
            strstr(ringd_errmsg(r), "splits do not add up") == NULL) {
            fprintf(stderr, "rank %d: want rank 0's refusal, got %s: %s\n", me, ringd_strerror(rc),
                    ringd_errmsg(r));
            return 52;
        }
    }
    if (ringd_refuse(r, "fine", RINGD_OK, "no") != RINGD_E_INVALID)
        return 53;
    TH_CHECK_OK(r, ringd_allreduce(r, "after.refused", in, out, 4, RINGD_F32, RINGD_SUM));
    th_close_together(r, t->world);
    return 0;
}

/* ringd_allgatherv_into's receive callback: a heap buffer of total elements (ctx: the element
 * size), recorded in the caller's slot; NULL when ctx says to refuse. */
typedef struct {
    size_t esz;
    int refuse;
    void *buf;
    size_t total;
} recv_slot;

static void *recv_into(void *ctx, const size_t *counts, int size, size_t total)
{
    recv_slot *s = ctx;
    (void)counts, (void)size;
    s->total = total;
    s->buf = s->refuse ? NULL : malloc(total * s->esz + 1);
    return s->buf;
}

/* Checks a learnt allgatherv of rank q contributing q % 4 * 3 + (salt % 2) i32 elements
 * 1000 * q + k. Returns 0 or 40. */
static int check_learnt(int me, int n, int salt, const recv_slot *s, const size_t *counts)
{
    size_t at = 0;
    for (int q = 0; q < n; q++) {
        size_t c = (size_t)(q % 4 * 3 + salt % 2);
        if (counts[q] != c) {
            fprintf(stderr, "rank %d: learnt count of rank %d is %zu, want %zu\n", me, q, counts[q],
                    c);
            return 40;
        }
        for (size_t k = 0; k < c; k++)
            if (((int32_t *)s->buf)[at + k] != (int32_t)(1000 * q + (int)k)) {
                fprintf(stderr, "rank %d: element %zu of rank %d's block is wrong\n", me, k, q);
                return 40;
            }
        at += c;
    }
    return at == s->total ? 0 : 40;
}

/* Allgathervs whose counts the ranks learn: sync, two async ones waited in rank-specific orders
 * (each rank's second step goes from whatever call handles its first), a layout that differs
 * on one rank, and a rank whose callback gives no buffer: every rank fails alike. */
static int learnt_counts(int i, void *arg)
{
    const topo *t = arg;
    ringd_t *r = join(t, i);
    if (r == NULL)
        return 10;
    int n = ringd_size(r), me = ringd_rank(r);
    int32_t mine[16];
    size_t counts[2][TH_RING_MAX * 4];
    recv_slot slot[2] = {{4, 0, NULL, 0}, {4, 0, NULL, 0}};
    for (int salt = 0; salt < 2; salt++) {
        size_t c = (size_t)(me % 4 * 3 + salt);
        for (size_t k = 0; k < c; k++)
            mine[k] = 1000 * me + (int)k;
        char name[32];
        snprintf(name, sizeof(name), "learn.sync.%d", salt);
        TH_CHECK_OK(r, ringd_allgatherv_into(r, name, mine, c, 7, RINGD_I32, recv_into, &slot[0],
                                             counts[0]));
        int rc = check_learnt(me, n, salt, &slot[0], counts[0]);
        free(slot[0].buf);
        slot[0].buf = NULL;
        if (rc != 0)
            return rc;
    }
    ringd_request_t *req[2];
    int32_t a[16], b[16];
    for (size_t k = 0; k < 16; k++)
        a[k] = b[k] = 1000 * me + (int)k;
    TH_CHECK_OK(r, ringd_allgatherv_into_async(r, "learn.a", a, (size_t)(me % 4 * 3), 7, RINGD_I32,
                                               recv_into, &slot[0], counts[0], &req[0]));
    TH_CHECK_OK(r, ringd_allgatherv_into_async(r, "learn.b", b, (size_t)(me % 4 * 3 + 1), 7,
                                               RINGD_I32, recv_into, &slot[1], counts[1], &req[1]));
    for (int k = 0; k < 2; k++) {
        int x = (k + me) % 2; /* odd ranks wait for b first */
        TH_CHECK_OK(r, ringd_wait(req[x]));
    }
    for (int x = 0; x < 2; x++) {
        int rc = check_learnt(me, n, x, &slot[x], counts[x]);
        free(slot[x].buf);
        slot[x].buf = NULL;
        if (rc != 0)
            return rc;
    }
    ringd_result_t rc = ringd_allgatherv_into(r, "learn.layout", mine, 1, me == n - 1 ? 8 : 7,
                                              RINGD_I32, recv_into, &slot[0], NULL);
    if (rc != RINGD_E_MISMATCH || strstr(ringd_errmsg(r), "layout") == NULL) {
        fprintf(stderr, "rank %d: want a layout mismatch, got %s: %s\n", me, ringd_strerror(rc),
                ringd_errmsg(r));
        return 50;
    }
    slot[0].refuse = me == 0;
    rc =
        ringd_allgatherv_into(r, "learn.refused", mine, 1, 7, RINGD_I32, recv_into, &slot[0], NULL);
    free(slot[0].buf);
    if (rc != RINGD_E_NOMEM || strstr(ringd_errmsg(r), "no buffer") == NULL) {
        fprintf(stderr, "rank %d: want NOMEM from rank 0's refusal, got %s: %s\n", me,
                ringd_strerror(rc), ringd_errmsg(r));
        return 51;
    }
    slot[0].refuse = 0;
    TH_CHECK_OK(r, ringd_allgatherv_into(r, "learn.after", mine, 0, 7, RINGD_I32, recv_into,
                                         &slot[0], NULL));
    free(slot[0].buf);
    th_close_together(r, t->world);
    return 0;
}

/* Element e of rank k's block for rank j, small enough for every dtype. */
/* Collectives of two steps in a group (Horovod's grouped_allgather): all run, or all fail alike
 * on every rank: a layout that differs on one rank in one member fails every member of two steps
 * (the group's one-step allreduce has run by then), a member refused on one rank fails every
 * member, a synchronous one inside is refused. */
static int learnt_groups(int i, void *arg)
{
    const topo *t = arg;
    ringd_t *r = join(t, i);
    if (r == NULL)
        return 10;
    int n = ringd_size(r), me = ringd_rank(r);
    int32_t a[16], b[16];
    float x = 1;
    size_t counts[2][TH_RING_MAX * 4];
    for (size_t k = 0; k < 16; k++)
        a[k] = b[k] = 1000 * me + (int)k;
    for (int round = 0; round < 3; round++) {
        recv_slot slot[2] = {{4, 0, NULL, 0}, {4, 0, NULL, 0}};
        ringd_request_t *q[3] = {NULL, NULL, NULL};
        char na[32], nb[32], nc[32];
        snprintf(na, sizeof(na), "lg%d.a", round);
        snprintf(nb, sizeof(nb), "lg%d.b", round);
        snprintf(nc, sizeof(nc), "lg%d.c", round);
        TH_CHECK_OK(r, ringd_group_start(r));
        /* round 1: the last rank passes another layout; round 2: rank 0's second is refused */
        uint64_t layout = round == 1 && me == n - 1 ? 8 : 7;
        TH_CHECK_OK(r,
                    ringd_allgatherv_into_async(r, na, a, (size_t)(me % 4 * 3), layout, RINGD_I32,
                                                recv_into, &slot[0], counts[0], &q[0]));
        ringd_result_t call = ringd_allgatherv_into_async(
            r, nb, b, (size_t)(me % 4 * 3 + 1), 7, RINGD_I32,
            round == 2 && me == 0 ? NULL : recv_into, &slot[1], counts[1], &q[1]);
        if (call != (round == 2 && me == 0 ? RINGD_E_INVALID : RINGD_OK)) {
            fprintf(stderr, "rank %d: group %d: %s: %s\n", me, round, ringd_strerror(call),
                    ringd_errmsg(r));
            return 100;
        }
        TH_CHECK_OK(r, ringd_allreduce_async(r, nc, &x, &x, 1, RINGD_F32, RINGD_SUM, &q[2]));
        if (ringd_allgatherv_into(r, "lg.sync", a, 1, 7, RINGD_I32, recv_into, &slot[0], NULL) !=
            RINGD_E_INVALID) {
            fprintf(stderr, "rank %d: a synchronous two-step call inside a group ran\n", me);
            return 101;
        }
        TH_CHECK_OK(r, ringd_group_end(r));
        for (int k = 0; k < 3; k++) {
            /* a layout is compared once every first step has run: the group's allreduce, done
             * with them, has run */
            ringd_result_t want = round == 0 || (round == 1 && k == 2) ? RINGD_OK
                                  : round == 1                         ? RINGD_E_MISMATCH
                                                                       : RINGD_E_INVALID;
            ringd_result_t rc = q[k] != NULL ? ringd_wait(q[k]) : want;
            if (rc != want) {
                fprintf(stderr, "rank %d: group %d, member %d: %s, want %s: %s\n", me, round, k,
                        ringd_strerror(rc), ringd_strerror(want), ringd_errmsg(r));
                return 102;
            }
        }
        if (round == 0) {
            for (int k = 0; k < 2; k++) {
                int rc = check_learnt(me, n, k, &slot[k], counts[k]);
                if (rc != 0)
                    return rc;
            }
            if (x != (float)n)
                return 103;
        }
        free(slot[0].buf);
        free(slot[1].buf);
        x = 1;
    }
    TH_CHECK_OK(r, ringd_allreduce(r, "after.lg", &x, &x, 1, RINGD_F32, RINGD_SUM));
    th_close_together(r, t->world);
    return 0;
}

static double a2a_value(int k, int j, size_t e)
{
    return (double)((k * 7 + j * 3 + (int)e) % 50);
}

/* Rank k's count for rank j of the per-rank shapes: 0s among them, and a prime. */
static size_t a2a_count(int k, int j, int salt)
{
    return (size_t)((k * 3 + j * 5 + salt) % 7 == 6 ? 2011 : (k * 3 + j * 5 + salt) % 7);
}

/* Checks recvbuf of rank me: from each rank k in turn, counts[k] elements of a2a_value(k, me).
 * Returns 0 or 40. */
static int a2a_check(const char *name, int me, int n, ringd_dtype_t dt, const void *buf,
                     const size_t *counts)
{
    size_t esz = ringd_dtype_size(dt), at = 0;
    uint64_t want;
    for (int k = 0; k < n; k++)
        for (size_t e = 0; e < counts[k]; e++, at++) {
            want = 0;
            rd_dtype_store((rd_dtype)dt, &want, 0, a2a_value(k, me, e));
            if (memcmp((const uint8_t *)buf + at * esz, &want, esz) != 0) {
                fprintf(stderr, "rank %d: %s: element %zu from rank %d is %g, want %g\n", me, name,
                        e, k, th_ref_load(buf, dt, at), a2a_value(k, me, e));
                return 40;
            }
        }
    return 0;
}

/* Fills sendbuf of rank me: counts[j] elements of a2a_value(me, j) for each rank j in turn. */
static void a2a_fill(void *buf, int me, int n, ringd_dtype_t dt, const size_t *counts)
{
    size_t at = 0;
    for (int j = 0; j < n; j++)
        for (size_t e = 0; e < counts[j]; e++)
            rd_dtype_store((rd_dtype)dt, buf, at++, a2a_value(me, j, e));
}

/* Alltoall of equal counts on every dtype (0, 1 and a prime), alltoallv of a matrix with 0s
 * and a prime (receive counts given, and learnt: sync, and async waited in rank-specific
 * orders), and receive counts that disagree with the senders': every rank fails alike. */
static int alltoalls(int i, void *arg)
{
    const topo *t = arg;
    ringd_t *r = join(t, i);
    if (r == NULL)
        return 10;
    int n = ringd_size(r), me = ringd_rank(r), rc;
    size_t eq[TH_RING_MAX * 4], sc[3][TH_RING_MAX * 4], rcv[3][TH_RING_MAX * 4],
        got[2][TH_RING_MAX * 4];
    uint8_t *in = ringd_alloc(r, (size_t)n * 2551 * 8 + 8), *out = malloc((size_t)n * 2551 * 8 + 8);
    if (in == NULL || out == NULL)
        return 30;
    char name[64];
    for (int dt = RINGD_F32; dt <= RINGD_U8; dt++)
        for (size_t count = 0; count < 3000; count = count * 50 + 1) { /* 0, 1, 51, 2551 */
            /* 2551 f64 a pair: bundles over 64 KiB, which differ from node to node round a ring
             * of uneven nodes (every node must cut them into the same segments) */
            size_t c = count;
            for (int j = 0; j < n; j++)
                eq[j] = c;
            a2a_fill(in, me, n, (ringd_dtype_t)dt, eq);
            snprintf(name, sizeof(name), "a2a.%s.%zu", rd_dtype_name((rd_dtype)dt), c);
            TH_CHECK_OK(r, ringd_alltoall(r, name, in, out, c, (ringd_dtype_t)dt));
            if ((rc = a2a_check(name, me, n, (ringd_dtype_t)dt, out, eq)) != 0)
                return rc;
        }
    for (int salt = 0; salt < 3; salt++)
        for (int j = 0; j < n; j++) {
            sc[salt][j] = a2a_count(me, j, salt);
            rcv[salt][j] = a2a_count(j, me, salt);
        }
    a2a_fill(in, me, n, RINGD_I32, sc[0]);
    TH_CHECK_OK(r, ringd_alltoallv(r, "a2av.given", in, sc[0], out, rcv[0], RINGD_I32));
    if ((rc = a2a_check("a2av.given", me, n, RINGD_I32, out, rcv[0])) != 0)
        return rc;
    recv_slot slot[2] = {{8, 0, NULL, 0}, {8, 0, NULL, 0}};
    uint8_t *in2 = malloc((size_t)n * 2551 * 8 + 8);
    if (in2 == NULL)
        return 30;
    a2a_fill(in, me, n, RINGD_F64, sc[1]);
    a2a_fill(in2, me, n, RINGD_F64, sc[2]);
    ringd_request_t *req[2];
    TH_CHECK_OK(r, ringd_alltoallv_into_async(r, "a2av.a", in, sc[1], 3, RINGD_F64, recv_into,
                                              &slot[0], got[0], &req[0]));
    TH_CHECK_OK(r, ringd_alltoallv_into_async(r, "a2av.b", in2, sc[2], 3, RINGD_F64, recv_into,
                                              &slot[1], got[1], &req[1]));
    for (int k = 0; k < 2; k++)
        TH_CHECK_OK(r, ringd_wait(req[(k + me) % 2]));
    for (int x = 0; x < 2; x++) {
        if (memcmp(got[x], rcv[x + 1], (size_t)n * sizeof(size_t)) != 0) {
            fprintf(stderr, "rank %d: a2av learnt the wrong receive counts\n", me);
            return 40;
        }
        rc = a2a_check("a2av learnt", me, n, RINGD_F64, slot[x].buf, rcv[x + 1]);
        free(slot[x].buf);
        if (rc != 0)
            return rc;
    }
    if (me == 1)
        rcv[0][0] += 1;
    a2a_fill(in, me, n, RINGD_I32, sc[0]);
    ringd_result_t res = ringd_alltoallv(r, "a2av.bad", in, sc[0], out, rcv[0], RINGD_I32);
    if (res != RINGD_E_MISMATCH || strstr(ringd_errmsg(r), "rank 1 expects") == NULL) {
        fprintf(stderr, "rank %d: want rank 1's receive counts refused, got %s: %s\n", me,
                ringd_strerror(res), ringd_errmsg(r));
        return 50;
    }
    TH_CHECK_OK(r, ringd_alltoall(r, "a2a.after", in, out, 1, RINGD_I32));
    free(in2);
    free(out);
    th_close_together(r, t->world);
    return 0;
}

/* Direct links of job on daemon sock: those its ring holds open there (-1: no such ring), and
 * every job's together into *total. */
static int pair_links_of(const char *sock, const char *job, int *total)
{
    rd_msg *m = th_status(sock);
    const Ringd__StatusReply *st = m != NULL ? m->status_reply : NULL;
    int mine = -1;
    *total = 0;
    for (size_t k = 0; st != NULL && k < st->n_jobs; k++) {
        const Ringd__RingInfo *ri = st->jobs[k]->ring;
        if (ri == NULL)
            continue;
        *total += (int)ri->pair_links;
        if (strcmp(st->jobs[k]->name, job) == 0)
            mine = (int)ri->pair_links;
    }
    rd_frame_free(m);
    return mine;
}

/* Control messages the daemon at sock has sent other nodes (keepalives apart), or UINT64_MAX;
 * their bytes into *bytes unless NULL. */
static uint64_t control_sent_of(const char *sock, uint64_t *bytes)
{
    rd_msg *m = th_status(sock);
    const Ringd__StatusReply *st = m != NULL ? m->status_reply : NULL;
    uint64_t n = st != NULL ? st->control_sent : UINT64_MAX;
    if (bytes != NULL)
        *bytes = st != NULL ? st->control_bytes_sent : UINT64_MAX;
    rd_frame_free(m);
    return n;
}

#define MANY 48 /* allreduces of one group */

/* A group of MANY allreduces, ready together: each node announces them in one loop turn, as one
 * Ready (and the coordinator orders them as one Go), so each daemon sends a few control
 * messages for the lot, not one per op per node. Every result is checked. */
static int many_at_once(int i, void *arg)
{
    const topo *t = arg;
    ringd_t *r = join(t, i);
    if (r == NULL)
        return 10;
    int n = ringd_size(r), me = ringd_rank(r), k = 0;
    for (int first = 0; k < t->nnodes - 1 && i >= first + t->local[k];)
        first += t->local[k++];
    float *x = ringd_alloc(r, MANY * 300 * sizeof(float)), one = 1;
    if (x == NULL)
        return 30;
    TH_CHECK_OK(r, ringd_allreduce(r, "before", &one, &one, 1, RINGD_F32, RINGD_SUM));
    uint64_t before = control_sent_of(ring_.d[k].sock, NULL);
    ringd_request_t *q[MANY];
    TH_CHECK_OK(r, ringd_group_start(r));
    for (int m = 0; m < MANY; m++) {
        char name[32];
        snprintf(name, sizeof(name), "many.%d", m);
        for (int e = 0; e < 300; e++)
            x[m * 300 + e] = (float)(me + m + e);
        TH_CHECK_OK(r, ringd_allreduce_async(r, name, x + m * 300, x + m * 300, 300, RINGD_F32,
                                             RINGD_SUM, &q[m]));
    }
    TH_CHECK_OK(r, ringd_group_end(r));
    for (int m = 0; m < MANY; m++)
        TH_CHECK_OK(r, ringd_wait(q[m]));
    for (int m = 0; m < MANY; m++)
        for (int e = 0; e < 300; e++)
            if (x[m * 300 + e] != (float)(n * (m + e) + n * (n - 1) / 2)) {
                fprintf(stderr, "rank %d: many.%d element %d is %g\n", me, m, e,
                        (double)x[m * 300 + e]);
                return 80;
            }
    /* every rank has its results: what the daemons sent for them is counted */
    TH_CHECK_OK(r, ringd_allreduce(r, "after", &one, &one, 1, RINGD_F32, RINGD_SUM));
    uint64_t sent = control_sent_of(ring_.d[k].sock, NULL) - before;
    /* to each of the 2 other nodes: the group's Ready and the Ready of "after", and from the
     * coordinator the group's Go (and one more should "after" need the ring): at most 8; one
     * per op would be MANY */
    if (sent > 12) {
        fprintf(stderr, "rank %d: its daemon sent %llu control messages for %d ops\n", me,
                (unsigned long long)sent, MANY);
        return 81;
    }
    th_close_together(r, t->world);
    return 0;
}

Test(collectives, ops_ready_together_are_announced_together, .timeout = 120)
{
    topo t = {3, {1, 2, 1}, 0};
    start(&t, NULL);
    cr_assert_eq(run(&t, many_at_once, 60000), 0, "a client failed (its stderr above)");
    finish(&t);
}

#define SMALL_OPS 30 /* small allreduces, one at a time */

/* SMALL_OPS 4-byte allreduces, one after another, on a ring of nine nodes: node 0 is the parent
 * of the other eight in the control tree and passes each one's announcement on to the seven
 * others. It holds them until every node has announced the op, so it sends each child two frames
 * an op (its own announcement, then the others'), not one for every loop turn in which some
 * announcement came in; and the announcements name the op by its slot in the sender's cache.
 * Every result is checked. */
static int small_ops_in_turn(int i, void *arg)
{
    const topo *t = arg;
    ringd_t *r = join(t, i);
    if (r == NULL)
        return 10;
    int n = ringd_size(r);
    int32_t one = 1, x;
    TH_CHECK_OK(r, ringd_allreduce(r, "before", &one, &one, 1, RINGD_I32, RINGD_SUM));
    uint64_t bytes0, bytes;
    uint64_t before = control_sent_of(ring_.d[i].sock, &bytes0);
    for (int m = 0; m < SMALL_OPS; m++) {
        x = i + m;
        TH_CHECK_OK(r, ringd_allreduce(r, "small", &x, &x, 1, RINGD_I32, RINGD_SUM));
        if (x != n * m + n * (n - 1) / 2) {
            fprintf(stderr, "rank %d: op %d gave %d\n", i, m, x);
            return 80;
        }
    }
    TH_CHECK_OK(r, ringd_allreduce(r, "after", &one, &one, 1, RINGD_I32, RINGD_SUM));
    uint64_t sent = control_sent_of(ring_.d[i].sock, &bytes) - before;
    bytes -= bytes0;
    /* node 0: 2 frames per child per op, SMALL_OPS + 1 ops, and room for the hold's time limit
     * sending early once in every one of them on a slow machine (ops of 20 ms or more); a frame
     * per child per loop turn with news was 979 to 1135 here. The others pass nothing on. */
    uint64_t most = i == 0 ? 3 * 8 * (SMALL_OPS + 1) : SMALL_OPS + 1 + 4;
    /* Each node announces "small" whole once, then by the slot it filled (about 10 bytes of the
     * 60 it takes whole): node 0 sent 1,695 bytes an op here (3,240 announcing it whole every
     * time), the others 32 (56). */
    uint64_t most_bytes = (i == 0 ? 2400 : 45) * (SMALL_OPS + 1);
    fprintf(stderr, "rank %d: its daemon sent %llu control messages of %llu bytes for %d ops\n", i,
            (unsigned long long)sent, (unsigned long long)bytes, SMALL_OPS + 1);
    if (sent > most || bytes > most_bytes)
        return 81;
    th_close_together(r, t->world);
    return 0;
}

Test(collectives, a_node_passing_on_eight_nodes_announcements_sends_each_two_small_frames_an_op,
     .timeout = 180)
{
    topo t = {9, {1, 1, 1, 1, 1, 1, 1, 1, 1}, 0};
    start(&t, NULL);
    cr_assert_eq(run(&t, small_ops_in_turn, 120000), 0, "a client failed (its stderr above)");
    finish(&t);
}

/* Two jobs of one rank on each of four daemons started with --pair-links 3 take turns at an
 * alltoallv: each turn goes straight between the nodes, over the 3 direct links a node has
 * room for, so the job whose turn it is closes the other's (idle) links on every node and opens
 * its own again; every result is exact, and no node ever holds more than 3. */
static int pair_pool(int i, void *arg)
{
    const topo *t = arg;
    char job[2][96];
    ringd_t *r[2];
    for (int x = 0; x < 2; x++) {
        snprintf(job[x], sizeof(job[x]), "%s.%c", job_, 'a' + x);
        r[x] = th_open_world(ring_.d[i].sock, job[x], t->world, 1, 0, OP_TIMEOUT_MS);
        if (r[x] == NULL)
            return 10;
    }
    int n = ringd_size(r[0]), rc;
    size_t sc[TH_RING_MAX], rcv[TH_RING_MAX];
    uint8_t *in = malloc((size_t)n * 3011 * 4), *out = malloc((size_t)n * 3011 * 4);
    if (in == NULL || out == NULL)
        return 30;
    for (int turn = 0; turn < 6; turn++) {
        ringd_t *q = r[turn % 2];
        int me = ringd_rank(q);
        for (int j = 0; j < n; j++) { /* none 0: every node sends every node something */
            sc[j] = a2a_count(me, j, turn) + 1;
            rcv[j] = a2a_count(j, me, turn) + 1;
        }
        char name[32];
        snprintf(name, sizeof(name), "pool.%d", turn);
        a2a_fill(in, me, n, RINGD_I32, sc);
        TH_CHECK_OK(q, ringd_alltoallv(q, name, in, sc, out, rcv, RINGD_I32));
        if ((rc = a2a_check(name, me, n, RINGD_I32, out, rcv)) != 0)
            return rc;
        TH_CHECK_OK(q, ringd_barrier(q, "turn.done"));
        int total, mine = pair_links_of(ring_.d[i].sock, job[turn % 2], &total);
        int other = pair_links_of(ring_.d[i].sock, job[(turn + 1) % 2], &total);
        if (mine != n - 1 || other != 0 || total > 3) {
            fprintf(stderr,
                    "rank %d, turn %d: job %s holds %d direct links, the other %d, %d in all "
                    "(want %d, 0, at most 3)\n",
                    me, turn, job[turn % 2], mine, other, total, n - 1);
            return 60;
        }
        TH_CHECK_OK(q, ringd_barrier(q, "turn.looked"));
    }
    free(in);
    free(out);
    th_close_together(r[0], t->world);
    ringd_close(r[1]);
    return 0;
}

Test(collectives, alltoall_goes_over_direct_links_that_jobs_share_within_the_pool, .timeout = 180)
{
    static const char *const pool[] = {"--pair-links", "3", NULL};
    topo t = {4, {1, 1, 1, 1}, 0};
    start(&t, pool);
    cr_assert_eq(run(&t, pair_pool, 120000), 0, "a client failed (its stderr above)");
    finish(&t);
}

/* Steps of the two jobs of stale_links, counted across their clients (shared). */
static _Atomic int *steps_;

/* Waits until steps_ reaches n (30 s at most). */
static int steps_reach(int n)
{
    for (int64_t end = th_now_ms() + 30000; atomic_load(steps_) < n; th_sleep_ms(1))
        if (th_now_ms() > end)
            return -1;
    return 0;
}

/* One alltoallv of large blocks (several segments each) under name, checked. */
static int large_alltoall(ringd_t *r, const char *name, int salt)
{
    int n = ringd_size(r), me = ringd_rank(r), rc;
    size_t sc[TH_RING_MAX], rcv[TH_RING_MAX], most = 0;
    for (int j = 0; j < n; j++) {
        sc[j] = 40000 + (size_t)(1000 * me + 7 * j + salt);
        rcv[j] = 40000 + (size_t)(1000 * j + 7 * me + salt);
        most += sc[j] > rcv[j] ? sc[j] : rcv[j];
    }
    uint8_t *in = malloc(most * 4), *out = malloc(most * 4);
    if (in == NULL || out == NULL)
        return 30;
    a2a_fill(in, me, n, RINGD_I32, sc);
    TH_CHECK_OK(r, ringd_alltoallv(r, name, in, sc, out, rcv, RINGD_I32));
    rc = a2a_check(name, me, n, RINGD_I32, out, rcv);
    free(in);
    free(out);
    return rc;
}

/* Job a on the four daemons, job b on the last three, --pair-links 3: b's alltoall closes a's
 * links on its three nodes, while the first node keeps its ends of them; a's next alltoall
 * finds them closed there, dials them again, and every result is exact. Blocks of several
 * segments (--segment-size 64 KiB), sent in parts. */
static int stale_links(int i, void *arg)
{
    (void)arg;
    int in_a = i < 4, node = in_a ? i : i - 3;
    char job[96];
    snprintf(job, sizeof(job), "%s.%c", job_, in_a ? 'a' : 'b');
    ringd_t *r = th_open_world(ring_.d[node].sock, job, in_a ? 4 : 3, 1, 0, OP_TIMEOUT_MS);
    if (r == NULL)
        return 10;
    int rc, total;
    if (in_a) {
        if ((rc = large_alltoall(r, "first", 0)) != 0)
            return rc;
        TH_CHECK_OK(r, ringd_barrier(r, "first.done"));
        atomic_fetch_add(steps_, 1);
        if (steps_reach(7) != 0) /* b's alltoall done on its three nodes */
            return 62;
        int mine = pair_links_of(ring_.d[node].sock, job, &total);
        if ((node == 0 && mine != 3) || (node > 0 && mine != 0)) {
            fprintf(stderr, "node %d: job a holds %d direct links after b's turn\n", node, mine);
            return 63;
        }
        if ((rc = large_alltoall(r, "again", 1)) != 0)
            return rc;
        TH_CHECK_OK(r, ringd_barrier(r, "again.done"));
        atomic_fetch_add(steps_, 1);
    } else {
        if (steps_reach(4) != 0)
            return 62;
        if ((rc = large_alltoall(r, "between", 2)) != 0)
            return rc;
        TH_CHECK_OK(r, ringd_barrier(r, "between.done"));
        atomic_fetch_add(steps_, 1);
    }
    if (steps_reach(11) != 0)
        return 64;
    ringd_close(r);
    return 0;
}

Test(collectives, a_direct_link_the_other_end_closed_is_dialled_again, .timeout = 180)
{
    static const char *const pool[] = {"--pair-links", "3", "--segment-size", "64K", NULL};
    topo t = {4, {1, 1, 1, 1}, 0};
    start(&t, pool);
    steps_ = mmap(NULL, sizeof(*steps_), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(steps_, MAP_FAILED);
    atomic_store(steps_, 0);
    t.world = 7; /* four clients of a, three of b */
    cr_assert_eq(run(&t, stale_links, 120000), 0, "a client failed (its stderr above)");
    finish(&t);
}

/* With fewer direct links than the ring's nodes less one, alltoall goes round the ring and
 * opens none. */
static int relayed(int i, void *arg)
{
    const topo *t = arg;
    ringd_t *r = join(t, i);
    if (r == NULL)
        return 10;
    int n = ringd_size(r), me = ringd_rank(r), rc;
    size_t sc[TH_RING_MAX * 4], rcv[TH_RING_MAX * 4];
    uint8_t *in = ringd_alloc(r, (size_t)n * 3011 * 4 + 8), *out = malloc((size_t)n * 3011 * 4);
    if (in == NULL || out == NULL)
        return 30;
    for (int j = 0; j < n; j++) {
        sc[j] = a2a_count(me, j, 1);
        rcv[j] = a2a_count(j, me, 1);
    }
    a2a_fill(in, me, n, RINGD_I32, sc);
    TH_CHECK_OK(r, ringd_alltoallv(r, "relayed", in, sc, out, rcv, RINGD_I32));
    if ((rc = a2a_check("relayed", me, n, RINGD_I32, out, rcv)) != 0)
        return rc;
    int total, links = 0;
    for (int k = 0; k < t->nnodes; k++)
        links += pair_links_of(ring_.d[k].sock, job_, &total);
    if (links != 0) {
        fprintf(stderr, "rank %d: %d direct links opened with --pair-links 1\n", me, links);
        return 61;
    }
    free(out);
    th_close_together(r, t->world);
    return 0;
}

Test(collectives, alltoall_goes_round_the_ring_when_the_pool_is_too_small, .timeout = 120)
{
    static const char *const one[] = {"--pair-links", "1", NULL};
    topo t = {3, {1, 2, 1}, 0};
    start(&t, one);
    cr_assert_eq(run(&t, relayed, 60000), 0, "a client failed (its stderr above)");
    finish(&t);
}

/* An f32 whose sums differ in other orders: magnitudes 2^-20 to 2^20, both signs. */
static float uneven(int rank, size_t e)
{
    uint32_t h = (uint32_t)rank * 2654435761u ^ (uint32_t)e * 40503u;
    float m = (float)((h % 1000) + 1) / 7.0f;
    int exp = (int)((h >> 10) % 41) - 20;
    return (h & 1 ? -m : m) * (exp >= 0 ? (float)(1u << exp) : 1.0f / (float)(1u << -exp));
}

/* An allreduce over --direct-bytes and under --doubling-bytes on 3 or 4 nodes goes by recursive
 * doubling over direct links: every rank ends with the same bits (a digest of its result has
 * one MIN and MAX over the ranks), and its daemon holds direct links for it. */
static int doubling_alike(int i, void *arg)
{
    const topo *t = arg;
    ringd_t *r = join(t, i);
    if (r == NULL)
        return 10;
    int me = ringd_rank(r);
    size_t count = 6000; /* 24000 bytes: over the 16 KiB direct, under the 64 KiB doubling */
    float *x = malloc(count * sizeof(float));
    if (x == NULL)
        return 20;
    for (int round = 0; round < 20; round++) {
        for (size_t e = 0; e < count; e++)
            x[e] = uneven(me + round, e);
        char name[32];
        snprintf(name, sizeof(name), "uneven.%d", round);
        TH_CHECK_OK(r, ringd_allreduce(r, name, x, x, count, RINGD_F32, RINGD_SUM));
        uint32_t h = 2166136261u;
        for (size_t b = 0; b < count * sizeof(float); b++)
            h = (h ^ ((const uint8_t *)x)[b]) * 16777619u;
        int32_t lo = (int32_t)(h >> 1), hi = lo;
        TH_CHECK_OK(r, ringd_allreduce(r, "digest.min", &lo, &lo, 1, RINGD_I32, RINGD_MIN));
        TH_CHECK_OK(r, ringd_allreduce(r, "digest.max", &hi, &hi, 1, RINGD_I32, RINGD_MAX));
        if (lo != hi) {
            fprintf(stderr, "rank %d, round %d: the ranks' results differ in their bits\n", me,
                    round);
            return 30;
        }
    }
    free(x);
    int total, mine = pair_links_of(ring_.d[i].sock, job_, &total);
    if (mine < 1) {
        fprintf(stderr, "rank %d: its daemon holds %d direct links: no recursive doubling\n", me,
                mine);
        return 40;
    }
    th_close_together(r, t->world);
    return 0;
}

Test(collectives, recursive_doubling_gives_every_rank_the_same_bits, .timeout = 180)
{
    static const char *const no_direct[] = {"--direct-bytes", "0", NULL};
    topo three = {3, {1, 1, 1}, 0}, four = {4, {1, 1, 1, 1}, 0};
    start(&three, NULL);
    cr_assert_eq(run(&three, doubling_alike, 60000), 0, "a client failed (its stderr above)");
    finish(&three);
    start(&four, no_direct);
    cr_assert_eq(run(&four, doubling_alike, 60000), 0, "a client failed (its stderr above)");
    finish(&four);
}

/* Groups: three collectives of different kinds run together; a mismatch in one fails every
 * one on every rank; a refusal in one (a NULL buffer) too; ranks that group differently fail;
 * a synchronous call inside a group is refused. */
static int groups(int i, void *arg)
{
    const topo *t = arg;
    ringd_t *r = join(t, i);
    if (r == NULL)
        return 10;
    int n = ringd_size(r), me = ringd_rank(r);
    float *x = ringd_alloc(r, 64 * sizeof(float)), *y = ringd_alloc(r, 64 * (size_t)n * 4);
    float *z = ringd_alloc(r, 64 * (size_t)n * 4);
    if (x == NULL || y == NULL || z == NULL)
        return 30;
    ringd_request_t *q[3];
    for (int round = 0; round < 3; round++) {
        char a[32], b[32], c[32];
        snprintf(a, sizeof(a), "g%d.ar", round);
        snprintf(b, sizeof(b), "g%d.rs", round);
        snprintf(c, sizeof(c), "g%d.ag", round);
        for (int k = 0; k < 5; k++)
            x[k] = (float)(me + k);
        for (int k = 0; k < 2 * n; k++)
            y[k] = (float)(me * k);
        z[0] = (float)me;
        TH_CHECK_OK(r, ringd_group_start(r));
        TH_CHECK_OK(r, ringd_allreduce_async(r, a, x, x, 5, RINGD_F32, RINGD_SUM, &q[0]));
        /* round 1: rank 1 passes another dtype; round 2: rank 0 a NULL buffer (refused) */
        int refusing = round == 2 && me == 0; /* its call fails at once, and is told */
        ringd_result_t call = ringd_reducescatter_async(
            r, b, refusing ? NULL : y, y + 64, 2, round == 1 && me == 1 ? RINGD_I32 : RINGD_F32,
            RINGD_SUM, &q[1]);
        if (call != (refusing ? RINGD_E_INVALID : RINGD_OK)) {
            fprintf(stderr, "rank %d: group %d: %s: %s\n", me, round, ringd_strerror(call),
                    ringd_errmsg(r));
            return 59;
        }
        TH_CHECK_OK(r, ringd_allgather_async(r, c, z, z + 1, 1, RINGD_F32, &q[2]));
        ringd_result_t sync = ringd_barrier(r, "in.group");
        int done;
        if (ringd_test(q[0], &done) != RINGD_E_INVALID) { /* its group is not sent yet */
            fprintf(stderr, "rank %d: a request tested inside its group\n", me);
            return 66;
        }
        TH_CHECK_OK(r, ringd_group_end(r));
        if (sync != RINGD_E_INVALID) {
            fprintf(stderr, "rank %d: a barrier inside a group: %s\n", me, ringd_strerror(sync));
            return 60;
        }
        ringd_result_t rc[3];
        for (int k = 0; k < 3; k++)
            rc[k] = k == 1 && refusing ? RINGD_E_INVALID : ringd_wait(q[k]);
        for (int k = 0; k < 3; k++) {
            ringd_result_t want = round == 0   ? RINGD_OK
                                  : round == 1 ? RINGD_E_MISMATCH
                                               : RINGD_E_INVALID;
            /* (a failed member's group fails the others with its result) */
            if (rc[k] != want) {
                fprintf(stderr, "rank %d: group %d, member %d: %s, want %s\n", me, round, k,
                        ringd_strerror(rc[k]), ringd_strerror(want));
                return 61;
            }
        }
        if (round == 0) {
            for (int k = 0; k < 5; k++)
                if (x[k] != (float)(n * k + n * (n - 1) / 2))
                    return 62;
            for (int k = 0; k < 2; k++)
                if (y[64 + k] != (float)((2 * me + k) * n * (n - 1) / 2))
                    return 63;
            for (int k = 0; k < n; k++)
                if (z[1 + k] != (float)k)
                    return 64;
        }
    }
    /* ranks that group differently: every one fails */
    ringd_request_t *d[2];
    TH_CHECK_OK(r, ringd_group_start(r));
    TH_CHECK_OK(r, ringd_allreduce_async(r, "diff.a", x, x, 1, RINGD_F32, RINGD_SUM, &d[0]));
    if (me != 0)
        TH_CHECK_OK(r, ringd_allreduce_async(r, "diff.b", x, x, 1, RINGD_F32, RINGD_SUM, &d[1]));
    TH_CHECK_OK(r, ringd_group_end(r));
    if (me == 0) /* its diff.b alone, after its group of one */
        TH_CHECK_OK(r, ringd_allreduce_async(r, "diff.b", x, x, 1, RINGD_F32, RINGD_SUM, &d[1]));
    for (int k = 0; k < 2; k++) {
        ringd_result_t rc = ringd_wait(d[k]);
        if (rc != RINGD_E_MISMATCH) {
            fprintf(stderr, "rank %d: differing groups, member %d: %s: %s\n", me, k,
                    ringd_strerror(rc), ringd_errmsg(r));
            return 65;
        }
    }
    TH_CHECK_OK(r, ringd_allreduce(r, "after.groups", x, x, 1, RINGD_F32, RINGD_SUM));
    th_close_together(r, t->world);
    return 0;
}

/* Process sets: two that overlap, used at the same time under the same tensor name; ranks
 * outside a set get none and never wait; ranks that pass different sets fail alike; a set
 * opened by name by its members alone (ringd_process_set_open), refused to others. */
static int process_sets(int i, void *arg)
{
    const topo *t = arg;
    ringd_t *r = join(t, i);
    if (r == NULL)
        return 10;
    int n = ringd_size(r), me = ringd_rank(r);
    int a[TH_RING_MAX * 4], na = 0, b[2] = {0, n - 1};
    for (int k = 1; k < n; k++)
        a[na++] = k;
    ringd_t *sa = NULL, *sb = NULL;
    TH_CHECK_OK(r, ringd_process_set_create(r, a, na, &sa));
    TH_CHECK_OK(r, ringd_process_set_create(r, b, 2, &sb));
    if ((sa != NULL) != (me != 0) || (sb != NULL) != (me == 0 || me == n - 1)) {
        fprintf(stderr, "rank %d: membership of the sets is wrong\n", me);
        return 70;
    }
    float xa = (float)me, xb = (float)(10 * me);
    ringd_request_t *qa = NULL, *qb = NULL;
    if (sa != NULL)
        TH_CHECK_OK(sa, ringd_allreduce_async(sa, "x", &xa, &xa, 1, RINGD_F32, RINGD_SUM, &qa));
    if (sb != NULL)
        TH_CHECK_OK(sb, ringd_allreduce_async(sb, "x", &xb, &xb, 1, RINGD_F32, RINGD_SUM, &qb));
    if (qb != NULL)
        TH_CHECK_OK(sb, ringd_wait(qb));
    if (qa != NULL)
        TH_CHECK_OK(sa, ringd_wait(qa));
    if ((sa != NULL &&
         (xa != (float)(n * (n - 1) / 2) || ringd_size(sa) != n - 1 || ringd_rank(sa) != me - 1)) ||
        (sb != NULL && (xb != (float)(10 * (n - 1)) || ringd_size(sb) != 2))) {
        fprintf(stderr, "rank %d: set results %g %g\n", me, xa, xb);
        return 71;
    }
    ringd_close(sb);
    ringd_close(sa);
    int one[1] = {0}, two[2] = {0, 1};
    ringd_t *bad = NULL;
    ringd_result_t rc = ringd_process_set_create(r, me == 0 ? one : two, me == 0 ? 1 : 2, &bad);
    if (rc != RINGD_E_MISMATCH || bad != NULL) {
        fprintf(stderr, "rank %d: differing sets: %s: %s\n", me, ringd_strerror(rc),
                ringd_errmsg(r));
        return 72;
    }
    /* opened by its members alone, by name (torch's new_group): the others never call */
    ringd_t *named = NULL;
    if (me == 0 || me == n - 1) {
        TH_CHECK_OK(r, ringd_process_set_open(r, "ends", b, 2, &named));
        float y = (float)me;
        TH_CHECK_OK(named, ringd_allreduce(named, "y", &y, &y, 1, RINGD_F32, RINGD_SUM));
        if (named == NULL || y != (float)(n - 1) || ringd_size(named) != 2 ||
            ringd_rank(named) != (me == 0 ? 0 : 1)) {
            fprintf(stderr, "rank %d: the named set gave %g\n", me, y);
            return 73;
        }
        ringd_close(named);
    } else if (ringd_process_set_open(r, "ends", b, 2, &named) != RINGD_E_INVALID ||
               named != NULL || strstr(ringd_errmsg(r), "not among") == NULL) {
        fprintf(stderr, "rank %d: a non-member opened a named set: %s\n", me, ringd_errmsg(r));
        return 74;
    }
    if (ringd_process_set_open(r, "", b, 2, &named) != RINGD_E_INVALID || named != NULL) {
        fprintf(stderr, "rank %d: a set of no name was opened\n", me);
        return 75;
    }
    TH_CHECK_OK(r, ringd_allreduce(r, "after.sets", &xa, &xa, 1, RINGD_F32, RINGD_SUM));
    th_close_together(r, t->world);
    return 0;
}

/* The sum of an allreduce at step `step` of ranks 0..n-1 where rank k works for 3 + 2k steps
 * and then joins (contributing zeros): k + 1 + step from each rank still at work. */
static float join_expected(int n, int step, size_t e)
{
    float sum = 0;
    for (int k = 0; k < n; k++)
        if (step < 3 + 2 * k)
            sum += (float)(k + 1 + step) + (float)(e % 7);
    return sum;
}

/* Ranks run out of data at different steps and join: the others' allreduces (a small one that
 * may go with the negotiation, one of the ring's size, averaged) go on with zeros in their place,
 * every join returns the rank that joined last, and afterwards every rank takes part again. A
 * broadcast while a rank has joined fails on every other rank, naming the joined rank. */
static int joins(int i, void *arg)
{
    const topo *t = arg;
    ringd_t *r = join(t, i);
    if (r == NULL)
        return 10;
    int n = ringd_size(r), me = ringd_rank(r), last = -1;
    enum { BIG = 70000 };
    float *x = malloc(BIG * sizeof(*x)), small[3];
    if (x == NULL)
        return 11;
    for (int step = 0; step < 3 + 2 * me; step++) {
        for (size_t e = 0; e < BIG; e++)
            x[e] = (float)(me + 1 + step) + (float)(e % 7);
        for (size_t e = 0; e < 3; e++)
            small[e] = (float)(me + 1 + step) + (float)(e % 7);
        TH_CHECK_OK(r, ringd_allreduce(r, "grad", x, x, BIG, RINGD_F32, RINGD_AVG));
        TH_CHECK_OK(r, ringd_allreduce(r, "small", small, small, 3, RINGD_F32, RINGD_SUM));
        for (size_t e = 0; e < BIG; e++)
            if (fabsf(x[e] - join_expected(n, step, e) / (float)n) > 1e-5f * x[e] ||
                (e < 3 && small[e] != join_expected(n, step, e))) {
                fprintf(stderr, "rank %d step %d: element %zu is %g / %g, not %g\n", me, step, e,
                        x[e], e < 3 ? small[e] : 0, join_expected(n, step, e));
                free(x);
                return 80;
            }
    }
    TH_CHECK_OK(r, ringd_join(r, &last));
    if (last != n - 1) {
        fprintf(stderr, "rank %d: the last to join was %d, not %d\n", me, last, n - 1);
        free(x);
        return 81;
    }
    free(x);
    float all = 1;
    TH_CHECK_OK(r, ringd_allreduce(r, "after", &all, &all, 1, RINGD_F32, RINGD_SUM));
    if (all != (float)n) {
        fprintf(stderr, "rank %d: after the join %g ranks took part, not %d\n", me, all, n);
        return 82;
    }
    if (me != 0) { /* rank 0 joins at once: the broadcast cannot run, the allreduce can */
        ringd_result_t rc = ringd_broadcast(r, "bc", small, 3, RINGD_F32, 0);
        if (rc != RINGD_E_INVALID || strstr(ringd_errmsg(r), "rank 0") == NULL ||
            strstr(ringd_errmsg(r), "has joined") == NULL) {
            fprintf(stderr, "rank %d: a broadcast while rank 0 had joined: %s: %s\n", me,
                    ringd_strerror(rc), ringd_errmsg(r));
            return 83;
        }
        all = 1;
        TH_CHECK_OK(r, ringd_allreduce(r, "tail", &all, &all, 1, RINGD_F32, RINGD_SUM));
        if (all != (float)(n - 1)) {
            fprintf(stderr, "rank %d: with rank 0 joined %g ranks took part\n", me, all);
            return 84;
        }
    }
    TH_CHECK_OK(r, ringd_join(r, &last));
    if (last != n - 1) {
        fprintf(stderr, "rank %d: the last to join the second time was %d\n", me, last);
        return 85;
    }
    th_close_together(r, t->world);
    return 0;
}

/* A process set through a membership change: the job's last rank leaves (the job runs on with
 * one rank fewer); the set's collectives then fail with RINGD_E_MEMBERSHIP on every member
 * once its job session has heard of the change, and a set created again in the new generation
 * runs. */
static int pset_change(int i, void *arg)
{
    const topo *t = arg;
    char min[16];
    snprintf(min, sizeof(min), "%d", t->world - 1);
    setenv("RINGD_MIN_SIZE", min, 1);
    ringd_t *r = join(t, i);
    if (r == NULL)
        return 10;
    int n = ringd_size(r), me = ringd_rank(r), set[TH_RING_MAX * 4];
    for (int k = 0; k < n - 1; k++)
        set[k] = k;
    ringd_t *ps = NULL;
    TH_CHECK_OK(r, ringd_process_set_create(r, set, n - 1, &ps));
    float x = 1;
    if (ps != NULL)
        TH_CHECK_OK(ps, ringd_allreduce(ps, "x", &x, &x, 1, RINGD_F32, RINGD_SUM));
    if (me == n - 1) { /* the leaver: its last op done, it goes */
        TH_CHECK_OK(r, ringd_barrier(r, "before.leave"));
        ringd_close(r);
        return 0;
    }
    TH_CHECK_OK(r, ringd_barrier(r, "before.leave"));
    uint64_t gen = ringd_generation(r);
    ringd_result_t rc = RINGD_OK;
    for (int k = 0; ringd_generation(r) == gen && k < 2000; k++) { /* until the change is heard */
        char name[32];
        snprintf(name, sizeof(name), "probe.%d", k);
        rc = ringd_allreduce(r, name, &x, &x, 1, RINGD_F32, RINGD_SUM);
        if (rc != RINGD_OK && rc != RINGD_E_MEMBERSHIP)
            TH_CHECK_OK(r, rc);
        if (rc == RINGD_OK)
            th_sleep_ms(5);
    }
    if (ringd_generation(r) == gen || ringd_size(r) != n - 1) {
        fprintf(stderr, "rank %d: the leave was never heard (size %d)\n", me, ringd_size(r));
        return 90;
    }
    rc = ringd_allreduce(ps, "x.after", &x, &x, 1, RINGD_F32, RINGD_SUM);
    if (rc != RINGD_E_MEMBERSHIP) {
        fprintf(stderr, "rank %d: the set after the change: %s: %s\n", me, ringd_strerror(rc),
                ringd_errmsg(ps));
        return 91;
    }
    ringd_close(ps);
    ps = NULL;
    /* every rank of the new generation starts its collectives again from here */
    for (rc = RINGD_E_MEMBERSHIP; rc == RINGD_E_MEMBERSHIP;)
        rc = ringd_barrier(r, "resync");
    TH_CHECK_OK(r, rc);
    TH_CHECK_OK(r, ringd_process_set_create(r, set, n - 1, &ps));
    x = (float)me;
    TH_CHECK_OK(ps, ringd_allreduce(ps, "x.again", &x, &x, 1, RINGD_F32, RINGD_SUM));
    if (x != (float)((n - 1) * (n - 2) / 2)) {
        fprintf(stderr, "rank %d: the set made again summed %g\n", me, x);
        return 92;
    }
    ringd_close(ps);
    th_close_together(r, t->world - 1);
    return 0;
}

static void every_case(topo t, const char *const *extra)
{
    start(&t, extra);
    cr_assert_eq(run(&t, every_op, 240000), 0, "a client failed (its stderr above)");
    cr_assert_eq(run(&t, async_orders, 60000), 0, "a client failed (its stderr above)");
    cr_assert_eq(run(&t, differing_counts, 60000), 0, "a client failed (its stderr above)");
    cr_assert_eq(run(&t, learnt_counts, 60000), 0, "a client failed (its stderr above)");
    cr_assert_eq(run(&t, alltoalls, 120000), 0, "a client failed (its stderr above)");
    cr_assert_eq(run(&t, groups, 60000), 0, "a client failed (its stderr above)");
    cr_assert_eq(run(&t, learnt_groups, 60000), 0, "a client failed (its stderr above)");
    cr_assert_eq(run(&t, process_sets, 60000), 0, "a client failed (its stderr above)");
    cr_assert_eq(run(&t, joins, 60000), 0, "a client failed (its stderr above)");
    cr_assert_eq(run(&t, pset_change, 60000), 0, "a client failed (its stderr above)");
    finish(&t);
}

static const char *const ring_only[] = {"--direct-bytes", "0", "--doubling-bytes", "0", NULL};
static const char *const past_direct[] = {"--direct-bytes", "0", NULL};

Test(collectives, three_ranks_on_one_node_run_every_op_dtype_and_count_exactly, .timeout = 300)
{
    every_case((topo){0, {3}, 0}, NULL);
}

Test(collectives, two_nodes_of_one_rank_run_every_op_dtype_and_count_exactly, .timeout = 300)
{
    every_case((topo){2, {1, 1}, 0}, NULL);
}

Test(collectives, two_nodes_of_two_ranks_run_every_op_round_the_ring_exactly, .timeout = 300)
{
    every_case((topo){2, {2, 2}, 0}, ring_only);
}

Test(collectives, three_nodes_of_two_one_and_one_ranks_run_every_op_exactly, .timeout = 300)
{
    every_case((topo){3, {2, 1, 1}, 0}, ring_only);
}

/* The same with allreduces up to --doubling-bytes by recursive doubling over direct links. */
Test(collectives, three_nodes_run_every_op_exactly_with_recursive_doubling, .timeout = 300)
{
    every_case((topo){3, {1, 2, 1}, 0}, past_direct);
}

/* --encrypt on every daemon: every op, dtype and count exact over sealed links: ring data,
 * small ops riding in sealed control frames, and alltoall on sealed direct links (3 nodes). */
Test(collectives, three_sealed_nodes_run_every_op_and_alltoall_exactly, .timeout = 300)
{
    static const char *const sealed[] = {"--encrypt", NULL};
    topo t = {3, {1, 1, 1}, 0};
    start(&t, sealed);
    cr_assert_eq(run(&t, every_op, 240000), 0, "a client failed (its stderr above)");
    cr_assert_eq(run(&t, alltoalls, 120000), 0, "a client failed (its stderr above)");
    finish(&t);
}

/* Ops another node announced before this node's only rank joined, which cannot run with it
 * joined: this node makes them its own and fails them on every rank, several at once. */
static int join_fails_what_waits(int i, void *arg)
{
    const topo *t = arg;
    ringd_t *r = join(t, i);
    if (r == NULL)
        return 10;
    int me = ringd_rank(r), last = -1;
    float b[2][4] = {{1, 2, 3, 4}, {5, 6, 7, 8}};
    if (me == 1) {
        ringd_request_t *q[2];
        TH_CHECK_OK(r, ringd_broadcast_async(r, "b1", b[0], 4, RINGD_F32, 1, &q[0]));
        TH_CHECK_OK(r, ringd_broadcast_async(r, "b2", b[1], 4, RINGD_F32, 1, &q[1]));
        atomic_store(submitted_, 1); /* rank 0 may join */
        for (int k = 0; k < 2; k++) {
            ringd_result_t rc = ringd_wait(q[k]);
            if (rc != RINGD_E_INVALID || strstr(ringd_errmsg(r), "has joined") == NULL) {
                fprintf(stderr, "rank 1: broadcast %d while rank 0 had joined: %s: %s\n", k,
                        ringd_strerror(rc), ringd_errmsg(r));
                return 95;
            }
        }
    } else {
        for (int64_t end = th_now_ms() + 30000; atomic_load(submitted_) == 0 && th_now_ms() < end;)
            th_sleep_ms(1);
        th_sleep_ms(200); /* their announcement reaches this node first, most of the time */
    }
    TH_CHECK_OK(r, ringd_join(r, &last));
    if (last != 1) {
        fprintf(stderr, "rank %d: the last to join was %d\n", me, last);
        return 96;
    }
    th_close_together(r, t->world);
    return 0;
}

Test(collectives, a_node_all_joined_fails_the_broadcasts_another_node_announced, .timeout = 120)
{
    topo t = {2, {1, 1}, 0};
    start(&t, NULL);
    cr_assert_eq(run(&t, join_fails_what_waits, 60000), 0, "a client failed (its stderr above)");
    finish(&t);
}

/* The announcement of an op submitted after the join ended may reach a node whose ranks are
 * still joined before the last join announcement does (control links are per pair of nodes:
 * nothing orders two senders): that node must not take it for one its joined ranks are out of.
 * Node n1 is stopped while n0's join ends and n0's rank announces "after". */
static int join_then_reordered(int i, void *arg)
{
    const topo *t = arg;
    ringd_t *r = join(t, i);
    if (r == NULL)
        return 10;
    int last = -1;
    if (i == 0)
        th_sleep_ms(650);
    if (i == 2) {
        th_sleep_ms(500);
        kill(ring_.d[1].pid, SIGSTOP);
        th_sleep_ms(300);
    }
    ringd_result_t rc = ringd_join(r, &last);
    if (i == 2) {
        th_sleep_ms(100);
        kill(ring_.d[1].pid, SIGCONT);
    }
    TH_CHECK_OK(r, rc);
    float all = 1;
    TH_CHECK_OK(r, ringd_allreduce(r, "after", &all, &all, 1, RINGD_F32, RINGD_SUM));
    if (all != 3) {
        fprintf(stderr, "rank %d: after the join %g ranks took part, not 3\n", ringd_rank(r), all);
        return 97;
    }
    th_close_together(r, t->world);
    return 0;
}

Test(collectives, an_op_after_the_join_overtaking_the_last_join_is_not_joined, .timeout = 120)
{
    topo t = {3, {1, 1, 1}, 0};
    start(&t, NULL);
    int failed = run(&t, join_then_reordered, 60000);
    kill(ring_.d[1].pid, SIGCONT); /* whatever happened to the client that stopped it */
    cr_assert_eq(failed, 0, "a client failed (its stderr above)");
    finish(&t);
}

/* The data steps of collectives of two steps never join a group the caller is making when their
 * first steps end: waiting inside a later group for a member of an ended group, and a rank that
 * alone handles another's completion inside its group, both run as on every other rank. */
static int data_steps_outside_the_callers_group(int i, void *arg)
{
    const topo *t = arg;
    ringd_t *r = join(t, i);
    if (r == NULL)
        return 10;
    int me = ringd_rank(r), n = ringd_size(r);
    int32_t a[16];
    for (int k = 0; k < 16; k++)
        a[k] = 1000 * me + k;
    recv_slot slot[2] = {{4, 0, NULL, 0}, {4, 0, NULL, 0}};
    size_t counts[2][TH_RING_MAX * 4];
    ringd_request_t *qa, *qb, *qx, *qy;
    float x = 1, y = 1;
    TH_CHECK_OK(r, ringd_group_start(r));
    TH_CHECK_OK(r, ringd_allgatherv_into_async(r, "ds.a", a, (size_t)(me % 4 * 3), 7, RINGD_I32,
                                               recv_into, &slot[0], counts[0], &qa));
    TH_CHECK_OK(r, ringd_group_end(r));
    TH_CHECK_OK(r, ringd_group_start(r));
    TH_CHECK_OK(r, ringd_allreduce_async(r, "ds.b", &x, &x, 1, RINGD_F32, RINGD_SUM, &qb));
    TH_CHECK_OK(r, ringd_wait(qa)); /* inside group b, which holds nothing it needs */
    TH_CHECK_OK(r, ringd_group_end(r));
    TH_CHECK_OK(r, ringd_wait(qb));
    int rc = check_learnt(me, n, 0, &slot[0], counts[0]);
    if (rc != 0 || x != (float)n)
        return rc != 0 ? rc : 110;
    TH_CHECK_OK(r, ringd_allgatherv_into_async(r, "ds.x", a, (size_t)(me % 4 * 3 + 1), 7, RINGD_I32,
                                               recv_into, &slot[1], counts[1], &qx));
    TH_CHECK_OK(r, ringd_group_start(r));
    TH_CHECK_OK(r, ringd_allreduce_async(r, "ds.y", &y, &y, 1, RINGD_F32, RINGD_SUM, &qy));
    int done = 0;
    ringd_result_t rx = RINGD_OK;
    if (me == 0) /* it handles x's first step inside its group; the others after theirs */
        for (int k = 0; k < 200 && !done; k++) {
            rx = ringd_test(qx, &done); /* done: released, rx its result */
            th_sleep_ms(2);
        }
    TH_CHECK_OK(r, ringd_group_end(r));
    TH_CHECK_OK(r, ringd_wait(qy));
    TH_CHECK_OK(r, done ? rx : ringd_wait(qx));
    rc = check_learnt(me, n, 1, &slot[1], counts[1]);
    free(slot[0].buf);
    free(slot[1].buf);
    if (rc != 0 || y != (float)n)
        return rc != 0 ? rc : 111;
    th_close_together(r, t->world);
    return 0;
}

Test(collectives, data_steps_of_two_step_collectives_stay_out_of_the_callers_group, .timeout = 120)
{
    topo t = {0, {2}, 0};
    start(&t, NULL);
    cr_assert_eq(run(&t, data_steps_outside_the_callers_group, 60000), 0,
                 "a client failed (its stderr above)");
    finish(&t);
}

/* A rank joins with a collective of two steps under way: it fails on every rank, saying why,
 * instead of waiting for the joined rank's data step. */
static int join_with_two_steps_under_way(int i, void *arg)
{
    const topo *t = arg;
    ringd_t *r = join(t, i);
    if (r == NULL)
        return 10;
    int me = ringd_rank(r), last = -1;
    int32_t a[16] = {0};
    recv_slot slot = {4, 0, NULL, 0};
    size_t counts[TH_RING_MAX * 4];
    ringd_result_t rc;
    if (me == 0) {
        ringd_request_t *q;
        TH_CHECK_OK(r, ringd_allgatherv_into_async(r, "tj", a, 2, 7, RINGD_I32, recv_into, &slot,
                                                   counts, &q));
        TH_CHECK_OK(r, ringd_join(r, &last));
        rc = ringd_wait(q);
    } else {
        rc = ringd_allgatherv_into(r, "tj", a, 3, 7, RINGD_I32, recv_into, &slot, counts);
    }
    free(slot.buf);
    if (rc != RINGD_E_INVALID || strstr(ringd_errmsg(r), "joined") == NULL) {
        fprintf(stderr, "rank %d: a two-step op under way at a join: %s: %s\n", me,
                ringd_strerror(rc), ringd_errmsg(r));
        return 112;
    }
    if (me != 0)
        TH_CHECK_OK(r, ringd_join(r, &last));
    th_close_together(r, t->world);
    return 0;
}

Test(collectives, a_join_fails_the_two_step_collectives_under_way_on_every_rank, .timeout = 120)
{
    topo t = {2, {1, 1}, 0};
    start(&t, NULL);
    cr_assert_eq(run(&t, join_with_two_steps_under_way, 60000), 0,
                 "a client failed (its stderr above)");
    finish(&t);
}
