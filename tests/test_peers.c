/* Daemon-to-daemon links under attack and misconfiguration: real redis-server and ringd daemons
 * on loopback, and the test itself as a stranger or a forged peer on --listen (wrong keys,
 * garbage, idle connections, handshakes that lie about generation, identity or frame sizes).
 * Every test ends by checking that the daemons still run and shut down cleanly. */
#define _GNU_SOURCE
#include "auth.h"
#include "frame.h"
#include "peer.h"
#include "seal.h"
#include "ringd.h"
#include "th_ring.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define JOB "job-peers"
#define SEGMENT (1u << 20) /* the daemons' default --segment-size */
#define CONNS 2            /* the daemons' default --conns-per-link */

static th_ring ring;
static char other_key[256]; /* a second key file, removed by the fixture */
static ringd_t *sess[2];    /* the ranks' sessions, closed by the fixture after a failure */

static void close_sessions(void)
{
    for (int i = 0; i < 2; i++) {
        ringd_close(sess[i]);
        sess[i] = NULL;
    }
}

/* A test that failed before th_ring_finish leaves its daemons running: their logs are the
 * evidence. */
static void teardown(void)
{
    close_sessions();
    for (int i = 0; i < ring.n; i++) {
        char *log = ring.d[i].pid > 0 ? th_daemon_log(&ring.d[i]) : NULL;
        if (log != NULL)
            fprintf(stderr, "---- n%d log (%s) ----\n%s----\n", i, ring.d[i].log, log);
        free(log);
    }
    if (other_key[0] != '\0')
        unlink(other_key);
    other_key[0] = '\0';
    th_ring_teardown(&ring);
}

TestSuite(peers, .fini = teardown, .timeout = 60);

/* ---- daemon state -------------------------------------------------------------------------- */

/* What a StatusRequest tells about a daemon's peer port and one job's ring. */
typedef struct {
    int port;       /* from StatusReply.listen */
    uint64_t gen;   /* the job's ring generation, 0 when the job is unknown */
    char state[16]; /* the job's ring state, "" when unknown */
} peer_status;

static int status_get(const th_daemon *d, const char *job, peer_status *ps)
{
    memset(ps, 0, sizeof(*ps));
    rd_msg *r = th_status(d->sock);
    if (r == NULL)
        return -1;
    const Ringd__StatusReply *s = r->status_reply;
    const char *colon = strrchr(s->listen, ':');
    ps->port = colon != NULL ? atoi(colon + 1) : 0;
    for (size_t i = 0; job != NULL && i < s->n_jobs; i++) {
        if (strcmp(s->jobs[i]->name, job) != 0 || s->jobs[i]->ring == NULL)
            continue;
        ps->gen = s->jobs[i]->ring->generation;
        snprintf(ps->state, sizeof(ps->state), "%s", s->jobs[i]->ring->state);
    }
    rd_frame_free(r);
    return ps->port > 0 ? 0 : -1;
}

/* The daemon's peer port (fails the test when it has none). */
static int peer_port(const th_daemon *d)
{
    peer_status ps;
    cr_assert_eq(status_get(d, NULL, &ps), 0, "no status or no listen address from %s", d->sock);
    return ps.port;
}

/* Occurrences of needle in the daemon's log. */
static int log_count(const th_daemon *d, const char *needle)
{
    char *log = th_daemon_log(d);
    int n = 0;
    for (const char *p = log; p != NULL && (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    free(log);
    return n;
}

/* 1 once needle appears in the daemon's log within timeout_ms. */
static int log_wait(const th_daemon *d, const char *needle, int timeout_ms)
{
    int64_t end = th_now_ms() + timeout_ms;
    for (;;) {
        if (log_count(d, needle) > 0)
            return 1;
        if (th_now_ms() >= end)
            return 0;
        th_sleep_ms(20);
    }
}

static void assert_log(const th_daemon *d, const char *needle)
{
    cr_assert(log_wait(d, needle, 3000), "the log of %s lacks \"%s\"", d->log, needle);
}

/* ---- clients ------------------------------------------------------------------------------- */

/* One ringd_open in a thread, so that the ranks on two daemons can join at once. */
typedef struct {
    const char *sock;
    int timeout_ms;
    ringd_t *s;
    ringd_result_t rc;
    char err[512];
    pthread_t t;
} opener;

static void *open_main(void *arg)
{
    opener *o = arg;
    ringd_options_t opt = RINGD_OPTIONS_INIT;
    opt.socket_path = o->sock;
    opt.job = JOB;
    opt.world_size = 2;
    opt.local_size = 1;
    opt.open_timeout_ms = o->timeout_ms;
    opt.op_timeout_ms = 15000;
    o->rc = ringd_open(&opt, &o->s);
    snprintf(o->err, sizeof(o->err), "%s", o->s != NULL ? ringd_errmsg(o->s) : "no memory");
    return NULL;
}

/* Starts rank i of a world-2 job on ring daemon i. */
static void open_start(opener o[2], int timeout_ms)
{
    for (int i = 0; i < 2; i++) {
        o[i] = (opener){.sock = ring.d[i].sock, .timeout_ms = timeout_ms};
        cr_assert_eq(pthread_create(&o[i].t, NULL, open_main, &o[i]), 0);
    }
}

static void open_join(opener o[2])
{
    for (int i = 0; i < 2; i++) {
        pthread_join(o[i].t, NULL);
        sess[i] = o[i].s;
    }
}

/* Both ranks join; returns the sessions. */
static void open_ring(ringd_t *s[2])
{
    opener o[2];
    open_start(o, 15000);
    open_join(o);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(o[i].rc, RINGD_OK, "open on n%d: %s: %s", i, ringd_strerror(o[i].rc),
                     o[i].err);
        s[i] = o[i].s;
    }
    cr_assert_eq(ringd_generation(s[0]), ringd_generation(s[1]));
}

/* Both ranks' opens fail with a timeout: the ring never forms. */
static void open_times_out(int timeout_ms)
{
    opener o[2];
    open_start(o, timeout_ms);
    open_join(o);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(o[i].rc, RINGD_E_TIMEOUT, "open on n%d: %s: %s", i, ringd_strerror(o[i].rc),
                     o[i].err);
        cr_assert(strstr(o[i].err, "did not complete") != NULL, "open on n%d: %s", i, o[i].err);
    }
    close_sessions();
}

/* A 1 MiB float allreduce across both ranks gives the exact sum. */
static void allreduce_ok(ringd_t *s[2], const char *name)
{
    const size_t n = 1u << 18;
    float *buf[2];
    ringd_request_t *q[2];
    for (int r = 0; r < 2; r++) {
        buf[r] = malloc(n * sizeof(float));
        cr_assert_not_null(buf[r]);
        for (size_t i = 0; i < n; i++)
            buf[r][i] = (float)(r + 1) + (float)(i % 7);
    }
    for (int r = 0; r < 2; r++)
        cr_assert_eq(
            ringd_allreduce_async(s[r], name, buf[r], buf[r], n, RINGD_F32, RINGD_SUM, &q[r]),
            RINGD_OK, "submit %s on rank %d: %s", name, r, ringd_errmsg(s[r]));
    for (int r = 0; r < 2; r++) {
        ringd_result_t rc = ringd_wait(q[r]);
        cr_assert_eq(rc, RINGD_OK, "allreduce %s on rank %d: %s: %s", name, r, ringd_strerror(rc),
                     ringd_errmsg(s[r]));
    }
    for (int r = 0; r < 2; r++) {
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(buf[r][i], 3.0f + 2.0f * (float)(i % 7), "rank %d element %zu: %g", r, i,
                         (double)buf[r][i]);
        free(buf[r]);
    }
}

/* ---- the test as a peer -------------------------------------------------------------------- */

static int tcp_connect(int port)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0, "socket: %s", strerror(errno));
    cr_assert_eq(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0, "connect to port %d: %s",
                 port, strerror(errno));
    return fd;
}

/* "127.0.0.1:PORT" of our end of fd, as the daemon logs it. */
static void local_name(int fd, char *out, size_t len)
{
    struct sockaddr_in sin;
    socklen_t sl = sizeof(sin);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&sin, &sl), 0);
    snprintf(out, len, "connection from 127.0.0.1:%u:", ntohs(sin.sin_port));
}

