/* Rendezvous through Redis: each node's membership of a job is a lease; joins, leaves, evictions
 * and expiries are one atomic step that bumps the job's generation and appends an event to the
 * job's stream, which watchers read with XREAD BLOCK from their last id, so no change is missed
 * across a reconnect. Generations never go backwards, even when Redis loses its data: the first
 * daemon back restores the membership it knew. The only module that talks to hiredis. Loop thread
 * only. */
#ifndef RD_RENDEZVOUS_H
#define RD_RENDEZVOUS_H

#include <stddef.h>
#include <stdint.h>

#include "frame.h"
#include "status.h"

struct event_base;
struct redisReply;

#define RD_ADDR_MAX 128       /* "host:port" */
#define RD_RDV_RECORD_MAX 512 /* bytes of a member record, as read back */
#define RD_RDV_ID_MAX 48      /* "ms-seq" stream ids: two 20-digit numbers and a dash */

/* One node's registration in a job. */
typedef struct {
    char node[RD_NAME_MAX + 1];
    char addr[RD_ADDR_MAX]; /* where its peers connect: --advertise, else --listen */
    uint32_t local_size;    /* clients of the job on that node */
    uint32_t world_size;    /* the world its clients asked for */
    uint32_t min_size;      /* the fewest ranks its clients run with (0 from an older daemon) */
    uint64_t since;         /* when it joined the job (wall clock ms): orders the ring */
    uint64_t incarnation;   /* random per daemon start: tells a restarted node from the old one */
} rd_rdv_member;

/* A job's membership at one generation, members in ring order (by since, then name). Every
 * daemon reading generation g reads the same members and the same started flag. */
typedef struct {
    uint64_t generation;
    int started; /* 1 once the job has had a complete ring: its members' local sizes reached their
                  * (common) world_size at some generation since the job's first member joined;
                  * reset only when its last member is gone */
    uint64_t started_at; /* the newest since of the members it started with */
    size_t nmembers;
    rd_rdv_member *members;
} rd_rdv_view;

typedef struct rd_rdv rd_rdv;

/* Called on the loop with the job's membership each time its generation grows as seen here
 * (after a join, an event, a lease sweep, an eviction or a reconnect); the view is valid during
 * the call only. Generations delivered only increase: a lower one read from Redis (it lost its
 * data) is not delivered but repaired (restored at the last generation, or joined above it). */
typedef void (*rd_rdv_view_fn)(void *arg, const char *job, const rd_rdv_view *view);

typedef struct {
    const char *url;      /* redis://HOST:PORT[/DB] */
    const char *password; /* AUTH, or NULL */
    int64_t lease_ms;     /* lease TTL; refreshed every lease_ms / 3, and other members' leases
                           * swept a few ms after they can first expire */
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
 * already joined replaces the record (generation + 1). Returns RINGD_OK, RINGD_E_NOMEM, or
 * RINGD_E_INVALID for an invalid job, node name or address (logged). */
rd_status rd_rdv_join(rd_rdv *r, const char *job, const rd_rdv_member *self);

/* Removes this node from job (generation + 1, event) and stops watching it. */
void rd_rdv_leave(rd_rdv *r, const char *job);

/* Moves job to a generation above `above` (appending an event with reason), unless the job is
 * already past it: both ends of a link that broke ask, the job moves once. Returns RINGD_OK,
 * RINGD_E_INVALID for a job not joined here, or RINGD_E_NOMEM. */
rd_status rd_rdv_bump(rd_rdv *r, const char *job, uint64_t above, const char *reason);

/* Removes node from job if its record still has incarnation (a restarted daemon of that name is
 * left alone): record and lease deleted, generation + 1, an 'evict' event carrying reason (cut to
 * 200 bytes). For a peer known dead (its links broke and its listener refuses connections), so
 * the others need not wait for its lease to expire. Asynchronous, now or once Redis is reachable;
 * works whether or not this node joined job. Returns RINGD_OK, RINGD_E_NOMEM, or RINGD_E_INVALID
 * for an invalid job or node name (logged). */
rd_status rd_rdv_evict(rd_rdv *r, const char *job, const char *node, uint64_t incarnation,
                       const char *reason);

/* Refreshes this node's lease of job now, sweeping members whose leases expired (a caller that
 * suspects a peer); a refresh in flight is followed by another. No-op for a job not joined. */
void rd_rdv_sweep_soon(rd_rdv *r, const char *job);

/* 1 when Redis has not confirmed this node's registration in job for longer than the lease:
 * the other nodes count it gone (Redis is unreachable from here, or this node was stopped). */
int rd_rdv_lapsed(const rd_rdv *r, const char *job);

/* 1 while the command connection to Redis is up. */
int rd_rdv_connected(const rd_rdv *r);

/* Microseconds the last rendezvous script took from sending to its answer (Redis running it
 * included), or -1 before any answer. */
int64_t rd_rdv_rtt_us(const rd_rdv *r);

/* Pure encoders and decoders of what goes to Redis and what it returns (untrusted: any client of
 * the Redis may have written it), the decoders exported for the fuzz harnesses in tests/fuzz too
 * (rendezvous_parse.c); any thread. */

/* Writes m's record (version 3) into buf of len bytes (RD_RDV_RECORD_MAX holds any). */
void rd_rdv_record_format(const rd_rdv_member *m, char *buf, size_t len);

/* 1 when m can be written as a record and read back (a valid node name and address). */
int rd_rdv_member_valid(const rd_rdv_member *m);

/* 1 when stream id a comes after b; also when either is not a stream id. */
int rd_rdv_id_after(const char *a, const char *b);

/* Parses redis://HOST:PORT[/DB] (an IPv6 host in brackets) into host (hostlen bytes), *port and
 * *db (0 when absent). Returns RINGD_OK, or RINGD_E_INVALID with err set. */
rd_status rd_rdv_url_parse(const char *url, char *host, size_t hostlen, int *port, int *db,
                           char *err, size_t errlen);

/* Parses a member record "V <incarnation> <local_size> <world_size> [<min_size> [<since>]] <addr>"
 * (V = 3, 2 or 1) of len bytes into m, node not touched. Returns RINGD_OK, or RINGD_E_PROTOCOL when
 * malformed. */
rd_status rd_rdv_record_parse(const char *s, size_t len, rd_rdv_member *m);

/* Parses a script reply into a new view (members sorted; malformed members skipped and counted in
 * *nbad) and writes its status (statuslen bytes at most), last stream id (id holds RD_RDV_ID_MAX
 * bytes), *soonest (the least time left on the others' leases, -1 for none) and *same (1: the
 * reply has no members, those of the caller's view of this generation are current; the view
 * then has none). Returns NULL for a malformed reply (logged) or out of memory. The caller owns
 * the view: rd_rdv_view_free. */
rd_rdv_view *rd_rdv_view_parse(const struct redisReply *rep, const char *job, char *status,
                               size_t statuslen, char *id, int64_t *soonest, size_t *nbad,
                               int *same);

/* Frees a view of rd_rdv_view_parse; NULL is a no-op. */
void rd_rdv_view_free(rd_rdv_view *v);

/* Finds the last well-formed entry id in an XREAD reply; *id points into rep, *len bytes, not
 * terminated. Returns RINGD_OK, or RINGD_E_PROTOCOL (id NULL) when the reply holds none. */
rd_status rd_rdv_stream_last_id(const struct redisReply *rep, const char **id, size_t *len);

#endif
