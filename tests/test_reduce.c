/* Unit tests for the CPU reduction kernels and the f16/bf16 conversions in gpu/cpu.c. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

#define MAX_SRC 3

/* ------------------------------------------------------------------------------------------ */
/* Independent reference helpers                                                              */
/* ------------------------------------------------------------------------------------------ */

/* Value of a binary16 from its fields, with ldexp: shares no code with the library decoder. */
static double ref_f16_value(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v;

    if (e == 0x1f)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp(m, -24);
    else
        v = ldexp(m + 1024, e - 25);
    return (h & 0x8000) ? -v : v;
}

/* Value of a bfloat16 from its fields (8 exponent bits, 7 mantissa bits). */
static double ref_bf16_value(uint16_t b)
{
    int e = (b >> 7) & 0xff, m = b & 0x7f;
    double v;

    if (e == 0xff)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp(m, -133);
    else
        v = ldexp(m + 128, e - 134);
    return (b & 0x8000) ? -v : v;
}

/* Kept out of line so the compiler cannot fuse the scaling into the next add (FMA contraction)
 * and so mirrors the two separate roundings the kernels perform. */
static __attribute__((noinline)) float mulf(float a, float b)
{
    return a * b;
}

static __attribute__((noinline)) double muld(double a, double b)
{
    return a * b;
}

/* Deterministic 64-bit generator (splitmix64). */
static uint64_t next_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Fill buf with count elements of dt: floats in [-16, 16) with an inexact fraction for f32/f64,
 * integers over their full range so that sums and products wrap. */
static void fill(rd_dtype dt, void *buf, size_t count, uint64_t seed)
{
    uint64_t s = seed;
    for (size_t i = 0; i < count; i++) {
        uint64_t r = next_rand(&s);
        double v = (double)(int)(r % 2048) / 64.0 - 16.0;
        switch (dt) {
        case RD_DT_F32: ((float *)buf)[i] = (float)(v + (double)(r >> 40) / 3e7); break;
        case RD_DT_F64: ((double *)buf)[i] = v + (double)(r >> 20) / 3e13; break;
        case RD_DT_F16: ((uint16_t *)buf)[i] = rd_f32_to_f16((float)v); break;
        case RD_DT_BF16: ((uint16_t *)buf)[i] = rd_f32_to_bf16((float)v); break;
        case RD_DT_I32: ((uint32_t *)buf)[i] = (uint32_t)r; break;
        case RD_DT_I64: ((uint64_t *)buf)[i] = r; break;
        case RD_DT_U8: ((uint8_t *)buf)[i] = (uint8_t)r; break;
        default: cr_assert_fail("bad dtype");
        }
    }
}

/* Float min/max that return NaN when either side is NaN. */
static double ref_min(double a, double b)
{
    return (isnan(a) || isnan(b)) ? NAN : (b < a ? b : a);
}

static double ref_max(double a, double b)
{
    return (isnan(a) || isnan(b)) ? NAN : (b > a ? b : a);
}

/* Reference for f32, f16, bf16: element i decoded independently, combined in float. */
static float ref_float_elem(rd_dtype dt, rd_redop op, const void *const *src, int nsrc, size_t i,
                            const rd_reduce_args *a)
{
    float pre = (float)a->prescale, acc = 0;
    for (int k = 0; k < nsrc; k++) {
        float x;
        if (dt == RD_DT_F32)
            x = ((const float *)src[k])[i];
        else if (dt == RD_DT_F16)
            x = (float)ref_f16_value(((const uint16_t *)src[k])[i]);
        else
            x = (float)ref_bf16_value(((const uint16_t *)src[k])[i]);
        x = mulf(x, pre);
        if (k == 0)
            acc = x;
        else if (op == RD_OP_SUM)
            acc = acc + x;
        else if (op == RD_OP_PROD)
            acc = acc * x;
        else if (op == RD_OP_MIN)
            acc = (float)ref_min(acc, x);
        else
            acc = (float)ref_max(acc, x);
    }
    if (a->divisor > 1)
        acc = acc / (float)a->divisor;
    return mulf(acc, (float)a->postscale);
}

static double ref_double_elem(rd_redop op, const void *const *src, int nsrc, size_t i,
                              const rd_reduce_args *a)
{
    double acc = 0;
    for (int k = 0; k < nsrc; k++) {
        double x = muld(((const double *)src[k])[i], a->prescale);
        if (k == 0)
            acc = x;
        else if (op == RD_OP_SUM)
            acc = acc + x;
        else if (op == RD_OP_PROD)
            acc = acc * x;
        else if (op == RD_OP_MIN)
            acc = ref_min(acc, x);
        else
            acc = ref_max(acc, x);
    }
    if (a->divisor > 1)
        acc = acc / (double)a->divisor;
    return muld(acc, a->postscale);
}