/* Reads up to len bytes within timeout_ms; returns how many came before EOF, an error or the
 * deadline. */
static size_t read_upto(int fd, void *buf, size_t len, int timeout_ms)
{
    int64_t end = th_now_ms() + timeout_ms;
    size_t have = 0;
    while (have < len) {
        int left = (int)(end - th_now_ms());
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, left) <= 0)
            break;
        ssize_t r = recv(fd, (uint8_t *)buf + have, len - have, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        have += (size_t)r;
    }
    return have;
}

/* Connects to port, reads the challenge and answers it with k; returns the fd. */
static int peer_answer(int port, const rd_auth_key *k, uint8_t chal[RD_AUTH_CHALLENGE_LEN],
                       uint8_t ans[RD_AUTH_ANSWER_LEN])
{
    int fd = tcp_connect(port);
    cr_assert_eq(read_upto(fd, chal, RD_AUTH_CHALLENGE_LEN, 5000), RD_AUTH_CHALLENGE_LEN,
                 "no challenge from port %d", port);
    cr_assert_eq(rd_auth_answer(k, chal, ans), 0, "not a ringd challenge");
    cr_assert_eq(th_write(fd, ans, RD_AUTH_ANSWER_LEN), 0);
    return fd;
}

/* Connects to port and completes the challenge-response as a client holding k; returns the fd,
 * on which the daemon now waits for PeerHello. */
static int peer_auth(int port, const rd_auth_key *k)
{
    uint8_t chal[RD_AUTH_CHALLENGE_LEN], ans[RD_AUTH_ANSWER_LEN], conf[RD_AUTH_CONFIRM_LEN];
    int fd = peer_answer(port, k, chal, ans);
    cr_assert_eq(read_upto(fd, conf, sizeof(conf), 5000), sizeof(conf), "no confirmation");
    cr_assert_eq(rd_auth_verify_confirm(k, chal, ans, conf), 0, "the daemon's confirmation is bad");
    return fd;
}

/* The ring's key, as the daemons loaded it. */
static rd_auth_key ring_key(void)
{
    rd_auth_key k;
    char err[256] = "";
    cr_assert_eq(rd_auth_init(), 0);
    cr_assert_eq(rd_auth_load(&k, ring.key, err, sizeof(err)), 0, "%s", err);
    return k;
}

static Ringd__PeerHello hello(const char *job, uint64_t gen, const char *node, int kind,
                              uint32_t index)
{
    Ringd__PeerHello h = RINGD__PEER_HELLO__INIT;
    h.protocol = RD_PEER_PROTOCOL_VERSION;
    h.job = (char *)job;
    h.generation = gen;
    h.node = (char *)node;
    h.kind = (Ringd__LinkKind)kind;
    h.index = index;
    h.conns = CONNS;
    h.segment_size = SEGMENT;
    h.pair_links = 32;          /* the daemons' default */
    h.max_frame = 1u << 20;     /* the daemons' default */
    h.direct_bytes = 16u << 10; /* the daemons' default */
    return h;
}

/* Authenticates to daemon d, sends h and returns the answer (NULL: none within 5 s); *fd_out
 * gets the connection. */
static rd_msg *peer_hello(const th_daemon *d, const Ringd__PeerHello *h, int *fd_out)
{
    rd_auth_key k = ring_key();
    int fd = peer_auth(peer_port(d), &k);
    Ringd__PeerHello to = *h;
    char name[16];
    snprintf(name, sizeof(name), "n%d", (int)(d - ring.d)); /* th_ring names node i "ni" */
    if (to.to[0] == '\0')
        to.to = name;
    rd_msg m = RINGD__MSG__INIT;
    m.body_case = RINGD__MSG__BODY_PEER_HELLO;
    m.peer_hello = &to;
    cr_assert_eq(th_send(fd, &m), 0);
    *fd_out = fd;
    return th_recv(fd, 5000, NULL);
}

/* d answers h with Error{status, message containing why}, closes the connection, and logs the
 * refusal. */
static void expect_refused(const th_daemon *d, const Ringd__PeerHello *h, ringd_result_t status,
                           const char *why)
{
    int fd;
    rd_msg *r = peer_hello(d, h, &fd);
    cr_assert_not_null(r, "no answer to PeerHello{job %s, generation %" PRIu64 ", node %s}", h->job,
                       h->generation, h->node);
    cr_assert_eq(r->body_case, RINGD__MSG__BODY_ERROR,
                 "PeerHello{job %s, generation %" PRIu64 ", node %s, kind %d, index %u} was "
                 "answered with message %d, not Error",
                 h->job, h->generation, h->node, (int)h->kind, h->index, (int)r->body_case);
    cr_assert_eq(r->error->status, (uint32_t)status, "status %u: %s", r->error->status,
                 r->error->message);
    cr_assert(strstr(r->error->message, why) != NULL, "Error \"%s\" does not say \"%s\"",
              r->error->message, why);
    cr_assert(th_wait_eof(fd, 3000), "the daemon kept the refused connection open");
    char line[600];
    snprintf(line, sizeof(line), "(node '%s', job '%s'): refused: %s", h->node, h->job,
             r->error->message);
    assert_log(d, line);
    rd_frame_free(r);
    close(fd);
}

/* ---- tests --------------------------------------------------------------------------------- */

