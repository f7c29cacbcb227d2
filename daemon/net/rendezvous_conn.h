/* One connection of the rendezvous to Redis: an explicit state machine (down, connecting, ready,
 * closed) that looks the host up, connects, logs in (AUTH, SELECT, SCRIPT LOAD), reconnects with
 * back-off and is dropped by a watchdog when Redis stops answering. The rendezvous keeps one for
 * its scripts and one per watched job. Part of the rendezvous, the only module that talks to
 * hiredis. Loop thread only. */
#ifndef RD_RENDEZVOUS_CONN_H
#define RD_RENDEZVOUS_CONN_H

#include <arpa/inet.h>
#include <stddef.h>
#include <stdint.h>

#include "log.h"
#include "resolve.h"

struct event;
struct event_base;
struct redisAsyncContext;

/* Where Redis is and how to log in: one per rendezvous, shared by its connections. */
typedef struct {
    struct event_base *base;
    rd_resolver *resolver; /* looks the host name up without blocking the loop */
    char host[256];
    char ip[INET6_ADDRSTRLEN]; /* the host's address as last resolved ("" before) */
    int port;
    int db;
    char *password; /* AUTH, or NULL */
} rd_rdv_server;

/* Scripts a connection loads on every connect (SCRIPT LOAD), so that they run by EVALSHA. */
typedef struct {
    int n;
    const char *const *text;
    const char *const *name; /* for logs */
    char (*sha)[41]; /* n of them, written by the connection: the SHA1; "" unknown (not loaded on
                      * this connection yet); starting with '!', its load failed (use EVAL) */
} rd_rdv_scripts;

/* A connection's life; rd_rdv_conn_state moves are checked (see rendezvous_conn.c). */
typedef enum {
    RD_RDV_DOWN,       /* no context: a reconnect timer is armed */
    RD_RDV_CONNECTING, /* host lookup, TCP connect, AUTH, SELECT (and SCRIPT LOAD) in flight */
    RD_RDV_READY,      /* handshake answered: commands flow */
    RD_RDV_CLOSED,     /* closed for good (its owner is freeing it): never reconnects; a context
                        * still there is being freed, its callbacks answered with NULL */
    RD_RDV_NSTATES
} rd_rdv_conn_state;

/* Called each time the connection becomes READY (after every reconnect). */
typedef void (*rd_rdv_conn_ready_fn)(void *arg);

typedef struct {
    rd_rdv_server *srv;
    const char *what; /* its name in logs ("command", or the job's name): outlives it */
    const rd_rdv_scripts *scripts; /* loaded on each connect, or NULL */
    rd_rdv_conn_ready_fn on_ready;
    void *arg;
    struct redisAsyncContext *ac; /* commands go here while READY */
    rd_rdv_conn_state state;      /* read freely; changed only inside rendezvous_conn.c */
    int backoff_ms;
    int warned;           /* the loss was logged since the last READY */
    int npending;         /* commands sent on ac, not yet answered */
    int64_t progress_ms;  /* last reply, or the first command sent after quiet */
    struct event *retry;  /* reconnect timer */
    rd_lookup *resolving; /* the host name's lookup under way */
    char lasterr[160];    /* last error logged, to log each distinct one once */
} rd_rdv_conn;

/* Sets up c, DOWN, without connecting yet; srv, what and scripts (NULL: none) must outlive c.
 * Returns 0, or -1 when out of memory (then rd_rdv_conn_fini still frees it). */
int rd_rdv_conn_init(rd_rdv_conn *c, rd_rdv_server *srv, const char *what,
                     const rd_rdv_scripts *scripts, rd_rdv_conn_ready_fn on_ready, void *arg);

/* Starts connecting c (a DOWN connection with no lookup under way; otherwise a no-op): looks the
 * host name up again each time (a Redis that moves keeps its name), or connects to an address at
 * once. Failures are logged and retried with back-off. */
void rd_rdv_conn_start(rd_rdv_conn *c);

/* Closes c for good: CLOSED; commands in flight are answered with NULL replies (from within the
 * call). Safe on a connection whose init failed, or a zeroed one never set up. */
void rd_rdv_conn_fini(rd_rdv_conn *c);

/* Accounts for one command sent on c's context. */
void rd_rdv_conn_sent(rd_rdv_conn *c);

/* Accounts for one reply (or NULL reply) that came on context ac of c. */
void rd_rdv_conn_answered(rd_rdv_conn *c, const struct redisAsyncContext *ac);

/* Logs a connection problem once: at warn the first time since the last READY, then only when
 * the message changes (at level). */
void rd_rdv_conn_complain(rd_rdv_conn *c, rd_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The watchdog: drops (and so reconnects) c when a command or the connect has gone unanswered
 * for more than limit ms at now (hiredis async has no timeouts of its own). */
void rd_rdv_conn_check(rd_rdv_conn *c, int64_t limit, int64_t now);

/* 1 when srv's host is an address rather than a name to look up. */
int rd_rdv_host_numeric(const rd_rdv_server *srv);

#endif
