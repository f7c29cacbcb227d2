/* Device backend interface: datatypes, reduction kernels, and the hooks the CUDA backend fills. */
#ifndef RD_BACKEND_H
#define RD_BACKEND_H

#include <stddef.h>
#include <stdint.h>

/* Element types. Values match ringd_dtype_t in client/include/ringd.h and DataType in ringd.proto.
 */
typedef enum {
    RD_DT_F32 = 0,
    RD_DT_F64 = 1,
    RD_DT_F16 = 2,
    RD_DT_BF16 = 3,
    RD_DT_I32 = 4,
    RD_DT_I64 = 5,
    RD_DT_U8 = 6,
    RD_DT_COUNT
} rd_dtype;

/* Combining operators. AVG never reaches a kernel: callers pass SUM with a divisor. */
typedef enum {
    RD_OP_SUM = 0,
    RD_OP_AVG = 1,
    RD_OP_MIN = 2,
    RD_OP_MAX = 3,
    RD_OP_PROD = 4,
    RD_OP_COUNT
} rd_redop;

/* Collectives. Values match OpType in ringd.proto. */
typedef enum {
    RD_COLL_ALLREDUCE = 0,
    RD_COLL_BROADCAST = 1,
    RD_COLL_ALLGATHER = 2,
    RD_COLL_BARRIER = 3,
} rd_coll;

/* How the raw inputs are scaled and the combined result finished.
 * Floating types: each input is multiplied by prescale before combining; the combined value is
 * divided by divisor (when > 1) and multiplied by postscale. f32, f16 and bf16 compute in float,
 * f64 in double; f16 and bf16 are rounded once, to nearest even, when stored.
 * Integer types: arithmetic wraps modulo 2^bits; prescale and postscale must be 1; the result is
 * divided by divisor (truncating toward zero). */
typedef struct {
    double prescale;
    double postscale;
    uint32_t divisor;
} rd_reduce_args;

#define RD_REDUCE_ARGS_INIT                                                                        \
    {                                                                                              \
        1.0, 1.0, 1                                                                                \
    }

size_t rd_dtype_size(rd_dtype dt);      /* 0 for an invalid dtype */
const char *rd_dtype_name(rd_dtype dt); /* "f32", ...; "invalid" when out of range */
const char *rd_redop_name(rd_redop op); /* "sum", ...; "invalid" when out of range */
int rd_dtype_is_float(rd_dtype dt);

/* dst[i] = finish(combine_k(scale(src[k][i]))) for i < count, k < nsrc (nsrc >= 1), combining in
 * source order. dst may be the same buffer as any src (exactly, not partially overlapping).
 * op must be SUM, MIN, MAX or PROD. Thread-safe; callers split large ranges across threads. */
void rd_reduce(rd_dtype dt, rd_redop op, void *dst, const void *const *src, int nsrc, size_t count,
               const rd_reduce_args *args);

/* IEEE binary16 and bfloat16 conversions; float-to-half rounds to nearest even, NaN stays NaN. */
float rd_f16_to_f32(uint16_t h);
uint16_t rd_f32_to_f16(float f);
float rd_bf16_to_f32(uint16_t b);
uint16_t rd_f32_to_bf16(float f);

/* Stores v as element i of buf, converted to dt (integers truncated and wrapped, halves rounded
 * to nearest even). For filling and checking tensors in tools and tests. */
void rd_dtype_store(rd_dtype dt, void *buf, size_t i, double v);

/* A device backend. The CPU one is always built; the CUDA one (memory, IPC handles, NCCL
 * communicator) will implement the same table behind the 'cuda' feature. */
typedef struct rd_backend {
    const char *name;
    void (*reduce)(rd_dtype dt, rd_redop op, void *dst, const void *const *src, int nsrc,
                   size_t count, const rd_reduce_args *args);
} rd_backend;

const rd_backend *rd_backend_cpu(void);

#endif
