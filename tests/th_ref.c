/* Test helper: reference inputs and results of the reductions (th_ref.h). */
#include "th_ref.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dtype.h"
#include "elem.h"

int th_ref_is_float(ringd_dtype_t dt)
{
    return dt == RINGD_F32 || dt == RINGD_F64 || dt == RINGD_F16 || dt == RINGD_BF16;
}

/* Rank r's element i for an allreduce of dt with op. Small enough that every sum and product is
 * exact in every dtype whatever order the ring combines them in: quarters for floats, powers of
 * two for floating products, small integers (wrapping in u8 products) otherwise. */
double th_ref_input(int r, size_t i, ringd_dtype_t dt, ringd_redop_t op)
{
    static const double pow2[] = {1, -2, 0.5, 2, -1, -0.5, 1, 0.25, -1};
    int b = (int)((i * 7 + (size_t)r * 3) % 11) - 3;
    if (th_ref_is_float(dt))
        return op == RINGD_PROD ? pow2[(i * 5 + (size_t)r * 3) % 9] : b / 4.0;
    return dt == RINGD_U8 ? b + 3 : b;
}

double th_ref_load(const void *buf, ringd_dtype_t dt, size_t i)
{
    switch (dt) {
    case RINGD_F32: return ((const float *)buf)[i];
    case RINGD_F64: return ((const double *)buf)[i];
    case RINGD_F16: return f16_to_f32(((const uint16_t *)buf)[i]);
    case RINGD_BF16: return bf16_to_f32(((const uint16_t *)buf)[i]);
    case RINGD_I32: return ((const int32_t *)buf)[i];
    case RINGD_I64: return (double)((const int64_t *)buf)[i];
    default: return ((const uint8_t *)buf)[i];
    }
}

static double fcombine(ringd_redop_t op, double a, double b)
{
    switch (op) {
    case RINGD_MIN: return b < a ? b : a;
    case RINGD_MAX: return b > a ? b : a;
    case RINGD_PROD: return a * b;
    default: return a + b;
    }
}

/* Integer op on values wrapped to bits, signed or not; the result wrapped again. */
static uint64_t icombine(ringd_redop_t op, uint64_t a, uint64_t b, int sgn, int bits)
{
    uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
    int64_t sa = sgn ? (int64_t)(a << (64 - bits)) >> (64 - bits) : (int64_t)a;
    int64_t sb = sgn ? (int64_t)(b << (64 - bits)) >> (64 - bits) : (int64_t)b;
    switch (op) {
    case RINGD_MIN: return (uint64_t)(sb < sa ? sb : sa) & mask;
    case RINGD_MAX: return (uint64_t)(sb > sa ? sb : sa) & mask;
    case RINGD_PROD: return (a * b) & mask;
    default: return (a + b) & mask;
    }
}

/* Element i of the allreduce of n ranks' th_ref_input(), stored into want[0] as dt. Floating types
 * combine in float (f64: double), divide, scale and round once, as the header promises; integers
 * wrap and avg truncates toward zero. */
void th_ref_reduce(void *want, size_t i, ringd_dtype_t dt, ringd_redop_t op, int n, double pre,
                   double post)
{
    if (dt == RINGD_F64) {
        double acc = pre * th_ref_input(0, i, dt, op);
        for (int k = 1; k < n; k++)
            acc = fcombine(op, acc, pre * th_ref_input(k, i, dt, op));
        if (op == RINGD_AVG)
            acc /= n;
        *(double *)want = acc * post;
        return;
    }
    if (th_ref_is_float(dt)) {
        float acc = (float)pre * (float)th_ref_input(0, i, dt, op);
        for (int k = 1; k < n; k++)
            acc = (float)fcombine(op, acc, (float)pre * (float)th_ref_input(k, i, dt, op));
        if (op == RINGD_AVG)
            acc /= (float)n;
        acc *= (float)post;
        if (dt == RINGD_F32)
            *(float *)want = acc;
        else if (dt == RINGD_F16)
            *(uint16_t *)want = f32_to_f16(acc);
        else
            *(uint16_t *)want = f32_to_bf16(acc);
        return;
    }
    int bits = dt == RINGD_U8 ? 8 : dt == RINGD_I32 ? 32 : 64, sgn = dt != RINGD_U8;
    uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
    uint64_t acc = (uint64_t)(int64_t)th_ref_input(0, i, dt, op) & mask;
    for (int k = 1; k < n; k++)
        acc = icombine(op, acc, (uint64_t)(int64_t)th_ref_input(k, i, dt, op) & mask, sgn, bits);
    if (op == RINGD_AVG) {
        if (sgn)
            acc = (uint64_t)(((int64_t)(acc << (64 - bits)) >> (64 - bits)) / n) & mask;
        else
            acc /= (uint64_t)n;
    }
    if (dt == RINGD_U8)
        *(uint8_t *)want = (uint8_t)acc;
    else if (dt == RINGD_I32)
        *(uint32_t *)want = (uint32_t)acc;
    else
        *(uint64_t *)want = acc;
}

int th_ref_check(const ringd_t *r, const char *name, const void *got, ringd_dtype_t dt,
                 ringd_redop_t op, size_t first, size_t count, double pre, double post)
{
    size_t esz = ringd_dtype_size(dt);
    uint64_t want;
    for (size_t i = 0; i < count; i++) {
        th_ref_reduce(&want, first + i, dt, op, ringd_size(r), pre, post);
        if (memcmp((const uint8_t *)got + i * esz, &want, esz) != 0) {
            fprintf(stderr, "rank %d: tensor '%s' element %zu of %zu is %g, want %g\n",
                    ringd_rank(r), name, first + i, count, th_ref_load(got, dt, i),
                    th_ref_load(&want, dt, 0));
            return 40;
        }
    }
    return 0;
}

void th_ref_fill(void *buf, int rank, ringd_dtype_t dt, ringd_redop_t op, size_t first,
                 size_t count)
{
    for (size_t i = 0; i < count; i++)
        rd_dtype_store((rd_dtype)dt, buf, i, th_ref_input(rank, first + i, dt, op));
}