/* Integer reference: sums in a wider exact type reduced modulo 2^bits, products as exact
 * 2-word products, min/max with native signed comparisons, division with C's truncation. */
static int64_t ref_i32_elem(rd_redop op, const void *const *src, int nsrc, size_t i, uint32_t d)
{
    int64_t acc = 0;
    for (int k = 0; k < nsrc; k++) {
        int32_t x = ((const int32_t *)src[k])[i];
        if (k == 0)
            acc = x;
        else if (op == RD_OP_SUM)
            acc = acc + x;
        else if (op == RD_OP_PROD)
            acc = (int64_t)(((uint64_t)(uint32_t)acc * (uint32_t)x) & 0xffffffffu);
        else if (op == RD_OP_MIN)
            acc = x < (int32_t)acc ? x : (int32_t)acc;
        else
            acc = x > (int32_t)acc ? x : (int32_t)acc;
        /* back into [INT32_MIN, INT32_MAX] */
        acc = (int64_t)(uint32_t)acc;
        if (acc > INT32_MAX)
            acc -= (int64_t)1 << 32;
    }
    return d > 1 ? acc / (int64_t)d : acc;
}

static int64_t ref_i64_elem(rd_redop op, const void *const *src, int nsrc, size_t i, uint32_t d)
{
    uint64_t acc = 0;
    for (int k = 0; k < nsrc; k++) {
        uint64_t x = ((const uint64_t *)src[k])[i];
        if (k == 0)
            acc = x;
        else if (op == RD_OP_SUM)
            acc += x;
        else if (op == RD_OP_PROD)
            acc *= x;
        else if (op == RD_OP_MIN)
            acc = (int64_t)x < (int64_t)acc ? x : acc;
        else
            acc = (int64_t)x > (int64_t)acc ? x : acc;
    }
    int64_t v = (int64_t)acc;
    return d > 1 ? v / (int64_t)d : v;
}

static unsigned ref_u8_elem(rd_redop op, const void *const *src, int nsrc, size_t i, uint32_t d)
{
    unsigned acc = 0;
    for (int k = 0; k < nsrc; k++) {
        unsigned x = ((const uint8_t *)src[k])[i];
        if (k == 0)
            acc = x;
        else if (op == RD_OP_SUM)
            acc = (acc + x) % 256;
        else if (op == RD_OP_PROD)
            acc = (acc * x) % 256;
        else if (op == RD_OP_MIN)
            acc = x < acc ? x : acc;
        else
            acc = x > acc ? x : acc;
    }
    return d > 1 ? acc / d : acc;
}

/* Compare dst against the reference for every element; floats must match bit for bit
 * (NaN matches any NaN). */
static void check_against_reference(rd_dtype dt, rd_redop op, const void *dst,
                                    const void *const *src, int nsrc, size_t count,
                                    const rd_reduce_args *a)
{
    for (size_t i = 0; i < count; i++) {
        switch (dt) {
        case RD_DT_F32: {
            float want = ref_float_elem(dt, op, src, nsrc, i, a), got = ((const float *)dst)[i];
            if (isnan(want))
                cr_assert(isnan(got), "f32 %s [%zu]: got %a, want NaN", rd_redop_name(op), i, got);
            else
                cr_assert(memcmp(&got, &want, sizeof(got)) == 0, "f32 %s [%zu]: got %a, want %a",
                          rd_redop_name(op), i, got, want);
            break;
        }
        case RD_DT_F64: {
            double want = ref_double_elem(op, src, nsrc, i, a), got = ((const double *)dst)[i];
            if (isnan(want))
                cr_assert(isnan(got), "f64 %s [%zu]: got %a, want NaN", rd_redop_name(op), i, got);
            else
                cr_assert(memcmp(&got, &want, sizeof(got)) == 0, "f64 %s [%zu]: got %a, want %a",
                          rd_redop_name(op), i, got, want);
            break;
        }
        case RD_DT_F16:
        case RD_DT_BF16: {
            float want = ref_float_elem(dt, op, src, nsrc, i, a);
            uint16_t got = ((const uint16_t *)dst)[i];
            double gotv = dt == RD_DT_F16 ? ref_f16_value(got) : ref_bf16_value(got);
            if (isnan(want)) {
                cr_assert(isnan(gotv), "%s %s [%zu]: got 0x%04x, want NaN", rd_dtype_name(dt),
                          rd_redop_name(op), i, got);
            } else {
                uint16_t w = dt == RD_DT_F16 ? rd_f32_to_f16(want) : rd_f32_to_bf16(want);
                cr_assert_eq(got, w, "%s %s [%zu]: got 0x%04x, want 0x%04x (%a)", rd_dtype_name(dt),
                             rd_redop_name(op), i, got, w, want);
            }
            break;
        }
        case RD_DT_I32: {
            int64_t want = ref_i32_elem(op, src, nsrc, i, a->divisor);
            int32_t got = ((const int32_t *)dst)[i];
            cr_assert_eq(got, want, "i32 %s [%zu]: got %d, want %lld", rd_redop_name(op), i, got,
                         (long long)want);
            break;
        }
        case RD_DT_I64: {
            int64_t want = ref_i64_elem(op, src, nsrc, i, a->divisor);
            int64_t got = ((const int64_t *)dst)[i];
            cr_assert_eq(got, want, "i64 %s [%zu]: got %lld, want %lld", rd_redop_name(op), i,
                         (long long)got, (long long)want);
            break;
        }
        case RD_DT_U8: {
            unsigned want = ref_u8_elem(op, src, nsrc, i, a->divisor);
            unsigned got = ((const uint8_t *)dst)[i];
            cr_assert_eq(got, want, "u8 %s [%zu]: got %u, want %u", rd_redop_name(op), i, got,
                         want);
            break;
        }
        default: cr_assert_fail("bad dtype");
        }
    }
}

