/* Test helper: a redis-server and n ringd daemons on loopback forming rings through it, each
 * with its own socket, node name ("n0", "n1", ...) and the same key file. */
#ifndef TH_RING_H
#define TH_RING_H

#include "harness.h"
#include "th_redis.h"

#define TH_RING_MAX 8

typedef struct {
    th_redis redis;
    int n;
    th_daemon d[TH_RING_MAX];
    char dir[128];
    char key[192]; /* key file path */
} th_ring;

/* Starts redis and n daemons (extra: more ringd arguments for every daemon, NULL-terminated, may
 * be NULL). Returns 0, or -1 after printing why (whatever started is stopped). */
int th_ring_start(th_ring *r, int n, const char *const *extra);

/* Starts daemon i (0 <= i < TH_RING_MAX) with the ring's redis and key plus extra. For tests
 * that start daemons one by one or with other options. Returns 0 or -1. */
int th_ring_start_node(th_ring *r, int i, const char *const *extra);

/* Fails the test unless every daemon still runs and shuts down cleanly; then stops redis. */
void th_ring_finish(th_ring *r);

/* Fixture teardown: stops whatever is left without judging it. */
void th_ring_teardown(th_ring *r);

#endif
