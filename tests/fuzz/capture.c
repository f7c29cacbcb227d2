/* Writes the fuzz harnesses' seed corpora: real frames packed from the protobuf structs the
 * client and the daemons send, real control queue contents, member records and Redis replies in
 * the rendezvous's format, and the bytes a real ring node sends on a data link.
 * usage: fuzz_capture DIR   (DIR/<target>/<seed>; tests/fuzz/corpus is made with DIR =
 * tests/fuzz/corpus, from build-test: build-test/tests/fuzz/fuzz_capture tests/fuzz/corpus) */
#define _GNU_SOURCE
#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"
#include "counters.h"
#include "frame.h"
#include "log.h"
#include "ctlq.h"
#include "schedmsg.h"
#include "xfer.h"

#define SEED_MAX 65536

/* A seed under construction. */
typedef struct {
    uint8_t b[SEED_MAX];
    size_t n;
} seed;

static const char *outdir;

static void seed_bytes(seed *s, const void *p, size_t n)
{
    if (s->n + n > sizeof(s->b)) {
        fprintf(stderr, "fuzz_capture: seed over %d bytes\n", SEED_MAX);
        exit(1);
    }
    memcpy(s->b + s->n, p, n);
    s->n += n;
}

static void seed_byte(seed *s, uint8_t v)
{
    seed_bytes(s, &v, 1);
}

static void seed_frame(seed *s, const rd_msg *m)
{
    uint8_t buf[4096];
    if (rd_frame_size(m) > sizeof(buf))
        exit(1);
    seed_bytes(s, buf, rd_frame_pack(m, buf));
}

/* Writes DIR/target/name. */
static void seed_write(const char *target, const char *name, const seed *s)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", outdir, target);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/%s/%s", outdir, target, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(s->b, 1, s->n, f) != s->n || fclose(f) != 0) {
        fprintf(stderr, "fuzz_capture: %s: %s\n", path, strerror(errno));
        exit(1);
    }
}

/* ---- the messages, as libringd, ringctl and the daemons build them ---- */

static void msg_hello(rd_msg *m, Ringd__Hello *h, const char *job, uint32_t local)
{
    ringd__msg__init(m);
    ringd__hello__init(h);
    h->protocol = RD_PROTOCOL_VERSION;
    h->job = (char *)job;
    h->world_size = local;
    h->local_size = local;
    m->body_case = RINGD__MSG__BODY_HELLO;
    m->hello = h;
}

static void msg_submit(rd_msg *m, Ringd__Submit *s, uint64_t id, Ringd__OpType op, const char *name,
                       uint64_t count)
{
    ringd__msg__init(m);
    ringd__submit__init(s);
    s->request_id = id;
    s->op = op;
    s->name = (char *)name;
    s->dtype = RINGD__DATA_TYPE__DT_F32;
    s->count = count;
    s->in_offset = RD_CTRL_BYTES;
    s->out_offset = RD_CTRL_BYTES + 16384;
    s->redop = RINGD__REDUCE_OP__RED_SUM;
    s->prescale = 1.0;
    s->postscale = 1.0;
    m->body_case = RINGD__MSG__BODY_SUBMIT;
    m->submit = s;
}

/* A frame of a message that has no fields. */
static void seed_empty(seed *s, Ringd__Msg__BodyCase which)
{
    Ringd__StatusRequest sr = RINGD__STATUS_REQUEST__INIT;
    Ringd__Poke pk = RINGD__POKE__INIT;
    Ringd__DrainRequest dr = RINGD__DRAIN_REQUEST__INIT;
    Ringd__MetricsRequest mr = RINGD__METRICS_REQUEST__INIT;
    rd_msg m = RINGD__MSG__INIT;
    m.body_case = which;
    if (which == RINGD__MSG__BODY_STATUS_REQUEST)
        m.status_request = &sr;
    else if (which == RINGD__MSG__BODY_POKE)
        m.poke = &pk;
    else if (which == RINGD__MSG__BODY_METRICS_REQUEST)
        m.metrics_request = &mr;
    else
        m.drain_request = &dr;
    seed_frame(s, &m);
}

