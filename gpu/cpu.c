/* CPU backend: blocked reduction kernels for every dtype, the f16/bf16 conversions, host arena
 * mapping, and asynchronous operations reported on the event loop. */
#include "backend.h"
#include "elem.h"

#include <assert.h>
#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>

/* Elements per block. The float accumulator plus the f16/bf16 staging array (8 KiB together)
 * stay in L1, so each source is streamed from memory once and dst is written once per block. */
#define RD_BLOCK 1024

/* ------------------------------------------------------------------------------------------ */
/* Half-precision conversions                                                                 */
/* ------------------------------------------------------------------------------------------ */

/* Exported conversions; see backend.h. Pure functions, callable from any thread. */
float rd_f16_to_f32(uint16_t h)
{
    return f16_to_f32(h);
}

uint16_t rd_f32_to_f16(float f)
{
    return f32_to_f16(f);
}

float rd_bf16_to_f32(uint16_t b)
{
    return bf16_to_f32(b);
}

uint16_t rd_f32_to_bf16(float f)
{
    return f32_to_bf16(f);
}

/* ------------------------------------------------------------------------------------------ */
/* Floating-point block kernels                                                               */
/* ------------------------------------------------------------------------------------------ */

/* The three steps of a float or double block, generated for both types:
 *   load:    acc[i] = x[i] * pre
 *   combine: acc[i] = op(acc[i], x[i] * pre)
 *   finish:  acc[i] = acc[i] / divisor * post
 * Each switch sits outside its loop so that every loop is branch-free and vectorizes. MIN and
 * MAX return the NaN when either operand is one: the comparison picks x only when x is
 * smaller (larger) or NaN, and keeps acc otherwise, which covers a NaN acc. */