/* Allocate and fill nsrc sources, run rd_reduce (out of place, or in place into source
 * inplace_k when >= 0), check every element, free. */
static void run_case(rd_dtype dt, rd_redop op, int nsrc, size_t count, const rd_reduce_args *a,
                     int inplace_k)
{
    size_t es = rd_dtype_size(dt);
    void *src[MAX_SRC], *copy[MAX_SRC], *dst;

    cr_assert(es > 0 && nsrc >= 1 && nsrc <= MAX_SRC);
    for (int k = 0; k < nsrc; k++) {
        src[k] = malloc(count * es);
        copy[k] = malloc(count * es);
        cr_assert(src[k] && copy[k]);
        fill(dt, src[k], count, 1000003u * (uint64_t)(k + 1) + (uint64_t)dt * 7919u + count);
        memcpy(copy[k], src[k], count * es);
    }
    dst = inplace_k >= 0 ? src[inplace_k] : malloc(count * es);
    cr_assert(dst);

    rd_reduce(dt, op, dst, (const void *const *)src, nsrc, count, a);
    check_against_reference(dt, op, dst, (const void *const *)copy, nsrc, count, a);

    for (int k = 0; k < nsrc; k++) {
        if (k != inplace_k)
            cr_assert(memcmp(src[k], copy[k], count * es) == 0, "source %d was modified", k);
        free(src[k]);
        free(copy[k]);
    }
    if (inplace_k < 0)
        free(dst);
}

/* ------------------------------------------------------------------------------------------ */
/* Every dtype x op x source count x length                                                   */
/* ------------------------------------------------------------------------------------------ */

struct reduce_case {
    rd_dtype dt;
    rd_redop op;
    int nsrc;
    size_t count;
};

static const rd_redop all_ops[] = {RD_OP_SUM, RD_OP_MIN, RD_OP_MAX, RD_OP_PROD};
static const int all_nsrc[] = {1, 2, 3};
static const size_t all_counts[] = {1, 7, 1000, 4099};

#define N_MATRIX (RD_DT_COUNT * 4 * 3 * 4)

ParameterizedTestParameters(reduce, matches_reference_for_every_dtype_op_and_length)
{
    static struct reduce_case cases[N_MATRIX];
    size_t n = 0;

    for (int dt = 0; dt < RD_DT_COUNT; dt++)
        for (size_t o = 0; o < 4; o++)
            for (size_t s = 0; s < 3; s++)
                for (size_t c = 0; c < 4; c++)
                    cases[n++] =
                        (struct reduce_case){(rd_dtype)dt, all_ops[o], all_nsrc[s], all_counts[c]};
    return cr_make_param_array(struct reduce_case, cases, n);
}

ParameterizedTest(struct reduce_case *c, reduce, matches_reference_for_every_dtype_op_and_length)
{
    rd_reduce_args a = RD_REDUCE_ARGS_INIT;
    run_case(c->dt, c->op, c->nsrc, c->count, &a, -1);
}

/* ------------------------------------------------------------------------------------------ */
/* In place, and scaling                                                                      */
/* ------------------------------------------------------------------------------------------ */

struct inplace_case {
    rd_dtype dt;
    rd_redop op;
    int k;
};

ParameterizedTestParameters(reduce, gives_the_same_result_in_place_into_any_source)
{
    static struct inplace_case cases[RD_DT_COUNT * 2 * 3];
    size_t n = 0;

    for (int dt = 0; dt < RD_DT_COUNT; dt++)
        for (int k = 0; k < 3; k++) {
            cases[n++] = (struct inplace_case){(rd_dtype)dt, RD_OP_SUM, k};
            cases[n++] = (struct inplace_case){(rd_dtype)dt, RD_OP_MAX, k};
        }
    return cr_make_param_array(struct inplace_case, cases, n);
}