static void msg_peer_hello(rd_msg *m, Ringd__PeerHello *h, uint64_t generation)
{
    ringd__msg__init(m);
    ringd__peer_hello__init(h);
    h->protocol = RD_PEER_PROTOCOL_VERSION;
    h->job = "fuzz";
    h->generation = generation;
    h->node = "node-b";
    h->kind = RINGD__LINK_KIND__LINK_DATA;
    h->conns = 2;
    h->segment_size = 1 << 20;
    m->body_case = RINGD__MSG__BODY_PEER_HELLO;
    m->peer_hello = h;
}

/* Encodes v as world.c does and adds its frame. */
static void seed_schedmsg(seed *s, const rd_schedmsg *v)
{
    rd_msg *m = rd_schedmsg_encode(v);
    if (m == NULL)
        exit(1);
    seed_frame(s, m);
    rd_schedmsg_encoded_free(m);
}

/* Ready of one allreduce bound for the ring and a direct one carrying its data, a stall request,
 * and the coordinator's Go, as the daemons encode them. */
static void seed_negotiation(seed *s)
{
    static const float payload[16] = {1, 2, 3, 4};
    const rd_op_spec ops[2] = {
        {.name = "grad.0", .p = {.count = 1 << 20, .prescale = 1, .postscale = 1}, .message = ""},
        {.name = "loss",
         .p = {.count = 16, .prescale = 1, .postscale = 1},
         .message = "",
         .direct = 1,
         .data = (const uint8_t *)payload,
         .len = sizeof(payload)},
    };
    const rd_op_spec stalled = {
        .name = "late",
        .p = {.coll = RINGD__OP_TYPE__OP_BARRIER},
        .status = RINGD_E_STALLED,
        .message = "tensor 'late' stalled: rank 3 (node n2) never submitted it within 60000 ms"};
    const char *order[] = {"grad.0"};
    const rd_schedmsg ready = {.kind = RD_SCHEDMSG_READY, .generation = 3, .ops = ops, .nops = 2};
    const rd_schedmsg ask = {
        .kind = RD_SCHEDMSG_READY, .generation = 3, .stalled = &stalled, .nstalled = 1};
    const rd_schedmsg go = {.kind = RD_SCHEDMSG_GO,
                            .generation = 3,
                            .names = order,
                            .nnames = 1,
                            .tuning = {.fusion_threshold = 64u << 20,
                                       .segment_size = 1u << 20,
                                       .conns = 2,
                                       .autotune = RD_AUTOTUNE_TUNING}};
    static const uint8_t id[128] = {7, 7, 7};
    const rd_schedmsg offer = {.kind = RD_SCHEDMSG_DEV_OFFER,
                               .generation = 3,
                               .dev = {.want = RD_DEV_WANT_AUTO, .device = 1, .can = 1}};
    const rd_schedmsg plan = {.kind = RD_SCHEDMSG_DEV_PLAN,
                              .generation = 3,
                              .dev = {.transport = RD_DEV_NCCL, .id = id, .id_len = sizeof(id)}};
    const rd_schedmsg confirm = {
        .kind = RD_SCHEDMSG_DEV_CONFIRM, .generation = 3, .dev = {.confirm = RD_DEV_FORMED}};
    seed_schedmsg(s, &ready);
    seed_schedmsg(s, &ask);
    seed_schedmsg(s, &go);
    seed_schedmsg(s, &offer);
    seed_schedmsg(s, &plan);
    seed_schedmsg(s, &confirm);
}

/* ---- per target ---- */

static void capture_frame(void)
{
    seed s = {.n = 0};
    rd_msg m;
    Ringd__Hello h;
    Ringd__Submit sub;
    msg_hello(&m, &h, "train-job", 2);
    seed_frame(&s, &m);
    seed_write("frame", "hello", &s);
    s.n = 0;
    msg_submit(&m, &sub, 1, RINGD__OP_TYPE__OP_ALLREDUCE, "grad.0", 1024);
    seed_frame(&s, &m);
    msg_submit(&m, &sub, 2, RINGD__OP_TYPE__OP_BROADCAST, "weights", 16);
    seed_frame(&s, &m);
    seed_write("frame", "submits", &s);
    s.n = 0;
    seed_empty(&s, RINGD__MSG__BODY_STATUS_REQUEST);
    seed_empty(&s, RINGD__MSG__BODY_POKE);
    seed_empty(&s, RINGD__MSG__BODY_DRAIN_REQUEST);
    seed_write("frame", "requests", &s);
    s.n = 0;
    seed_negotiation(&s);
    seed_write("frame", "ready_go", &s);
    s.n = 0;
    Ringd__PeerHello ph;
    msg_peer_hello(&m, &ph, 4);
    seed_frame(&s, &m);
    seed_write("frame", "peer_hello", &s);
}