Test(peers, a_daemon_holding_another_key_never_joins_the_ring)
{
    cr_assert_eq(th_ring_start(&ring, 1, NULL), 0);
    snprintf(other_key, sizeof(other_key), "%s/other-key", ring.dir);
    int fd = open(other_key, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const char secret[] = "another ring's key, also 32 byte";
    cr_assert(fd >= 0 && write(fd, secret, sizeof(secret) - 1) == (ssize_t)sizeof(secret) - 1);
    close(fd);
    /* th_ring_start_node passes the ring's --key-file first; the later one wins. */
    const char *const extra[] = {"--key-file", other_key, NULL};
    cr_assert_eq(th_ring_start_node(&ring, 1, extra), 0);
    char dump[300];
    snprintf(dump, sizeof(dump), "key-file = %s\n", other_key);
    assert_log(&ring.d[1], dump);

    open_times_out(2000);
    for (int i = 0; i < 2; i++) {
        assert_log(&ring.d[i], "authentication failed (wrong or missing ring key); closed");
        cr_assert_eq(log_count(&ring.d[i], "ring of 2 nodes up"), 0);
        cr_assert(th_status_ok(ring.d[i].sock), "n%d no longer serves status", i);
    }
    th_ring_finish(&ring);
}

Test(peers, an_insecure_daemon_never_joins_a_ring_with_a_key)
{
    cr_assert_eq(th_ring_start(&ring, 1, NULL), 0);
    /* th_ring_start_node always passes --key-file, which --insecure excludes. */
    const char *const args[] = {"--redis", ring.redis.url, "--listen",    "127.0.0.1:0", "--node",
                                "n1",      "--insecure",   "--lease-ttl", "1000",        NULL};
    cr_assert_eq(th_daemon_start(&ring.d[1], args), 0);
    ring.n = 2;
    assert_log(&ring.d[1], "--insecure: peers are not authenticated");

    open_times_out(2000);
    for (int i = 0; i < 2; i++) {
        assert_log(&ring.d[i], "authentication failed (wrong or missing ring key); closed");
        cr_assert_eq(log_count(&ring.d[i], "ring of 2 nodes up"), 0);
        cr_assert(th_status_ok(ring.d[i].sock), "n%d no longer serves status", i);
    }
    th_ring_finish(&ring);
}

/* Runs $RINGD_BIN with args (5 s at most) and returns its exit status, its stderr in out. */
static int ringd_exit_status(const char *const *args, char *out, size_t outlen)
{
    char dir[] = "/tmp/ringd-peers.XXXXXX", path[64], sock[80];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/stderr", dir);
    snprintf(sock, sizeof(sock), "%s/ringd.sock", dir);
    const char *bin = getenv("RINGD_BIN");
    const char *argv[32] = {bin != NULL ? bin : "ringd", "--socket", sock};
    int n = 3;
    for (; *args != NULL && n < 31; args++)
        argv[n++] = *args;
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    cr_assert_gt(pid, 0);
    int ws = 0, done = 0;
    for (int64_t end = th_now_ms() + 5000; !done && th_now_ms() < end; th_sleep_ms(10))
        done = waitpid(pid, &ws, WNOHANG) == pid;
    if (!done) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    FILE *f = fopen(path, "r");
    size_t got = f != NULL ? fread(out, 1, outlen - 1, f) : 0;
    out[got] = '\0';
    if (f != NULL)
        fclose(f);
    unlink(path);
    unlink(sock);
    rmdir(dir);
    cr_assert(done, "ringd kept running (output: %s)", out);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

Test(peers, a_multi_node_daemon_needs_exactly_one_of_key_file_and_insecure)
{
    char out[2048];
    const char *const neither[] = {"--redis", "redis://127.0.0.1:1", "--listen", "127.0.0.1:0",
                                   NULL};
    cr_assert_eq(ringd_exit_status(neither, out, sizeof(out)), 2, "output: %s", out);
    cr_assert(strstr(out, "--insecure") != NULL && strstr(out, "--key-file") != NULL, "output: %s",
              out);

    const char *const both[] = {"--redis",    "redis://127.0.0.1:1", "--listen",   "127.0.0.1:0",
                                "--key-file", "/nonexistent",        "--insecure", NULL};
    cr_assert_eq(ringd_exit_status(both, out, sizeof(out)), 2, "output: %s", out);
    cr_assert(strstr(out, "--insecure") != NULL, "output: %s", out);

    /* --insecure's key is public: sealing with it would protect nothing */
    const char *const sealed[] = {"--redis",    "redis://127.0.0.1:1", "--listen", "127.0.0.1:0",
                                  "--insecure", "--encrypt",           NULL};
    cr_assert_eq(ringd_exit_status(sealed, out, sizeof(out)), 2, "output: %s", out);
    cr_assert(strstr(out, "--encrypt needs --key-file") != NULL, "output: %s", out);
}

/* --encrypt on both daemons: the ring forms and reduces exactly; a peer holding the key but
 * not sealing is refused at the handshake, saying so. */
Test(peers, sealed_daemons_reduce_exactly_and_refuse_a_peer_that_does_not_seal, .timeout = 60)
{
    const char *const sealed[] = {"--encrypt", NULL};
    cr_assert_eq(th_ring_start(&ring, 2, sealed), 0);
    ringd_t **s = sess;
    open_ring(s);
    allreduce_ok(s, "sealed");
    peer_status ps;
    cr_assert_eq(status_get(&ring.d[1], JOB, &ps), 0);
    Ringd__PeerHello h = hello(JOB, ps.gen, "n0", RINGD__LINK_KIND__LINK_DATA, 0);
    expect_refused(&ring.d[1], &h, RINGD_E_REFUSED,
                   "node n0 does not seal its links (--encrypt) and this one does: give every "
                   "daemon of the ring the same --encrypt");
    /* a connection meant for another node (redirected in flight, or an address that moved) */
    h.encrypt = RD_CIPHER_CHACHA;
    h.to = "n5";
    expect_refused(&ring.d[1], &h, RINGD_E_REFUSED,
                   "node n0 meant to reach node n5; this is node n1");
    allreduce_ok(s, "sealed.again");
    for (int i = 0; i < 2; i++) {
        ringd_close(s[i]);
        s[i] = NULL;
    }
    th_ring_finish(&ring);
}

/* Starts n0 with extra (n1 without, so that the two disagree and the ring stays connecting) and
 * both nodes' openers; returns n0's status once its ring is connecting. */
static peer_status start_forming(const char *const *extra, opener o[2])
{
    cr_assert_eq(th_ring_start(&ring, 1, extra), 0);
    cr_assert_eq(th_ring_start_node(&ring, 1, NULL), 0);
    open_start(o, 4000);
    const char *forming = "job 'job-peers': ring waiting -> connecting";
    cr_assert(log_wait(&ring.d[0], forming, 5000), "the ring never started connecting");
    peer_status ps;
    cr_assert_eq(status_get(&ring.d[0], JOB, &ps), 0);
    return ps;
}

/* One daemon with --encrypt, one without: the ring never forms, and both logs say why. */
Test(peers, daemons_that_disagree_on_encrypt_never_form_a_ring_and_say_why, .timeout = 60)
{
    const char *const sealed[] = {"--encrypt", NULL};
    opener o[2];
    /* The sealing daemon seals with the best cipher the dialler runs: a forged n1 holding the
     * key, sealing, is taken in (while the real n1 is refused) and told which. */
    peer_status ps = start_forming(sealed, o);
    const rd_cipher offer[] = {RD_CIPHER_CHACHA, RD_CIPHER_AES};
    for (int k = 0; k < 2; k++) {
        Ringd__PeerHello h = hello(JOB, ps.gen, "n1", RINGD__LINK_KIND__LINK_DATA, 0);
        h.encrypt = offer[k];
        int fd;
        rd_msg *r = peer_hello(&ring.d[0], &h, &fd);
        cr_assert(r != NULL && r->body_case == RINGD__MSG__BODY_PEER_ACCEPT,
                  "a sealing PeerHello was not accepted");
        cr_assert_eq(r->peer_accept->cipher, (uint32_t)rd_seal_agree(rd_seal_best(), offer[k]),
                     "offered %s, answered cipher %u", rd_cipher_name(offer[k]),
                     r->peer_accept->cipher);
        rd_frame_free(r);
        close(fd);
    }
    open_join(o);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(o[i].rc, RINGD_E_TIMEOUT, "open on n%d: %s: %s", i, ringd_strerror(o[i].rc),
                     o[i].err);
    close_sessions();
    assert_log(&ring.d[0], "node n1 does not seal its links (--encrypt) and this one does");
    assert_log(&ring.d[1], "node n0 seals its links (--encrypt) and this one does not");
    th_ring_finish(&ring);
}

/* Sends payload as a stranger to daemon d and checks that the daemon closes the connection and
 * logs it with our address and why. */
static void stranger_is_closed(const th_daemon *d, const void *payload, size_t len, const char *why)
{
    int fd = tcp_connect(peer_port(d));
    char who[64], line[160];
    local_name(fd, who, sizeof(who));
    th_write(fd, payload, len); /* the daemon may reset us mid-way */
    cr_assert(th_wait_eof(fd, 5000), "the daemon kept a stranger's connection open (%s)", who);
    close(fd);
    snprintf(line, sizeof(line), "%s %s", who, why);
    assert_log(d, line);
}

Test(peers, strangers_sending_garbage_are_closed_and_the_ring_keeps_working)
{
    cr_assert_eq(th_ring_start(&ring, 2, NULL), 0);
    ringd_t **s = sess;
    open_ring(s);
    uint64_t gen = ringd_generation(s[0]);

    uint8_t junk[4096];
    cr_assert_eq(getrandom(junk, sizeof(junk), 0), (ssize_t)sizeof(junk));
    const char http[] = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: curl/8.5.0\r\n"
                        "Accept: */*\r\n\r\n";
    for (int i = 0; i < 2; i++) {
        stranger_is_closed(&ring.d[i], junk, sizeof(junk), "authentication failed");
        stranger_is_closed(&ring.d[i], http, sizeof(http) - 1, "authentication failed");
    }

    allreduce_ok(s, "after-garbage");
    /* both looked at before either leaves: a node whose client left seals the other's ring */
    for (int i = 0; i < 2; i++) {
        peer_status ps;
        cr_assert_eq(status_get(&ring.d[i], JOB, &ps), 0);
        cr_assert_eq(ps.gen, gen, "n%d: the ring went from generation %" PRIu64 " to %" PRIu64, i,
                     gen, ps.gen);
        cr_assert_str_eq(ps.state, "up");
    }
    for (int i = 0; i < 2; i++) {
        ringd_close(s[i]);
        s[i] = NULL;
    }
    th_ring_finish(&ring);
}

Test(peers, an_idle_stranger_is_closed_after_handshake_ms)
{
    const char *const extra[] = {"--handshake-ms", "300", NULL};
    cr_assert_eq(th_ring_start(&ring, 1, extra), 0);
    int fd = tcp_connect(peer_port(&ring.d[0]));
    int64_t t0 = th_now_ms();
    char who[64], line[160];
    local_name(fd, who, sizeof(who));
    uint8_t chal[RD_AUTH_CHALLENGE_LEN];
    cr_assert_eq(read_upto(fd, chal, sizeof(chal), 3000), sizeof(chal), "no challenge");
    cr_assert_eq(memcmp(chal, "RNGD", 4), 0, "the challenge lacks its magic");
    cr_assert(th_wait_eof(fd, 5000), "an idle connection stayed open for 5 s");
    int64_t held = th_now_ms() - t0;
    close(fd);
    cr_assert_geq(held, 250, "closed after %" PRId64 " ms, before --handshake-ms", held);
    cr_assert_leq(held, 3000, "closed only after %" PRId64 " ms", held);
    snprintf(line, sizeof(line), "%s handshake timed out after 300 ms; closed", who);
    assert_log(&ring.d[0], line);
    th_ring_finish(&ring);
}

Test(peers, a_stranger_sending_part_of_an_answer_is_closed_after_handshake_ms)
{
    const char *const extra[] = {"--handshake-ms", "300", NULL};
    cr_assert_eq(th_ring_start(&ring, 1, extra), 0);
    /* Fewer bytes than an answer, and then fewer than a PeerHello header after a good answer:
     * the daemon must not wait for the rest longer than the handshake may take. */
    stranger_is_closed(&ring.d[0], "hello\n", 6, "handshake timed out after 300 ms");
    rd_auth_key k = ring_key();
    int fd = peer_auth(peer_port(&ring.d[0]), &k);
    char who[64], line[160];
    local_name(fd, who, sizeof(who));
    cr_assert_eq(th_write(fd, "\x10\x00", 2), 0);
    cr_assert(th_wait_eof(fd, 5000), "half a PeerHello header held the connection open");
    close(fd);
    snprintf(line, sizeof(line), "%s handshake timed out after 300 ms; closed", who);
    assert_log(&ring.d[0], line);
    th_ring_finish(&ring);
}

#define FLOOD 300
#define SETUPS_MAX 256 /* RD_PEER_SETUPS_MAX in daemon/net/peer.c */

/* Opens FLOOD connections to each daemon of a 2-node ring (handshake-ms 1000), each sending
 * first (len bytes, may be 0), then lets the ranks join while every handshake slot is taken: the
 * dials between the daemons are turned away until the strangers time out, then the ring forms. */
static void flood_then_ring(const void *first, size_t len)
{
    const char *const extra[] = {"--handshake-ms", "1000", NULL};
    cr_assert_eq(th_ring_start(&ring, 2, extra), 0);
    int port[2] = {peer_port(&ring.d[0]), peer_port(&ring.d[1])};
    static int fds[2][FLOOD];
    static int64_t opened[2][FLOOD], closed[2][FLOOD];
    for (int d = 0; d < 2; d++) {
        for (int i = 0; i < FLOOD; i++) {
            fds[d][i] = tcp_connect(port[d]);
            opened[d][i] = th_now_ms();
            closed[d][i] = 0;
            if (len > 0)
                th_write(fds[d][i], first, len); /* may be reset already */
        }
    }
    opener o[2];
    open_start(o, 15000);

    int left = 2 * FLOOD;
    for (int64_t end = th_now_ms() + 8000; left > 0 && th_now_ms() < end;) {
        struct pollfd p[2 * FLOOD];
        int who[2 * FLOOD], np = 0;
        for (int k = 0; k < 2 * FLOOD; k++)
            if (closed[k / FLOOD][k % FLOOD] == 0) {
                p[np] = (struct pollfd){.fd = fds[k / FLOOD][k % FLOOD], .events = POLLIN};
                who[np++] = k;
            }
        if (poll(p, (nfds_t)np, 50) <= 0)
            continue;
        for (int j = 0; j < np; j++) {
            if (p[j].revents == 0)
                continue;
            uint8_t buf[64];
            ssize_t r = recv(p[j].fd, buf, sizeof(buf), 0);
            if (r == 0 || (r < 0 && errno == ECONNRESET)) {
                closed[who[j] / FLOOD][who[j] % FLOOD] = th_now_ms();
                left--;
            }
        }
    }
    open_join(o);
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < FLOOD; i++)
            close(fds[d][i]);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(o[i].rc, RINGD_OK, "open on n%d: %s: %s", i, ringd_strerror(o[i].rc),
                     o[i].err);
    cr_assert_eq(left, 0, "%d of the strangers' connections were still open after 8 s", left);
    for (int d = 0; d < 2; d++) {
        int late = 0;
        for (int i = 0; i < FLOOD; i++)
            late += closed[d][i] - opened[d][i] >= 900;
        cr_assert_geq(late, SETUPS_MAX, "n%d: only %d connections were held for the handshake", d,
                      late);
        /* The excess over the cap, and the turned-away dials of the other daemon. */
        int excess = log_count(&ring.d[d], "handshakes already in progress; closed");
        cr_assert_geq(excess, FLOOD - SETUPS_MAX, "n%d closed only %d connections at the cap", d,
                      excess);
        cr_assert_eq(log_count(&ring.d[d], "handshake timed out after 1000 ms; closed"),
                     SETUPS_MAX);
    }
    allreduce_ok(sess, "after-flood");
    close_sessions();
    th_ring_finish(&ring);
}

Test(peers, a_flood_of_idle_connections_delays_but_does_not_stop_the_ring, .timeout = 60)
{
    flood_then_ring(NULL, 0);
}

Test(peers, a_flood_of_connections_sending_one_byte_delays_but_does_not_stop_the_ring,
     .timeout = 60)
{
    flood_then_ring("G", 1);
}

Test(peers, a_peer_with_a_stale_generation_is_refused_and_the_ring_keeps_working)
{
    cr_assert_eq(th_ring_start(&ring, 2, NULL), 0);
    ringd_t **s = sess;
    open_ring(s);
    uint64_t gen = ringd_generation(s[0]);
    peer_status ps;
    cr_assert_eq(status_get(&ring.d[1], JOB, &ps), 0);
    cr_assert_eq(ps.gen, gen);
    cr_assert_gt(gen, 0);

    Ringd__PeerHello h = hello(JOB, gen - 1, "n0", RINGD__LINK_KIND__LINK_DATA, 0);
    char why[128];
    snprintf(why, sizeof(why), "stale generation %" PRIu64 " (job '%s' is at %" PRIu64 ")", gen - 1,
             JOB, gen);
    expect_refused(&ring.d[1], &h, RINGD_E_MEMBERSHIP, why);

    allreduce_ok(s, "after-stale");
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(status_get(&ring.d[i], JOB, &ps), 0);
        cr_assert_eq(ps.gen, gen, "n%d moved to generation %" PRIu64, i, ps.gen);
        ringd_close(s[i]);
        s[i] = NULL;
    }
    th_ring_finish(&ring);
}

