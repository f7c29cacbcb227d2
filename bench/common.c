/* Shared bench pieces: sweep options, clock, median, table output. */
#include "common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "units.h"

const char rb_sweep_usage[] =
    "  -b MIN     smallest size in bytes, suffix K/M/G = 2^10/2^20/2^30 (default 4)\n"
    "  -e MAX     largest size in bytes (default 64M)\n"
    "  -f FACTOR  size multiplier between rows, >= 2 (default 4)\n"
    "  -n ITERS   timed iterations per size (default 20)\n"
    "  -w WARMUP  untimed iterations per size (default 5)\n"
    "  -c 0|1     check the result of one extra op per size (default 1)\n";

void rb_sweep_defaults(rb_sweep *s)
{
    s->min_bytes = 4;
    s->max_bytes = 64u << 20;
    s->factor = 4;
    s->iters = 20;
    s->warmup = 5;
    s->check = 1;
}

static int parse_int(const char *text, int lo, int hi, int *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

int rb_sweep_option(rb_sweep *s, int c, const char *arg)
{
    switch (c) {
    case 'b': return rd_units_parse_size(arg, &s->min_bytes) || s->min_bytes == 0 ? -1 : 0;
    case 'e': return rd_units_parse_size(arg, &s->max_bytes) || s->max_bytes == 0 ? -1 : 0;
    case 'f': return rd_units_parse_size(arg, &s->factor) || s->factor < 2 ? -1 : 0;
    case 'n': return parse_int(arg, 1, 1000000, &s->iters);
    case 'w': return parse_int(arg, 0, 1000000, &s->warmup);
    case 'c': return parse_int(arg, 0, 1, &s->check);
    default: return 1;
    }
}

void rb_sleep_us(int64_t us)
{
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000L};
    while (us > 0 && nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

double rb_pattern(int r, size_t i)
{
    return (double)(((i + (size_t)r * 5) % 13) + 1);
}

double rb_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double rb_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void rb_print_header(const char *tool, int nranks, const char *what, const rb_sweep *s)
{
    printf("# %s: %d ranks, %s, iters %d, warmup %d (time: median over iterations of the "
           "slowest rank)\n",
           tool, nranks, what, s->iters, s->warmup);
    printf("#       size        count   type  redop     time(us)   algbw(GB/s)   busbw(GB/s)"
           "  #wrong\n");
    fflush(stdout);
}

void rb_print_row(uint64_t bytes, size_t count, const char *type, const char *redop, double time,
                  double bus_factor, long long wrong)
{
    double algbw = time > 0 ? (double)bytes / time / 1e9 : 0.0;
    printf("%12llu %12zu %6s %6s %12.2f %13.2f %13.2f %7lld\n", (unsigned long long)bytes, count,
           type, redop, time * 1e6, algbw, algbw * bus_factor, wrong);
    fflush(stdout);
}