#define RD_FLOAT_KERNELS(T, sfx)                                                                   \
    static void load_##sfx(T *restrict acc, const T *restrict x, size_t n, T pre)                  \
    {                                                                                              \
        size_t i;                                                                                  \
        if (pre == 1) {                                                                            \
            memcpy(acc, x, n * sizeof(T));                                                         \
            return;                                                                                \
        }                                                                                          \
        for (i = 0; i < n; i++)                                                                    \
            acc[i] = x[i] * pre;                                                                   \
    }                                                                                              \
                                                                                                   \
    static void combine_##sfx(rd_redop op, T *restrict acc, const T *restrict x, size_t n, T pre)  \
    {                                                                                              \
        size_t i;                                                                                  \
        switch (op) {                                                                              \
        case RD_OP_SUM:                                                                            \
        case RD_OP_AVG:                                                                            \
            if (pre == 1) {                                                                        \
                for (i = 0; i < n; i++)                                                            \
                    acc[i] += x[i];                                                                \
            } else {                                                                               \
                for (i = 0; i < n; i++)                                                            \
                    acc[i] += x[i] * pre;                                                          \
            }                                                                                      \
            break;                                                                                 \
        case RD_OP_PROD:                                                                           \
            for (i = 0; i < n; i++)                                                                \
                acc[i] *= x[i] * pre;                                                              \
            break;                                                                                 \
        case RD_OP_MIN:                                                                            \
            for (i = 0; i < n; i++) {                                                              \
                T v = x[i] * pre;                                                                  \
                acc[i] = (v < acc[i] || v != v) ? v : acc[i];                                      \
            }                                                                                      \
            break;                                                                                 \
        case RD_OP_MAX:                                                                            \
            for (i = 0; i < n; i++) {                                                              \
                T v = x[i] * pre;                                                                  \
                acc[i] = (v > acc[i] || v != v) ? v : acc[i];                                      \
            }                                                                                      \
            break;                                                                                 \
        default: assert(0 && "rd_reduce: invalid op");                                             \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    static void finish_##sfx(T *acc, size_t n, uint32_t divisor, T post)                           \
    {                                                                                              \
        size_t i;                                                                                  \
        if (divisor > 1) {                                                                         \
            T d = (T)divisor;                                                                      \
            for (i = 0; i < n; i++)                                                                \
                acc[i] /= d;                                                                       \
        }                                                                                          \
        if (post != 1) {                                                                           \
            for (i = 0; i < n; i++)                                                                \
                acc[i] *= post;                                                                    \
        }                                                                                          \
    }

RD_FLOAT_KERNELS(float, f32)
RD_FLOAT_KERNELS(double, f64)

/* f32: sources are combined straight from memory, no staging copy. */
static void reduce_f32(rd_redop op, float *dst, const void *const *src, int nsrc, size_t count,
                       const rd_reduce_args *args)
{
    float acc[RD_BLOCK];
    float pre = (float)args->prescale, post = (float)args->postscale;
    size_t off, n;
    int k;

    for (off = 0; off < count; off += n) {
        n = count - off < RD_BLOCK ? count - off : RD_BLOCK;
        load_f32(acc, (const float *)src[0] + off, n, pre);
        for (k = 1; k < nsrc; k++)
            combine_f32(op, acc, (const float *)src[k] + off, n, pre);
        finish_f32(acc, n, args->divisor, post);
        memcpy(dst + off, acc, n * sizeof(float));
    }
}

/* f64: as f32, computing in double with the scales kept in double. */
static void reduce_f64(rd_redop op, double *dst, const void *const *src, int nsrc, size_t count,
                       const rd_reduce_args *args)
{
    double acc[RD_BLOCK];
    size_t off, n;
    int k;

    for (off = 0; off < count; off += n) {
        n = count - off < RD_BLOCK ? count - off : RD_BLOCK;
        load_f64(acc, (const double *)src[0] + off, n, args->prescale);
        for (k = 1; k < nsrc; k++)
            combine_f64(op, acc, (const double *)src[k] + off, n, args->prescale);
        finish_f64(acc, n, args->divisor, args->postscale);
        memcpy(dst + off, acc, n * sizeof(double));
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
/* x86 processors with F16C convert 8 halves per instruction, rounding to nearest even like the
 * portable code; chosen at run time, so the build does not depend on the build machine. */
#include <cpuid.h>
#include <immintrin.h>

#define RD_F16C_TARGET __attribute__((target("avx,f16c")))

RD_F16C_TARGET static void widen_f16_f16c(float *restrict out, const uint16_t *restrict in,
                                          size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(in + i))));
    for (; i < n; i++)
        out[i] = f16_to_f32(in[i]);
}

RD_F16C_TARGET static void narrow_f16_f16c(uint16_t *restrict out, const float *restrict in,
                                           size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(out + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(in + i),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++)
        out[i] = f32_to_f16(in[i]);
}

/* CPUID itself rather than __builtin_cpu_supports("f16c"), which clang before 15 does not
 * know. */
static int have_f16c(void)
{
    unsigned a, b, c, d;
    return __builtin_cpu_supports("avx") && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

/* bfloat16 with AVX2: the same bit operations as bf16_to_f32 and f32_to_bf16, 8 at a time. */
__attribute__((target("avx2"))) static void widen_bf16_avx2(float *restrict out,
                                                            const uint16_t *restrict in, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(in + i)));
        _mm256_storeu_si256((__m256i *)(out + i), _mm256_slli_epi32(w, 16));
    }
    for (; i < n; i++)
        out[i] = bf16_to_f32(in[i]);
}

__attribute__((target("avx2"))) static void narrow_bf16_avx2(uint16_t *restrict out,
                                                             const float *restrict in, size_t n)
{
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i quiet = _mm256_set1_epi32(0x0040);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i x = _mm256_castps_si256(_mm256_loadu_ps(in + i));
        __m256i hi = _mm256_srli_epi32(x, 16);
        __m256i rounded = _mm256_srli_epi32(
            _mm256_add_epi32(x, _mm256_add_epi32(bias, _mm256_and_si256(hi, one))), 16);
        __m256i nan = _mm256_or_si256(hi, quiet);
        __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, abs_mask), inf);
        __m256i r = _mm256_blendv_epi8(rounded, nan, is_nan);
        /* 32 -> 16 bits: pack works per 128-bit lane, so restore element order after it */
        __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xd8);
        _mm_storeu_si128((__m128i *)(out + i), _mm256_castsi256_si128(packed));
    }
    for (; i < n; i++)
        out[i] = f32_to_bf16(in[i]);
}