/* A daemon of another protocol version (a mixed upgrade) is refused before anything else. */
Test(peers, a_peer_of_another_protocol_version_is_refused_and_the_ring_keeps_working)
{
    cr_assert_eq(th_ring_start(&ring, 2, NULL), 0);
    ringd_t **s = sess;
    open_ring(s);
    uint64_t gen = ringd_generation(s[0]);
    Ringd__PeerHello h = hello(JOB, gen, "n0", RINGD__LINK_KIND__LINK_DATA, 0);
    h.protocol = RD_PEER_PROTOCOL_VERSION + 1;
    char why[128];
    snprintf(why, sizeof(why), "node n0 speaks protocol %d, this node %d",
             RD_PEER_PROTOCOL_VERSION + 1, RD_PEER_PROTOCOL_VERSION);
    expect_refused(&ring.d[1], &h, RINGD_E_PROTOCOL, why);
    allreduce_ok(s, "after-protocol");
    for (int i = 0; i < 2; i++) {
        ringd_close(s[i]);
        s[i] = NULL;
    }
    th_ring_finish(&ring);
}

Test(peers, peers_claiming_another_identity_are_refused_by_a_ring_that_is_up)
{
    cr_assert_eq(th_ring_start(&ring, 2, NULL), 0);
    ringd_t **s = sess;
    open_ring(s);
    uint64_t gen = ringd_generation(s[0]);
    char why[160];
    snprintf(why, sizeof(why), "is not forming generation %" PRIu64 " here (at %" PRIu64 ", up)",
             gen, gen);

    /* n1's previous node is n0; its data connections 0 and 1 are connected. */
    Ringd__PeerHello h = hello(JOB, gen, "n7", RINGD__LINK_KIND__LINK_DATA, 0);
    expect_refused(&ring.d[1], &h, RINGD_E_MEMBERSHIP, why);
    h = hello(JOB, gen, "n0", RINGD__LINK_KIND__LINK_DATA, 1);
    expect_refused(&ring.d[1], &h, RINGD_E_MEMBERSHIP, why);
    /* n0 coordinates; n1 has its control connection. */
    h = hello(JOB, gen, "n1", RINGD__LINK_KIND__LINK_CONTROL, 0);
    expect_refused(&ring.d[0], &h, RINGD_E_MEMBERSHIP, why);
    h = hello(JOB, gen + 1, "n0", RINGD__LINK_KIND__LINK_DATA, 0);
    snprintf(why, sizeof(why), "is not forming generation %" PRIu64, gen + 1);
    expect_refused(&ring.d[1], &h, RINGD_E_MEMBERSHIP, why);
    h = hello("no-such-job", gen, "n0", RINGD__LINK_KIND__LINK_DATA, 0);
    expect_refused(&ring.d[1], &h, RINGD_E_REFUSED, "job 'no-such-job' has no clients on node n1");

    allreduce_ok(s, "after-impostors");
    for (int i = 0; i < 2; i++) {
        peer_status ps;
        cr_assert_eq(status_get(&ring.d[i], JOB, &ps), 0);
        cr_assert_eq(ps.gen, gen, "n%d moved to generation %" PRIu64, i, ps.gen);
        ringd_close(s[i]);
        s[i] = NULL;
    }
    th_ring_finish(&ring);
}

