/* Element conversions of the wire's dtypes, shared by the CPU kernels (gpu/cpu.c), the CUDA
 * kernels (gpu/cuda_kernels.cu) and rd_dtype_store (dtype.c):
 * both devices widen and round f16 and bf16 with the same bit operations, so a result is the
 * same bit for bit whichever device reduced it. Header-only; compiles as C and as CUDA C++,
 * where each function is a host and device function. */
#ifndef RD_ELEM_H
#define RD_ELEM_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define RD_ELEM static inline __host__ __device__
#else
#define RD_ELEM static inline
#endif

/* Reinterpret float bits; memcpy keeps this free of aliasing UB and compiles to a move. */
RD_ELEM uint32_t f32_bits(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
#endif
}

RD_ELEM float f32_from_bits(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
#endif
}

/* c ? a : b for c in {0, 1}, as bit masks: GCC would turn a ?: over a floating-point result
 * back into a branch (the FP operation might trap), and a branch stops vectorization. */
RD_ELEM uint32_t select_u32(uint32_t c, uint32_t a, uint32_t b)
{
    uint32_t m = 0u - c;
    return (a & m) | (b & ~m);
}

/* Decode IEEE binary16. Exact: every half is representable as a float. Written as selects
 * rather than branches so that the widening loop vectorizes. A subnormal is rebuilt as
 * (2^-14 + mant * 2^-24) - 2^-14, which is exact. */
RD_ELEM float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t t = (uint32_t)(h & 0x7fffu) << 13; /* exponent and mantissa in float position */
    uint32_t e = t & 0x0f800000u;
    uint32_t o = t + 0x38000000u;       /* rebias exponent 15 -> 127 */
    uint32_t special = o + 0x38000000u; /* inf/NaN: exponent 31 -> 255, payload kept */
    uint32_t sub = f32_bits(f32_from_bits(o + 0x00800000u) - 0x1p-14f);

    o = select_u32(e == 0x0f800000u, special, o);
    o = select_u32(e == 0, sub, o);
    return f32_from_bits(o | sign);
}

/* Encode IEEE binary16 with one round to nearest even. Overflow goes to inf, NaN stays a
 * quiet NaN with the top payload bits kept. All three cases are computed and one selected, so
 * the narrowing loop vectorizes. The subnormal case adds 0.5 (bits 126 << 23): the FPU's own
 * round to nearest even then leaves the half's subnormal bits at the bottom of the sum. */
RD_ELEM uint16_t f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;

    uint32_t nan = 0x7e00u | ((ax >> 13) & 0x3ffu);
    /* normal half: rebias 127 -> 15 and round; a carry bumps the exponent, up to inf */
    uint32_t norm = (ax - 0x38000000u + 0xfffu + ((ax >> 13) & 1u)) >> 13;
    uint32_t sub = f32_bits(f32_from_bits(ax) + 0.5f) - 0x3f000000u;

    uint32_t o = select_u32(ax < 0x38800000u, sub, norm); /* below 2^-14: subnormal or zero */
    o = select_u32(ax >= 0x477ff000u, 0x7c00u, o);        /* >= 65520 rounds to inf, as inf */
    o = select_u32(ax > 0x7f800000u, nan, o);
    return (uint16_t)(sign | o);
}

/* Decode bfloat16: it is the top half of a float. */
RD_ELEM float bf16_to_f32(uint16_t b)
{
    return f32_from_bits((uint32_t)b << 16);
}

/* Encode bfloat16 with round to nearest even. A NaN is truncated and forced quiet rather than
 * rounded, since rounding could carry a payload held in the low 16 bits into inf. */
RD_ELEM uint16_t f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    uint32_t nan = (x >> 16) | 0x0040u;

    return (uint16_t)select_u32((x & 0x7fffffffu) > 0x7f800000u, nan, rounded);
}

#endif
