/* The one vocabulary of a collective: element types, reduce operators and collective kinds, with
 * their names and sizes. Values are the public API's (ringd_dtype_t, ringd_redop_t in
 * client/include/ringd.h) and the wire's (DataType, ReduceOp, OpType in ringd.proto): dtype.c
 * checks both at compile time. Plain C with no includes beyond the standard ones, so the
 * backends, the daemon, the client library and the tools all use it. */
#ifndef RD_DTYPE_H
#define RD_DTYPE_H

#include <stddef.h>

/* Element types. */
typedef enum {
    RD_DT_F32 = 0,
    RD_DT_F64 = 1,
    RD_DT_F16 = 2,  /* IEEE binary16 */
    RD_DT_BF16 = 3, /* bfloat16 */
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

/* Collectives. Switches over one handle every member, so the count stands outside the enum. */
typedef enum {
    RD_COLL_ALLREDUCE = 0,
    RD_COLL_BROADCAST = 1,
    RD_COLL_ALLGATHER = 2,
    RD_COLL_BARRIER = 3,
    RD_COLL_REDUCESCATTER = 4, /* every rank's input reduced, rank i keeps block i */
    RD_COLL_ALLGATHERV = 5,    /* allgather of per-rank counts */
    RD_COLL_ALLTOALL = 6,      /* each rank's block for each rank (a matrix of counts) */
} rd_coll;
#define RD_COLL_COUNT (RD_COLL_ALLTOALL + 1)

/* 1 when v (as it came: off the wire, from a caller) names a member of the enum, else 0. */
int rd_dtype_valid(int v);
int rd_redop_valid(int v);
int rd_coll_valid(int v);

/* Size in bytes of one element of dt; 0 when dt is not a valid dtype. */
size_t rd_dtype_size(rd_dtype dt);

/* 1 for the floating-point dtypes (f32, f64, f16, bf16), 0 for integers and invalid values. */
int rd_dtype_is_float(rd_dtype dt);

/* Short lowercase names ("f32", "sum", "allreduce", ...), or "invalid" for a value out of range.
 * Static strings. */
const char *rd_dtype_name(rd_dtype dt);
const char *rd_redop_name(rd_redop op);
const char *rd_coll_name(rd_coll c);

/* The member whose name (as above) is name, or -1 for none (NULL included). */
int rd_dtype_parse(const char *name);
int rd_redop_parse(const char *name);
int rd_coll_parse(const char *name);

/* Stores v as element i of buf, converted to dt (integers truncated and wrapped, halves rounded
 * to nearest even, as the kernels round). For filling and checking tensors in tools and tests;
 * dt must be valid. */
void rd_dtype_store(rd_dtype dt, void *buf, size_t i, double v);

#endif