ParameterizedTest(struct inplace_case *c, reduce, gives_the_same_result_in_place_into_any_source)
{
    rd_reduce_args a = RD_REDUCE_ARGS_INIT;
    run_case(c->dt, c->op, 3, 4099, &a, c->k);
}

struct scale_case {
    rd_dtype dt;
    rd_redop op;
    double pre, post;
    uint32_t divisor;
};

ParameterizedTestParameters(reduce, applies_prescale_divisor_and_postscale_to_floats)
{
    static struct scale_case cases[] = {
        {RD_DT_F32, RD_OP_SUM, 0.5, 3.0, 3},    {RD_DT_F32, RD_OP_SUM, 0.1, 1.0, 1},
        {RD_DT_F32, RD_OP_SUM, 1.0, 1.0, 7},    {RD_DT_F32, RD_OP_PROD, 2.0, 0.25, 1},
        {RD_DT_F32, RD_OP_MIN, -1.0, 0.3, 2},   {RD_DT_F64, RD_OP_SUM, 0.5, 3.0, 3},
        {RD_DT_F64, RD_OP_SUM, 0.1, 0.7, 5},    {RD_DT_F64, RD_OP_MAX, -2.0, 1.0, 1},
        {RD_DT_F16, RD_OP_SUM, 0.5, 3.0, 3},    {RD_DT_F16, RD_OP_SUM, 1.0, 1.0, 3},
        {RD_DT_F16, RD_OP_SUM, 1024.0, 1.0, 1}, /* overflows to inf */
        {RD_DT_F16, RD_OP_PROD, 0.001, 1.0, 1}, /* underflows into subnormals */
        {RD_DT_BF16, RD_OP_SUM, 0.5, 3.0, 3},   {RD_DT_BF16, RD_OP_SUM, 0.1, 1.0, 6},
        {RD_DT_BF16, RD_OP_MAX, 1.0, -1.5, 1},
    };
    return cr_make_param_array(struct scale_case, cases, sizeof(cases) / sizeof(cases[0]));
}

ParameterizedTest(struct scale_case *c, reduce, applies_prescale_divisor_and_postscale_to_floats)
{
    rd_reduce_args a = {c->pre, c->post, c->divisor};
    run_case(c->dt, c->op, 3, 4099, &a, -1);
    run_case(c->dt, c->op, 1, 7, &a, -1);
}

Test(reduce, treats_avg_as_sum_with_the_divisor)
{
    float x[2] = {1.0f, -3.0f}, y[2] = {2.0f, 4.0f}, out[2];
    const void *src[] = {x, y};
    rd_reduce_args a = {1.0, 1.0, 2};

    rd_reduce(RD_DT_F32, RD_OP_AVG, out, src, 2, 2, &a);
    cr_assert_eq(out[0], 1.5f);
    cr_assert_eq(out[1], 0.5f);
}

Test(reduce, uses_default_args_when_args_is_null)
{
    double x[1] = {1.25}, y[1] = {2.5}, out[1];
    const void *src[] = {x, y};

    rd_reduce(RD_DT_F64, RD_OP_SUM, out, src, 2, 1, NULL);
    cr_assert_eq(out[0], 3.75);
}

Test(reduce, leaves_dst_untouched_for_zero_count)
{
    float x[1] = {1.0f}, out[1] = {42.0f};
    const void *src[] = {x};

    rd_reduce(RD_DT_F32, RD_OP_SUM, out, src, 1, 0, NULL);
    cr_assert_eq(out[0], 42.0f);
}

/* ------------------------------------------------------------------------------------------ */
/* Integer wrap-around and truncating division                                                */
/* ------------------------------------------------------------------------------------------ */

Test(reduce, wraps_i32_sum_past_int_max)
{
    int32_t x[2] = {INT32_MAX, INT32_MIN}, y[2] = {1, -1}, out[2];
    const void *src[] = {x, y};

    rd_reduce(RD_DT_I32, RD_OP_SUM, out, src, 2, 2, NULL);
    cr_assert_eq(out[0], INT32_MIN);
    cr_assert_eq(out[1], INT32_MAX);
}

Test(reduce, wraps_i32_product)
{
    int32_t x[1] = {65536}, y[1] = {65537}, out[1];
    const void *src[] = {x, y};

    rd_reduce(RD_DT_I32, RD_OP_PROD, out, src, 2, 1, NULL);
    cr_assert_eq(out[0], 65536); /* 2^32 + 2^16 mod 2^32 */
}

