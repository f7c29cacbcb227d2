/* CUDA reduction kernels: rd_reduce's contract (gpu/backend.h) on device memory, element for
 * element the same arithmetic as the CPU kernels in cpu.c, so that results match bit for bit
 * (NaN payloads aside: a GPU's arithmetic returns the canonical NaN).
 *   floating types: acc = x0 * pre; acc = op(acc, xk * pre) in source order; acc /= divisor
 *   (when > 1); acc *= post (when != 1); f16 and bf16 widen to float and round once when
 *   stored, with the conversions of elem.h; f64 computes in double.
 *   integers: in the unsigned type of the same width (wrapping), MIN/MAX compare with the sign
 *   bit flipped, the divisor truncates the magnitude toward zero.
 * Built with -fmad=false (no fused multiply-add, as cpu.c is built with -ffp-contract=off),
 * IEEE division and no flush to zero. Loaded by cuda_dev.c from the embedded fatbin by the names
 * below (extern "C": unmangled), launched with a grid-stride loop over count. */
#include <stddef.h>
#include <stdint.h>

#include "elem.h"

#define RD_CUDA_MAX_SRC 16 /* sources per launch: cuda_dev.c refuses more reductions */

/* The sources, passed by value as one kernel parameter. */
struct rd_cuda_srcs {
    const void *p[RD_CUDA_MAX_SRC];
};

enum { OP_SUM = 0, OP_AVG = 1, OP_MIN = 2, OP_MAX = 3, OP_PROD = 4 }; /* rd_redop */

template <typename A> __device__ __forceinline__ A combine(int op, A acc, A v)
{
    switch (op) {
    case OP_PROD: return acc * v;
    case OP_MIN: return (v < acc || v != v) ? v : acc;
    case OP_MAX: return (v > acc || v != v) ? v : acc;
    default: return acc + v; /* SUM, AVG */
    }
}

/* Storage element S as compute type A, and back: H is 0 for float and double, 1 for f16, 2 for
 * bf16 (both stored as uint16_t). */
template <typename S, typename A, int H> __device__ __forceinline__ A widen(S x)
{
    if (H == 1)
        return f16_to_f32((uint16_t)x);
    if (H == 2)
        return bf16_to_f32((uint16_t)x);
    return (A)x;
}

template <typename S, typename A, int H> __device__ __forceinline__ S narrow(A v)
{
    if (H == 1)
        return (S)f32_to_f16((float)v);
    if (H == 2)
        return (S)f32_to_bf16((float)v);
    return (S)v;
}

/* The steps of one element of a floating-point reduction, cpu.c's: acc = x0 (* pre); acc =
 * op(acc, xk * pre); then / divisor and * post. */
template <typename S, typename A, int H> struct float_steps {
    typedef A acc_t;
    int op;
    A pre, post;
    uint32_t divisor;

    __device__ __forceinline__ A first(S x) const
    {
        A v = widen<S, A, H>(x);
        return pre != (A)1 ? v * pre : v;
    }
    __device__ __forceinline__ A next(A acc, S x) const
    {
        A v = widen<S, A, H>(x);
        if (op != OP_SUM && op != OP_AVG)
            v = v * pre; /* cpu.c scales before MIN, MAX and PROD even when pre is 1 */
        else if (pre != (A)1)
            v = v * pre;
        return combine<A>(op, acc, v);
    }
    __device__ __forceinline__ S finish(A acc) const
    {
        if (divisor > 1)
            acc = acc / (A)divisor;
        if (post != (A)1)
            acc = acc * post;
        return narrow<S, A, H>(acc);
    }
};

/* The steps of one element of an integer reduction, in the unsigned type UT (wrapping; sign:
 * the sign bit, 0 for u8): MIN and MAX compare with it flipped, the divisor truncates the
 * magnitude toward zero. */
template <typename UT> struct int_steps {
    typedef UT acc_t;
    int op;
    UT sign;
    uint32_t divisor;

    __device__ __forceinline__ UT first(UT x) const
    {
        return x;
    }
    __device__ __forceinline__ UT next(UT acc, UT x) const
    {
        switch (op) {
        case OP_PROD: return (UT)(1u * acc * x);
        case OP_MIN: return (UT)(x ^ sign) < (UT)(acc ^ sign) ? x : acc;
        case OP_MAX: return (UT)(x ^ sign) > (UT)(acc ^ sign) ? x : acc;
        default: return (UT)(acc + x);
        }
    }
    __device__ __forceinline__ UT finish(UT acc) const
    {
        if (divisor <= 1)
            return acc;
        if (acc & sign)
            return (UT)(0u - (UT)((UT)(0u - acc) / divisor));
        return (UT)(acc / divisor);
    }
};