/* The session harness's input: socket bytes (2-byte length first), then control queue bytes. */
static void session_seed(const char *name, const seed *sock, const seed *ring)
{
    seed s = {.n = 0};
    seed_byte(&s, (uint8_t)sock->n);
    seed_byte(&s, (uint8_t)(sock->n >> 8));
    seed_bytes(&s, sock->b, sock->n);
    seed_bytes(&s, ring->b, ring->n);
    seed_write("session", name, &s);
}

static void capture_session(void)
{
    seed sock = {.n = 0}, ring = {.n = 0};
    rd_msg m;
    Ringd__Hello h;
    Ringd__Submit sub;
    msg_hello(&m, &h, "fuzz", 1);
    seed_frame(&sock, &m);
    msg_submit(&m, &sub, 1, RINGD__OP_TYPE__OP_ALLREDUCE, "grad.0", 256);
    seed_frame(&sock, &m);
    seed_empty(&sock, RINGD__MSG__BODY_POKE);
    msg_submit(&m, &sub, 2, RINGD__OP_TYPE__OP_BROADCAST, "weights", 64);
    seed_frame(&ring, &m);
    msg_submit(&m, &sub, 3, RINGD__OP_TYPE__OP_ALLGATHER, "shards", 64);
    seed_frame(&ring, &m);
    msg_submit(&m, &sub, 4, RINGD__OP_TYPE__OP_BARRIER, "step", 0);
    seed_frame(&ring, &m);
    session_seed("hello_submit_ring", &sock, &ring);
    ring.n = 0;
    session_seed("hello_submit", &sock, &ring);
    /* the collectives of per-rank counts, a world of one: its counts, or the matrix of them */
    sock.n = 0;
    msg_hello(&m, &h, "fuzz", 1);
    seed_frame(&sock, &m);
    uint64_t one[1] = {48};
    msg_submit(&m, &sub, 5, RINGD__OP_TYPE__OP_REDUCESCATTER, "rs", 48);
    sub.counts = one;
    sub.n_counts = 1;
    seed_frame(&sock, &m);
    msg_submit(&m, &sub, 6, RINGD__OP_TYPE__OP_ALLGATHERV, "agv", 48);
    sub.counts = one;
    sub.n_counts = 1;
    seed_frame(&sock, &m);
    msg_submit(&m, &sub, 7, RINGD__OP_TYPE__OP_ALLTOALL, "a2a", 48);
    sub.counts = one;
    sub.n_counts = 1;
    seed_frame(&sock, &m);
    msg_submit(&m, &sub, 8, RINGD__OP_TYPE__OP_ALLTOALL, "a2a.even", 0);
    seed_frame(&sock, &m);
    ring.n = 0;
    session_seed("hello_counts", &sock, &ring);
    /* a join between an allreduce and a broadcast (a world of one: the join ends at once) */
    sock.n = 0;
    msg_hello(&m, &h, "fuzz", 1);
    seed_frame(&sock, &m);
    msg_submit(&m, &sub, 9, RINGD__OP_TYPE__OP_ALLREDUCE, "grad", 64);
    seed_frame(&sock, &m);
    msg_submit(&m, &sub, 10, RINGD__OP_TYPE__OP_ALLGATHER, RD_JOIN_NAME, 1);
    sub.dtype = RINGD__DATA_TYPE__DT_I64;
    sub.join = 1;
    seed_frame(&sock, &m);
    msg_submit(&m, &sub, 11, RINGD__OP_TYPE__OP_BROADCAST, "weights", 64);
    seed_frame(&sock, &m);
    session_seed("hello_join", &sock, &ring);
    sock.n = 0;
    seed_empty(&sock, RINGD__MSG__BODY_STATUS_REQUEST);
    session_seed("status", &sock, &ring);
    sock.n = 0;
    seed_empty(&sock, RINGD__MSG__BODY_DRAIN_REQUEST);
    session_seed("drain", &sock, &ring);
    sock.n = 0;
    seed_empty(&sock, RINGD__MSG__BODY_METRICS_REQUEST);
    session_seed("metrics", &sock, &ring);
    sock.n = 0;
    Ringd__TimelineRequest tr = RINGD__TIMELINE_REQUEST__INIT;
    tr.job = "train";
    tr.seconds = 1;
    m.body_case = RINGD__MSG__BODY_TIMELINE_REQUEST;
    m.timeline_request = &tr;
    seed_frame(&sock, &m);
    session_seed("timeline", &sock, &ring);
}