Test(peers, a_forming_ring_refuses_mismatched_settings_and_wrong_identities, .timeout = 60)
{
    /* n0 runs one connection per link, n1 two: the ring stays connecting, and while it does
     * the test probes the identity rules that apply then. */
    const char *const one[] = {"--conns-per-link", "1", NULL};
    cr_assert_eq(th_ring_start(&ring, 1, one), 0);
    cr_assert_eq(th_ring_start_node(&ring, 1, NULL), 0);
    opener o[2];
    open_start(o, 4000);
    /* Waits on the logs, not on status requests: a status request before the first view
     * arrives leaks in rd_world_describe (see the report). */
    const char *forming = "job 'job-peers': ring waiting -> connecting";
    cr_assert(log_wait(&ring.d[0], forming, 5000) && log_wait(&ring.d[1], forming, 5000),
              "the ring never started connecting");
    peer_status ps[2];
    cr_assert_eq(status_get(&ring.d[0], JOB, &ps[0]), 0);
    cr_assert_eq(status_get(&ring.d[1], JOB, &ps[1]), 0);
    cr_assert_str_eq(ps[0].state, "connecting");
    cr_assert_str_eq(ps[1].state, "connecting");
    cr_assert_eq(ps[0].gen, ps[1].gen);
    uint64_t gen = ps[1].gen;
    assert_log(&ring.d[1], "node n0 runs --conns-per-link 1 (this node 2); all nodes must agree");

    Ringd__PeerHello h = hello(JOB, gen, "n7", RINGD__LINK_KIND__LINK_DATA, 0);
    expect_refused(&ring.d[1], &h, RINGD_E_REFUSED,
                   "unexpected data connection 0 from node n7 (previous node: n0)");
    h = hello(JOB, gen, "n0", RINGD__LINK_KIND__LINK_DATA, CONNS);
    expect_refused(&ring.d[1], &h, RINGD_E_REFUSED, "unexpected data connection 2 from node n0");
    h = hello(JOB, gen, "n0", RINGD__LINK_KIND__LINK_DATA, 0);
    h.segment_size = SEGMENT / 2;
    expect_refused(&ring.d[1], &h, RINGD_E_REFUSED, "all nodes must agree");
    h = hello(JOB, gen, "n0", RINGD__LINK_KIND__LINK_DATA, 0);
    h.pair_links = 4;
    expect_refused(&ring.d[1], &h, RINGD_E_REFUSED, "node n0 runs --pair-links 4 (this node 32)");
    h = hello(JOB, gen, "n0", RINGD__LINK_KIND__LINK_DATA, 0);
    h.max_frame = 1u << 16;
    h.direct_bytes = 0;
    expect_refused(&ring.d[1], &h, RINGD_E_REFUSED,
                   "node n0 runs --max-frame 65536 (this node 1048576), --direct-bytes 0 (this "
                   "node 16384); all nodes must agree");
    /* a direct link (alltoall) comes only once the ring is up */
    h = hello(JOB, gen, "n0", RINGD__LINK_KIND__LINK_PAIR, 0);
    expect_refused(&ring.d[1], &h, RINGD_E_MEMBERSHIP, "has no ring of generation");
    h = hello(JOB, gen, "n7", RINGD__LINK_KIND__LINK_CONTROL, 0);
    h.conns = 1;
    expect_refused(&ring.d[0], &h, RINGD_E_REFUSED, "unexpected control connection from node n7");
    /* n1 is not the coordinator. */
    h = hello(JOB, gen, "n0", RINGD__LINK_KIND__LINK_CONTROL, 0);
    expect_refused(&ring.d[1], &h, RINGD_E_REFUSED, "unexpected control connection from node n0");

    /* A forged n0 holding the key takes data connection 0 of n1 (the key is what makes a peer).
     * A second claim on the same index is taken for a re-dial of n0: it replaces the first
     * connection, which the daemon closes. */
    int fd[2];
    h = hello(JOB, gen, "n0", RINGD__LINK_KIND__LINK_DATA, 0);
    for (int k = 0; k < 2; k++) {
        rd_msg *r = peer_hello(&ring.d[1], &h, &fd[k]);
        cr_assert(r != NULL && r->body_case == RINGD__MSG__BODY_PEER_ACCEPT,
                  "valid PeerHello %d was not accepted", k);
        cr_assert_eq(r->peer_accept->generation, gen);
        rd_frame_free(r);
    }
    cr_assert(th_wait_eof(fd[0], 3000), "the replaced data connection stayed open");
    close(fd[0]);
    close(fd[1]);

    open_join(o);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(o[i].rc, RINGD_E_TIMEOUT, "open on n%d: %s: %s", i, ringd_strerror(o[i].rc),
                     o[i].err);
    }
    close_sessions();
    assert_log(&ring.d[0], "node n1 runs --conns-per-link 2 (this node 1); all nodes must agree");
    th_ring_finish(&ring);
}

/* n1 is n0's child in the control tree: a forged n1 holding the key takes its control link at
 * gen (start_forming). Returns the link's fd. */
static int forged_child_link(uint64_t gen)
{
    Ringd__PeerHello h = hello(JOB, gen, "n1", RINGD__LINK_KIND__LINK_CONTROL, 0);
    h.conns = 1;
    int fd;
    rd_msg *r = peer_hello(&ring.d[0], &h, &fd);
    cr_assert(r != NULL && r->body_case == RINGD__MSG__BODY_PEER_ACCEPT,
              "the control link was not accepted");
    rd_frame_free(r);
    return fd;
}

/* Sends m over the control link fd as a Relay from position origin for every node. */
static void relay_send(int fd, const rd_msg *m, uint32_t origin)
{
    Ringd__Relay *relay = rd_relay_new(m, origin, -1);
    cr_assert_not_null(relay);
    Ringd__Relays rs;
    rd_msg batch;
    rd_relays_msg(&batch, &rs, &relay, 1);
    cr_assert_eq(th_send(fd, &batch), 0);
    rd_relay_free(relay);
}

/* A peer holding the key that relays what cannot come its way (here a message "from" the node it
 * talks to) makes that node drop the ring, naming the peer, instead of acting on it. */