Test(reduce, wraps_u8_sum_and_product)
{
    uint8_t x[2] = {200, 16}, y[2] = {100, 17}, out[2];
    const void *src[] = {x, y};

    rd_reduce(RD_DT_U8, RD_OP_SUM, out, src, 2, 2, NULL);
    cr_assert_eq(out[0], 44);
    cr_assert_eq(out[1], 33);
    rd_reduce(RD_DT_U8, RD_OP_PROD, out, src, 2, 2, NULL);
    cr_assert_eq(out[0], (200 * 100) % 256);
    cr_assert_eq(out[1], 16);
}

Test(reduce, wraps_i64_product)
{
    int64_t x[3] = {INT64_MAX, (int64_t)1 << 32, INT64_MIN}, y[3] = {2, (int64_t)1 << 32, -1};
    int64_t out[3];
    const void *src[] = {x, y};

    rd_reduce(RD_DT_I64, RD_OP_PROD, out, src, 2, 3, NULL);
    cr_assert_eq(out[0], -2);
    cr_assert_eq(out[1], 0);
    cr_assert_eq(out[2], INT64_MIN);
}

Test(reduce, compares_signed_integers_as_signed_and_u8_as_unsigned)
{
    int32_t a32[2] = {-5, INT32_MIN}, b32[2] = {3, INT32_MAX}, o32[2];
    int64_t a64[1] = {-1}, b64[1] = {1}, o64[1];
    uint8_t a8[1] = {255}, b8[1] = {1}, o8[1];
    const void *s32[] = {a32, b32}, *s64[] = {a64, b64}, *s8[] = {a8, b8};

    rd_reduce(RD_DT_I32, RD_OP_MIN, o32, s32, 2, 2, NULL);
    cr_assert(o32[0] == -5 && o32[1] == INT32_MIN);
    rd_reduce(RD_DT_I32, RD_OP_MAX, o32, s32, 2, 2, NULL);
    cr_assert(o32[0] == 3 && o32[1] == INT32_MAX);
    rd_reduce(RD_DT_I64, RD_OP_MIN, o64, s64, 2, 1, NULL);
    cr_assert_eq(o64[0], -1);
    rd_reduce(RD_DT_U8, RD_OP_MAX, o8, s8, 2, 1, NULL);
    cr_assert_eq(o8[0], 255);
}

Test(reduce, truncates_integer_division_toward_zero)
{
    int32_t x[5] = {-7, 7, -1, INT32_MIN, -6}, z[5] = {0, 0, 0, 0, 0}, o32[5];
    int64_t x64[3] = {-9, 9, INT64_MIN}, z64[3] = {0, 0, 0}, o64[3];
    uint8_t x8[2] = {250, 200}, z8[2] = {0, 100}, o8[2];
    const void *s32[] = {x, z}, *s64[] = {x64, z64}, *s8[] = {x8, z8};
    rd_reduce_args a = {1.0, 1.0, 2};

    rd_reduce(RD_DT_I32, RD_OP_SUM, o32, s32, 2, 5, &a);
    cr_assert_eq(o32[0], -3);
    cr_assert_eq(o32[1], 3);
    cr_assert_eq(o32[2], 0);
    cr_assert_eq(o32[3], INT32_MIN / 2);
    cr_assert_eq(o32[4], -3);

    a.divisor = 4;
    rd_reduce(RD_DT_I64, RD_OP_SUM, o64, s64, 2, 3, &a);
    cr_assert_eq(o64[0], -2);
    cr_assert_eq(o64[1], 2);
    cr_assert_eq(o64[2], INT64_MIN / 4);

    a.divisor = 3;
    rd_reduce(RD_DT_U8, RD_OP_SUM, o8, s8, 2, 2, &a);
    cr_assert_eq(o8[0], 83);
    cr_assert_eq(o8[1], 14); /* (200 + 100) mod 256 = 44, then / 3 */

    a.divisor = 300; /* wider than u8: must not be truncated to 44 */
    rd_reduce(RD_DT_U8, RD_OP_SUM, o8, s8, 2, 2, &a);
    cr_assert_eq(o8[0], 0);
    a.divisor = UINT32_MAX;
    rd_reduce(RD_DT_I32, RD_OP_SUM, o32, s32, 2, 5, &a);
    cr_assert_eq(o32[3], 0);
}

/* ------------------------------------------------------------------------------------------ */
/* NaN in min/max                                                                             */
/* ------------------------------------------------------------------------------------------ */

struct nan_case {
    rd_dtype dt;
    rd_redop op;
    int nan_k;
};