/* The control queue harness's script: frames written into the submission queue and taken, replies
 * put. */
static void capture_ring(void)
{
    seed s = {.n = 0};
    rd_msg m;
    Ringd__Submit sub;
    uint8_t frame[512];
    uint64_t head = 0;
    const char *names[] = {"grad.0", "grad.1", "weights"};
    for (int i = 0; i < 3; i++) {
        msg_submit(&m, &sub, (uint64_t)i + 1, RINGD__OP_TYPE__OP_ALLREDUCE, names[i], 1024);
        size_t n = rd_frame_pack(&m, frame);
        seed_byte(&s, 3); /* write at the head */
        seed_byte(&s, (uint8_t)head);
        seed_byte(&s, (uint8_t)(head >> 8));
        seed_byte(&s, (uint8_t)n);
        seed_bytes(&s, frame, n);
        head += n;
        seed_byte(&s, 0); /* publish the head */
        for (int k = 0; k < 8; k++)
            seed_byte(&s, (uint8_t)(head >> (8 * k)));
        seed_byte(&s, 4); /* get */
        seed_byte(&s, 5); /* put a reply */
        seed_byte(&s, 6); /* sleep and wake */
    }
    seed_write("ctlq", "three_submits", &s);
    /* A client that publishes a head far ahead of what it wrote. */
    s.n = 0;
    seed_byte(&s, 0);
    for (int k = 0; k < 8; k++)
        seed_byte(&s, k == 7 ? 0x80 : 0);
    seed_byte(&s, 4);
    seed_byte(&s, 1);
    for (int k = 0; k < 8; k++)
        seed_byte(&s, 0xff);
    seed_byte(&s, 5);
    seed_write("ctlq", "hostile_indices", &s);
}

static void capture_config(void)
{
    static const char *const lines[][8] = {
        {"\x02", "RINGD_ARENA_SIZE=64M", "RINGD_REDIS=redis://10.0.0.5:6379/2", "--listen",
         "0.0.0.0:7070", "--insecure", "--threads", "4"},
        {"\x00", "--socket", "/tmp/ringd.sock", "--max-frame", "64K", "--log-level", "debug",
         "--segment-size=1M"},
        {"\x01", "RINGD_NODE=node-a", "--poll-us", "0", "--stall-abort", "0", "--conns-per-link",
         "2"},
    };
    for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
        seed s = {.n = 0};
        seed_byte(&s, (uint8_t)lines[i][0][0]);
        for (size_t k = 1; k < 8; k++)
            seed_bytes(&s, lines[i][k], strlen(lines[i][k]) + 1);
        char name[32];
        snprintf(name, sizeof(name), "argv_env_%zu", i);
        seed_write("config", name, &s);
    }
}

/* A bulk string of RESP. */
static void resp_bulk(seed *s, const char *str)
{
    char hdr[32];
    snprintf(hdr, sizeof(hdr), "$%zu\r\n", strlen(str));
    seed_bytes(s, hdr, strlen(hdr));
    seed_bytes(s, str, strlen(str));
    seed_bytes(s, "\r\n", 2);
}

static void resp_line(seed *s, const char *line)
{
    seed_bytes(s, line, strlen(line));
    seed_bytes(s, "\r\n", 2);
}

/* Records as record_format writes them (version 3), and replies of the view script and XREAD
 * as Redis sends them. */
