/* Collectives through a real ringd: every dtype and reduce op, broadcast from every root,
 * allgather, barrier, out-of-order async submissions, buffers in and outside the arena. Results
 * are compared bit for bit with references computed here. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "harness.h"
#include "ringd.h"

#define NPROCS 3

static th_daemon daemon_;
static char job_[64];

static void start(void)
{
    cr_assert_eq(th_daemon_start(&daemon_, NULL), 0, "ringd did not start");
    snprintf(job_, sizeof(job_), "ops.%d", (int)getpid());
}

static void stop(void)
{
    th_daemon_teardown(&daemon_);
}

/* Opens a session of job_ with n local clients; exits the process on failure. */
static ringd_t *open_or_die(int n)
{
    ringd_t *r = th_open(daemon_.sock, job_, n, 64u << 20, 20000);
    if (r == NULL)
        exit(10);
    return r;
}

#define CHECK_OK(r, call)                                                                          \
    do {                                                                                           \
        ringd_result_t rc_ = (call);                                                               \
        if (rc_ != RINGD_OK) {                                                                     \
            fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call, ringd_strerror(rc_), \
                    ringd_errmsg(r));                                                              \
            return 20;                                                                             \
        }                                                                                          \
    } while (0)

/* Rank r's element i: small integers, negative ones too, exact in every dtype. */
static int base(int r, size_t i)
{
    return (int)((i * 7 + (size_t)r * 3) % 11) - 3;
}

/* Stores rank-pattern value v; u8 shifts it to be non-negative. */
static void put(void *buf, ringd_dtype_t dt, size_t i, double v)
{
    rd_dtype_store((rd_dtype)dt, buf, i, dt == RINGD_U8 ? v + 3 : v);
}

static float fop(ringd_redop_t op, float a, float b)
{
    switch (op) {
    case RINGD_MIN: return b < a ? b : a;
    case RINGD_MAX: return b > a ? b : a;
    case RINGD_PROD: return a * b;
    default: return a + b;
    }
}

static double dop(ringd_redop_t op, double a, double b)
{
    switch (op) {
    case RINGD_MIN: return b < a ? b : a;
    case RINGD_MAX: return b > a ? b : a;
    case RINGD_PROD: return a * b;
    default: return a + b;
    }
}

/* Integer reduction with wrap-around, done on unsigned 64-bit and truncated by the caller. */
static uint64_t uop(ringd_redop_t op, uint64_t a, uint64_t b, int is_signed, int bits)
{
    uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
    int64_t sa = is_signed ? (int64_t)(a << (64 - bits)) >> (64 - bits) : (int64_t)a;
    int64_t sb = is_signed ? (int64_t)(b << (64 - bits)) >> (64 - bits) : (int64_t)b;
    switch (op) {
    case RINGD_MIN: return (uint64_t)(sb < sa ? sb : sa) & mask;
    case RINGD_MAX: return (uint64_t)(sb > sa ? sb : sa) & mask;
    case RINGD_PROD: return (a * b) & mask;
    default: return (a + b) & mask;
    }
}

/* Writes the expected allreduce result of n ranks into want. */
static void reference(void *want, ringd_dtype_t dt, ringd_redop_t op, size_t count, int n,
                      double pre, double post)
{
    for (size_t i = 0; i < count; i++) {
        if (dt == RINGD_F64) {
            double acc = pre * base(0, i);
            for (int k = 1; k < n; k++)
                acc = dop(op, acc, pre * base(k, i));
            if (op == RINGD_AVG)
                acc /= n;
            ((double *)want)[i] = acc * post;
        } else if (dt == RINGD_F32 || dt == RINGD_F16 || dt == RINGD_BF16) {
            float acc = (float)pre * (float)base(0, i);
            for (int k = 1; k < n; k++)
                acc = fop(op, acc, (float)pre * (float)base(k, i));
            if (op == RINGD_AVG)
                acc /= (float)n;
            acc *= (float)post;
            if (dt == RINGD_F32)
                ((float *)want)[i] = acc;
            else if (dt == RINGD_F16)
                ((uint16_t *)want)[i] = rd_f32_to_f16(acc);
            else
                ((uint16_t *)want)[i] = rd_f32_to_bf16(acc);
        } else {
            int bits = dt == RINGD_U8 ? 8 : dt == RINGD_I32 ? 32 : 64;
            int sgn = dt != RINGD_U8;
            uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
            uint64_t acc = (uint64_t)(int64_t)(base(0, i) + (sgn ? 0 : 3)) & mask;
            for (int k = 1; k < n; k++)
                acc =
                    uop(op, acc, (uint64_t)(int64_t)(base(k, i) + (sgn ? 0 : 3)) & mask, sgn, bits);
            if (op == RINGD_AVG) {
                if (sgn) {
                    int64_t s = (int64_t)(acc << (64 - bits)) >> (64 - bits);
                    acc = (uint64_t)(s / n) & mask;
                } else {
                    acc = acc / (uint64_t)n;
                }
            }
            if (dt == RINGD_U8)
                ((uint8_t *)want)[i] = (uint8_t)acc;
            else if (dt == RINGD_I32)
                ((uint32_t *)want)[i] = (uint32_t)acc;
            else
                ((uint64_t *)want)[i] = acc;
        }
    }
}

