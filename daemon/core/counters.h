/* Daemon-wide counters and the monotonic clock, shared by every layer on the loop thread. */
#ifndef RD_COUNTERS_H
#define RD_COUNTERS_H

#include <stdint.h>
#include <time.h>

#define RD_COUNTERS_DEVICES 64 /* gpu/devices.h's RD_MAX_DEVICES */

typedef struct {
    uint64_t ops_in_flight; /* collectives submitted and not yet ended */
    uint64_t ops_completed;
    uint64_t ops_failed;
    uint64_t bytes_reduced;   /* bytes written into arenas by collectives */
    uint64_t ring_passes;     /* collectives run on rings, a fused group counting once */
    uint64_t ring_ops;        /* ops those passes carried */
    uint64_t activity;        /* bumped by peer messages: the loop keeps polling after them */
    uint64_t ctrl_sent;       /* control messages sent to other nodes (rings' control links),
                                 keepalives aside */
    uint64_t ctrl_bytes_sent; /* their bytes, framing included */
    uint64_t ctrl_keepalives; /* keepalives sent on those links */
    uint64_t device_bytes[RD_COUNTERS_DEVICES]; /* bytes_reduced on each CUDA device (index) */
} rd_counters;

/* CLOCK_MONOTONIC in milliseconds. */
static inline int64_t rd_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* CLOCK_MONOTONIC in microseconds. */
static inline int64_t rd_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

#endif
