/* rd_check_kernels: see kernel_cases.h. */
#include "kernel_cases.h"

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A deterministic generator (splitmix64): the same cases on every machine. */
static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* Fills n elements of dt: mostly values of moderate size, one in eight a special one. */
static void fill(rd_dtype dt, void *buf, size_t n, uint64_t *s, int special)
{
    static const double specials[] = {0.0,    -0.0,     INFINITY, -INFINITY, NAN,  1e-40,
                                      -1e-40, 6.1e-5,   65504.0,  70000.0,   3e38, -3e38,
                                      1e-310, 1.0 / 3., 2.5,      -2.5,      1e-8, 5.96e-8};
    size_t i;
    for (i = 0; i < n; i++) {
        uint64_t r = next(s);
        double v;
        if (!rd_dtype_is_float(dt)) {
            memcpy((char *)buf + i * rd_dtype_size(dt), &r, rd_dtype_size(dt)); /* any bits */
            continue;
        }
        if (special && (r & 7) == 0)
            v = specials[(r >> 3) % (sizeof(specials) / sizeof(specials[0]))];
        else
            v = ((double)(int64_t)(r >> 11) / (double)(UINT64_C(1) << 52) - 1.0) * 8.0;
        rd_dtype_store(dt, buf, i, v);
    }
}

int rd_kernel_same(rd_dtype dt, const void *a, const void *b, size_t i)
{
    size_t es = rd_dtype_size(dt);
    const unsigned char *x = (const unsigned char *)a + i * es,
                        *y = (const unsigned char *)b + i * es;
    if (memcmp(x, y, es) == 0)
        return 1;
    switch (dt) {
    case RD_DT_F32: {
        float f, g;
        memcpy(&f, x, 4);
        memcpy(&g, y, 4);
        return f != f && g != g;
    }
    case RD_DT_F64: {
        double f, g;
        memcpy(&f, x, 8);
        memcpy(&g, y, 8);
        return f != f && g != g;
    }
    case RD_DT_F16:
    case RD_DT_BF16: {
        uint16_t h, k;
        memcpy(&h, x, 2);
        memcpy(&k, y, 2);
        float f = dt == RD_DT_F16 ? rd_f16_to_f32(h) : rd_bf16_to_f32(h);
        float g = dt == RD_DT_F16 ? rd_f16_to_f32(k) : rd_bf16_to_f32(k);
        return f != f && g != g;
    }
    default: return 0;
    }
}

long rd_check_kernels(rd_reduce_under_test fn, void *ctx, const size_t *counts, int ncounts,
                      int max_src, unsigned dtypes, long *ran)
{
    static const int nsrcs[] = {1, 2, 3, 5, 8, 16};
    static const rd_redop ops[] = {RD_OP_SUM, RD_OP_AVG, RD_OP_MIN, RD_OP_MAX, RD_OP_PROD};
    static const double scales[][2] = {{1.0, 1.0}, {0.5, 1.0}, {1.0, 1.0 / 3.0}, {0.1, 3.0}};
    long bad = 0, shown = 0;
    uint64_t seed = 42;
    int c, d, o, k, sc, i;

    *ran = 0;
    for (c = 0; c < ncounts; c++) {
        size_t count = counts[c];
        for (d = 0; d < RD_DT_COUNT; d++) {
            rd_dtype dt = (rd_dtype)d;
            size_t bytes = count * rd_dtype_size(dt);
            if (!(dtypes & (1u << d)))
                continue;
            for (k = 0; k < (int)(sizeof(nsrcs) / sizeof(nsrcs[0])) && nsrcs[k] <= max_src; k++) {
                int nsrc = nsrcs[k];
                void *src[16], *want = malloc(bytes), *got = malloc(bytes);
                for (i = 0; i < nsrc; i++) {
                    src[i] = malloc(bytes);
                    fill(dt, src[i], count, &seed, 1);
                }
                for (o = 0; o < 5; o++) {
                    for (sc = 0; sc < 4; sc++) {
                        rd_reduce_args args = RD_REDUCE_ARGS_INIT;
                        char why[256] = "";
                        size_t j, first = count;
                        if (!rd_dtype_is_float(dt) && sc > 0)
                            break; /* integers take no scales */
                        args.prescale = scales[sc][0];
                        args.postscale = scales[sc][1];
                        args.divisor = ops[o] == RD_OP_AVG ? (uint32_t)nsrc : 1;
                        rd_reduce(dt, ops[o], want, (const void *const *)src, nsrc, count, &args);
                        memset(got, 0xa5, bytes);
                        ++*ran;
                        if (fn(ctx, dt, ops[o], got, (const void *const *)src, nsrc, count, &args,
                               why, sizeof(why)) != 0) {
                            bad++;
                            if (shown++ < 20)
                                printf("%s %s nsrc %d count %zu: failed: %s\n", rd_dtype_name(dt),
                                       rd_redop_name(ops[o]), nsrc, count, why);
                            continue;
                        }
                        for (j = 0; j < count && first == count; j++)
                            if (!rd_kernel_same(dt, want, got, j))
                                first = j;
                        if (first < count) {
                            bad++;
                            if (shown++ < 20)
                                printf("%s %s nsrc %d count %zu pre %g post %g: element %zu "
                                       "differs from the CPU kernels\n",
                                       rd_dtype_name(dt), rd_redop_name(ops[o]), nsrc, count,
                                       args.prescale, args.postscale, first);
                        }
                    }
                }
                for (i = 0; i < nsrc; i++)
                    free(src[i]);
                free(want);
                free(got);
            }
        }
    }
    return bad;
}
