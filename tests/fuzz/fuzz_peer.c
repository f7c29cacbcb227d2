/* Fuzzes daemon-to-daemon connections over real loopback sockets: the handshake state machine on
 * both sides (the bytes before authentication, then the PeerHello a server decodes and the answer
 * a dialling client decodes, after an honest challenge-response), and the framed control channel
 * that carries negotiation between nodes, whose Relays and the Ready and Go in them are decoded
 * as world_ctrl.c does, in the clear and sealed (--encrypt). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "auth.h"
#include "counters.h"
#include "log.h"
#include "peer.h"
#include "schedmsg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define STEP_LIMIT_MS 5000 /* every handshake here ends at the harness's EOF, long before this */

typedef enum {
    MODE_SERVER_AUTHED,  /* the input follows an honest answer: PeerHello frames to the server */
    MODE_SERVER_RAW,     /* the input is the client's answer itself */
    MODE_CLIENT_AUTHED,  /* the input answers the client's PeerHello after honest auth */
    MODE_CLIENT_RAW,     /* the input is the server's challenge itself */
    MODE_CHANNEL,        /* the input is a control channel's byte stream */
    MODE_SEALED,         /* records for a sealed channel: frames the harness seals, raw bytes */
    MODE_SERVER_SEALING, /* as MODE_SERVER_AUTHED, to a listener with --encrypt */
    MODE_CLIENT_SEALING, /* as MODE_CLIENT_AUTHED, from a dialler with --encrypt */
    MODE_COUNT
} fuzz_mode;

typedef struct {
    struct event_base *base;
    rd_auth_key key;
    rd_peer_net *net, *sealing; /* the second with --encrypt */
    int listen_fd;              /* the harness as a server a dial connects to */
    char listen_addr[64];
    int dial_done, chan_failed, msgs;
} peer_fixture;

static peer_fixture fx;

/* Accepts a PeerHello of an even generation, refuses the rest, as world.c's accept may. */
static ringd_result_t on_peer_hello(void *arg, const Ringd__PeerHello *h, int fd,
                                    const rd_seal *seal, const char *remote, uint64_t *generation,
                                    char *err, size_t errlen)
{
    (void)arg;
    (void)seal;
    (void)remote;
    if (h->generation % 2 != 0 || !rd_name_valid(h->job)) {
        snprintf(err, errlen, "job %s: not at generation %llu",
                 rd_name_valid(h->job) ? h->job : "?", (unsigned long long)h->generation);
        return RINGD_E_REFUSED;
    }
    *generation = h->generation;
    close(fd);
    return RINGD_OK;
}

static void on_dial(void *arg, int fd, const rd_seal *seal, const char *why)
{
    (void)arg;
    (void)seal;
    (void)why;
    if (fd >= 0)
        close(fd);
    fx.dial_done = 1;
}

static void on_chan_msg(void *arg, rd_peer_chan *c, const rd_msg *m)
{
    (void)arg;
    (void)c;
    if (m->body_case == RINGD__MSG__BODY__NOT_SET)
        abort();
    rd_schedmsg v;
    char err[256];
    for (size_t k = 0; m->body_case == RINGD__MSG__BODY_RELAYS && k < m->relays->n_relays; k++) {
        rd_msg *inner = NULL; /* what a Relay carries, as world_ctrl.c opens it */
        uint32_t origin;
        int to;
        if (rd_relay_open(m->relays->relays[k], &inner, &origin, &to, err, sizeof(err)) ==
                RD_FRAME_OK &&
            rd_schedmsg_decode(inner, &v, err, sizeof(err)) == RD_SCHEDMSG_DECODED)
            rd_schedmsg_release(&v);
        rd_frame_free(inner);
    }
    if (rd_schedmsg_decode(m, &v, err, sizeof(err)) == RD_SCHEDMSG_DECODED)
        rd_schedmsg_release(&v);
    fx.msgs++;
}

static void on_chan_err(void *arg, rd_peer_chan *c, const char *why)
{
    (void)arg;
    (void)c;
    (void)why;
    fx.chan_failed = 1;
}