static int have_avx2(void)
{
    return __builtin_cpu_supports("avx2");
}
#else
static int have_avx2(void)
{
    return 0;
}
#define widen_bf16_avx2(out, in, n) ((void)0)
#define narrow_bf16_avx2(out, in, n) ((void)0)
static int have_f16c(void)
{
    return 0;
}
#define widen_f16_f16c(out, in, n) ((void)0)
#define narrow_f16_f16c(out, in, n) ((void)0)
#endif

/* Widen a block of f16 or bf16 into float. */
static void widen_half(rd_dtype dt, float *restrict out, const uint16_t *restrict in, size_t n)
{
    size_t i;
    if (dt == RD_DT_F16 && have_f16c()) {
        widen_f16_f16c(out, in, n);
    } else if (dt == RD_DT_F16) {
        for (i = 0; i < n; i++)
            out[i] = f16_to_f32(in[i]);
    } else if (have_avx2()) {
        widen_bf16_avx2(out, in, n);
    } else {
        for (i = 0; i < n; i++)
            out[i] = bf16_to_f32(in[i]);
    }
}

/* Narrow a block of float to f16 or bf16: the single rounding of the whole reduction. */
static void narrow_half(rd_dtype dt, uint16_t *restrict out, const float *restrict in, size_t n)
{
    size_t i;
    if (dt == RD_DT_F16 && have_f16c()) {
        narrow_f16_f16c(out, in, n);
    } else if (dt == RD_DT_F16) {
        for (i = 0; i < n; i++)
            out[i] = f32_to_f16(in[i]);
    } else if (have_avx2()) {
        narrow_bf16_avx2(out, in, n);
    } else {
        for (i = 0; i < n; i++)
            out[i] = f32_to_bf16(in[i]);
    }
}

