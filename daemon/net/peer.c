/* Daemon-to-daemon connections: TCP listener, authenticated handshakes as small state machines on
 * the loop (exact-length reads, so no byte past the handshake is consumed), framed channels. */
#define _GNU_SOURCE
#include "peer.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sodium.h>
#include <unistd.h>

#include "counters.h"
#include "log.h"
#include "resolve.h"

#define RD_PEER_HELLO_MAX 4096 /* handshake frames are small */
/* Inbound handshakes in progress at once: a forming ring's burst (a node is dialled by its
 * children in the control tree and its previous node, and alltoall's direct links by up to
 * RD_RING_NODES_MAX others), and no more, against strangers' floods. */
#define RD_PEER_SETUPS_MAX 256
/* Connections the kernel queues before accept: past it, a dialler's SYN is dropped and resent a
 * second later, so a forming ring's burst fits in it. */
#define RD_PEER_BACKLOG 1024
#define RD_PEER_CHAN_OUT_MAX (64u << 20) /* a channel whose peer reads nothing is dropped */

/* A handshake's steps. A server goes NEW, ANSWER, FRAME_LEN, FRAME; a client NEW, [RESOLVE,]
 * [CONNECT,] CHALLENGE, CONFIRM, FRAME_LEN, FRAME. It ends (freed) from any state: a failure, the
 * deadline, a cancelled dial, or its last frame read. */
typedef enum {
    SETUP_NEW,       /* either: created, nothing under way yet */
    SETUP_RESOLVE,   /* client: looking the peer's host name up (evdns), before SETUP_CONNECT */
    SETUP_CONNECT,   /* client: non-blocking connect in progress (or its failure, reported on
                        the next turn) */
    SETUP_CHALLENGE, /* client: reading the server's challenge */
    SETUP_ANSWER,    /* server: challenge sent; reading the client's answer */
    SETUP_CONFIRM,   /* client: answer sent; reading the server's confirmation */
    SETUP_FRAME_LEN, /* either: reading the 4-byte length of PeerHello / its answer */
    SETUP_FRAME,     /* either: reading that frame */
    SETUP_NSTATES
} setup_state;

static const char *const setup_state_names[SETUP_NSTATES] = {
    "new", "resolve", "connect", "challenge", "answer", "confirm", "frame length", "frame"};

/* The moves setup_set_state allows: setup_moves[from] has bit 1 << to. */
#define SETUP_BIT(st) (1u << (st))
static const unsigned setup_moves[SETUP_NSTATES] = {
    [SETUP_NEW] = SETUP_BIT(SETUP_RESOLVE) | SETUP_BIT(SETUP_CONNECT) | SETUP_BIT(SETUP_CHALLENGE) |
                  SETUP_BIT(SETUP_ANSWER),
    [SETUP_RESOLVE] = SETUP_BIT(SETUP_CONNECT) | SETUP_BIT(SETUP_CHALLENGE),
    [SETUP_CONNECT] = SETUP_BIT(SETUP_CHALLENGE),
    [SETUP_CHALLENGE] = SETUP_BIT(SETUP_CONFIRM),
    [SETUP_ANSWER] = SETUP_BIT(SETUP_FRAME_LEN),
    [SETUP_CONFIRM] = SETUP_BIT(SETUP_FRAME_LEN),
    [SETUP_FRAME_LEN] = SETUP_BIT(SETUP_FRAME),
    [SETUP_FRAME] = 0,
};

typedef struct setup {
    rd_peer_net *n;
    int fd;
    int client;
    setup_state state;
    struct event *ev;          /* readable (or writable while connecting), persistent */
    struct event *ev_deadline; /* the whole handshake's time limit, never extended */
    short armed;
    int quiet; /* the failure is routine: log it below warning */
    /* client: the error connect failed with at once (SO_ERROR no longer holds it), or 0 */
    int connect_err;
    rd_lookup *lookup;          /* client: SETUP_RESOLVE's lookup, under way */
    struct sockaddr_storage ss; /* client: the address to connect to */
    unsigned sslen;             /* 0 while unknown */
    char lookup_err[160];       /* client: why the lookup failed */
    uint8_t chal[RD_AUTH_CHALLENGE_LEN];
    uint8_t ans[RD_AUTH_ANSWER_LEN];
    uint8_t buf[RD_FRAME_HEADER + RD_PEER_HELLO_MAX];
    size_t have, need;
    char remote[RD_PEER_ADDR_MAX];
    uint8_t *hello; /* client: the packed PeerHello */
    size_t hello_len;
    rd_peer_dial_fn fn;
    void *arg;
    struct setup *prev, *next;
} setup;

struct rd_peer_dial {
    setup s;
};

struct rd_peer_net {
    struct event_base *base;
    rd_resolver *resolver; /* host names of peers, looked up off the loop */
    struct evconnlistener *listener;
    const rd_auth_key *key;
    rd_cipher cipher; /* --encrypt: the best this CPU runs; RD_CIPHER_NONE without */
    int64_t timeout_ms;
    rd_peer_accept_fn accept_fn;
    void *arg;
    setup *setups;
    unsigned ninbound;
    char address[RD_PEER_ADDR_MAX];
};

struct rd_peer_chan {
    struct bufferevent *bev;
    struct event *ev_fail;
    char name[RD_PEER_ADDR_MAX];
    uint32_t max_frame;
    rd_seal seal;   /* cipher RD_CIPHER_NONE: in the clear */
    uint8_t *plain; /* sealed: a frame opened, header included */
    size_t plain_cap;
    rd_peer_chan_msg_fn on_msg;
    rd_peer_chan_err_fn on_err;
    void *arg;
    char why[160];
    int busy, dead;
    struct rd_peer_chan *next, *prev; /* lingering */
};