Test(peers, a_control_link_relaying_what_cannot_come_its_way_drops_the_ring_naming_it,
     .timeout = 60)
{
    /* n1 runs two connections per link, n0 one: the ring stays connecting */
    const char *const one[] = {"--conns-per-link", "1", NULL};
    opener o[2];
    uint64_t gen = start_forming(one, o).gen;

    int fd = forged_child_link(gen);
    Ringd__Bye bye = RINGD__BYE__INIT;
    bye.generation = gen;
    rd_msg m = RINGD__MSG__INIT;
    m.body_case = RINGD__MSG__BODY_BYE;
    m.bye = &bye;
    relay_send(fd, &m, 0); /* position 0 is n0 itself */
    assert_log(&ring.d[0], "control message from node n1 relayed from position 0 to -1, which "
                           "does not come that way in a ring of 2 nodes; dropping the ring");
    cr_assert(th_wait_eof(fd, 3000), "the link stayed open after the ring dropped");
    close(fd);
    cr_assert(!log_wait(&ring.d[0], "node n1 sealed generation", 200),
              "n0 took the forged Bye as n1's");

    open_join(o);
    close_sessions();
    th_ring_finish(&ring);
}

/* A peer that announces an op by a slot of its cache it never filled makes the node drop the
 * ring, naming it, instead of guessing which op that is. */
Test(peers, an_announcement_by_a_slot_never_filled_drops_the_ring_naming_the_node, .timeout = 60)
{
    const char *const one[] = {"--conns-per-link", "1", NULL};
    opener o[2];
    uint64_t gen = start_forming(one, o).gen;

    int fd = forged_child_link(gen);
    Ringd__OpSpec op = RINGD__OP_SPEC__INIT, *ops[] = {&op};
    op.cached = 3;
    Ringd__Ready ready = RINGD__READY__INIT;
    ready.generation = gen;
    ready.ops = ops;
    ready.n_ops = 1;
    rd_msg m = RINGD__MSG__INIT;
    m.body_case = RINGD__MSG__BODY_READY;
    m.ready = &ready;
    relay_send(fd, &m, 1); /* n1's own */
    assert_log(&ring.d[0], "announcement of node n1: an op in slot 3 of its cache, of 0 filled; "
                           "dropping the ring");
    cr_assert(th_wait_eof(fd, 3000), "the link stayed open after the ring dropped");
    close(fd);

    open_join(o);
    close_sessions();
    th_ring_finish(&ring);
}

Test(peers, a_peer_with_the_wrong_key_gets_no_confirmation)
{
    cr_assert_eq(th_ring_start(&ring, 1, NULL), 0);
    int port = peer_port(&ring.d[0]);
    /* The right key first, so that the check below can tell a refusal from a broken test. */
    rd_auth_key k = ring_key();
    close(peer_auth(port, &k));

    rd_auth_key wrong = k;
    wrong.key[0] ^= 1;
    uint8_t chal[RD_AUTH_CHALLENGE_LEN], ans[RD_AUTH_ANSWER_LEN], conf[RD_AUTH_CONFIRM_LEN];
    int fd = peer_answer(port, &wrong, chal, ans);
    char who[64], line[160];
    local_name(fd, who, sizeof(who));
    size_t got = read_upto(fd, conf, sizeof(conf), 5000);
    cr_assert_eq(got, 0, "the daemon sent %zu bytes to a peer without the key", got);
    cr_assert(th_wait_eof(fd, 100), "the connection is still open");
    close(fd);
    snprintf(line, sizeof(line), "%s authentication failed (wrong or missing ring key); closed",
             who);
    assert_log(&ring.d[0], line);
    th_ring_finish(&ring);
}

/* Authenticates to daemon d, sends raw bytes where PeerHello belongs, and checks that the daemon
 * closes the connection at once and logs why. */
static void bad_hello_is_closed(const th_daemon *d, const void *bytes, size_t len, const char *why)
{
    rd_auth_key k = ring_key();
    int fd = peer_auth(peer_port(d), &k);
    char who[64], line[200];
    local_name(fd, who, sizeof(who));
    int64_t t0 = th_now_ms();
    th_write(fd, bytes, len);
    uint8_t b;
    cr_assert_eq(read_upto(fd, &b, 1, 5000), 0, "the daemon answered a bad PeerHello");
    cr_assert(th_wait_eof(fd, 100), "the connection is still open");
    cr_assert_lt(th_now_ms() - t0, 4000, "closed only after the handshake timed out");
    th_sleep_ms(100); /* room for a crash after the close */
    cr_assert(th_daemon_alive(d) && th_status_ok(d->sock), "ringd died after \"%s\" (log above)",
              why);
    close(fd);
    snprintf(line, sizeof(line), "%s %s; closed", who, why);
    assert_log(d, line);
}

Test(peers, a_peer_announcing_a_huge_or_bad_hello_frame_is_closed)
{
    const char *const extra[] = {"--handshake-ms", "5000", NULL};
    cr_assert_eq(th_ring_start(&ring, 1, extra), 0);
    const uint8_t huge[] = {0xf0, 0xff, 0xff, 0xff, 'x', 'y', 'z'};
    bad_hello_is_closed(&ring.d[0], huge, sizeof(huge), "handshake frame of 4294967280 bytes");
    const uint8_t over[] = {0x01, 0x10, 0x00, 0x00}; /* 4097: one byte over the limit */
    bad_hello_is_closed(&ring.d[0], over, sizeof(over), "handshake frame of 4097 bytes");
    const uint8_t empty[] = {0, 0, 0, 0};
    bad_hello_is_closed(&ring.d[0], empty, sizeof(empty), "handshake frame of 0 bytes");
    const uint8_t junk[] = {8, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    bad_hello_is_closed(&ring.d[0], junk, sizeof(junk), "first frame is not a PeerHello");

    /* A well-formed message of another type. */
    Ringd__StatusRequest q = RINGD__STATUS_REQUEST__INIT;
    rd_msg m = RINGD__MSG__INIT;
    m.body_case = RINGD__MSG__BODY_STATUS_REQUEST;
    m.status_request = &q;
    uint8_t frame[64];
    cr_assert_leq(rd_frame_size(&m), sizeof(frame));
    size_t n = rd_frame_pack(&m, frame);
    bad_hello_is_closed(&ring.d[0], frame, n, "first frame is not a PeerHello");
    th_ring_finish(&ring);
}

/* ---- the probe: does a process listen at a peer's address? ---------------------------------- */

typedef struct {
    struct event_base *base;
    int calls;
    int alive;
    char why[128];
} probe_outcome;

static void on_probe_done(void *arg, int alive, const char *why)
{
    probe_outcome *o = arg;
    o->calls++;
    o->alive = alive;
    snprintf(o->why, sizeof(o->why), "%s", why);
    event_base_loopbreak(o->base);
}

/* Probes host:port with the daemon's own rd_peer_probe on a loop of the test's; the outcome comes
 * within 3 s (the probe bounds itself at a second). */
static probe_outcome probe_addr(const char *host, int port)
{
    probe_outcome o = {event_base_new(), 0, -2, ""};
    char addr[64];
    snprintf(addr, sizeof(addr), "%s:%d", host, port);
    cr_assert_not_null(o.base);
    rd_peer_probe *p = rd_peer_probe_new(o.base, addr, 0, on_probe_done, &o);
    cr_assert_not_null(p, "rd_peer_probe_new(%s) failed", addr);
    struct timeval bound = {3, 0};
    event_base_loopexit(o.base, &bound);
    event_base_dispatch(o.base);
    if (o.calls == 0)
        rd_peer_probe_cancel(p);
    event_base_free(o.base);
    cr_assert_eq(o.calls, 1, "the probe of %s reported %d times within 3 s", addr, o.calls);
    return o;
}

/* A TCP socket bound to a loopback port: listening (something accepts there) or not (connects
 * to it are refused, and the port stays taken so that nobody else listens there meanwhile). */
static int loopback_port(int listening, int *port)
{
    struct sockaddr_in sin = {.sin_family = AF_INET};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof(sin);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0, "socket: %s", strerror(errno));
    cr_assert_eq(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0, "bind: %s", strerror(errno));
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&sin, &sl), 0);
    if (listening)
        cr_assert_eq(listen(fd, 4), 0, "listen: %s", strerror(errno));
    *port = ntohs(sin.sin_port);
    return fd;
}

