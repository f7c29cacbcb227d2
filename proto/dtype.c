/* Element types, reduce operators and collective kinds: their tables, and the compile-time
 * proof that the public, wire and internal enums agree. */
#include "dtype.h"

#include <assert.h>
#include <stdint.h>
#include <string.h>

#include "elem.h"
#include "ringd.h"
#include "ringd.pb-c.h"

/* A value crosses from the API to the wire to the kernels by a cast: these make the casts
 * sound. The generated enums carry no count: tests/test_dtype.c checks that the wire has no
 * member these lack, through protobuf-c's descriptors. */
#define SAME3(a, b, c) _Static_assert((int)(a) == (int)(b) && (int)(b) == (int)(c), #a " differs")
SAME3(RD_DT_F32, RINGD_F32, RINGD__DATA_TYPE__DT_F32);
SAME3(RD_DT_F64, RINGD_F64, RINGD__DATA_TYPE__DT_F64);
SAME3(RD_DT_F16, RINGD_F16, RINGD__DATA_TYPE__DT_F16);
SAME3(RD_DT_BF16, RINGD_BF16, RINGD__DATA_TYPE__DT_BF16);
SAME3(RD_DT_I32, RINGD_I32, RINGD__DATA_TYPE__DT_I32);
SAME3(RD_DT_I64, RINGD_I64, RINGD__DATA_TYPE__DT_I64);
SAME3(RD_DT_U8, RINGD_U8, RINGD__DATA_TYPE__DT_U8);
_Static_assert(RD_DT_COUNT == RD_DT_U8 + 1, "RD_DT_U8 is the last dtype");

SAME3(RD_OP_SUM, RINGD_SUM, RINGD__REDUCE_OP__RED_SUM);
SAME3(RD_OP_AVG, RINGD_AVG, RINGD__REDUCE_OP__RED_AVG);
SAME3(RD_OP_MIN, RINGD_MIN, RINGD__REDUCE_OP__RED_MIN);
SAME3(RD_OP_MAX, RINGD_MAX, RINGD__REDUCE_OP__RED_MAX);
SAME3(RD_OP_PROD, RINGD_PROD, RINGD__REDUCE_OP__RED_PROD);
_Static_assert(RD_OP_COUNT == RD_OP_PROD + 1, "RD_OP_PROD is the last reduce op");

/* The public API has no collective enum: one function per collective. */
SAME3(RD_COLL_ALLREDUCE, RD_COLL_ALLREDUCE, RINGD__OP_TYPE__OP_ALLREDUCE);
SAME3(RD_COLL_BROADCAST, RD_COLL_BROADCAST, RINGD__OP_TYPE__OP_BROADCAST);
SAME3(RD_COLL_ALLGATHER, RD_COLL_ALLGATHER, RINGD__OP_TYPE__OP_ALLGATHER);
SAME3(RD_COLL_BARRIER, RD_COLL_BARRIER, RINGD__OP_TYPE__OP_BARRIER);
SAME3(RD_COLL_REDUCESCATTER, RD_COLL_REDUCESCATTER, RINGD__OP_TYPE__OP_REDUCESCATTER);
SAME3(RD_COLL_ALLGATHERV, RD_COLL_ALLGATHERV, RINGD__OP_TYPE__OP_ALLGATHERV);
SAME3(RD_COLL_ALLTOALL, RD_COLL_ALLTOALL, RINGD__OP_TYPE__OP_ALLTOALL);

static const char *const dtype_names[RD_DT_COUNT] = {
    [RD_DT_F32] = "f32", [RD_DT_F64] = "f64", [RD_DT_F16] = "f16", [RD_DT_BF16] = "bf16",
    [RD_DT_I32] = "i32", [RD_DT_I64] = "i64", [RD_DT_U8] = "u8",
};
static const uint8_t dtype_sizes[RD_DT_COUNT] = {
    [RD_DT_F32] = 4, [RD_DT_F64] = 8, [RD_DT_F16] = 2, [RD_DT_BF16] = 2,
    [RD_DT_I32] = 4, [RD_DT_I64] = 8, [RD_DT_U8] = 1,
};
static const char *const redop_names[RD_OP_COUNT] = {
    [RD_OP_SUM] = "sum", [RD_OP_AVG] = "avg",   [RD_OP_MIN] = "min",
    [RD_OP_MAX] = "max", [RD_OP_PROD] = "prod",
};
static const char *const coll_names[RD_COLL_COUNT] = {
    [RD_COLL_ALLREDUCE] = "allreduce",         [RD_COLL_BROADCAST] = "broadcast",
    [RD_COLL_ALLGATHER] = "allgather",         [RD_COLL_BARRIER] = "barrier",
    [RD_COLL_REDUCESCATTER] = "reducescatter", [RD_COLL_ALLGATHERV] = "allgatherv",
    [RD_COLL_ALLTOALL] = "alltoall",
};

/* Index of name among names[0..n), or -1. */
static int lookup(const char *name, const char *const *names, int n)
{
    for (int i = 0; name != NULL && i < n; i++)
        if (strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

int rd_dtype_valid(int v)
{
    return v >= 0 && v < RD_DT_COUNT;
}

int rd_redop_valid(int v)
{
    return v >= 0 && v < RD_OP_COUNT;
}

int rd_coll_valid(int v)
{
    return v >= 0 && v < RD_COLL_COUNT;
}

size_t rd_dtype_size(rd_dtype dt)
{
    return rd_dtype_valid((int)dt) ? dtype_sizes[dt] : 0;
}

int rd_dtype_is_float(rd_dtype dt)
{
    return dt == RD_DT_F32 || dt == RD_DT_F64 || dt == RD_DT_F16 || dt == RD_DT_BF16;
}

const char *rd_dtype_name(rd_dtype dt)
{
    return rd_dtype_valid((int)dt) ? dtype_names[dt] : "invalid";
}

const char *rd_redop_name(rd_redop op)
{
    return rd_redop_valid((int)op) ? redop_names[op] : "invalid";
}

const char *rd_coll_name(rd_coll c)
{
    return rd_coll_valid((int)c) ? coll_names[c] : "invalid";
}

int rd_dtype_parse(const char *name)
{
    return lookup(name, dtype_names, RD_DT_COUNT);
}

int rd_redop_parse(const char *name)
{
    return lookup(name, redop_names, RD_OP_COUNT);
}

int rd_coll_parse(const char *name)
{
    return lookup(name, coll_names, RD_COLL_COUNT);
}

void rd_dtype_store(rd_dtype dt, void *buf, size_t i, double v)
{
    switch (dt) {
    case RD_DT_F32: ((float *)buf)[i] = (float)v; break;
    case RD_DT_F64: ((double *)buf)[i] = v; break;
    case RD_DT_F16: ((uint16_t *)buf)[i] = f32_to_f16((float)v); break;
    case RD_DT_BF16: ((uint16_t *)buf)[i] = f32_to_bf16((float)v); break;
    case RD_DT_I32: ((uint32_t *)buf)[i] = (uint32_t)(int64_t)v; break;
    case RD_DT_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case RD_DT_U8: ((uint8_t *)buf)[i] = (uint8_t)(int64_t)v; break;
    default: assert(!"rd_dtype_store: invalid dtype"); break;
    }
}