/* The peer listener on an ephemeral loopback port, and a listening socket for dials. */
static void fixture_init(void)
{
    char err[256];
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sin);
    signal(SIGPIPE, SIG_IGN);
    rd_log_set_level(RD_LOG_ERROR);
    if (rd_auth_init() != 0)
        abort();
    rd_auth_insecure(&fx.key);
    fx.base = event_base_new();
    fx.net = rd_peer_net_new(fx.base, "127.0.0.1:0", &fx.key, 0, STEP_LIMIT_MS, on_peer_hello, NULL,
                             err, sizeof(err));
    if (fx.net != NULL)
        fx.sealing = rd_peer_net_new(fx.base, "127.0.0.1:0", &fx.key, 1, STEP_LIMIT_MS,
                                     on_peer_hello, NULL, err, sizeof(err));
    fx.listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fx.base == NULL || fx.net == NULL || fx.sealing == NULL || fx.listen_fd < 0 ||
        bind(fx.listen_fd, (struct sockaddr *)&sin, sizeof(sin)) != 0 ||
        listen(fx.listen_fd, 64) != 0 ||
        getsockname(fx.listen_fd, (struct sockaddr *)&sin, &len) != 0) {
        fprintf(stderr, "fuzz_peer: setup failed: %s\n",
                fx.net == NULL || fx.sealing == NULL ? err : strerror(errno));
        abort();
    }
    snprintf(fx.listen_addr, sizeof(fx.listen_addr), "127.0.0.1:%u", ntohs(sin.sin_port));
}

/* Turns the loop once; aborts when one exchange takes far longer than any should. */
static void turn(int64_t until)
{
    if (rd_now_ms() > until) {
        fprintf(stderr, "fuzz_peer: a handshake or channel made no progress in %d ms\n",
                STEP_LIMIT_MS);
        abort();
    }
    event_base_loop(fx.base, EVLOOP_NONBLOCK);
}

/* Reads exactly n bytes from fd while the loop turns. Returns 0, or -1 at EOF or error. */
static int recv_exact(int fd, uint8_t *buf, size_t n, int64_t until)
{
    size_t have = 0;
    while (have < n) {
        ssize_t r = recv(fd, buf + have, n - have, MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            return -1;
        if (r > 0)
            have += (size_t)r;
        else
            turn(until);
    }
    return 0;
}

/* Sends all of buf (the loop turns while the socket is full), unless *stop becomes set (stop
 * may be NULL); errors are the daemon hanging up. */
static void send_until(int fd, const uint8_t *buf, size_t n, int64_t until, const int *stop)
{
    while (n > 0 && (stop == NULL || !*stop)) {
        ssize_t w = send(fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return;
        if (w > 0) {
            buf += w;
            n -= (size_t)w;
        } else {
            turn(until);
        }
    }
}

static void send_all(int fd, const uint8_t *buf, size_t n, int64_t until)
{
    send_until(fd, buf, n, until, NULL);
}

/* send_all into a control channel, which stops reading once it has failed (its owner frees it,
 * closing the socket): what the input has left is not sent then (a full socket buffer would
 * wait for a reader that is gone). */
static void send_chan(int fd, const uint8_t *buf, size_t n, int64_t until)
{
    send_until(fd, buf, n, until, &fx.chan_failed);
}

/* Waits for the daemon to close its end (after its verdict), reading what it sends. */
static void wait_eof(int fd, int64_t until)
{
    uint8_t sink[4096];
    for (;;) {
        ssize_t r = recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            return;
        if (r < 0)
            turn(until);
    }
}

/* Closes with a reset, so that thousands of handshakes a second leave no TIME_WAIT behind. */
static void close_hard(int fd)
{
    struct linger l = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    close(fd);
}

/* connect(2) that a signal does not end (libFuzzer's timers interrupt system calls): an
 * interrupted connect goes on in the background, so it is waited for. Returns 0 or -1. */
static int connect_blocking(int fd, const struct sockaddr *sa, socklen_t len)
{
    if (connect(fd, sa, len) == 0)
        return 0;
    if (errno != EINTR)
        return -1;
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    while (poll(&p, 1, -1) < 0)
        if (errno != EINTR)
            return -1;
    int e = 0;
    socklen_t el = sizeof(e);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) != 0 || e != 0) {
        errno = e;
        return -1;
    }
    return 0;
}