ParameterizedTestParameters(reduce, propagates_nan_through_min_and_max)
{
    static struct nan_case cases[4 * 2 * 3];
    static const rd_dtype fdt[] = {RD_DT_F32, RD_DT_F64, RD_DT_F16, RD_DT_BF16};
    size_t n = 0;

    for (int d = 0; d < 4; d++)
        for (int k = 0; k < 3; k++) {
            cases[n++] = (struct nan_case){fdt[d], RD_OP_MIN, k};
            cases[n++] = (struct nan_case){fdt[d], RD_OP_MAX, k};
        }
    return cr_make_param_array(struct nan_case, cases, n);
}

ParameterizedTest(struct nan_case *c, reduce, propagates_nan_through_min_and_max)
{
    /* element 0 carries the NaN; element 1 checks ordinary values still work */
    double vals[MAX_SRC][2] = {{1.0, 4.0}, {-2.0, 8.0}, {3.0, -0.5}};
    unsigned char buf[MAX_SRC][16], out[16];
    const void *src[MAX_SRC];

    for (int k = 0; k < MAX_SRC; k++) {
        for (int i = 0; i < 2; i++) {
            double v = (k == c->nan_k && i == 0) ? NAN : vals[k][i];
            uint16_t h;
            float f = (float)v;
            switch (c->dt) {
            case RD_DT_F32: memcpy(buf[k] + 4 * i, &f, 4); break;
            case RD_DT_F64: memcpy(buf[k] + 8 * i, &v, 8); break;
            case RD_DT_F16:
                h = rd_f32_to_f16(f);
                memcpy(buf[k] + 2 * i, &h, 2);
                break;
            default:
                h = rd_f32_to_bf16(f);
                memcpy(buf[k] + 2 * i, &h, 2);
                break;
            }
        }
        src[k] = buf[k];
    }
    rd_reduce(c->dt, c->op, out, src, MAX_SRC, 2, NULL);

    double r0, r1;
    switch (c->dt) {
    case RD_DT_F32: {
        float f[2];
        memcpy(f, out, 8);
        r0 = f[0];
        r1 = f[1];
        break;
    }
    case RD_DT_F64: {
        double d[2];
        memcpy(d, out, 16);
        r0 = d[0];
        r1 = d[1];
        break;
    }
    case RD_DT_F16: {
        uint16_t h[2];
        memcpy(h, out, 4);
        r0 = ref_f16_value(h[0]);
        r1 = ref_f16_value(h[1]);
        break;
    }
    default: {
        uint16_t h[2];
        memcpy(h, out, 4);
        r0 = ref_bf16_value(h[0]);
        r1 = ref_bf16_value(h[1]);
        break;
    }
    }
    cr_assert(isnan(r0), "%s %s with NaN in source %d gave %g", rd_dtype_name(c->dt),
              rd_redop_name(c->op), c->nan_k, r0);
    cr_assert_eq(r1, c->op == RD_OP_MIN ? -0.5 : 8.0);
}

/* ------------------------------------------------------------------------------------------ */
/* f16 and bf16 conversions                                                                   */
/* ------------------------------------------------------------------------------------------ */

struct f16_case {
    float in;
    uint16_t want;
};

ParameterizedTestParameters(reduce, encodes_f16_edge_cases)
{
    static struct f16_case cases[] = {
        {0.0f, 0x0000},
        {-0.0f, 0x8000},
        {1.0f, 0x3c00},
        {-2.0f, 0xc000},
        {65504.0f, 0x7bff},
        {65519.996f, 0x7bff},
        {65520.0f, 0x7c00}, /* tie between 65504 and 2^16: even is inf */
        {-65520.0f, 0xfc00},
        {1e10f, 0x7c00},
        {0x1p-14f, 0x0400}, /* smallest normal */
        {0x1p-24f, 0x0001}, /* smallest subnormal */
        {-0x1p-24f, 0x8001},
        {0x1p-25f, 0x0000}, /* tie: rounds to even zero */
        {-0x1p-25f, 0x8000},
        {0x1.000002p-25f, 0x0001},
        {0x3p-25f, 0x0002}, /* 1.5 ulp: tie rounds up to even 2 */
        {0x5p-25f, 0x0002}, /* 2.5 ulp: tie rounds down to even 2 */
        {0x1p-26f, 0x0000},
        {0x3ffp-24f, 0x03ff},      /* largest subnormal */
        {0x7ffp-25f, 0x0400},      /* rounds up into the smallest normal */
        {1.0f + 0x1p-11f, 0x3c00}, /* tie at 1: down to even */
        {1.0f + 0x3p-11f, 0x3c02}, /* tie: up to even */
        {INFINITY, 0x7c00},
        {-INFINITY, 0xfc00},
        {FLT_MAX, 0x7c00},
        {FLT_MIN, 0x0000},
    };
    return cr_make_param_array(struct f16_case, cases, sizeof(cases) / sizeof(cases[0]));
}

