/* Fuzzes a client session end to end: a real daemon state (event loop, executor, jobs, arenas)
 * reads the input as a client's bytes on its Unix socket and in its shared submission queue, and
 * every message handler a client reaches (Hello, Submit, StatusRequest, DrainRequest, Poke, the
 * rest refused) runs as in ringd. */
#define _GNU_SOURCE
#include <event2/event.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "admin.h"
#include "arena.h"
#include "counters.h"
#include "drain.h"
#include "exec.h"
#include "job.h"
#include "log.h"
#include "ctlq.h"
#include "session.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define TEARDOWN_LIMIT_MS 10000 /* a session and its job must be gone this long after EOF */

/* The layers of a one-node daemon (no network context). */
typedef struct {
    rd_config cfg;
    rd_devices devices; /* two made-up GPUs: Hellos asking for devices reach both paths */
    rd_counters counters;
    struct event_base *base;
    rd_exec *exec;
    rd_engine *engine;
    rd_front front;
} daemon_state;

static daemon_state state;

/* A fresh engine under the front (after a drain, which lasts for the engine's life). */
static void engine_start(daemon_state *d)
{
    rd_engine_free(d->engine);
    d->engine = rd_engine_new(d->base, &d->cfg, &d->counters, NULL, d->exec, NULL,
                              &rd_session_client_events);
    if (d->engine == NULL) {
        fprintf(stderr, "fuzz_session: out of memory\n");
        abort();
    }
    d->front.engine = d->engine;
}

/* The daemon as main.c wires it for one node, with small arenas so each Hello is cheap. */
static daemon_state *daemon_get(void)
{
    static int ready;
    daemon_state *d = &state;
    if (ready)
        return d;
    char *argv[] = {"ringd", "--threads",   "1",   "--arena-size", "128K",  "--arena-max",
                    "1M",    "--max-frame", "64K", "--log-level",  "error", "--poll-us",
                    "0",     NULL};
    char *envp[] = {NULL};
    char err[512];
    memset(d, 0, sizeof(*d));
    if (rd_config_parse(&d->cfg, 13, argv, envp, stderr, err, sizeof(err)) != RD_CONFIG_RUN) {
        fprintf(stderr, "fuzz_session: %s\n", err);
        abort();
    }
    rd_log_set_level((rd_log_level)d->cfg.log_level);
    signal(SIGPIPE, SIG_IGN);
    d->base = event_base_new();
    if (d->base == NULL || (d->exec = rd_exec_new(d->base, 1, err, sizeof(err))) == NULL) {
        fprintf(stderr, "fuzz_session: cannot start the daemon state: %s\n", err);
        abort();
    }
    d->devices.n = 2;
    d->devices.dev[0] = (rd_device){0, "made-up GPU 0", "GPU-made-up-0", UINT64_C(1) << 30};
    d->devices.dev[1] = (rd_device){3, "made-up GPU 3", "GPU-made-up-3", UINT64_C(1) << 30};
    d->front = (rd_front){
        .base = d->base,
        .cfg = &d->cfg,
        .devices = &d->devices,
        .counters = &d->counters,
        .admin = rd_admin_handlers,
        .nadmin = rd_admin_nhandlers,
        .forget = rd_admin_forget,
    };
    clock_gettime(CLOCK_MONOTONIC, &d->front.started);
    engine_start(d);
    ready = 1;
    return d;
}

/* Reads and drops what the daemon sent, closing any arena fd passed along. */
static void drain_replies(int fd)
{
    for (;;) {
        char buf[65536];
        union {
            struct cmsghdr h;
            char space[CMSG_SPACE(4 * sizeof(int))];
        } ctl;
        struct iovec iov = {buf, sizeof(buf)};
        struct msghdr mh = {.msg_iov = &iov,
                            .msg_iovlen = 1,
                            .msg_control = ctl.space,
                            .msg_controllen = sizeof(ctl.space)};
        ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n <= 0)
            return;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c)) {
            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                continue;
            size_t nfds = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < nfds; i++) {
                int passed;
                memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                close(passed);
            }
        }
    }
}

/* One turn of ringd's loop: events, then the control queues. */
static void turn(daemon_state *d, int client)
{
    event_base_loop(d->base, EVLOOP_NONBLOCK);
    rd_session_poll_queues(&d->front);
    if (client >= 0)
        drain_replies(client);
}

/* Writes the client's socket bytes, turning the loop whenever the socket is full. */
static void send_all(daemon_state *d, int client, const uint8_t *p, size_t len)
{
    for (int spins = 0; len > 0 && spins < 10000; spins++) {
        ssize_t n = send(client, p, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
        } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            return; /* the daemon closed the session */
        }
        turn(d, client);
    }
}

/* Appends bytes to the session's submission queue as a client would (up to the queue's room). */
static void ring_write(rd_session *s, const uint8_t *p, size_t len)
{
    rd_ctrl *c = (rd_ctrl *)s->c.arena->base;
    uint64_t head = atomic_load(&c->sq.head), tail = atomic_load(&c->sq.tail);
    uint64_t room = RD_CTLQ_BYTES - (head - tail);
    if (head - tail > RD_CTLQ_BYTES)
        return;
    if (len > room)
        len = (size_t)room;
    for (size_t i = 0; i < len; i++)
        c->sq.data[(head + i) & (RD_CTLQ_BYTES - 1)] = p[i];
    atomic_store(&c->sq.head, head + len);
}

/* The input: a 2-byte little-endian count of socket bytes, those bytes (Hello, Submit, ...),
 * then bytes appended to the shared submission queue once the session is active. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    daemon_state *d = daemon_get();
    int sp[2];
    if (size < 2 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0)
        return 0;
    size_t nsock = (size_t)data[0] | (size_t)data[1] << 8;
    if (nsock > size - 2)
        nsock = size - 2;
    const uint8_t *sock = data + 2, *ring = data + 2 + nsock;
    size_t nring = size - 2 - nsock;

    fcntl(sp[0], F_SETFL, O_NONBLOCK);
    rd_session_accept(&d->front, sp[0]);
    send_all(d, sp[1], sock, nsock);
    for (int i = 0; i < 16; i++)
        turn(d, sp[1]);
    rd_session *s = d->front.sessions;
    if (s != NULL && s->state == RD_SESSION_ACTIVE && nring > 0) {
        ring_write(s, ring, nring);
        for (int i = 0; i < 16; i++)
            turn(d, sp[1]);
    }
    close(sp[1]);

    /* Hung up: the session, its ops and its job must all go away. */
    int64_t until = rd_now_ms() + TEARDOWN_LIMIT_MS;
    while (d->front.sessions != NULL || rd_engine_jobs(d->engine) != NULL) {
        if (rd_now_ms() > until) {
            fprintf(stderr,
                    "fuzz_session: %u sessions and %s left %d ms after the client hung up\n",
                    d->front.nsessions, rd_engine_jobs(d->engine) != NULL ? "a job" : "no job",
                    TEARDOWN_LIMIT_MS);
            abort();
        }
        turn(d, -1);
    }
    /* A DrainRequest drains the whole daemon for good; the next input starts from a fresh one. */
    if (d->front.drain != NULL) {
        rd_drain_free(&d->front);
        engine_start(d);
    }
    return 0;
}