/* 16 bytes of elements, loaded and stored as one: a warp then moves 512 contiguous bytes per
 * instruction whatever the element size. */
template <typename S> struct alignas(16) pack {
    S v[16 / sizeof(S)];
};

/* 1 when dst and every source are 16-byte aligned (the packed loop applies). */
__device__ __forceinline__ int aligned(const void *dst, const rd_cuda_srcs &src, int nsrc)
{
    uintptr_t bits = (uintptr_t)dst;
    for (int k = 0; k < nsrc; k++)
        bits |= (uintptr_t)src.p[k];
    return (bits & 15) == 0;
}

/* A reduction of count elements of storage type S with the element steps st, grid-stride: 16
 * bytes at a time while all buffers are aligned, then single elements for the rest. The
 * arithmetic of each element is the same either way. */
template <typename S, typename Steps>
__device__ __forceinline__ void reduce(void *dst, const rd_cuda_srcs &src, int nsrc, size_t count,
                                       const Steps &st)
{
    typedef pack<S> P;
    typedef typename Steps::acc_t A;
    const int V = (int)(16 / sizeof(S));
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t packs = aligned(dst, src, nsrc) ? count / (size_t)V : 0;

    for (size_t p = tid; p < packs; p += stride) {
        A acc[16 / sizeof(S)];
        P x = static_cast<const P *>(src.p[0])[p], out;
        for (int j = 0; j < V; j++)
            acc[j] = st.first(x.v[j]);
        for (int k = 1; k < nsrc; k++) {
            x = static_cast<const P *>(src.p[k])[p];
            for (int j = 0; j < V; j++)
                acc[j] = st.next(acc[j], x.v[j]);
        }
        for (int j = 0; j < V; j++)
            out.v[j] = st.finish(acc[j]);
        static_cast<P *>(dst)[p] = out;
    }
    for (size_t i = packs * (size_t)V + tid; i < count; i += stride) {
        A acc = st.first(static_cast<const S *>(src.p[0])[i]);
        for (int k = 1; k < nsrc; k++)
            acc = st.next(acc, static_cast<const S *>(src.p[k])[i]);
        static_cast<S *>(dst)[i] = st.finish(acc);
    }
}

/* The kernels cuda_dev.c launches: one per dtype, the same parameters for each (integers ignore
 * pre and post, which are 1 for them). */
#define RD_FLOAT_KERNEL(name, S, A, H)                                                             \
    extern "C" __global__ void name(void *dst, rd_cuda_srcs src, int nsrc, size_t count, int op,   \
                                    double pre, double post, uint32_t divisor)                     \
    {                                                                                              \
        reduce<S>(dst, src, nsrc, count, float_steps<S, A, H>{op, (A)pre, (A)post, divisor});      \
    }
#define RD_INT_KERNEL(name, UT, SIGN)                                                              \
    extern "C" __global__ void name(void *dst, rd_cuda_srcs src, int nsrc, size_t count, int op,   \
                                    double pre, double post, uint32_t divisor)                     \
    {                                                                                              \
        (void)pre;                                                                                 \
        (void)post;                                                                                \
        reduce<UT>(dst, src, nsrc, count, int_steps<UT>{op, (UT)(SIGN), divisor});                 \
    }

RD_FLOAT_KERNEL(rd_cuda_reduce_f32, float, float, 0)
RD_FLOAT_KERNEL(rd_cuda_reduce_f64, double, double, 0)
RD_FLOAT_KERNEL(rd_cuda_reduce_f16, uint16_t, float, 1)
RD_FLOAT_KERNEL(rd_cuda_reduce_bf16, uint16_t, float, 2)
RD_INT_KERNEL(rd_cuda_reduce_i32, uint32_t, 0x80000000u)
RD_INT_KERNEL(rd_cuda_reduce_i64, uint64_t, 0x8000000000000000ull)
RD_INT_KERNEL(rd_cuda_reduce_u8, uint8_t, 0u)