/* A refusal, whether connect returns it at once (as loopback does on some kernels) or reports it
 * later through the socket's error, means nobody listens: alive 0. */
Test(peers, a_probe_of_a_loopback_port_nobody_listens_on_reports_not_alive)
{
    int port;
    int fd = loopback_port(0, &port);
    probe_outcome o = probe_addr("127.0.0.1", port);
    cr_expect_eq(o.alive, 0, "a refused port probed as alive %d (%s)", o.alive, o.why);
    cr_expect(strstr(o.why, "refused") != NULL, "the reason is \"%s\"", o.why);
    close(fd);

    fd = loopback_port(1, &port);
    o = probe_addr("127.0.0.1", port);
    cr_expect_eq(o.alive, 1, "a listening port probed as alive %d (%s)", o.alive, o.why);
    close(fd);
}

/* A connect that fails before it returns leaves nothing in SO_ERROR: the probe must report the
 * error connect returned, not read the cleared socket error as success. A TCP connect to a
 * multicast address fails that way on every Linux (Network is unreachable). */
Test(peers, a_probe_whose_connect_fails_at_once_reports_that_error_not_alive)
{
    probe_outcome o = probe_addr("224.0.0.1", 9);
    cr_expect_eq(o.alive, -1, "probed as alive %d (%s)", o.alive, o.why);
    cr_expect(strstr(o.why, "unreachable") != NULL, "the reason is \"%s\"", o.why);
}

typedef struct {
    struct event_base *base;
    int calls;
    int fd;
    char why[256];
} dial_outcome;

static void on_dial_done(void *arg, int fd, const rd_seal *seal, const char *why)
{
    (void)seal;
    dial_outcome *o = arg;
    o->calls++;
    o->fd = fd;
    snprintf(o->why, sizeof(o->why), "%s", why != NULL ? why : "");
    event_base_loopbreak(o->base);
}

static ringd_result_t refuse_all(void *arg, const Ringd__PeerHello *h, int fd, const rd_seal *seal,
                                 const char *remote, uint64_t *generation, char *err, size_t errlen)
{
    (void)seal;
    (void)arg;
    (void)h;
    (void)fd;
    (void)remote;
    (void)generation;
    snprintf(err, errlen, "the test takes no peers");
    return RINGD_E_REFUSED;
}

/* Dials addr from n with a control PeerHello and runs the loop until the dial reports (secs at
 * most); then frees n and o's event base. */
static void dial_once(dial_outcome *o, rd_peer_net *n, const char *addr, int secs)
{
    Ringd__PeerHello h = hello(JOB, 1, "n9", RINGD__LINK_KIND__LINK_CONTROL, 0);
    rd_peer_dial *d = rd_peer_dial_new(n, addr, &h, on_dial_done, o);
    cr_assert_not_null(d);
    struct timeval bound = {secs, 0};
    event_base_loopexit(o->base, &bound);
    event_base_dispatch(o->base);
    if (o->calls == 0)
        rd_peer_dial_cancel(d);
    rd_peer_net_free(n);
    event_base_free(o->base);
}

/* A dial whose connect fails before it returns says why, as the probe does, rather than going on
 * to wait for a challenge on a socket that never connected. */
Test(peers, a_dial_whose_connect_fails_at_once_says_why)
{
    dial_outcome o = {event_base_new(), 0, -2, ""};
    cr_assert_not_null(o.base);
    rd_auth_key k;
    rd_auth_insecure(&k);
    char err[256] = "";
    rd_peer_net *n =
        rd_peer_net_new(o.base, "127.0.0.1:0", &k, 0, 2000, refuse_all, NULL, err, sizeof(err));
    cr_assert_not_null(n, "%s", err);
    dial_once(&o, n, "224.0.0.1:9", 3);
    cr_assert_eq(o.calls, 1, "the dial reported %d times within 3 s", o.calls);
    cr_expect_lt(o.fd, 0, "the dial connected (fd %d)", o.fd);
    cr_expect(strstr(o.why, "connect: Network is unreachable") != NULL, "the reason is \"%s\"",
              o.why);
}

/* A peer given by host name is looked up through evdns, never inside rd_peer_dial_new: a name
 * /etc/hosts knows reaches the peer (refused here: the handshake itself ran), and a name nobody
 * knows fails with the resolver's reason, reported from the loop. */
Test(peers, a_dial_by_host_name_looks_it_up_off_the_loop)
{
    dial_outcome o = {event_base_new(), 0, -2, ""};
    cr_assert_not_null(o.base);
    rd_auth_key k;
    rd_auth_insecure(&k);
    char err[256] = "", addr[64];
    rd_peer_net *n =
        rd_peer_net_new(o.base, "127.0.0.1:0", &k, 0, 2000, refuse_all, NULL, err, sizeof(err));
    cr_assert_not_null(n, "%s", err);
    const char *bound = rd_peer_net_address(n);
    snprintf(addr, sizeof(addr), "localhost%s", strrchr(bound, ':'));
    Ringd__PeerHello h = hello(JOB, 1, "n9", RINGD__LINK_KIND__LINK_CONTROL, 0);
    rd_peer_dial *d = rd_peer_dial_new(n, addr, &h, on_dial_done, &o);
    cr_assert_not_null(d);
    cr_assert_eq(o.calls, 0, "no callback from within rd_peer_dial_new");
    struct timeval limit = {3, 0};
    event_base_loopexit(o.base, &limit);
    event_base_dispatch(o.base);
    cr_assert_eq(o.calls, 1, "the dial to %s reported %d times within 3 s", addr, o.calls);
    cr_expect(strstr(o.why, "the test takes no peers") != NULL || strstr(o.why, "refused") != NULL,
              "the dial reached the listener by name: \"%s\"", o.why);
    o.calls = 0;
    d = rd_peer_dial_new(n, "no-such-host.invalid:9", &h, on_dial_done, &o);
    cr_assert_not_null(d);
    cr_assert_eq(o.calls, 0);
    event_base_loopexit(o.base, &limit);
    event_base_dispatch(o.base);
    cr_assert_eq(o.calls, 1);
    cr_expect_lt(o.fd, 0);
    cr_expect(strstr(o.why, "resolve:") != NULL, "the reason is \"%s\"", o.why);
    /* A lookup under way is cancelled with its dial. */
    d = rd_peer_dial_new(n, "another-unknown-host.invalid:9", &h, on_dial_done, &o);
    cr_assert_not_null(d);
    rd_peer_dial_cancel(d);
    rd_peer_net_free(n);
    /* The cancelled lookup reports back on the next turn; the resolver goes then (LSan checks). */
    event_base_loop(o.base, EVLOOP_NONBLOCK);
    cr_assert_eq(o.calls, 1, "a cancelled dial never calls back");
    event_base_free(o.base);
}

/* ---- sealing checked from outside ---------------------------------------------------------- */

/* The test as a server that authenticates honestly and answers a sealing dialler's PeerHello
 * with PeerAccept{cipher}: a dialler that seals takes no link in the clear (nor a cipher it did
 * not offer) from an answer nobody authenticated. */
typedef struct {
    int lfd;
    uint32_t cipher;
    rd_auth_key key;
} fake_server;

static void *fake_server_main(void *arg)
{
    fake_server *f = arg;
    int fd = accept(f->lfd, NULL, NULL);
    if (fd < 0)
        return NULL;
    uint8_t chal[RD_AUTH_CHALLENGE_LEN], ans[RD_AUTH_ANSWER_LEN], confirm[RD_AUTH_CONFIRM_LEN];
    rd_auth_challenge(chal);
    if (write(fd, chal, sizeof(chal)) == (ssize_t)sizeof(chal) &&
        read_upto(fd, ans, sizeof(ans), 3000) == sizeof(ans) &&
        rd_auth_verify_answer(&f->key, chal, ans, confirm) == 0 &&
        write(fd, confirm, sizeof(confirm)) == (ssize_t)sizeof(confirm)) {
        rd_msg *hello = th_recv(fd, 3000, NULL);
        if (hello != NULL) {
            Ringd__PeerAccept pa = RINGD__PEER_ACCEPT__INIT;
            pa.generation = hello->peer_hello->generation;
            pa.cipher = f->cipher;
            rd_msg m = RINGD__MSG__INIT;
            m.body_case = RINGD__MSG__BODY_PEER_ACCEPT;
            m.peer_accept = &pa;
            th_send(fd, &m);
            rd_frame_free(hello);
            th_wait_eof(fd, 3000);
        }
    }
    close(fd);
    return NULL;
}