/* Channels being closed: written out, half closed and read until the peer closes (a second at
 * most), so that the peer reads the last messages sent rather than a reset. */
static rd_peer_chan *lingering;

/* Splits "HOST:PORT" ("[V6]:PORT" too) into host and port, the port checked. Returns 0, or -1
 * with err set. */
static int addr_split(const char *addr, char *host, size_t hostlen, char port[8], char *err,
                      size_t errlen)
{
    const char *colon = strrchr(addr, ':');
    if (colon == NULL || colon == addr || colon[1] == '\0' || (size_t)(colon - addr) >= hostlen) {
        snprintf(err, errlen, "address '%s' is not HOST:PORT", addr);
        return -1;
    }
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    size_t hl = strlen(host);
    if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') {
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = '\0';
    }
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end != '\0' || p < 0 || p > 65535) {
        snprintf(err, errlen, "address '%s': bad port", addr);
        return -1;
    }
    snprintf(port, 8, "%ld", p);
    return 0;
}

/* getaddrinfo of host and port with flags into *ss. Returns 0, 1 for a name when flags say
 * AI_NUMERICHOST, or -1 with err set (naming addr). */
static int lookup(const char *addr, const char *host, const char *port, int flags,
                  struct sockaddr_storage *ss, unsigned *sslen, char *err, size_t errlen)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = flags;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc == EAI_NONAME && (flags & AI_NUMERICHOST))
        return 1;
    if (rc != 0 || res == NULL) {
        snprintf(err, errlen, "address '%s': %s", addr, gai_strerror(rc));
        if (res != NULL)
            freeaddrinfo(res);
        return -1;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *sslen = (unsigned)res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

/* A numeric address into *ss. Returns 0; 1 when host is a name (to look up); -1 with err set. */
static int resolve_numeric(const char *addr, struct sockaddr_storage *ss, unsigned *sslen,
                           char *host, size_t hostlen, char port[8], char *err, size_t errlen)
{
    if (addr_split(addr, host, hostlen, port, err, errlen) != 0)
        return -1;
    return lookup(addr, host, port, AI_NUMERICHOST | AI_NUMERICSERV, ss, sslen, err, errlen);
}

rd_status rd_peer_resolve(const char *addr, struct sockaddr_storage *ss, unsigned *sslen, char *err,
                          size_t errlen)
{
    char host[RD_PEER_ADDR_MAX], port[8];
    int rc = resolve_numeric(addr, ss, sslen, host, sizeof(host), port, err, errlen);
    if (rc == 1) /* a host name: one blocking lookup (start-up only) */
        rc = lookup(addr, host, port, AI_NUMERICSERV, ss, sslen, err, errlen);
    return rc == 0 ? RINGD_OK : RINGD_E_INVALID;
}

/* "HOST:PORT" of a socket address. */
static void format_addr(const struct sockaddr *sa, char *out, size_t len)
{
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        port = ntohs(in->sin_port);
        snprintf(out, len, "%s:%u", host, port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        port = ntohs(in6->sin6_port);
        snprintf(out, len, "[%s]:%u", host, port);
    } else {
        snprintf(out, len, "?");
    }
}

static void set_nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Writes all of buf on a fresh socket whose send buffer is empty. Returns 0, or -1 (errno). */
static int write_small(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            if (w == 0 || errno == EAGAIN)
                errno = ENOBUFS;
            return -1;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Packs m as a frame into a malloc'd buffer. */
static uint8_t *pack_frame(const rd_msg *m, size_t *len)
{
    *len = rd_frame_size(m);
    uint8_t *b = malloc(*len);
    if (b != NULL)
        rd_frame_pack(m, b);
    return b;
}

static void setup_unlink(setup *s)
{
    rd_peer_net *n = s->n;
    if (s->prev != NULL)
        s->prev->next = s->next;
    else if (n->setups == s)
        n->setups = s->next;
    if (s->next != NULL)
        s->next->prev = s->prev;
    s->prev = s->next = NULL;
    if (!s->client)
        n->ninbound--;
}

/* Frees a handshake; closes its fd unless handed over (fd < 0). */
static void setup_free(setup *s)
{
    rd_lookup_cancel(s->lookup);
    s->lookup = NULL;
    setup_unlink(s);
    if (s->ev != NULL)
        event_free(s->ev);
    if (s->ev_deadline != NULL)
        event_free(s->ev_deadline);
    if (s->fd >= 0)
        close(s->fd);
    free(s->hello);
    free(s);
}

/* Ends a handshake that failed: server side logs and closes; client side reports to its dialer. */
static void setup_fail(setup *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void setup_fail(setup *s, const char *fmt, ...)
{
    char why[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    if (!s->client) {
        /* a peer that hangs up mid-handshake is most often a dial its ring cancelled */
        rd_log(s->quiet ? RD_LOG_INFO : RD_LOG_WARN, "peer", "connection from %s: %s; closed",
               s->remote, why);
        setup_free(s);
        return;
    }
    rd_peer_dial_fn fn = s->fn;
    void *arg = s->arg;
    char msg[RD_PEER_ADDR_MAX + 400];
    snprintf(msg, sizeof(msg), "%s: %s", s->remote, why);
    setup_free(s);
    fn(arg, -1, NULL, msg);
}

static void on_setup_event(evutil_socket_t fd, short what, void *arg);

/* The one place a handshake changes state: the move must be one setup_moves allows (a
 * programmer error otherwise: an assertion, and an error in the log where assertions are
 * compiled out), and is logged at debug. */
static void setup_set_state(setup *s, setup_state st)
{
    if (!(setup_moves[s->state] & SETUP_BIT(st))) {
        rd_log(RD_LOG_ERROR, "peer", "handshake %s %s: illegal move %s -> %s",
               s->client ? "to" : "from", s->remote, setup_state_names[s->state],
               setup_state_names[st]);
        assert(!"illegal handshake state move");
    }
    rd_log(RD_LOG_DEBUG, "peer", "handshake %s %s: %s -> %s", s->client ? "to" : "from", s->remote,
           setup_state_names[s->state], setup_state_names[st]);
    s->state = st;
}

/* Waits for the next need bytes in state st. */
static void setup_expect(setup *s, setup_state st, size_t need)
{
    short want = st == SETUP_CONNECT ? EV_WRITE : EV_READ;
    setup_set_state(s, st);
    s->have = 0;
    s->need = need;
    if (s->armed != want) {
        event_del(s->ev);
        event_assign(s->ev, s->n->base, s->fd, want | EV_PERSIST, on_setup_event, s);
        event_add(s->ev, NULL);
        s->armed = want;
    }
}

/* Server: the client's PeerHello is in buf. */
static void server_hello(setup *s)
{
    rd_peer_net *n = s->n;
    rd_msg *m = NULL;
    size_t used;
    char err[384];
    if (rd_frame_decode(s->buf, s->have, RD_PEER_HELLO_MAX, &m, &used, err, sizeof(err)) !=
            RD_FRAME_OK ||
        m->body_case != RINGD__MSG__BODY_PEER_HELLO) {
        rd_frame_free(m);
        setup_fail(s, "first frame is not a PeerHello");
        return;
    }
    const Ringd__PeerHello *h = m->peer_hello;
    uint64_t gen = 0;
    int fd = s->fd;
    rd_seal seal = {0};
    rd_status rc = RINGD_E_REFUSED;
    if (h->protocol != RD_PEER_PROTOCOL_VERSION) {
        /* another version: the accept function says so, rather than what its fields mean */
        rc = n->accept_fn(n->arg, h, fd, &seal, s->remote, &gen, err, sizeof(err));
    } else if ((h->encrypt != RD_CIPHER_NONE) != (n->cipher != RD_CIPHER_NONE)) {
        snprintf(err, sizeof(err),
                 "node %s %s its links (--encrypt) and this one %s: give every daemon of the ring "
                 "the same --encrypt",
                 h->node, h->encrypt ? "seals" : "does not seal", n->cipher ? "does" : "does not");
        rd_log(RD_LOG_WARN, "peer", "connection from %s (node '%s', job '%s'): refused: %s",
               s->remote, h->node, h->job, err);
    } else if (h->encrypt > RD_CIPHER_AES) {
        snprintf(err, sizeof(err), "node %s asks for cipher %u, which this ringd does not know",
                 h->node, h->encrypt);
        rd_log(RD_LOG_WARN, "peer", "connection from %s (node '%s', job '%s'): refused: %s",
               s->remote, h->node, h->job, err);
    } else {
        if (n->cipher != RD_CIPHER_NONE)
            rd_seal_derive(&seal, rd_seal_agree(n->cipher, (rd_cipher)h->encrypt), n->key, 0,
                           s->chal, s->ans, s->buf, s->have);
        rc = n->accept_fn(n->arg, h, fd, &seal, s->remote, &gen, err, sizeof(err));
    }
    rd_msg r = RINGD__MSG__INIT;
    Ringd__PeerAccept pa = RINGD__PEER_ACCEPT__INIT;
    Ringd__Error e = RINGD__ERROR__INIT;
    if (rc == RINGD_OK) {
        pa.generation = gen;
        pa.cipher = (uint32_t)seal.cipher;
        r.body_case = RINGD__MSG__BODY_PEER_ACCEPT;
        r.peer_accept = &pa;
    } else {
        /* the accept function logged it at the level it deserves */
        e.status = (uint32_t)rc;
        e.message = err;
        r.body_case = RINGD__MSG__BODY_ERROR;
        r.error = &e;
    }
    size_t len;
    uint8_t *frame = pack_frame(&r, &len);
    if (frame != NULL)
        write_small(fd, frame, len); /* a failure shows on the first use of the link */
    free(frame);
    rd_frame_free(m);
    rd_seal_wipe(&seal);
    if (rc == RINGD_OK)
        s->fd = -1; /* handed over */
    setup_free(s);
}

/* Client: the server's answer to PeerHello is in buf. */
static void client_reply(setup *s)
{
    rd_msg *m = NULL;
    size_t used;
    char err[384];
    if (rd_frame_decode(s->buf, s->have, RD_PEER_HELLO_MAX, &m, &used, err, sizeof(err)) !=
        RD_FRAME_OK) {
        setup_fail(s, "bad answer to PeerHello: %s", err);
        return;
    }
    if (m->body_case == RINGD__MSG__BODY_ERROR) {
        snprintf(err, sizeof(err), "%s", m->error->message);
        rd_frame_free(m);
        setup_fail(s, "refused: %s", err);
        return;
    }
    if (m->body_case != RINGD__MSG__BODY_PEER_ACCEPT) {
        rd_frame_free(m);
        setup_fail(s, "answer to PeerHello is neither PeerAccept nor Error");
        return;
    }
    /* The server chose among the ciphers this node offered, and seals exactly when it does:
     * PeerAccept is not authenticated, so a sealing node takes no "in the clear" from it (a
     * cipher altered in flight only leaves the two ends with different keys). */
    rd_cipher mine = s->n->cipher, theirs = (rd_cipher)m->peer_accept->cipher;
    rd_frame_free(m);
    if (mine == RD_CIPHER_NONE ? theirs != RD_CIPHER_NONE
                               : theirs == RD_CIPHER_NONE || theirs > mine) {
        setup_fail(s,
                   "the peer answered with cipher %u where this node %s: give every daemon of "
                   "the ring the same --encrypt",
                   (unsigned)theirs, mine ? "seals its links (--encrypt)" : "does not seal");
        return;
    }
    rd_seal seal = {0};
    if (theirs != RD_CIPHER_NONE)
        rd_seal_derive(&seal, theirs, s->n->key, 1, s->chal, s->ans, s->hello, s->hello_len);
    int fd = s->fd;
    rd_peer_dial_fn fn = s->fn;
    void *arg = s->arg;
    s->fd = -1;
    setup_free(s);
    fn(arg, fd, &seal, NULL);
    rd_seal_wipe(&seal);
}

/* Acts on a completely read piece of the handshake. Returns 1 while the handshake goes on, 0 once
 * it has ended (s is freed). */
static int setup_step(setup *s)
{
    const rd_auth_key *k = s->n->key;
    uint8_t confirm[RD_AUTH_CONFIRM_LEN];
    switch (s->state) {
    case SETUP_CONNECT: {
        int e = s->connect_err;
        socklen_t el = sizeof(e);
        if (e != 0 || getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &e, &el) != 0 || e != 0) {
            setup_fail(s, "connect: %s", strerror(e ? e : errno));
            return 0;
        }
        setup_expect(s, SETUP_CHALLENGE, RD_AUTH_CHALLENGE_LEN);
        return 1;
    }
    case SETUP_CHALLENGE:
        memcpy(s->chal, s->buf, RD_AUTH_CHALLENGE_LEN);
        if (rd_auth_answer(k, s->chal, s->ans) != 0) {
            setup_fail(s, "not a ringd peer (bad challenge)");
            return 0;
        }
        if (write_small(s->fd, s->ans, sizeof(s->ans)) != 0) {
            setup_fail(s, "send: %s", strerror(errno));
            return 0;
        }
        setup_expect(s, SETUP_CONFIRM, RD_AUTH_CONFIRM_LEN);
        return 1;
    case SETUP_ANSWER:
        memcpy(s->ans, s->buf, RD_AUTH_ANSWER_LEN);
        if (rd_auth_verify_answer(k, s->chal, s->ans, confirm) != 0) {
            setup_fail(s, "authentication failed (wrong or missing ring key)");
            return 0;
        }
        if (write_small(s->fd, confirm, sizeof(confirm)) != 0) {
            setup_fail(s, "send: %s", strerror(errno));
            return 0;
        }
        setup_expect(s, SETUP_FRAME_LEN, RD_FRAME_HEADER);
        return 1;
    case SETUP_CONFIRM:
        if (rd_auth_verify_confirm(k, s->chal, s->ans, s->buf) != 0) {
            setup_fail(s, "authentication failed: the peer does not hold the ring key");
            return 0;
        }
        if (write_small(s->fd, s->hello, s->hello_len) != 0) {
            setup_fail(s, "send: %s", strerror(errno));
            return 0;
        }
        setup_expect(s, SETUP_FRAME_LEN, RD_FRAME_HEADER);
        return 1;
    case SETUP_FRAME_LEN: {
        uint32_t n = rd_frame_payload_len(s->buf);
        if (n == 0 || n > RD_PEER_HELLO_MAX) {
            setup_fail(s, "handshake frame of %u bytes", n);
            return 0;
        }
        setup_set_state(s, SETUP_FRAME);
        s->need = RD_FRAME_HEADER + n; /* keeps the header in buf */
        return 1;
    }
    case SETUP_FRAME:
        if (s->client)
            client_reply(s);
        else
            server_hello(s);
        return 0;
    case SETUP_NEW:
    case SETUP_RESOLVE: /* on_dial_resolved hands it to dial_connect, never here */
    case SETUP_NSTATES: break;
    }
    return 0;
}

static void on_setup_deadline(evutil_socket_t fd, short what, void *arg)
{
    setup *s = arg;
    (void)fd;
    (void)what;
    setup_fail(s, "handshake timed out after %lld ms", (long long)s->n->timeout_ms);
}

static void dial_connect(setup *s);

/* Reads what the handshake needs next, as far as it has arrived; a handshake whose bytes trickle
 * in is still bounded by its deadline. */
static void on_setup_event(evutil_socket_t fd, short what, void *arg)
{
    setup *s = arg;
    (void)what;
    if (s->state == SETUP_CONNECT) {
        setup_step(s);
        return;
    }
    for (;;) {
        ssize_t r = recv(fd, s->buf + s->have, s->need - s->have, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (r == 0 && s->client && s->state == SETUP_CONFIRM) {
            /* It hung up on this node's proof of the key: it holds another key (or none). */
            setup_fail(s, "handshake rejected: the peer hung up on this node's proof of the ring "
                          "key (most likely it holds another --key-file)");
            return;
        }
        if (r <= 0) {
            s->quiet = 1;
            setup_fail(s, "%s during the handshake",
                       r == 0 ? "connection closed" : strerror(errno));
            return;
        }
        s->have += (size_t)r;
        if (s->have == s->need && !setup_step(s))
            return; /* ended: s is freed */
    }
}

/* Creates a handshake on fd and links it into the net. */
static setup *setup_new(rd_peer_net *n, int fd, int client, size_t size)
{
    setup *s = calloc(1, size);
    if (s == NULL)
        return NULL;
    s->n = n;
    s->fd = fd;
    s->client = client;
    struct timeval tv = {n->timeout_ms / 1000, (n->timeout_ms % 1000) * 1000};
    s->ev = event_new(n->base, fd, EV_READ, on_setup_event, s);
    s->ev_deadline = evtimer_new(n->base, on_setup_deadline, s);
    if (s->ev == NULL || s->ev_deadline == NULL || evtimer_add(s->ev_deadline, &tv) != 0) {
        if (s->ev != NULL)
            event_free(s->ev);
        if (s->ev_deadline != NULL)
            event_free(s->ev_deadline);
        free(s);
        return NULL;
    }
    s->next = n->setups;
    if (n->setups != NULL)
        n->setups->prev = s;
    n->setups = s;
    if (!client)
        n->ninbound++;
    return s;
}

static void on_accept(struct evconnlistener *ev, evutil_socket_t fd, struct sockaddr *sa,
                      int socklen, void *arg)
{
    rd_peer_net *n = arg;
    char remote[RD_PEER_ADDR_MAX];
    (void)ev;
    (void)socklen;
    format_addr(sa, remote, sizeof(remote));
    if (n->ninbound >= RD_PEER_SETUPS_MAX) {
        rd_log(RD_LOG_WARN, "peer", "connection from %s: %u handshakes already in progress; closed",
               remote, n->ninbound);
        close(fd);
        return;
    }
    set_nodelay(fd);
    setup *s = setup_new(n, fd, 0, sizeof(setup));
    if (s == NULL) {
        close(fd);
        return;
    }
    snprintf(s->remote, sizeof(s->remote), "%s", remote);
    rd_auth_challenge(s->chal);
    if (write_small(fd, s->chal, sizeof(s->chal)) != 0) {
        setup_fail(s, "send: %s", strerror(errno));
        return;
    }
    setup_expect(s, SETUP_ANSWER, RD_AUTH_ANSWER_LEN);
}

rd_peer_net *rd_peer_net_new(struct event_base *base, const char *listen, const rd_auth_key *key,
                             int encrypt, int64_t timeout_ms, rd_peer_accept_fn fn, void *arg,
                             char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    unsigned sslen;
    if (rd_peer_resolve(listen, &ss, &sslen, err, errlen) != 0)
        return NULL;
    rd_peer_net *n = calloc(1, sizeof(*n));
    if (n == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    n->base = base;
    n->key = key;
    n->cipher = encrypt ? rd_seal_best() : RD_CIPHER_NONE;
    if (encrypt)
        rd_log(RD_LOG_INFO, "peer",
               "--encrypt: every link with other daemons is sealed, with %s where both ends "
               "run it, else %s",
               rd_cipher_name(n->cipher), rd_cipher_name(RD_CIPHER_CHACHA));
    n->timeout_ms = timeout_ms;
    n->resolver = rd_resolver_new(base);
    if (n->resolver == NULL) {
        snprintf(err, errlen, "cannot start the resolver (evdns)");
        free(n);
        return NULL;
    }
    n->accept_fn = fn;
    n->arg = arg;
    n->listener = evconnlistener_new_bind(
        base, on_accept, n, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC,
        RD_PEER_BACKLOG, (struct sockaddr *)&ss, (int)sslen);
    if (n->listener == NULL) {
        snprintf(err, errlen, "listen on %s: %s", listen, strerror(errno));
        rd_resolver_free(n->resolver);
        free(n);
        return NULL;
    }
    struct sockaddr_storage bound;
    socklen_t bl = sizeof(bound);
    if (getsockname(evconnlistener_get_fd(n->listener), (struct sockaddr *)&bound, &bl) != 0) {
        snprintf(err, errlen, "getsockname: %s", strerror(errno));
        evconnlistener_free(n->listener);
        rd_resolver_free(n->resolver);
        free(n);
        return NULL;
    }
    format_addr((struct sockaddr *)&bound, n->address, sizeof(n->address));
    return n;
}

void rd_peer_net_free(rd_peer_net *n)
{
    if (n == NULL)
        return;
    while (n->setups != NULL)
        setup_free(n->setups);
    rd_peer_chan_free_lingering();
    evconnlistener_free(n->listener);
    rd_resolver_free(n->resolver);
    free(n);
}

const char *rd_peer_net_address(const rd_peer_net *n)
{
    return n->address;
}

/* Client: the address is known (s->ss): connects. Returns -1 when no socket could be made
 * (nothing reported yet), else 0. */
static int dial_start_connect(setup *s)
{
    int fd = socket(s->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    set_nodelay(fd);
    s->fd = fd;
    int rc = connect(fd, (struct sockaddr *)&s->ss, s->sslen);
    if (rc == 0 || errno == EINPROGRESS) {
        setup_expect(s, rc == 0 ? SETUP_CHALLENGE : SETUP_CONNECT,
                     rc == 0 ? RD_AUTH_CHALLENGE_LEN : 0);
    } else {
        /* reported on the next turn, so the caller never sees its callback before the return */
        s->connect_err = errno;
        setup_expect(s, SETUP_CONNECT, 0);
        event_active(s->ev, EV_WRITE, 0);
    }
    return 0;
}

/* Client, from the loop: the host name's lookup ended; connects, or reports why not. */
static void dial_connect(setup *s)
{
    if (s->sslen == 0)
        setup_fail(s, "resolve: %s", s->lookup_err[0] != '\0' ? s->lookup_err : "no address");
    else if (dial_start_connect(s) != 0)
        setup_fail(s, "socket: %s", strerror(errno));
}

/* The peer's host name was looked up (on a later turn than rd_peer_dial_new's): connects. */
static void on_dial_resolved(void *arg, const struct sockaddr *sa, socklen_t len, const char *why)
{
    setup *s = arg;
    s->lookup = NULL;
    if (sa != NULL && len <= sizeof(s->ss)) {
        memcpy(&s->ss, sa, len);
        s->sslen = (unsigned)len;
    } else {
        snprintf(s->lookup_err, sizeof(s->lookup_err), "%s", why);
    }
    dial_connect(s);
}

rd_peer_dial *rd_peer_dial_new(rd_peer_net *n, const char *addr, const Ringd__PeerHello *h,
                               rd_peer_dial_fn fn, void *arg)
{
    struct sockaddr_storage ss;
    unsigned sslen = 0;
    char err[256], host[RD_PEER_ADDR_MAX], port[8];
    int named = resolve_numeric(addr, &ss, &sslen, host, sizeof(host), port, err, sizeof(err));
    if (named < 0) {
        rd_log(RD_LOG_WARN, "peer", "%s", err);
        return NULL;
    }
    setup *s = setup_new(n, -1, 1, sizeof(rd_peer_dial));
    if (s == NULL)
        return NULL;
    rd_msg m = RINGD__MSG__INIT;
    Ringd__PeerHello mine = *h;
    mine.encrypt = (uint32_t)n->cipher;
    m.body_case = RINGD__MSG__BODY_PEER_HELLO;
    m.peer_hello = &mine;
    s->hello = pack_frame(&m, &s->hello_len);
    if (s->hello == NULL) {
        setup_free(s);
        return NULL;
    }
    snprintf(s->remote, sizeof(s->remote), "%s", addr);
    s->fn = fn;
    s->arg = arg;
    if (named == 0) {
        s->ss = ss;
        s->sslen = sslen;
        if (dial_start_connect(s) != 0) {
            setup_free(s);
            return NULL;
        }
        return (rd_peer_dial *)s;
    }
    /* A host name: looked up through evdns, within the handshake's deadline. */
    setup_set_state(s, SETUP_RESOLVE);
    s->lookup = rd_resolve(n->resolver, host, port, on_dial_resolved, s);
    if (s->lookup == NULL) {
        setup_free(s);
        return NULL;
    }
    return (rd_peer_dial *)s;
}

void rd_peer_dial_cancel(rd_peer_dial *d)
{
    if (d != NULL)
        setup_free(&d->s);
}

/* Channel: reports a failure once, from the loop. */
static void chan_fail(rd_peer_chan *c, const char *why)
{
    if (c->why[0] != '\0')
        return;
    snprintf(c->why, sizeof(c->why), "%s", why);
    bufferevent_disable(c->bev, EV_READ | EV_WRITE);
    event_active(c->ev_fail, 0, 0);
}

static void on_chan_fail(evutil_socket_t fd, short what, void *arg)
{
    rd_peer_chan *c = arg;
    (void)fd;
    (void)what;
    c->on_err(c->arg, c, c->why);
}

/* Reads up to need more bytes of a frame straight from the socket into in: libevent 2.1 reads
 * at most 4 KiB per loop turn, and a direct op's data travels in these frames. Returns the bytes
 * read; 0 when none are there yet, or at EOF or an error, which the bufferevent reports. */
static size_t read_rest(struct bufferevent *bev, struct evbuffer *in, size_t need)
{
    struct evbuffer_iovec v[2];
    int nv = evbuffer_reserve_space(in, (ev_ssize_t)need, v, 2);
    if (nv <= 0)
        return 0;
    struct iovec io[2];
    size_t room = 0;
    for (int i = 0; i < nv; i++) {
        io[i].iov_base = v[i].iov_base;
        io[i].iov_len = v[i].iov_len < need - room ? v[i].iov_len : need - room;
        room += io[i].iov_len;
    }
    ssize_t r = readv(bufferevent_getfd(bev), io, nv);
    if (r <= 0)
        return 0;
    size_t left = (size_t)r;
    for (int i = 0; i < nv; i++) {
        v[i].iov_len = io[i].iov_len < left ? io[i].iov_len : left;
        left -= v[i].iov_len;
    }
    evbuffer_commit_space(in, v, nv);
    return (size_t)r;
}

/* Opens a sealed frame (header, then n bytes) into c->plain as a frame in the clear. Returns
 * c->plain, or NULL with the channel failed (out of memory, or the frame fails authentication:
 * tampered with, replayed, reordered or not from the peer of this handshake). */
static uint8_t *chan_open(rd_peer_chan *c, const uint8_t *frame, uint32_t n)
{
    size_t need = RD_FRAME_HEADER + (size_t)n - RD_SEAL_TAG;
    if (c->plain_cap < need) {
        uint8_t *p = realloc(c->plain, need);
        if (p == NULL)
            return NULL;
        c->plain = p;
        c->plain_cap = need;
    }
    int rc = rd_seal_open(c->seal.cipher, &c->seal.rx, c->plain + RD_FRAME_HEADER,
                          frame + RD_FRAME_HEADER, n - RD_SEAL_TAG, frame + need, frame,
                          RD_FRAME_HEADER);
    if (rc == -2) {
        chan_fail(c, "opening a sealed frame failed (out of memory)");
        return NULL;
    }
    if (rc != 0) {
        rd_log(RD_LOG_WARN, "peer",
               "node %s: a sealed control frame fails authentication "
               "(tampered with, replayed or out of order); link dropped",
               c->name);
        chan_fail(c, "a sealed frame failed authentication (tampered with in flight?)");
        return NULL;
    }
    put_le32(c->plain, n - RD_SEAL_TAG);
    return c->plain;
}

/* Hands every whole frame in c's input to its owner. Returns 0, or -1 when the owner let go of
 * c meanwhile (c is freed). */
static int chan_dispatch(rd_peer_chan *c)
{
    struct bufferevent *bev = c->bev;
    struct evbuffer *in = bufferevent_get_input(bev);
    c->busy = 1;
    while (!c->dead && c->why[0] == '\0') {
        size_t len = evbuffer_get_length(in);
        if (len < RD_FRAME_HEADER)
            break;
        uint8_t *hdr = evbuffer_pullup(in, RD_FRAME_HEADER);
        uint32_t n = rd_frame_payload_len(hdr);
        uint32_t tag = c->seal.cipher != RD_CIPHER_NONE ? RD_SEAL_TAG : 0;
        if (n > c->max_frame + tag || n < tag) {
            char why[96];
            if (n < tag)
                snprintf(why, sizeof(why), "sealed frame of %u bytes is shorter than its tag", n);
            else
                snprintf(why, sizeof(why), "frame of %u bytes exceeds the limit of %u", n - tag,
                         c->max_frame);
            chan_fail(c, why);
            break;
        }
        if (len < RD_FRAME_HEADER + (size_t)n) {
            if (read_rest(bev, in, RD_FRAME_HEADER + (size_t)n - len) > 0)
                continue;
            break;
        }
        uint8_t *buf = evbuffer_pullup(in, RD_FRAME_HEADER + (ssize_t)n);
        if (buf != NULL && tag != 0)
            buf = chan_open(c, buf, n);
        rd_msg *m = NULL;
        size_t used;
        char err[128];
        if (buf == NULL || rd_frame_decode(buf, RD_FRAME_HEADER + n - tag, c->max_frame, &m, &used,
                                           err, sizeof(err)) != RD_FRAME_OK) {
            chan_fail(c, buf == NULL ? c->why[0] == '\0' ? "out of memory" : c->why : err);
            break;
        }
        evbuffer_drain(in, RD_FRAME_HEADER + (size_t)n);
        c->on_msg(c->arg, c, m);
        rd_frame_free(m);
    }
    c->busy = 0;
    if (c->dead) {
        rd_peer_chan_free(c);
        return -1;
    }
    return 0;
}

static void on_chan_read(struct bufferevent *bev, void *arg)
{
    (void)bev;
    chan_dispatch(arg);
}

static void on_chan_event(struct bufferevent *bev, short what, void *arg)
{
    rd_peer_chan *c = arg;
    if (what & BEV_EVENT_EOF) {
        chan_fail(c, "connection closed");
    } else if (what & BEV_EVENT_ERROR) {
        char why[128];
        snprintf(why, sizeof(why), "%s", strerror(EVUTIL_SOCKET_ERROR()));
        /* A write failed (the peer closed first): what it sent before closing, its Bye saying
         * it leaves say, is still in the socket, and its owner hears that first. Bounded. */
        if (what & BEV_EVENT_WRITING) {
            struct evbuffer *in = bufferevent_get_input(bev);
            for (int i = 0; i < 64 && evbuffer_read(in, bufferevent_getfd(bev), 65536) > 0; i++)
                ;
            if (chan_dispatch(c) != 0 || c->why[0] != '\0')
                return; /* let go of, or failed for a reason of its own */
        }
        chan_fail(c, why);
    }
}

rd_peer_chan *rd_peer_chan_new(struct event_base *base, int fd, const rd_seal *seal,
                               const char *peer, uint32_t max_frame, rd_peer_chan_msg_fn on_msg,
                               rd_peer_chan_err_fn on_err, void *arg)
{
    rd_peer_chan *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    evutil_make_socket_nonblocking(fd);
    c->bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
    c->ev_fail = event_new(base, -1, 0, on_chan_fail, c);
    if (c->bev == NULL || c->ev_fail == NULL) {
        if (c->bev != NULL) {
            bufferevent_setfd(c->bev, -1); /* fd stays the caller's */
            bufferevent_free(c->bev);
        }
        if (c->ev_fail != NULL)
            event_free(c->ev_fail);
        free(c);
        return NULL;
    }
    snprintf(c->name, sizeof(c->name), "%s", peer);
    c->seal = *seal;
    c->max_frame = max_frame;
    c->on_msg = on_msg;
    c->on_err = on_err;
    c->arg = arg;
    bufferevent_setcb(c->bev, on_chan_read, NULL, on_chan_event, c);
    /* A frame in one write where the kernel allows, not libevent's 16 KiB a loop turn (reads:
     * read_rest). */
    bufferevent_set_max_single_write(c->bev, max_frame + 64 > 65536 ? max_frame + 64 : 65536);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    return c;
}

size_t rd_peer_chan_send(rd_peer_chan *c, const rd_msg *m)
{
    if (c->why[0] != '\0')
        return 0;
    struct evbuffer *out = bufferevent_get_output(c->bev);
    if (evbuffer_get_length(out) > RD_PEER_CHAN_OUT_MAX) {
        chan_fail(c, "peer reads nothing (output over 64 MiB)");
        return 0;
    }
    size_t plain = rd_frame_size(m);
    size_t len = plain + (c->seal.cipher != RD_CIPHER_NONE ? RD_SEAL_TAG : 0);
    struct evbuffer_iovec v;
    if (evbuffer_reserve_space(out, (ssize_t)len, &v, 1) < 1) {
        chan_fail(c, "out of memory");
        return 0;
    }
    uint8_t *f = v.iov_base;
    rd_frame_pack(m, f);
    if (c->seal.cipher != RD_CIPHER_NONE) { /* the header, now of the sealed length, is bound */
        put_le32(f, (uint32_t)(len - RD_FRAME_HEADER));
        if (rd_seal_seal(c->seal.cipher, &c->seal.tx, f + RD_FRAME_HEADER, f + plain,
                         f + RD_FRAME_HEADER, plain - RD_FRAME_HEADER, f, RD_FRAME_HEADER) != 0) {
            chan_fail(c, "sealing a frame failed (out of memory)");
            return 0; /* the space reserved is not committed: nothing goes out */
        }
    }
    v.iov_len = len;
    evbuffer_commit_space(out, &v, 1);
    /* Latency: write now rather than on the next loop turn; the bufferevent keeps the rest. A
     * socket bufferevent freezes the start of its output (only it drains it), so it is thawed
     * for this one write. */
    if (evbuffer_get_length(out) == len) {
        evbuffer_unfreeze(out, 1);
        evbuffer_write(out, bufferevent_getfd(c->bev));
        evbuffer_freeze(out, 1);
    }
    return len;
}

static void chan_destroy(rd_peer_chan *c)
{
    if (c->prev != NULL)
        c->prev->next = c->next;
    else if (lingering == c)
        lingering = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    bufferevent_free(c->bev);
    event_free(c->ev_fail);
    rd_seal_wipe(&c->seal);
    if (c->plain != NULL) /* the last frame opened: a direct op's data, say */
        sodium_memzero(c->plain, c->plain_cap);
    free(c->plain);
    free(c);
}

static void on_linger_read(struct bufferevent *bev, void *arg)
{
    (void)arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    evbuffer_drain(in, evbuffer_get_length(in));
}

/* Everything written: the peer gets the end of the stream after it. */
static void on_linger_write(struct bufferevent *bev, void *arg)
{
    (void)arg;
    shutdown(bufferevent_getfd(bev), SHUT_WR);
}

static void on_linger_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    (void)what; /* the peer closed, failed or took too long */
    chan_destroy(arg);
}

void rd_peer_chan_free(rd_peer_chan *c)
{
    if (c == NULL)
        return;
    if (c->busy) {
        c->dead = 1;
        return;
    }
    event_del(c->ev_fail);
    if (c->why[0] != '\0') { /* the connection is over already */
        chan_destroy(c);
        return;
    }
    c->next = lingering;
    if (lingering != NULL)
        lingering->prev = c;
    lingering = c;
    struct timeval sec = {1, 0};
    bufferevent_setcb(c->bev, on_linger_read, on_linger_write, on_linger_event, c);
    bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
    bufferevent_set_timeouts(c->bev, &sec, &sec);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
        shutdown(bufferevent_getfd(c->bev), SHUT_WR);
}

void rd_peer_chan_free_lingering(void)
{
    /* What a connection still holds goes out first (a drained node's Bye, when the daemon stops
     * right after), within about a second in all. */
    int64_t end = rd_now_ms() + 1000;
    for (rd_peer_chan *c = lingering; c != NULL; c = c->next) {
        struct evbuffer *out = bufferevent_get_output(c->bev);
        int fd = bufferevent_getfd(c->bev);
        evbuffer_unfreeze(out, 1);
        while (evbuffer_get_length(out) > 0 && rd_now_ms() < end) {
            if (evbuffer_write(out, fd) >= 0)
                continue;
            struct pollfd p = {fd, POLLOUT, 0};
            if ((errno != EAGAIN && errno != EWOULDBLOCK) ||
                poll(&p, 1, (int)(end - rd_now_ms())) <= 0)
                break;
        }
        evbuffer_freeze(out, 1);
    }
    while (lingering != NULL)
        chan_destroy(lingering);
}

const char *rd_peer_chan_name(const rd_peer_chan *c)
{
    return c->name;
}

struct rd_peer_probe {
    struct sockaddr_storage ss;
    unsigned sslen;
    int fd;
    int err; /* connect's own failure: the socket's SO_ERROR no longer holds it */
    struct event *ev;
    struct event *delay;
    rd_peer_probe_fn fn;
    void *arg;
};

void rd_peer_probe_cancel(rd_peer_probe *p)
{
    if (p == NULL)
        return;
    if (p->ev != NULL)
        event_free(p->ev);
    if (p->delay != NULL)
        event_free(p->delay);
    if (p->fd >= 0)
        close(p->fd);
    free(p);
}

/* The probe's connect ended, or its time ran out. */
static void on_probe(evutil_socket_t fd, short what, void *arg)
{
    rd_peer_probe *p = arg;
    int err = ETIMEDOUT;
    socklen_t len = sizeof(err);
    if (p->err != 0)
        err = p->err;
    else if ((what & EV_WRITE) && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    rd_peer_probe_fn fn = p->fn;
    void *parg = p->arg;
    rd_peer_probe_cancel(p);
    fn(parg,
       err == 0              ? 1
       : err == ECONNREFUSED ? 0
                             : -1,
       err == 0 ? "it accepts connections" : strerror(err));
}

/* Starts the probe's connect. */
static void probe_connect(evutil_socket_t fd, short what, void *arg)
{
    rd_peer_probe *p = arg;
    (void)fd;
    (void)what;
    struct timeval tv = {1, 0};
    int rc = connect(p->fd, (struct sockaddr *)&p->ss, p->sslen);
    if (rc != 0 && errno != EINPROGRESS)
        p->err = errno; /* a refusal on loopback often comes back here, and SO_ERROR is 0 then */
    if (event_add(p->ev, &tv) != 0 && p->err == 0)
        p->err = ENOMEM; /* it could not be waited for: reported now rather than never */
    if (p->err != 0)
        event_active(p->ev, EV_WRITE, 0);
}

rd_peer_probe *rd_peer_probe_new(struct event_base *base, const char *addr, int delay_ms,
                                 rd_peer_probe_fn fn, void *arg)
{
    char err[256];
    rd_peer_probe *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    p->fd = -1;
    /* Numeric addresses only: a probe is a shortcut, never worth a lookup (NULL: the caller
     * goes on as if the answer were unknown). */
    char host[RD_PEER_ADDR_MAX], port[8];
    if (resolve_numeric(addr, &p->ss, &p->sslen, host, sizeof(host), port, err, sizeof(err)) != 0) {
        free(p);
        return NULL;
    }
    p->fn = fn;
    p->arg = arg;
    p->fd = socket(p->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (p->fd < 0 || (p->ev = event_new(base, p->fd, EV_WRITE, on_probe, p)) == NULL ||
        (p->delay = evtimer_new(base, probe_connect, p)) == NULL) {
        rd_peer_probe_cancel(p);
        return NULL;
    }
    struct timeval tv = {delay_ms / 1000, (delay_ms % 1000) * 1000};
    evtimer_add(p->delay, &tv);
    return p;
}