/* The harness dials the daemon's peer listener; with authed, it answers honestly first. */
static void run_server(rd_peer_net *net, const uint8_t *data, size_t size, int authed)
{
    int64_t until = rd_now_ms() + STEP_LIMIT_MS;
    struct sockaddr_storage ss;
    unsigned sslen;
    char err[256];
    if (rd_peer_resolve(rd_peer_net_address(net), &ss, &sslen, err, sizeof(err)) != 0)
        abort();
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect_blocking(fd, (struct sockaddr *)&ss, sslen) != 0) {
        fprintf(stderr, "fuzz_peer: connect: %s\n", strerror(errno));
        abort();
    }
    if (authed) {
        uint8_t chal[RD_AUTH_CHALLENGE_LEN], ans[RD_AUTH_ANSWER_LEN], confirm[RD_AUTH_CONFIRM_LEN];
        if (recv_exact(fd, chal, sizeof(chal), until) != 0 || rd_auth_answer(&fx.key, chal, ans))
            abort();
        send_all(fd, ans, sizeof(ans), until);
        if (recv_exact(fd, confirm, sizeof(confirm), until) != 0 ||
            rd_auth_verify_confirm(&fx.key, chal, ans, confirm) != 0)
            abort();
    }
    send_all(fd, data, size, until);
    shutdown(fd, SHUT_WR);
    wait_eof(fd, until);
    close_hard(fd);
}

/* The daemon dials the harness; with authed, the harness challenges and confirms honestly and
 * reads the PeerHello before the input answers it. */
static void run_client(rd_peer_net *net, const uint8_t *data, size_t size, int authed)
{
    int64_t until = rd_now_ms() + STEP_LIMIT_MS;
    Ringd__PeerHello h = RINGD__PEER_HELLO__INIT;
    h.protocol = RD_PEER_PROTOCOL_VERSION;
    h.job = "fuzz";
    h.generation = 4;
    h.node = "node-a";
    h.kind = RINGD__LINK_KIND__LINK_CONTROL;
    h.conns = 1;
    h.segment_size = 65536;
    fx.dial_done = 0;
    rd_peer_dial *d = rd_peer_dial_new(net, fx.listen_addr, &h, on_dial, NULL);
    if (d == NULL)
        abort();
    int fd;
    while ((fd = accept4(fx.listen_fd, NULL, NULL, SOCK_CLOEXEC)) < 0)
        turn(until);
    if (authed) {
        uint8_t chal[RD_AUTH_CHALLENGE_LEN], ans[RD_AUTH_ANSWER_LEN], confirm[RD_AUTH_CONFIRM_LEN];
        uint8_t hello[RD_FRAME_HEADER + 4096];
        rd_auth_challenge(chal);
        send_all(fd, chal, sizeof(chal), until);
        if (recv_exact(fd, ans, sizeof(ans), until) != 0 ||
            rd_auth_verify_answer(&fx.key, chal, ans, confirm) != 0)
            abort();
        send_all(fd, confirm, sizeof(confirm), until);
        if (recv_exact(fd, hello, RD_FRAME_HEADER, until) != 0)
            abort();
        uint32_t n = rd_frame_payload_len(hello);
        if (n > 4096 || recv_exact(fd, hello + RD_FRAME_HEADER, n, until) != 0)
            abort();
    }
    send_all(fd, data, size, until);
    shutdown(fd, SHUT_WR);
    while (!fx.dial_done)
        turn(until);
    close_hard(fd);
}

/* A control channel with keys seal over a socket pair; sp[1] is the harness's end. */
static rd_peer_chan *chan_open(const rd_seal *seal, int sp[2])
{
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0)
        abort();
    fx.chan_failed = 0;
    rd_peer_chan *c =
        rd_peer_chan_new(fx.base, sp[0], seal, "fuzz", 65536, on_chan_msg, on_chan_err, NULL);
    if (c == NULL)
        abort();
    return c;
}