static const size_t counts[] = {1, 7, 1000, 300007};

/* Every dtype x every op x several counts, in place for even counts, out of place for odd. */
static int all_reductions(int idx, void *arg)
{
    (void)idx;
    (void)arg;
    ringd_t *r = open_or_die(NPROCS);
    int me = ringd_rank(r), n = ringd_size(r);
    size_t maxc = counts[3];
    void *in = ringd_alloc(r, maxc * 8), *out = ringd_alloc(r, maxc * 8);
    void *want = malloc(maxc * 8);
    if (in == NULL || out == NULL || want == NULL)
        return 30;
    for (int dt = RINGD_F32; dt <= RINGD_U8; dt++) {
        size_t esz = ringd_dtype_size((ringd_dtype_t)dt);
        for (int op = RINGD_SUM; op <= RINGD_PROD; op++) {
            for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
                size_t count = counts[c];
                for (size_t i = 0; i < count; i++)
                    put(in, (ringd_dtype_t)dt, i, base(me, i));
                void *dst = count % 2 ? out : in;
                char name[64];
                snprintf(name, sizeof(name), "t.%d.%d.%zu", dt, op, count);
                CHECK_OK(r, ringd_allreduce(r, name, in, dst, count, (ringd_dtype_t)dt,
                                            (ringd_redop_t)op));
                reference(want, (ringd_dtype_t)dt, (ringd_redop_t)op, count, n, 1.0, 1.0);
                for (size_t i = 0; i < count; i++) {
                    if (memcmp((uint8_t *)dst + i * esz, (uint8_t *)want + i * esz, esz) != 0) {
                        fprintf(stderr, "rank %d: %s element %zu of %zu differs\n", me, name, i,
                                count);
                        return 40;
                    }
                }
            }
        }
    }
    free(want);
    ringd_close(r);
    return 0;
}

/* prescale / postscale on floating dtypes, sum and avg. */
static int scaled(int idx, void *arg)
{
    (void)idx;
    (void)arg;
    ringd_t *r = open_or_die(NPROCS);
    int me = ringd_rank(r), n = ringd_size(r);
    const ringd_dtype_t dts[] = {RINGD_F32, RINGD_F64, RINGD_F16, RINGD_BF16};
    size_t count = 70001;
    void *buf = ringd_alloc(r, count * 8), *want = malloc(count * 8);
    for (size_t d = 0; d < 4; d++) {
        size_t esz = ringd_dtype_size(dts[d]);
        for (int op = RINGD_SUM; op <= RINGD_AVG; op++) {
            for (size_t i = 0; i < count; i++)
                put(buf, dts[d], i, base(me, i));
            char name[32];
            snprintf(name, sizeof(name), "s.%zu.%d", d, op);
            CHECK_OK(r, ringd_allreduce_scaled(r, name, buf, buf, count, dts[d], (ringd_redop_t)op,
                                               0.5, 3.0));
            reference(want, dts[d], (ringd_redop_t)op, count, n, 0.5, 3.0);
            if (memcmp(buf, want, count * esz) != 0) {
                fprintf(stderr, "rank %d: scaled %s differs\n", me, name);
                return 40;
            }
        }
    }
    free(want);
    ringd_close(r);
    return 0;
}