/* f16 and bf16: each source block is widened into a staging array, then combined in float. */
static void reduce_half(rd_dtype dt, rd_redop op, uint16_t *dst, const void *const *src, int nsrc,
                        size_t count, const rd_reduce_args *args)
{
    float acc[RD_BLOCK], tmp[RD_BLOCK];
    float pre = (float)args->prescale, post = (float)args->postscale;
    size_t off, n, i;
    int k;

    for (off = 0; off < count; off += n) {
        n = count - off < RD_BLOCK ? count - off : RD_BLOCK;
        widen_half(dt, acc, (const uint16_t *)src[0] + off, n);
        if (pre != 1) {
            for (i = 0; i < n; i++)
                acc[i] *= pre;
        }
        for (k = 1; k < nsrc; k++) {
            widen_half(dt, tmp, (const uint16_t *)src[k] + off, n);
            combine_f32(op, acc, tmp, n, pre);
        }
        finish_f32(acc, n, args->divisor, post);
        narrow_half(dt, dst + off, acc, n);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Integer block kernels                                                                      */
/* ------------------------------------------------------------------------------------------ */

/* Integers are handled in their unsigned type of the same width, so SUM and PROD wrap modulo
 * 2^bits with no signed-overflow UB. Signedness matters only to MIN/MAX, which compare with
 * the sign bit flipped (SIGN is that bit, 0 for u8), and to the divisor, which truncates the
 * magnitude toward zero. Signed and unsigned variants of a type may alias, so dst and src are
 * accessed through the unsigned type directly. Products are taken after a multiply by 1u so
 * that a narrow type promotes to unsigned int rather than int. */
#define RD_INT_KERNEL(UT, sfx, SIGN)                                                               \
    static void reduce_##sfx(rd_redop op, UT *dst, const void *const *src, int nsrc, size_t count, \
                             uint32_t divisor)                                                     \
    {                                                                                              \
        UT acc[RD_BLOCK];                                                                          \
        size_t off, n, i;                                                                          \
        int k;                                                                                     \
                                                                                                   \
        for (off = 0; off < count; off += n) {                                                     \
            n = count - off < RD_BLOCK ? count - off : RD_BLOCK;                                   \
            memcpy(acc, (const UT *)src[0] + off, n * sizeof(UT));                                 \
            for (k = 1; k < nsrc; k++) {                                                           \
                const UT *restrict x = (const UT *)src[k] + off;                                   \
                switch (op) {                                                                      \
                case RD_OP_SUM:                                                                    \
                case RD_OP_AVG:                                                                    \
                    for (i = 0; i < n; i++)                                                        \
                        acc[i] = (UT)(acc[i] + x[i]);                                              \
                    break;                                                                         \
                case RD_OP_PROD:                                                                   \
                    for (i = 0; i < n; i++)                                                        \
                        acc[i] = (UT)(1u * acc[i] * x[i]);                                         \
                    break;                                                                         \
                case RD_OP_MIN:                                                                    \
                    for (i = 0; i < n; i++)                                                        \
                        acc[i] = (UT)(x[i] ^ (SIGN)) < (UT)(acc[i] ^ (SIGN)) ? x[i] : acc[i];      \
                    break;                                                                         \
                case RD_OP_MAX:                                                                    \
                    for (i = 0; i < n; i++)                                                        \
                        acc[i] = (UT)(x[i] ^ (SIGN)) > (UT)(acc[i] ^ (SIGN)) ? x[i] : acc[i];      \
                    break;                                                                         \
                default: assert(0 && "rd_reduce: invalid op");                                     \
                }                                                                                  \
            }                                                                                      \
            if (divisor > 1) {                                                                     \
                for (i = 0; i < n; i++) {                                                          \
                    UT v = acc[i];                                                                 \
                    if (v & (SIGN))                                                                \
                        acc[i] = (UT)(0u - (UT)((UT)(0u - v) / divisor));                          \
                    else                                                                           \
                        acc[i] = (UT)(v / divisor);                                                \
                }                                                                                  \
            }                                                                                      \
            memcpy(dst + off, acc, n * sizeof(UT));                                                \
        }                                                                                          \
    }

RD_INT_KERNEL(uint32_t, i32, UINT32_C(0x80000000))
RD_INT_KERNEL(uint64_t, i64, UINT64_C(0x8000000000000000))
RD_INT_KERNEL(uint8_t, u8, 0u)

/* ------------------------------------------------------------------------------------------ */
/* Entry points                                                                               */
/* ------------------------------------------------------------------------------------------ */

/* Reduce nsrc buffers of count elements into dst; see backend.h for the exact semantics.
 * args NULL means RD_REDUCE_ARGS_INIT. RD_OP_AVG is accepted and behaves as SUM: the
 * averaging comes only from args->divisor. Each block reads every source before writing dst,
 * so dst may be any one of the sources. An invalid dtype or op, nsrc < 1, or a scale other
 * than 1 on an integer dtype is a programmer error. Thread-safe: all state is on the stack. */
void rd_reduce(rd_dtype dt, rd_redop op, void *dst, const void *const *src, int nsrc, size_t count,
               const rd_reduce_args *args)
{
    static const rd_reduce_args defaults = RD_REDUCE_ARGS_INIT;

    if (args == NULL)
        args = &defaults;
    assert(nsrc >= 1);
    assert((unsigned)op < RD_OP_COUNT);
    assert(rd_dtype_is_float(dt) || (args->prescale == 1.0 && args->postscale == 1.0));

    switch (dt) {
    case RD_DT_F32: reduce_f32(op, dst, src, nsrc, count, args); break;
    case RD_DT_F64: reduce_f64(op, dst, src, nsrc, count, args); break;
    case RD_DT_F16:
    case RD_DT_BF16: reduce_half(dt, op, dst, src, nsrc, count, args); break;
    case RD_DT_I32: reduce_i32(op, dst, src, nsrc, count, args->divisor); break;
    case RD_DT_I64: reduce_i64(op, dst, src, nsrc, count, args->divisor); break;
    case RD_DT_U8: reduce_u8(op, dst, src, nsrc, count, args->divisor); break;
    default: assert(0 && "rd_reduce: invalid dtype");
    }
}

/* rd_reduce in the backend's table. */
static int cpu_reduce(rd_dtype dt, rd_redop op, void *dst, const void *const *src, int nsrc,
                      size_t count, const rd_reduce_args *args)
{
    rd_reduce(dt, op, dst, src, nsrc, count, args);
    return 0;
}

static int cpu_copy(void *dst, const void *src, size_t bytes)
{
    if (bytes > 0 && dst != src)
        memmove(dst, src, bytes);
    return 0;
}

/* Host arenas: a shared read-write mapping of the memfd. */
static int cpu_import(rd_mem_kind kind, int device, int fd, uint64_t size, rd_mem *m, char *err,
                      size_t errlen)
{
    (void)device;
    memset(m, 0, sizeof(*m));
    if (kind != RD_MEM_ARENA) {
        snprintf(err, errlen,
                 "the cpu backend cannot reach memory of kind %d (device memory needs "
                 "a ringd built with CUDA)",
                 (int)kind);
        return -1;
    }
    if (size == 0 || size > (uint64_t)SIZE_MAX) {
        snprintf(err, errlen, "cannot map an arena of %" PRIu64 " bytes", size);
        return -1;
    }
    void *p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        snprintf(err, errlen, "mmap of the arena (%" PRIu64 " bytes): %s", size, strerror(errno));
        return -1;
    }
    m->kind = kind;
    m->base = p;
    m->size = size;
    return 0;
}