Test(peers, a_sealing_dialler_refuses_an_answer_in_the_clear_or_with_a_cipher_it_did_not_offer)
{
    const uint32_t answers[] = {RD_CIPHER_NONE, 7};
    for (int k = 0; k < 2; k++) {
        dial_outcome o = {event_base_new(), 0, -2, ""};
        cr_assert_not_null(o.base);
        fake_server f = {.cipher = answers[k]};
        cr_assert_eq(rd_auth_init(), 0);
        rd_auth_insecure(&f.key);
        int port;
        f.lfd = loopback_port(1, &port);
        pthread_t t;
        cr_assert_eq(pthread_create(&t, NULL, fake_server_main, &f), 0);
        char err[256] = "", addr[32];
        rd_peer_net *n = rd_peer_net_new(o.base, "127.0.0.1:0", &f.key, 1, 2000, refuse_all, NULL,
                                         err, sizeof(err));
        cr_assert_not_null(n, "%s", err);
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
        dial_once(&o, n, addr, 5);
        pthread_join(t, NULL);
        close(f.lfd);
        cr_assert_eq(o.calls, 1, "cipher %u: the dial reported %d times", answers[k], o.calls);
        cr_expect_lt(o.fd, 0, "cipher %u: the dial took the link (fd %d)", answers[k], o.fd);
        if (o.fd >= 0)
            close(o.fd);
        cr_expect(strstr(o.why, "where this node seals its links (--encrypt)") != NULL,
                  "cipher %u: the reason is \"%s\"", answers[k], o.why);
    }
}

/* A relay in front of a daemon's peer port (its --advertise): every connection to it goes on to
 * the daemon, and every byte either way is kept for the test to search. */
typedef struct {
    int lfd, target;
    uint8_t *seen;
    size_t len, cap;
    atomic_int stop;
    pthread_t t;
} relay;

/* A connection to the daemon's port, or -1 (no assertions: the relay's thread). */
static int relay_connect(int port)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

#define RELAY_PAIRS 64

static void *relay_main(void *arg)
{
    relay *rl = arg;
    int a[RELAY_PAIRS], b[RELAY_PAIRS], n = 0; /* a: from the dialler, b: to the daemon; -1 gone */
    uint8_t buf[65536];
    while (!atomic_load(&rl->stop)) {
        struct pollfd pf[1 + 2 * RELAY_PAIRS];
        pf[0] = (struct pollfd){.fd = rl->lfd, .events = POLLIN};
        for (int i = 0; i < n; i++) { /* poll skips the -1 of pairs gone */
            pf[1 + 2 * i] = (struct pollfd){.fd = a[i], .events = POLLIN};
            pf[2 + 2 * i] = (struct pollfd){.fd = b[i], .events = POLLIN};
        }
        if (poll(pf, (nfds_t)(1 + 2 * n), 50) <= 0)
            continue;
        if ((pf[0].revents & POLLIN) && n < RELAY_PAIRS) {
            int c = accept(rl->lfd, NULL, NULL), d = relay_connect(rl->target);
            if (c >= 0 && d >= 0) {
                a[n] = c;
                b[n++] = d;
                continue; /* pf no longer matches the pairs */
            }
            if (c >= 0)
                close(c);
            if (d >= 0)
                close(d);
        }
        for (int i = 0; i < n; i++)
            for (int side = 0; side < 2 && a[i] >= 0; side++) {
                if (!(pf[1 + 2 * i + side].revents & (POLLIN | POLLHUP | POLLERR)))
                    continue;
                int from = side ? b[i] : a[i], to = side ? a[i] : b[i];
                ssize_t got = read(from, buf, sizeof(buf));
                if (got <= 0) { /* either end gone: both go */
                    close(a[i]);
                    close(b[i]);
                    a[i] = b[i] = -1;
                    continue;
                }
                if (rl->len + (size_t)got <= rl->cap) {
                    memcpy(rl->seen + rl->len, buf, (size_t)got);
                    rl->len += (size_t)got;
                }
                for (ssize_t put = 0, w; put < got; put += w)
                    if ((w = send(to, buf + put, (size_t)(got - put), MSG_NOSIGNAL)) <= 0)
                        break;
            }
    }
    for (int i = 0; i < n; i++)
        if (a[i] >= 0) {
            close(a[i]);
            close(b[i]);
        }
    return NULL;
}

/* What crossed the relayed links of a 2-node ring (n0 behind the relay: n1's data and both
 * nodes' control go through it) during a small named allreduce and a 1 MiB one: whether the
 * tensor name and rank 1's data were seen in the clear. */
static void relayed_ring(int sealed, int *name_seen, int *data_seen)
{
    static const char name[] = "tensor.name.that.must.not.cross.in.the.clear";
    relay rl = {.cap = 16u << 20};
    rl.seen = malloc(rl.cap);
    cr_assert_not_null(rl.seen);
    int port0, rport;
    close(loopback_port(0, &port0)); /* free a moment ago: n0's --listen */
    rl.lfd = loopback_port(1, &rport);
    rl.target = port0;
    cr_assert_eq(pthread_create(&rl.t, NULL, relay_main, &rl), 0);
    cr_assert_eq(th_ring_init(&ring, 1), 0);
    snprintf(ring.listen[0], sizeof(ring.listen[0]), "127.0.0.1:%d", port0);
    char adv[32];
    snprintf(adv, sizeof(adv), "127.0.0.1:%d", rport);
    const char *const n0[] = {"--advertise", adv, sealed ? "--encrypt" : NULL, NULL};
    const char *const n1[] = {sealed ? "--encrypt" : NULL, NULL};
    cr_assert_eq(th_ring_start_node(&ring, 0, n0), 0);
    cr_assert_eq(th_ring_start_node(&ring, 1, n1), 0);
    open_ring(sess);
    float small[2][4] = {{1, 2, 3, 4}, {5, 6, 7, 8}};
    ringd_request_t *q[2];
    for (int r = 0; r < 2; r++) /* small: its data rides in the control messages */
        cr_assert_eq(ringd_allreduce_async(sess[r], name, small[r], small[r], 4, RINGD_F32,
                                           RINGD_SUM, &q[r]),
                     RINGD_OK, "%s", ringd_errmsg(sess[r]));
    for (int r = 0; r < 2; r++)
        cr_assert_eq(ringd_wait(q[r]), RINGD_OK, "%s", ringd_errmsg(sess[r]));
    cr_assert_eq(small[0][0], 6.0f);
    allreduce_ok(sess, sealed ? "sealed" : "clear");
    close_sessions();
    th_ring_finish(&ring);
    atomic_store(&rl.stop, 1);
    pthread_join(rl.t, NULL);
    close(rl.lfd);
    const float ones[] = {2, 3, 4, 5, 6, 7, 8}; /* rank 1's input of allreduce_ok, in a row */
    *name_seen = memmem(rl.seen, rl.len, name, sizeof(name) - 1) != NULL;
    *data_seen = memmem(rl.seen, rl.len, ones, sizeof(ones)) != NULL;
    cr_assert_gt(rl.len, (size_t)(1u << 19), "only %zu bytes crossed the relay", rl.len);
    free(rl.seen);
}

Test(peers, sealed_links_carry_no_tensor_name_or_data_in_the_clear, .timeout = 120)
{
    int name, data;
    relayed_ring(0, &name, &data); /* the relay sees what crosses: in the clear, both */
    cr_assert(name && data, "in the clear the relay saw name %d, data %d", name, data);
    relayed_ring(1, &name, &data);
    cr_expect(!name, "the tensor name crossed a sealed link in the clear");
    cr_expect(!data, "rank 1's data crossed a sealed link in the clear");
}