/* Broadcast from every root, allgather in and outside the arena, barrier. */
static int movement(int idx, void *arg)
{
    (void)idx;
    (void)arg;
    ringd_t *r = open_or_die(NPROCS);
    int me = ringd_rank(r), n = ringd_size(r);
    size_t count = 100003;
    int32_t *buf = ringd_alloc(r, count * 4);
    int32_t *heap = malloc(count * 4);
    int32_t *gather = ringd_alloc(r, count * 4 * (size_t)n);
    int32_t *heap_gather = malloc(count * 4 * (size_t)n);
    for (int root = 0; root < n; root++) {
        for (size_t i = 0; i < count; i++)
            buf[i] = heap[i] = (int32_t)(me * 1000003 + (int)i);
        char name[32];
        snprintf(name, sizeof(name), "b.%d", root);
        CHECK_OK(r, ringd_broadcast(r, name, buf, count, RINGD_I32, root));
        snprintf(name, sizeof(name), "bh.%d", root);
        CHECK_OK(r, ringd_broadcast(r, name, heap, 5, RINGD_I32, root));
        for (size_t i = 0; i < count; i++)
            if (buf[i] != (int32_t)(root * 1000003 + (int)i))
                return 41;
        for (size_t i = 0; i < 5; i++)
            if (heap[i] != (int32_t)(root * 1000003 + (int)i))
                return 42;
    }
    for (size_t i = 0; i < count; i++)
        buf[i] = heap[i] = (int32_t)(me * 7 + (int)i);
    CHECK_OK(r, ringd_allgather(r, "g.arena", buf, gather, count, RINGD_I32));
    CHECK_OK(r, ringd_allgather(r, "g.heap", heap, heap_gather, count, RINGD_I32));
    /* in place: this rank's contribution already sits in its slot of the output */
    for (size_t i = 0; i < count; i++)
        gather[(size_t)me * count + i] = (int32_t)(me * 11 + (int)i);
    CHECK_OK(
        r, ringd_allgather(r, "g.inplace", gather + (size_t)me * count, gather, count, RINGD_I32));
    for (int k = 0; k < n; k++) {
        for (size_t i = 0; i < count; i++) {
            if (heap_gather[(size_t)k * count + i] != (int32_t)(k * 7 + (int)i))
                return 43;
            if (gather[(size_t)k * count + i] != (int32_t)(k * 11 + (int)i))
                return 44;
        }
    }
    /* in place, sendbuf == recvbuf: the contribution sits at the start of the output, in the
     * arena and outside it, large (on the executor) and small (inline) */
    for (size_t c = count; c > 0; c = c > 7 ? 7 : 0) {
        for (size_t i = 0; i < c; i++)
            gather[i] = heap_gather[i] = (int32_t)(me * 13 - (int)i);
        CHECK_OK(r, ringd_allgather(r, c > 7 ? "g.start" : "g.start.small", gather, gather, c,
                                    RINGD_I32));
        CHECK_OK(r, ringd_allgather(r, c > 7 ? "g.start.heap" : "g.start.heap.small", heap_gather,
                                    heap_gather, c, RINGD_I32));
        for (int k = 0; k < n; k++)
            for (size_t i = 0; i < c; i++)
                if (gather[(size_t)k * c + i] != (int32_t)(k * 13 - (int)i) ||
                    heap_gather[(size_t)k * c + i] != (int32_t)(k * 13 - (int)i)) {
                    fprintf(stderr, "rank %d: in-place allgather of %zu: slot %d element %zu\n", me,
                            c, k, i);
                    return 45;
                }
    }
    CHECK_OK(r, ringd_barrier(r, "the-barrier"));
    CHECK_OK(r, ringd_barrier(r, NULL));
    free(heap);
    free(heap_gather);
    ringd_close(r);
    return 0;
}

/* 40 tensors per rank in flight at once, submitted in a different order on every rank and
 * finished in yet another order, some by polling. */
static int out_of_order(int idx, void *arg)
{
    (void)idx;
    (void)arg;
    enum { T = 40, C = 257 };
    ringd_t *r = open_or_die(NPROCS);
    int me = ringd_rank(r), n = ringd_size(r);
    float *buf[T];
    ringd_request_t *req[T];
    int order[T];
    for (int t = 0; t < T; t++)
        order[t] = t;
    srand(1234u + (unsigned)me);
    for (int t = T - 1; t > 0; t--) {
        int j = rand() % (t + 1), x = order[t];
        order[t] = order[j];
        order[j] = x;
    }
    for (int k = 0; k < T; k++) {
        int t = order[k];
        buf[t] = ringd_alloc(r, C * sizeof(float));
        for (int i = 0; i < C; i++)
            buf[t][i] = (float)(t + me + i);
        char name[32];
        snprintf(name, sizeof(name), "grad.%d", t);
        CHECK_OK(r,
                 ringd_allreduce_async(r, name, buf[t], buf[t], C, RINGD_F32, RINGD_SUM, &req[t]));
    }
    for (int t = 0; t < T; t += 2) {
        int done = 0;
        for (int spins = 0; !done && spins < 200000; spins++) {
            CHECK_OK(r, ringd_test(req[t], &done));
            if (!done)
                usleep(50);
        }
        if (!done)
            return 50;
    }
    for (int t = T - 1; t > 0; t -= 2)
        CHECK_OK(r, ringd_wait(req[t]));
    for (int t = 0; t < T; t++)
        for (int i = 0; i < C; i++)
            if (buf[t][i] != (float)(n * (t + i) + n * (n - 1) / 2))
                return 51;
    ringd_close(r);
    return 0;
}

TestSuite(ops, .init = start, .fini = stop, .timeout = 120);

Test(ops, every_dtype_and_reduce_op_matches_the_reference)
{
    cr_assert_eq(th_run(NPROCS, all_reductions, NULL, 100000), 0);
    th_daemon_finish(&daemon_);
}

Test(ops, prescale_and_postscale_apply_to_floating_dtypes)
{
    cr_assert_eq(th_run(NPROCS, scaled, NULL, 60000), 0);
    th_daemon_finish(&daemon_);
}

Test(ops, broadcast_allgather_and_barrier_deliver_every_rank_s_data)
{
    cr_assert_eq(th_run(NPROCS, movement, NULL, 60000), 0);
    th_daemon_finish(&daemon_);
}

Test(ops, async_ops_submitted_in_different_orders_all_complete)
{
    cr_assert_eq(th_run(NPROCS, out_of_order, NULL, 60000), 0);
    th_daemon_finish(&daemon_);
}
