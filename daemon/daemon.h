/* The daemon's shared state: event base, options, executor, sessions, jobs and counters. */
#ifndef RD_DAEMON_H
#define RD_DAEMON_H

#include <stdint.h>
#include <time.h>

#include "config.h"

struct event_base;
struct rd_exec;
struct rd_session;
struct rd_job;
struct rd_worlds;
struct rd_drain;

typedef struct rd_daemon {
    struct event_base *base;
    rd_config cfg;
    struct rd_exec *exec;
    struct rd_session *sessions; /* every open connection */
    unsigned nsessions;
    struct rd_job *jobs;
    struct rd_worlds *worlds; /* multi-node: key, peer listener, rendezvous; NULL alone */
    struct timespec started;  /* CLOCK_MONOTONIC */
    uint64_t ops_in_flight;   /* collectives submitted and not yet ended */
    uint64_t ops_completed;
    uint64_t ops_failed;
    uint64_t bytes_reduced; /* bytes written into arenas by collectives */
    uint64_t ring_passes;   /* collectives run on rings, a fused group counting once */
    uint64_t ring_ops;      /* ops those passes carried */
    uint64_t activity;      /* bumped by peer messages: the loop keeps polling after them */
    int draining;           /* ringctl drain or SIGTERM: leaving every job, refusing new ones */
    struct rd_drain *drain; /* the drain under way */
} rd_daemon;

/* CLOCK_MONOTONIC in milliseconds. */
static inline int64_t rd_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif
