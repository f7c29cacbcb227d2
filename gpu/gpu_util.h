/* Small helpers of gpu/'s modules: an error message written into a caller's buffer, and the
 * monotonic clock in milliseconds. */
#ifndef RD_GPU_UTIL_H
#define RD_GPU_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

/* vsnprintf of fmt into err[0..errlen); a NULL or empty err is a no-op. */
static inline void rd_gpu_say(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline void rd_gpu_say(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (err == NULL || errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* CLOCK_MONOTONIC in milliseconds. */
static inline int64_t rd_gpu_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif
