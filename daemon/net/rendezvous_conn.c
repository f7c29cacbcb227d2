/* The rendezvous's connections to Redis: lookup, connect, handshake, reconnect, watchdog. */
#define _GNU_SOURCE
#include "rendezvous_conn.h"

#include "counters.h"

#include <assert.h>
#include <event2/event.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SUBSYS "rendezvous"

#define RDV_BACKOFF_MIN_MS 100
#define RDV_BACKOFF_MAX_MS 2000

static const char *const state_names[RD_RDV_NSTATES] = {"down", "connecting", "ready", "closed"};

/* The moves set_state allows: conn_moves[from] has bit 1 << to. Every state may close for good;
 * a context is lost (DOWN) from CONNECTING or READY, and DOWN only reconnects. */
#define C_BIT(st) (1u << (st))
static const unsigned conn_moves[RD_RDV_NSTATES] = {
    [RD_RDV_DOWN] = C_BIT(RD_RDV_CONNECTING) | C_BIT(RD_RDV_CLOSED),
    [RD_RDV_CONNECTING] = C_BIT(RD_RDV_DOWN) | C_BIT(RD_RDV_READY) | C_BIT(RD_RDV_CLOSED),
    [RD_RDV_READY] = C_BIT(RD_RDV_DOWN) | C_BIT(RD_RDV_CLOSED),
    [RD_RDV_CLOSED] = 0,
};

/* The one place a connection changes state (staying is no move): the move must be one
 * conn_moves allows (a programmer error otherwise: an assertion, and an error in the log where
 * assertions are compiled out), and is logged at debug. */
static void set_state(rd_rdv_conn *c, rd_rdv_conn_state st)
{
    if (c->state == st)
        return;
    if (!(conn_moves[c->state] & C_BIT(st))) {
        rd_log(RD_LOG_ERROR, SUBSYS, "%s connection to %s:%d: illegal move %s -> %s", c->what,
               c->srv->host, c->srv->port, state_names[c->state], state_names[st]);
        assert(!"illegal Redis connection state move");
    }
    rd_log(RD_LOG_DEBUG, SUBSYS, "%s connection to %s:%d: %s -> %s", c->what, c->srv->host,
           c->srv->port, state_names[c->state], state_names[st]);
    c->state = st;
}
#undef C_BIT

void rd_rdv_conn_complain(rd_rdv_conn *c, rd_log_level level, const char *fmt, ...)
{
    char msg[sizeof(c->lasterr)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (c->warned && strcmp(msg, c->lasterr) == 0)
        return;
    rd_log(level, SUBSYS, "%s connection to %s:%d: %s", c->what, c->srv->host, c->srv->port, msg);
    snprintf(c->lasterr, sizeof(c->lasterr), "%s", msg);
    c->warned = 1;
}

/* Forgets what this connection loaded: a new one loads the scripts again. */
static void scripts_forget(rd_rdv_conn *c)
{
    if (c->scripts != NULL)
        memset(c->scripts->sha, 0, sizeof(*c->scripts->sha) * (size_t)c->scripts->n);
}

/* The context is gone (freed by hiredis or by us): forget it and schedule a reconnect, unless
 * the connection is closed for good. */
static void conn_lost(rd_rdv_conn *c)
{
    c->ac = NULL;
    c->npending = 0;
    scripts_forget(c);
    if (c->state == RD_RDV_CLOSED)
        return;
    set_state(c, RD_RDV_DOWN);
    if (c->retry == NULL)
        return;
    struct timeval tv = {c->backoff_ms / 1000, (c->backoff_ms % 1000) * 1000};
    evtimer_add(c->retry, &tv);
    c->backoff_ms = c->backoff_ms * 2 > RDV_BACKOFF_MAX_MS ? RDV_BACKOFF_MAX_MS : c->backoff_ms * 2;
}

/* Frees c's context from the top of the loop (not from a hiredis callback): pending callbacks
 * run with NULL replies, then conn_lost. */
static void conn_close(rd_rdv_conn *c)
{
    redisAsyncContext *ac = c->ac;
    if (ac == NULL)
        return;
    int connected = (ac->c.flags & REDIS_CONNECTED) != 0;
    redisAsyncFree(ac); /* calls on_disconnect, hence conn_lost, when connected */
    if (!connected || c->ac == ac)
        conn_lost(c);
}

void rd_rdv_conn_answered(rd_rdv_conn *c, const redisAsyncContext *ac)
{
    if (ac != c->ac)
        return;
    if (c->npending > 0)
        c->npending--;
    c->progress_ms = rd_now_ms();
}

void rd_rdv_conn_sent(rd_rdv_conn *c)
{
    if (c->npending++ == 0)
        c->progress_ms = rd_now_ms();
}

/* hiredis: the TCP connect finished. On failure hiredis frees the context after this. */
static void on_connect(const redisAsyncContext *ac, int status)
{
    rd_rdv_conn *c = ac->data;
    if (c == NULL || c->ac != ac)
        return;
    if (status != REDIS_OK) {
        rd_rdv_conn_complain(c, RD_LOG_WARN, "connect: %s (retrying)", ac->errstr);
        conn_lost(c);
    }
}

/* hiredis: a connected context is going away (error, EOF, or our redisAsyncFree). */
static void on_disconnect(const redisAsyncContext *ac, int status)
{
    rd_rdv_conn *c = ac->data;
    if (c == NULL || c->ac != ac)
        return;
    if (c->state != RD_RDV_CLOSED && !c->warned)
        rd_rdv_conn_complain(c, RD_LOG_WARN, "lost: %s (reconnecting)",
                             status == REDIS_OK ? "closed" : ac->errstr);
    conn_lost(c);
}

/* One handshake reply (AUTH, SELECT, PING). An error drops the connection; the final PING's
 * answer makes it READY. */
static void on_handshake(redisAsyncContext *ac, void *reply, void *privdata)
{
    rd_rdv_conn *c = privdata;
    redisReply *rep = reply;
    rd_rdv_conn_answered(c, ac);
    if (rep == NULL || c->ac != ac || c->state == RD_RDV_CLOSED)
        return;
    if (rep->type == REDIS_REPLY_ERROR) {
        rd_rdv_conn_complain(c, RD_LOG_ERROR,
                             "handshake: %s (check the password and URL; retrying)", rep->str);
        redisAsyncFree(ac); /* deferred until this callback returns; then on_disconnect */
        return;
    }
    if (rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, "PONG") == 0) {
        if (c->warned)
            rd_log(RD_LOG_INFO, SUBSYS, "%s connection to %s:%d: up", c->what, c->srv->host,
                   c->srv->port);
        c->warned = 0;
        c->lasterr[0] = '\0';
        c->backoff_ms = RDV_BACKOFF_MIN_MS;
        set_state(c, RD_RDV_READY);
        c->on_ready(c->arg);
    }
}

/* SCRIPT LOAD's answer: the next script's SHA1 for EVALSHA. */
static void on_script_load(redisAsyncContext *ac, void *reply, void *privdata)
{
    rd_rdv_conn *c = privdata;
    const rd_rdv_scripts *s = c->scripts;
    redisReply *rep = reply;
    rd_rdv_conn_answered(c, ac);
    if (rep == NULL || c->ac != ac)
        return;
    for (int i = 0; i < s->n; i++) {
        if (s->sha[i][0] != '\0')
            continue;
        if (rep->type == REDIS_REPLY_STRING && rep->len == 40)
            memcpy(s->sha[i], rep->str, 41);
        else
            rd_log(RD_LOG_WARN, SUBSYS, "SCRIPT LOAD %s: unexpected reply; using EVAL", s->name[i]);
        s->sha[i][40] = '\0';
        /* Mark a failed load as tried with a non-hex byte so the next load fills the next. */
        if (rep->type != REDIS_REPLY_STRING || rep->len != 40)
            s->sha[i][0] = '!';
        break;
    }
}

static void conn_connect(rd_rdv_conn *c, const char *ip);

int rd_rdv_host_numeric(const rd_rdv_server *srv)
{
    struct in6_addr scratch;
    return inet_pton(AF_INET, srv->host, &scratch) == 1 ||
           inet_pton(AF_INET6, srv->host, &scratch) == 1;
}

/* The host name's lookup ended: connects to its address (IPv4 first), or retries later. */
static void on_resolved(void *arg, const struct sockaddr *sa, socklen_t len, const char *why)
{
    rd_rdv_conn *c = arg;
    c->resolving = NULL;
    char ip[INET6_ADDRSTRLEN] = "";
    (void)len;
    if (sa != NULL && sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, ip, sizeof(ip));
    else if (sa != NULL && sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, ip, sizeof(ip));
    if (ip[0] == '\0') {
        rd_rdv_conn_complain(c, RD_LOG_WARN, "resolve %s: %s (retrying)", c->srv->host,
                             why != NULL && why[0] != '\0' ? why : "no address");
        conn_lost(c);
        return;
    }
    snprintf(c->srv->ip, sizeof(c->srv->ip), "%s", ip);
    conn_connect(c, ip);
}

/* See rendezvous_conn.h: through evdns, so that a slow resolver never holds the event loop. */
void rd_rdv_conn_start(rd_rdv_conn *c)
{
    rd_rdv_server *srv = c->srv;
    if (c->ac != NULL || c->state == RD_RDV_CLOSED || c->resolving != NULL)
        return;
    if (rd_rdv_host_numeric(srv)) {
        conn_connect(c, srv->host);
        return;
    }
    set_state(c, RD_RDV_CONNECTING);
    c->resolving = rd_resolve(srv->resolver, srv->host, NULL, on_resolved, c);
    if (c->resolving == NULL) {
        rd_rdv_conn_complain(c, RD_LOG_WARN, "resolve %s: out of memory (retrying)", srv->host);
        conn_lost(c);
    }
}

/* Queues the handshake on c's new context: AUTH, SELECT, the SCRIPT LOADs and a PING, which go
 * out when the connect completes. Returns 1 when all were queued. */
static int handshake_queue(rd_rdv_conn *c)
{
    rd_rdv_server *srv = c->srv;
    redisAsyncContext *ac = c->ac;
    int ok = 1;
    if (srv->password != NULL) {
        const char *argv[] = {"AUTH", srv->password};
        ok = ok && redisAsyncCommandArgv(ac, on_handshake, c, 2, argv, NULL) == REDIS_OK;
        rd_rdv_conn_sent(c);
    }
    if (srv->db != 0) {
        ok = ok && redisAsyncCommand(ac, on_handshake, c, "SELECT %d", srv->db) == REDIS_OK;
        rd_rdv_conn_sent(c);
    }
    scripts_forget(c);
    for (int i = 0; c->scripts != NULL && i < c->scripts->n; i++) {
        const char *argv[] = {"SCRIPT", "LOAD", c->scripts->text[i]};
        ok = ok && redisAsyncCommandArgv(ac, on_script_load, c, 3, argv, NULL) == REDIS_OK;
        rd_rdv_conn_sent(c);
    }
    ok = ok && redisAsyncCommand(ac, on_handshake, c, "PING") == REDIS_OK;
    rd_rdv_conn_sent(c);
    return ok;
}

/* Connects c to ip and queues the handshake at once. */
static void conn_connect(rd_rdv_conn *c, const char *ip)
{
    rd_rdv_server *srv = c->srv;
    if (c->ac != NULL || c->state == RD_RDV_CLOSED)
        return;
    redisAsyncContext *ac = redisAsyncConnect(ip, srv->port);
    if (ac == NULL) {
        rd_rdv_conn_complain(c, RD_LOG_WARN, "redisAsyncConnect: out of memory (retrying)");
        conn_lost(c);
        return;
    }
    if (ac->err) {
        rd_rdv_conn_complain(c, RD_LOG_WARN, "connect: %s (retrying)", ac->errstr);
        redisAsyncFree(ac);
        conn_lost(c);
        return;
    }
    ac->data = c;
    if (redisLibeventAttach(ac, srv->base) != REDIS_OK) {
        rd_rdv_conn_complain(c, RD_LOG_WARN, "redisLibeventAttach failed (retrying)");
        redisAsyncFree(ac);
        conn_lost(c);
        return;
    }
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    c->ac = ac;
    c->npending = 0;
    c->progress_ms = rd_now_ms();
    set_state(c, RD_RDV_CONNECTING);
    if (!handshake_queue(c)) {
        rd_rdv_conn_complain(c, RD_LOG_WARN, "queueing the handshake failed (retrying)");
        conn_close(c);
    }
}

/* Reconnect timer. */
static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    rd_rdv_conn_start(arg);
}

int rd_rdv_conn_init(rd_rdv_conn *c, rd_rdv_server *srv, const char *what,
                     const rd_rdv_scripts *scripts, rd_rdv_conn_ready_fn on_ready, void *arg)
{
    memset(c, 0, sizeof(*c));
    c->srv = srv;
    c->what = what;
    c->scripts = scripts;
    c->on_ready = on_ready;
    c->arg = arg;
    c->state = RD_RDV_DOWN;
    c->backoff_ms = RDV_BACKOFF_MIN_MS;
    c->retry = evtimer_new(srv->base, on_retry, c);
    return c->retry != NULL ? 0 : -1;
}

void rd_rdv_conn_fini(rd_rdv_conn *c)
{
    if (c->srv == NULL)
        return; /* never set up (zeroed) */
    set_state(c, RD_RDV_CLOSED);
    rd_lookup_cancel(c->resolving);
    c->resolving = NULL;
    conn_close(c);
    if (c->retry != NULL)
        event_free(c->retry);
    c->retry = NULL;
}

void rd_rdv_conn_check(rd_rdv_conn *c, int64_t limit, int64_t now)
{
    if (c->ac == NULL || (c->state == RD_RDV_READY && c->npending == 0))
        return;
    if (now - c->progress_ms <= limit)
        return;
    rd_rdv_conn_complain(c, RD_LOG_WARN, "no answer for %" PRId64 " ms (reconnecting)",
                         now - c->progress_ms);
    conn_close(c);
}
