/* Shared by ringd-bench and its peers: the size sweep options, timing, medians, and the
 * nccl-tests style table. */
#ifndef RB_COMMON_H
#define RB_COMMON_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t min_bytes, max_bytes, factor;
    int iters, warmup, check;
} rb_sweep;

/* Defaults: -b 4 -e 64M -f 4 -n 20 -w 5 -c 1. */
void rb_sweep_defaults(rb_sweep *s);

/* Applies one of the sweep flags b, e, f, n, w, c with its argument.
 * Returns 0 when applied, -1 for a bad value, 1 when c is not a sweep flag. */
int rb_sweep_option(rb_sweep *s, int c, const char *arg);

/* The usage lines for the sweep flags. */
extern const char rb_sweep_usage[];

/* Sleeps us microseconds (no-op when us <= 0), through signals. */
void rb_sleep_us(int64_t us);

/* Element i of rank r's input in the benches' checked runs: small integers (1..13), exact in
 * every dtype and in f32 sums of many ranks. */
double rb_pattern(int r, size_t i);

/* Monotonic time in seconds. */
double rb_now_s(void);

/* Median of v[0..n), the mean of the middle two when n is even; sorts v. */
double rb_median(double *v, int n);

/* Prints the two header lines of a table. */
void rb_print_header(const char *tool, int nranks, const char *what, const rb_sweep *s);

/* Prints one row: time is the median per-iteration time in seconds; bus_factor turns algbw into
 * busbw (allreduce 2(n-1)/n, allgather (n-1)/n, broadcast 1). */
void rb_print_row(uint64_t bytes, size_t count, const char *type, const char *redop, double time,
                  double bus_factor, long long wrong);

#endif
