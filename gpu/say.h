/* An error message written into a caller's buffer, the one idiom of gpu/'s modules. */
#ifndef RD_GPU_SAY_H
#define RD_GPU_SAY_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

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

#endif
