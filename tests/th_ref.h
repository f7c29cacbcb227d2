/* Test helper: the inputs collective tests fill their tensors with, and the exact results every
 * dtype and reduce op must give, computed here as the header defines them. */
#ifndef TH_REF_H
#define TH_REF_H

#include <stddef.h>

#include "ringd.h"

/* 1 for the floating dtypes. */
int th_ref_is_float(ringd_dtype_t dt);

/* Rank r's element i for a reduction of dt with op. Small enough that every sum and product is
 * exact in every dtype whatever order the ring combines them in: quarters for floats, powers of
 * two for floating products, small integers (wrapping in u8 products) otherwise. */
double th_ref_input(int r, size_t i, ringd_dtype_t dt, ringd_redop_t op);

/* Element i of buf as a double. */
double th_ref_load(const void *buf, ringd_dtype_t dt, size_t i);

/* Element i of the reduction of n ranks' th_ref_input(), stored into want[0] as dt. Floating
 * types combine in float (f64: double), divide, scale and round once, as the header promises;
 * integers wrap and avg truncates toward zero. */
void th_ref_reduce(void *want, size_t i, ringd_dtype_t dt, ringd_redop_t op, int n, double pre,
                   double post);

/* buf[0..count) = rank's th_ref_input(rank, first + k) for k in [0, count). */
void th_ref_fill(void *buf, int rank, ringd_dtype_t dt, ringd_redop_t op, size_t first,
                 size_t count);

/* Compares got[0..count) with elements [first, first + count) of the reduction of every rank of
 * r's job; prints the first difference. Returns 0 or 40. */
int th_ref_check(const ringd_t *r, const char *name, const void *got, ringd_dtype_t dt,
                 ringd_redop_t op, size_t first, size_t count, double pre, double post);

#endif