ParameterizedTest(struct f16_case *c, reduce, encodes_f16_edge_cases)
{
    uint16_t got = rd_f32_to_f16(c->in);
    cr_assert_eq(got, c->want, "f16(%a) = 0x%04x, want 0x%04x", c->in, got, c->want);
}

Test(reduce, decodes_f16_edge_cases)
{
    cr_assert_eq(rd_f16_to_f32(0x0000), 0.0f);
    cr_assert(signbit(rd_f16_to_f32(0x8000)) && rd_f16_to_f32(0x8000) == 0.0f);
    cr_assert_eq(rd_f16_to_f32(0x3c00), 1.0f);
    cr_assert_eq(rd_f16_to_f32(0x7bff), 65504.0f);
    cr_assert_eq(rd_f16_to_f32(0x0001), 0x1p-24f);
    cr_assert_eq(rd_f16_to_f32(0x83ff), -0x3ffp-24f);
    cr_assert_eq(rd_f16_to_f32(0x7c00), INFINITY);
    cr_assert_eq(rd_f16_to_f32(0xfc00), -INFINITY);
    cr_assert(isnan(rd_f16_to_f32(0x7e00)));
    cr_assert(isnan(rd_f16_to_f32(0x7c01)));
    cr_assert(isnan(rd_f16_to_f32(0xfe00)));
}

Test(reduce, keeps_nan_as_nan_when_encoding_f16)
{
    uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fbfffffu, 0x7fffffffu};
    for (size_t i = 0; i < sizeof(nans) / sizeof(nans[0]); i++) {
        float f;
        memcpy(&f, &nans[i], 4);
        uint16_t h = rd_f32_to_f16(f);
        cr_assert((h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0, "f16(0x%08x) = 0x%04x", nans[i], h);
        cr_assert_eq(h & 0x8000, (nans[i] >> 16) & 0x8000);
    }
}

Test(reduce, decodes_every_f16_to_its_exact_value_and_round_trips)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = rd_f16_to_f32((uint16_t)h);
        double want = ref_f16_value((uint16_t)h);
        if (isnan(want)) {
            cr_assert(isnan(f), "0x%04x", h);
            cr_assert(isnan(rd_f16_to_f32(rd_f32_to_f16(f))), "0x%04x NaN lost", h);
            continue;
        }
        cr_assert((double)f == want && !signbit(f) == !signbit(want), "0x%04x -> %a", h, f);
        cr_assert_eq(rd_f32_to_f16(f), h, "round trip of 0x%04x", h);
    }
}

Test(reduce, decodes_every_bf16_to_its_exact_value_and_round_trips)
{
    for (uint32_t b = 0; b < 65536; b++) {
        float f = rd_bf16_to_f32((uint16_t)b);
        double want = ref_bf16_value((uint16_t)b);
        if (isnan(want)) {
            cr_assert(isnan(f), "0x%04x", b);
            cr_assert(isnan(rd_bf16_to_f32(rd_f32_to_bf16(f))), "0x%04x NaN lost", b);
            continue;
        }
        cr_assert((double)f == want && !signbit(f) == !signbit(want), "0x%04x -> %a", b, f);
        cr_assert_eq(rd_f32_to_bf16(f), b, "round trip of 0x%04x", b);
    }
}

/* For every pair of adjacent finite values of a 16-bit format (and the last finite value
 * against the next power of two, which stands for inf), the exact midpoint must round to the
 * even one and the floats just either side of it to the nearer one. */
static void check_midpoints(uint16_t (*enc)(float), double (*value)(uint16_t), uint16_t last,
                            double beyond_last)
{
    for (uint32_t h = 0; h <= last; h++) {
        for (uint32_t sign = 0; sign <= 0x8000; sign += 0x8000) {
            double lo = value((uint16_t)h), hi = h == last ? beyond_last : value((uint16_t)(h + 1));
            float mid = (float)((lo + hi) / 2);
            uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
            cr_assert_eq((double)mid, (lo + hi) / 2, "midpoint above 0x%04x not exact", h);
            if (sign)
                mid = -mid;
            float below = nextafterf(mid, 0.0f),
                  above = nextafterf(mid, sign ? -INFINITY : INFINITY);
            cr_assert_eq(enc(mid), even | sign, "midpoint above 0x%04x", h | sign);
            cr_assert_eq(enc(below), h | sign, "just below midpoint above 0x%04x", h | sign);
            cr_assert_eq(enc(above), (h + 1) | sign, "just above midpoint above 0x%04x", h | sign);
        }
    }
}

static double f16_value_for_midpoints(uint16_t h)
{
    return ref_f16_value(h);
}

static double bf16_value_for_midpoints(uint16_t b)
{
    return ref_bf16_value(b);
}

Test(reduce, rounds_every_f16_midpoint_to_nearest_even)
{
    check_midpoints(rd_f32_to_f16, f16_value_for_midpoints, 0x7bff, 65536.0);
}