/* The CPU's reduce and copy cannot fail: never asked. */
static const char *cpu_error(void)
{
    return "";
}

static void cpu_release(rd_mem *m)
{
    if (m->base != NULL)
        munmap(m->base, (size_t)m->size);
    memset(m, 0, sizeof(*m));
}

/* A finished asynchronous operation waiting for the next loop turn to report. */
typedef struct {
    rd_backend_done_fn done;
    void *arg;
    int status;
    char why[256];
} done_later;

static void on_done_later(evutil_socket_t fd, short what, void *ctx)
{
    done_later *d = ctx;
    (void)fd;
    (void)what;
    d->done(d->arg, d->status, d->status != 0 ? d->why : NULL);
    free(d);
}

int rd_backend_report(struct event_base *base, int status, const char *why, rd_backend_done_fn done,
                      void *arg)
{
    done_later *d = malloc(sizeof(*d));
    struct timeval now = {0, 0};
    if (d == NULL)
        return -1;
    d->done = done;
    d->arg = arg;
    d->status = status;
    snprintf(d->why, sizeof(d->why), "%s", why != NULL ? why : "");
    if (event_base_once(base, -1, EV_TIMEOUT, on_done_later, d, &now) != 0) {
        free(d);
        return -1;
    }
    return 0;
}

/* The CPU has nothing to overlap with: the reduction runs now, and only its report waits for
 * the loop, so that callers see one contract for every backend. The work is done even when the
 * report cannot be queued (-1), which callers treat as a failure of the whole operation. */
static int cpu_reduce_async(struct event_base *base, rd_dtype dt, rd_redop op, void *dst,
                            const void *const *src, int nsrc, size_t count,
                            const rd_reduce_args *args, rd_backend_done_fn done, void *arg)
{
    rd_reduce(dt, op, dst, src, nsrc, count, args);
    return rd_backend_report(base, 0, NULL, done, arg);
}

static int cpu_copy_async(struct event_base *base, void *dst, const void *src, size_t bytes,
                          rd_backend_done_fn done, void *arg)
{
    cpu_copy(dst, src, bytes);
    return rd_backend_report(base, 0, NULL, done, arg);
}

/* The CPU backend table. Static storage; never freed. */
const rd_backend *rd_backend_cpu(void)
{
    static const rd_backend cpu = {
        .name = "cpu",
        .device_memory = 0,
        .reduce = cpu_reduce,
        .copy = cpu_copy,
        .error = cpu_error,
        .bind = NULL,
        .share = NULL,
        .import = cpu_import,
        .release = cpu_release,
        .reduce_async = cpu_reduce_async,
        .copy_async = cpu_copy_async,
        .transport = NULL,
    };
    return &cpu;
}
