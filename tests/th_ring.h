/* Test helper: a redis-server and n ringd daemons on loopback forming rings through it, each
 * with its own socket, node name ("n0", "n1", ...) and the same key file. */
#ifndef TH_RING_H
#define TH_RING_H

#include "harness.h"
#include "th_redis.h"

#define TH_RING_MAX 16

typedef struct {
    th_redis redis;
    int n;
    th_daemon d[TH_RING_MAX];
    char dir[128];
    char key[192]; /* key file path */
    /* for th_ring_start_node; th_ring_init and th_ring_start clear them */
    int lease_ttl;                /* --lease-ttl; 0: 1000 */
    char listen[TH_RING_MAX][64]; /* --listen of node i; "": 127.0.0.1:0 */
} th_ring;

/* Starts redis and n daemons (extra: more ringd arguments for every daemon, NULL-terminated, may
 * be NULL). Returns 0, or -1 after printing why (whatever started is stopped). */
int th_ring_start(th_ring *r, int n, const char *const *extra);

/* The ring's key file and, when redis is 1, its redis-server, but no daemon: for tests that start
 * daemons one by one with options of their own (th_ring_start_node), set lease_ttl or listen, or
 * run redis themselves (fill r->redis.url, and pid and dir to have th_ring_finish stop it).
 * Returns 0, or -1 after printing why. */
int th_ring_init(th_ring *r, int redis);

/* Starts daemon i (0 <= i < TH_RING_MAX) with the ring's redis and key plus extra. For tests
 * that start daemons one by one or with other options. Returns 0 or -1. A daemon that died or
 * was killed starts again with th_daemon_restart(&r->d[i]): same node name, socket and options. */
int th_ring_start_node(th_ring *r, int i, const char *const *extra);

/* Waits until every daemon i in mask (bit i) reports job's ring "up" with nmembers members at
 * one generation above after_gen. Returns that generation, or 0 at the deadline after printing
 * what each daemon reported last. Daemons outside mask (stopped ones, say) are not asked. */
uint64_t th_ring_wait_up(const th_ring *r, const char *job, unsigned mask, int nmembers,
                         uint64_t after_gen, int timeout_ms);

/* Prints the last tail bytes of every daemon's log to stderr (next to a failure's evidence),
 * leaving out the lines about the test process's own connections (its status requests). */
void th_ring_dump_logs(const th_ring *r, size_t tail);

/* Fails the test unless every running daemon still runs and shuts down cleanly (one killed on
 * purpose is only cleaned up); then stops redis. */
void th_ring_finish(th_ring *r);

/* Fixture teardown: stops whatever is left without judging it. */
void th_ring_teardown(th_ring *r);

#endif
