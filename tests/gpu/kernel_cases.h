/* Checks a reduction implementation against the CPU kernels (rd_reduce), bit for bit: every
 * dtype, op, scale and divisor, several source counts, element counts given by the caller, with
 * special values (NaN, infinities, signed zeros, subnormals, extremes) among random ones. */
#ifndef RD_KERNEL_CASES_H
#define RD_KERNEL_CASES_H

#include <stddef.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The implementation under test: rd_reduce's contract on host buffers (it copies them to its
 * device itself). Returns 0, or -1 with why set (a failure, not a mismatch). */
typedef int (*rd_reduce_under_test)(void *ctx, rd_dtype dt, rd_redop op, void *dst,
                                    const void *const *src, int nsrc, size_t count,
                                    const rd_reduce_args *args, char *why, size_t whylen);

/* 1 when element i of a and b (of dtype dt) have the same bits, or both are NaN. */
int rd_kernel_same(rd_dtype dt, const void *a, const void *b, size_t i);

/* Runs the cases over counts[0..ncounts) with up to max_src sources, for the dtypes whose bit
 * (1u << dtype) is in dtypes; prints what differs (the first 20) to stdout. Returns the number
 * of cases that differed or failed; *ran counts all. */
long rd_check_kernels(rd_reduce_under_test fn, void *ctx, const size_t *counts, int ncounts,
                      int max_src, unsigned dtypes, long *ran);

#ifdef __cplusplus
}
#endif

#endif