static void capture_rendezvous(void)
{
    seed s = {.n = 0};
    char rec[2][160];
    snprintf(rec[0], sizeof(rec[0]), "3 %" PRIu64 " %u %u %u %" PRIu64 " %s",
             (uint64_t)0xfedcba9876543210ULL, 2u, 4u, 1u, (uint64_t)1767225600123ULL,
             "10.0.0.1:7070");
    snprintf(rec[1], sizeof(rec[1]), "3 %" PRIu64 " %u %u %u %" PRIu64 " %s", (uint64_t)42, 2u, 4u,
             2u, (uint64_t)1767225600456ULL, "[fd00::2]:7070");
    seed_bytes(&s, rec[0], strlen(rec[0]));
    seed_write("rendezvous", "record_v3", &s);
    s.n = 0;
    seed_bytes(&s, "1 42 2 4 node-b:7070", 20);
    seed_write("rendezvous", "record_v1", &s);
    s.n = 0;
    resp_line(&s, "*6");
    resp_bulk(&s, "ok");
    resp_line(&s, ":12");
    resp_bulk(&s, "1767225600789-0");
    resp_line(&s, "*4");
    resp_bulk(&s, "node-a");
    resp_bulk(&s, rec[0]);
    resp_bulk(&s, "node-b");
    resp_bulk(&s, rec[1]);
    resp_bulk(&s, "1767225600456");
    resp_line(&s, ":2950");
    seed_write("rendezvous", "view_reply", &s);
    s.n = 0;
    resp_line(&s, "*1");
    resp_line(&s, "*2");
    resp_bulk(&s, "ringd:job:fuzz:events");
    resp_line(&s, "*2");
    for (int i = 0; i < 2; i++) {
        resp_line(&s, "*2");
        resp_bulk(&s, i == 0 ? "1767225600789-0" : "1767225600790-1");
        resp_line(&s, "*4");
        resp_bulk(&s, "event");
        resp_bulk(&s, i == 0 ? "join" : "evict");
        resp_bulk(&s, "node");
        resp_bulk(&s, "node-b");
    }
    seed_write("rendezvous", "xread_reply", &s);
}

/* The peer harness's input: a mode byte (see fuzz_peer.c), then the bytes. */
static void capture_peer(void)
{
    seed s = {.n = 0};
    rd_msg m;
    Ringd__PeerHello ph;
    seed_byte(&s, 0);
    msg_peer_hello(&m, &ph, 4);
    seed_frame(&s, &m);
    seed_write("peer", "server_hello_accepted", &s);
    s.n = 0;
    seed_byte(&s, 0);
    msg_peer_hello(&m, &ph, 5);
    seed_frame(&s, &m);
    seed_write("peer", "server_hello_refused", &s);
    s.n = 0;
    rd_auth_key k;
    uint8_t chal[RD_AUTH_CHALLENGE_LEN], ans[RD_AUTH_ANSWER_LEN];
    rd_auth_insecure(&k);
    rd_auth_challenge(chal);
    rd_auth_answer(&k, chal, ans);
    seed_byte(&s, 1);
    seed_bytes(&s, ans, sizeof(ans));
    seed_write("peer", "server_raw_answer", &s);
    s.n = 0;
    Ringd__PeerAccept pa = RINGD__PEER_ACCEPT__INIT;
    pa.generation = 4;
    ringd__msg__init(&m);
    m.body_case = RINGD__MSG__BODY_PEER_ACCEPT;
    m.peer_accept = &pa;
    seed_byte(&s, 2);
    seed_frame(&s, &m);
    seed_write("peer", "client_accepted", &s);
    s.n = 0;
    Ringd__Error e = RINGD__ERROR__INIT;
    e.status = RINGD_E_REFUSED;
    e.message = "job fuzz: node node-a is not a member at generation 4";
    m.body_case = RINGD__MSG__BODY_ERROR;
    m.error = &e;
    seed_byte(&s, 2);
    seed_frame(&s, &m);
    seed_write("peer", "client_refused", &s);
    s.n = 0;
    seed_byte(&s, 3);
    seed_bytes(&s, chal, sizeof(chal));
    seed_write("peer", "client_raw_challenge", &s);
    s.n = 0;
    seed_byte(&s, 4);
    seed_negotiation(&s);
    seed_write("peer", "channel_ready_go", &s);
}

/* ---- a real two-node data link, recorded ---- */

static int tasks_done;

static void on_task_done(void *arg, rd_xfer_task *t)
{
    (void)arg;
    if (t->status != RINGD_OK) {
        fprintf(stderr, "fuzz_capture: ring task failed: %s\n", t->message);
        exit(1);
    }
    tasks_done++;
}

/* Runs one collective on a real two-node ring (the fuzz harness's configuration) and records
 * what node 1 sends to node 0, as the xfer harness's input whose first byte is sel. */
static void capture_xfer_one(struct event_base *base, uint8_t sel, const char *name)
{
    int a_to_b[2], b_to_proxy[2], proxy_to_a[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, a_to_b) ||
        socketpair(AF_UNIX, SOCK_STREAM, 0, b_to_proxy) ||
        socketpair(AF_UNIX, SOCK_STREAM, 0, proxy_to_a))
        exit(1);
    uint32_t local[2] = {1, 1};
    rd_xfer *x[2];
    for (int i = 0; i < 2; i++) {
        rd_xfer_config cfg = {
            .nnodes = 2,
            .position = i,
            .local_sizes = local,
            .generation = 7,
            .segment_size = 65536,
            .conns = 1,
            .send_fds = i == 0 ? &a_to_b[0] : &b_to_proxy[0],
            .recv_fds = i == 0 ? &proxy_to_a[0] : &a_to_b[1],
            .timeout_ms = 10000,
            .poll_us = 0,
            .next_node = "next",
            .prev_node = "prev",
        };
        char err[256];
        if ((x[i] = rd_xfer_new(base, &cfg, on_task_done, NULL, err, sizeof(err))) == NULL) {
            fprintf(stderr, "fuzz_capture: %s\n", err);
            exit(1);
        }
    }
    uint64_t count = 1 + (uint64_t)(sel >> 2) * 997;
    uint8_t *in[2], *out[2];
    const uint8_t *ins[2][1];
    uint8_t *outs[2][1];
    rd_xfer_member mem[2];
    rd_xfer_task t[2];
    for (int i = 0; i < 2; i++) {
        in[i] = calloc(count, 4);
        out[i] = calloc(count * 2, 4);
        for (uint64_t e = 0; e < count; e++)
            ((int32_t *)in[i])[e] = (int32_t)(e * 7 + (uint64_t)i * 13);
        ins[i][0] = in[i];
        outs[i][0] = out[i];
        mem[i] = (rd_xfer_member){.in = ins[i], .out = outs[i], .count = count};
        memset(&t[i], 0, sizeof(t[i]));
        t[i].backend = rd_backend_cpu();
        t[i].coll = (rd_coll)(sel % 3);
        t[i].dtype = RD_DT_I32;
        t[i].redop = RD_OP_SUM;
        t[i].args = (rd_reduce_args)RD_REDUCE_ARGS_INIT;
        t[i].root = 1;
        t[i].nmembers = 1;
        t[i].members = &mem[i];
        rd_xfer_submit(x[i], &t[i]);
    }
    seed s = {.n = 0};
    seed_byte(&s, sel);
    tasks_done = 0;
    while (tasks_done < 2) {
        uint8_t buf[65536];
        ssize_t r = recv(b_to_proxy[1], buf, sizeof(buf), MSG_DONTWAIT);
        if (r > 0) {
            seed_bytes(&s, buf, (size_t)r);
            for (ssize_t off = 0; off < r;) {
                ssize_t w = send(proxy_to_a[1], buf + off, (size_t)(r - off), 0);
                if (w <= 0)
                    exit(1);
                off += w;
            }
        }
        struct timeval tv = {0, 200};
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
    }
    for (int i = 0; i < 2; i++) {
        rd_xfer_free(x[i], RINGD_E_MEMBERSHIP, "capture over");
        free(in[i]);
        free(out[i]);
    }
    close(b_to_proxy[1]);
    close(proxy_to_a[1]);
    seed_write("xfer", name, &s);
}

static void capture_xfer(void)
{
    struct event_base *base = event_base_new();
    if (base == NULL)
        exit(1);
    capture_xfer_one(base, 0, "allreduce_1");
    capture_xfer_one(base, 4, "allreduce_998");
    capture_xfer_one(base, 1 + 4, "broadcast_998");
    capture_xfer_one(base, 2 + 4, "allgather_998");
    event_base_free(base);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    outdir = argv[1];
    mkdir(outdir, 0755);
    rd_log_set_level(RD_LOG_ERROR);
    if (rd_auth_init() != 0)
        return 1;
    capture_frame();
    capture_session();
    capture_ring();
    capture_config();
    capture_rendezvous();
    capture_peer();
    capture_xfer();
    printf("seeds written under %s\n", outdir);
    return 0;
}
