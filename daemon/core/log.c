/* Logging for the daemon: timestamped lines on stderr, one write per line. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

atomic_int rd_log_threshold = RD_LOG_INFO;

const char *const rd_log_level_names[] = {"debug", "info", "warn", "error", NULL};

void rd_log_set_level(rd_log_level level)
{
    atomic_store_explicit(&rd_log_threshold, (int)level, memory_order_relaxed);
}

const char *rd_log_level_name(int level)
{
    if (level < 0 || level > RD_LOG_ERROR)
        return "?";
    return rd_log_level_names[level];
}

/* Formats one line and writes it with a single write(2), so lines of concurrent threads never
 * interleave. Over-long lines are cut. */
void rd_log_write(rd_log_level level, const char *subsys, const char *fmt, ...)
{
    char line[1024];
    struct timespec ts;
    struct tm tm;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof(line),
                     "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ ringd[%d] %-5s %s: ", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, (int)getpid(), rd_log_level_name(level), subsys);
    if (n < 0)
        return;
    if ((size_t)n < sizeof(line)) {
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
        va_end(ap);
        if (m > 0)
            n += m;
    }
    if ((size_t)n >= sizeof(line) - 1)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}