Test(reduce, rounds_every_bf16_midpoint_to_nearest_even)
{
    check_midpoints(rd_f32_to_bf16, bf16_value_for_midpoints, 0x7f7f, ldexp(1.0, 128));
}

struct bits_case {
    uint32_t in;
    uint16_t want;
};

ParameterizedTestParameters(reduce, encodes_bf16_edge_cases)
{
    static struct bits_case cases[] = {
        {0x3f808000u, 0x3f80}, /* tie, down to even */
        {0x3f818000u, 0x3f82}, /* tie, up to even */
        {0x3f808001u, 0x3f81}, {0x3f807fffu, 0x3f80}, {0x00000000u, 0x0000},
        {0x80000000u, 0x8000}, {0x7f800000u, 0x7f80}, /* inf */
        {0xff800000u, 0xff80}, {0x7f7fffffu, 0x7f80}, /* FLT_MAX rounds to inf */
        {0x7f7f7fffu, 0x7f7f}, {0x00008000u, 0x0000}, /* subnormal tie to even zero */
        {0x00018000u, 0x0002},
    };
    return cr_make_param_array(struct bits_case, cases, sizeof(cases) / sizeof(cases[0]));
}

ParameterizedTest(struct bits_case *c, reduce, encodes_bf16_edge_cases)
{
    float f;
    memcpy(&f, &c->in, 4);
    uint16_t got = rd_f32_to_bf16(f);
    cr_assert_eq(got, c->want, "bf16(0x%08x) = 0x%04x, want 0x%04x", c->in, got, c->want);
}

Test(reduce, keeps_nan_as_nan_when_encoding_bf16)
{
    /* 0x7f800001 and 0x7fffffff would round into inf or across the sign without the NaN check */
    uint32_t nans[] = {0x7fc00000u, 0x7f800001u, 0x7f80ffffu, 0x7fffffffu, 0xff800001u};
    for (size_t i = 0; i < sizeof(nans) / sizeof(nans[0]); i++) {
        float f;
        memcpy(&f, &nans[i], 4);
        uint16_t b = rd_f32_to_bf16(f);
        cr_assert((b & 0x7f80) == 0x7f80 && (b & 0x007f) != 0, "bf16(0x%08x) = 0x%04x", nans[i], b);
        cr_assert_eq(b & 0x8000, (nans[i] >> 16) & 0x8000);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* The backend table                                                                          */
/* ------------------------------------------------------------------------------------------ */

Test(reduce, exposes_a_cpu_backend_table)
{
    const rd_backend *b = rd_backend_cpu();
    cr_assert_not_null(b);
    cr_assert_str_eq(b->name, "cpu");
    cr_assert_eq(b->device_memory, 0);
    cr_assert_null(b->share);
    float x[2] = {1, 2}, y[2] = {3, 4};
    const void *src[2] = {x, y};
    cr_assert_eq(b->reduce(RD_DT_F32, RD_OP_SUM, x, src, 2, 2, NULL), 0);
    cr_assert(x[0] == 4 && x[1] == 6);
    cr_assert_eq(rd_backend_cpu(), b);
}

/* The vectorised half conversions (F16C, AVX2, chosen at run time) against the scalar ones:
 * sums of random pairs of halves, NaN and infinity bit patterns included, must round the same. */
static void check_bulk_half(rd_dtype dt, float (*to_f32)(uint16_t), uint16_t (*to_half)(float))
{
    enum { N = 1 << 16 };
    static uint16_t a[N], b[N], out[N];
    uint32_t seed = 12345;
    for (size_t i = 0; i < N; i++) {
        seed = seed * 1664525u + 1013904223u;
        a[i] = (uint16_t)(seed >> 16);
        b[i] = (uint16_t)i;
    }
    const void *src[2] = {a, b};
    rd_reduce_args args = RD_REDUCE_ARGS_INIT;
    rd_reduce(dt, RD_OP_SUM, out, src, 2, N, &args);
    for (size_t i = 0; i < N; i++) {
        float want = to_f32(a[i]) + to_f32(b[i]);
        if (isnan(want))
            cr_assert(isnan(to_f32(out[i])), "%s element %zu: want NaN, got 0x%04x",
                      rd_dtype_name(dt), i, out[i]);
        else
            cr_assert_eq(out[i], to_half(want), "%s element %zu: 0x%04x + 0x%04x",
                         rd_dtype_name(dt), i, a[i], b[i]);
    }
}

Test(reduce, vectorised_half_paths_round_like_the_scalar_code)
{
    check_bulk_half(RD_DT_F16, rd_f16_to_f32, rd_f32_to_f16);
    check_bulk_half(RD_DT_BF16, rd_bf16_to_f32, rd_f32_to_bf16);
}