/* The harness's end is done: the channel reads to EOF, fails there, and goes. */
static void chan_close(rd_peer_chan *c, int sp[2], int64_t until)
{
    shutdown(sp[1], SHUT_WR);
    while (!fx.chan_failed)
        turn(until);
    rd_peer_chan_free(c);
    close(sp[1]);
    rd_peer_chan_free_lingering();
}

/* A control channel over a socket pair reads the input as frames until it fails at EOF. */
static void run_channel(const uint8_t *data, size_t size)
{
    int64_t until = rd_now_ms() + STEP_LIMIT_MS;
    int sp[2];
    const rd_seal clear = {0};
    rd_peer_chan *c = chan_open(&clear, sp);
    send_chan(sp[1], data, size, until);
    chan_close(c, sp, until);
}

/* A sealed control channel (--encrypt) reads records of the input: a 2-byte little-endian
 * length L, then L bytes, sealed by the harness as one frame with the peer's keys when the top
 * bit of L is clear (frames that open, whose payload the decoder then meets), or sent as they are
 * when it is set (forged, cut or replayed bytes), until the channel fails at EOF. */
static void run_sealed(const uint8_t *data, size_t size)
{
    int64_t until = rd_now_ms() + STEP_LIMIT_MS;
    uint8_t chal[RD_AUTH_CHALLENGE_LEN] = {1}, ans[RD_AUTH_ANSWER_LEN] = {2}, hello[8] = {3};
    rd_seal mine, peer;
    rd_seal_derive(&mine, RD_CIPHER_CHACHA, &fx.key, 1, chal, ans, hello, sizeof(hello));
    rd_seal_derive(&peer, RD_CIPHER_CHACHA, &fx.key, 0, chal, ans, hello, sizeof(hello));
    int sp[2];
    rd_peer_chan *c = chan_open(&mine, sp);
    static uint8_t f[RD_FRAME_HEADER + 0x8000 + RD_SEAL_TAG];
    while (size >= 2 && !fx.chan_failed) {
        size_t len = (size_t)(data[0] | (data[1] & 0x7f) << 8), raw = data[1] & 0x80;
        data += 2;
        size -= 2;
        len = len < size ? len : size;
        if (raw) {
            send_chan(sp[1], data, len, until);
        } else {
            uint32_t n = (uint32_t)(len + RD_SEAL_TAG);
            for (int i = 0; i < 4; i++)
                f[i] = (uint8_t)(n >> (8 * i));
            if (rd_seal_seal(peer.cipher, &peer.tx, f + RD_FRAME_HEADER, f + RD_FRAME_HEADER + len,
                             data, len, f, RD_FRAME_HEADER) != 0)
                abort(); /* the harness's own sealing: out of memory */
            send_chan(sp[1], f, RD_FRAME_HEADER + n, until);
        }
        data += len;
        size -= len;
    }
    chan_close(c, sp, until);
}

/* The first byte picks the side and the moment the input takes over; the rest is the bytes. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (fx.base == NULL)
        fixture_init();
    if (size < 1)
        return 0;
    switch ((fuzz_mode)(data[0] % MODE_COUNT)) {
    case MODE_SERVER_AUTHED: run_server(fx.net, data + 1, size - 1, 1); break;
    case MODE_SERVER_RAW: run_server(fx.net, data + 1, size - 1, 0); break;
    case MODE_CLIENT_AUTHED: run_client(fx.net, data + 1, size - 1, 1); break;
    case MODE_CLIENT_RAW: run_client(fx.net, data + 1, size - 1, 0); break;
    case MODE_SERVER_SEALING: run_server(fx.sealing, data + 1, size - 1, 1); break;
    case MODE_CLIENT_SEALING: run_client(fx.sealing, data + 1, size - 1, 1); break;
    case MODE_CHANNEL: run_channel(data + 1, size - 1); break;
    case MODE_SEALED: run_sealed(data + 1, size - 1); break;
    case MODE_COUNT: break;
    }
    return 0;
}
