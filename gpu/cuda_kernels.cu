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

/* Storage element S as compute type A, and back: H is 0 for float and double, 1 for f16, 2
 * for bf16 (both stored as uint16_t). */
template <typename S, typename A, int H> __device__ __forceinline__ A load(const void *p, size_t i)
{
    S x = static_cast<const S *>(p)[i];
    if (H == 1)
        return f16_to_f32((uint16_t)x);
    if (H == 2)
        return bf16_to_f32((uint16_t)x);
    return (A)x;
}

template <typename S, typename A, int H>
__device__ __forceinline__ void store(void *p, size_t i, A v)
{
    if (H == 1)
        static_cast<uint16_t *>(p)[i] = f32_to_f16((float)v);
    else if (H == 2)
        static_cast<uint16_t *>(p)[i] = f32_to_bf16((float)v);
    else
        static_cast<S *>(p)[i] = (S)v;
}

template <typename S, typename A, int H>
__device__ __forceinline__ void reduce_float(void *dst, const rd_cuda_srcs &src, int nsrc,
                                             size_t count, int op, A pre, A post, uint32_t divisor)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        A acc = load<S, A, H>(src.p[0], i);
        if (pre != (A)1)
            acc = acc * pre;
        for (int k = 1; k < nsrc; k++) {
            A v = load<S, A, H>(src.p[k], i);
            if (op != OP_SUM && op != OP_AVG)
                v = v * pre; /* cpu.c scales before MIN, MAX and PROD even when pre is 1 */
            else if (pre != (A)1)
                v = v * pre;
            acc = combine<A>(op, acc, v);
        }
        if (divisor > 1)
            acc = acc / (A)divisor;
        if (post != (A)1)
            acc = acc * post;
        store<S, A, H>(dst, i, acc);
    }
}

template <typename UT>
__device__ __forceinline__ void reduce_int(void *dst, const rd_cuda_srcs &src, int nsrc,
                                           size_t count, int op, UT sign, uint32_t divisor)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        UT acc = static_cast<const UT *>(src.p[0])[i];
        for (int k = 1; k < nsrc; k++) {
            UT x = static_cast<const UT *>(src.p[k])[i];
            switch (op) {
            case OP_PROD: acc = (UT)(1u * acc * x); break;
            case OP_MIN: acc = (UT)(x ^ sign) < (UT)(acc ^ sign) ? x : acc; break;
            case OP_MAX: acc = (UT)(x ^ sign) > (UT)(acc ^ sign) ? x : acc; break;
            default: acc = (UT)(acc + x); break;
            }
        }
        if (divisor > 1) {
            if (acc & sign)
                acc = (UT)(0u - (UT)((UT)(0u - acc) / divisor));
            else
                acc = (UT)(acc / divisor);
        }
        static_cast<UT *>(dst)[i] = acc;
    }
}

/* The kernels cuda_dev.c launches: one per dtype, the same parameters for each (integers ignore
 * pre and post, which are 1 for them). */
#define RD_FLOAT_KERNEL(name, S, A, H)                                                             \
    extern "C" __global__ void name(void *dst, rd_cuda_srcs src, int nsrc, size_t count, int op,   \
                                    double pre, double post, uint32_t divisor)                     \
    {                                                                                              \
        reduce_float<S, A, H>(dst, src, nsrc, count, op, (A)pre, (A)post, divisor);                \
    }
#define RD_INT_KERNEL(name, UT, SIGN)                                                              \
    extern "C" __global__ void name(void *dst, rd_cuda_srcs src, int nsrc, size_t count, int op,   \
                                    double pre, double post, uint32_t divisor)                     \
    {                                                                                              \
        (void)pre;                                                                                 \
        (void)post;                                                                                \
        reduce_int<UT>(dst, src, nsrc, count, op, (UT)(SIGN), divisor);                            \
    }

RD_FLOAT_KERNEL(rd_cuda_reduce_f32, float, float, 0)
RD_FLOAT_KERNEL(rd_cuda_reduce_f64, double, double, 0)
RD_FLOAT_KERNEL(rd_cuda_reduce_f16, uint16_t, float, 1)
RD_FLOAT_KERNEL(rd_cuda_reduce_bf16, uint16_t, float, 2)
RD_INT_KERNEL(rd_cuda_reduce_i32, uint32_t, 0x80000000u)
RD_INT_KERNEL(rd_cuda_reduce_i64, uint64_t, 0x8000000000000000ull)
RD_INT_KERNEL(rd_cuda_reduce_u8, uint8_t, 0u)
