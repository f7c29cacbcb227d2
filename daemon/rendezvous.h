/* Rendezvous through Redis: each node's membership of a job is a lease; joins and leaves are one
 * atomic step that bumps the job's generation and appends an event to the job's stream, which
 * watchers read with XREAD BLOCK from their last id, so no change is missed across a reconnect.
 * The only module that talks to hiredis. Loop thread only. */
#ifndef RD_RENDEZVOUS_H
#define RD_RENDEZVOUS_H

#include <stddef.h>
#include <stdint.h>

#include "frame.h"

struct event_base;

#define RD_ADDR_MAX 128 /* "host:port" */

/* One node's registration in a job. */
typedef struct {
    char node[RD_NAME_MAX + 1];
    char addr[RD_ADDR_MAX]; /* where its peers connect: --advertise, else --listen */
    uint32_t local_size;    /* clients of the job on that node */
    uint32_t world_size;    /* the world its clients asked for */
    uint64_t incarnation;   /* random per daemon start: tells a restarted node from the old one */
} rd_rdv_member;

/* A job's membership at one generation, members sorted by node name (the ring order). */
typedef struct {
    uint64_t generation;
    size_t nmembers;
    rd_rdv_member *members;
} rd_rdv_view;

typedef struct rd_rdv rd_rdv;

/* Called on the loop with the job's membership each time its generation changes as seen here
 * (after a join, an event, a lease sweep or a reconnect); the view is valid during the call only.
 * A generation lower than one already delivered means Redis lost its data: the caller treats it
 * as a new rendezvous. */
typedef void (*rd_rdv_view_fn)(void *arg, const char *job, const rd_rdv_view *view);

typedef struct {
    const char *url;      /* redis://HOST:PORT[/DB] */
    const char *password; /* AUTH, or NULL */
    int64_t lease_ms;     /* lease TTL; refreshed every lease_ms / 3 */
    rd_rdv_view_fn on_view;
    void *arg;
} rd_rdv_options;

/* Parses the URL and starts connecting (in the background, retried with back-off; failures are
 * logged). Returns NULL with err set for a bad URL or out of memory. Caller owns the result. */
rd_rdv *rd_rdv_new(struct event_base *base, const rd_rdv_options *o, char *err, size_t errlen);

/* Leaves every job still joined (best effort, bounded by about one second), disconnects and
 * frees. rd_rdv_free(NULL) is a no-op. */
void rd_rdv_free(rd_rdv *r);

/* Registers self in job (lease plus member record, generation + 1, event), now or once Redis is
 * reachable, and keeps the lease alive and the job watched until rd_rdv_leave. Joining a job
 * already joined replaces the record (generation + 1). Returns 0, or -1 when out of memory. */
int rd_rdv_join(rd_rdv *r, const char *job, const rd_rdv_member *self);

/* Removes this node from job (generation + 1, event) and stops watching it. */
void rd_rdv_leave(rd_rdv *r, const char *job);

/* 1 while the command connection to Redis is up. */
int rd_rdv_connected(const rd_rdv *r);

#endif
