/* Logging for the daemon: one call, filtered by level before any formatting. */
#ifndef RD_LOG_H
#define RD_LOG_H

#include <stdatomic.h>

typedef enum {
    RD_LOG_DEBUG = 0,
    RD_LOG_INFO = 1,
    RD_LOG_WARN = 2,
    RD_LOG_ERROR = 3,
} rd_log_level;

/* Read by every thread (the data plane's too) on each rd_log; a relaxed load is enough. */
extern atomic_int rd_log_threshold;

void rd_log_set_level(rd_log_level level);

/* The levels' names, by value, NULL-terminated: what --log-level takes. */
extern const char *const rd_log_level_names[];
const char *rd_log_level_name(int level);

void rd_log_write(rd_log_level level, const char *subsys, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define rd_log(level, subsys, ...)                                                                 \
    do {                                                                                           \
        if ((int)(level) >= atomic_load_explicit(&rd_log_threshold, memory_order_relaxed))         \
            rd_log_write((level), (subsys), __VA_ARGS__);                                          \
    } while (0)

#endif
