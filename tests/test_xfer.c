/* The ring data plane on its own: rings of 2-4 in-process "nodes" joined by socket pairs, each
 * with its real thread, checked against references; frames of another generation and garbage on
 * a link fail the op cleanly; on sealed links (--encrypt) a man in the middle who alters,
 * replays, reorders or splices segments is caught and nothing wrong is delivered. */
#include <criterion/criterion.h>
#include <event2/event.h>
#include <math.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "segment.h"
#include "xfer.h"

#define MAXN 72 /* past 64: the direct links wanted by positions of more than one word */
#define CONNS 2

typedef struct {
    int n;
    struct event_base *base;
    rd_xfer *x[MAXN];
    int done;
    uint8_t linked[MAXN][MAXN]; /* on_pairs_wanted made the direct link of the two */
    int asked;                  /* links made so, because a data plane asked */
} ring;

static void on_done(void *arg, rd_xfer_task *t)
{
    (void)t;
    ((ring *)arg)->done++;
}

/* A data plane asks for direct links (a daemon's loop dials them): each one it wants that is
 * not there yet is made, in the clear, and handed to both ends. */
static void on_pairs_wanted(void *arg, rd_xfer *x)
{
    ring *r = arg;
    int i = 0;
    while (i < r->n && r->x[i] != x)
        i++;
    for (int q = 0; i < r->n && q < r->n; q++) {
        if (q == i || !rd_xfer_pair_wanted(x, q) || r->linked[i][q])
            continue;
        int sp[2];
        rd_seal none;
        memset(&none, 0, sizeof(none));
        cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
        rd_xfer_pair(x, q, sp[0], &none);
        rd_xfer_pair(r->x[q], i, sp[1], &none);
        r->linked[i][q] = r->linked[q][i] = 1;
        r->asked++;
    }
}

/* The two ends' keys of one connection, as a handshake with fresh nonces under one ring key
 * would leave them (every call: another connection). */
static void link_seals(rd_seal *client, rd_seal *server)
{
    static rd_auth_key key;
    uint8_t chal[RD_AUTH_CHALLENGE_LEN], ans[RD_AUTH_ANSWER_LEN], hello[24];
    cr_assert_eq(rd_auth_init(), RINGD_OK);
    if (key.key[0] == 0)
        randombytes_buf(key.key, sizeof(key.key));
    randombytes_buf(chal, sizeof(chal));
    randombytes_buf(ans, sizeof(ans));
    randombytes_buf(hello, sizeof(hello));
    rd_seal_derive(client, rd_seal_best(), &key, 1, chal, ans, hello, sizeof(hello));
    rd_seal_derive(server, rd_seal_best(), &key, 0, chal, ans, hello, sizeof(hello));
}

/* A man in the middle of one connection (node 0 -> node 1, connection 0): it reads whole
 * segments (header, payload, tag) and passes them on, or does to them what mode says. */
typedef enum {
    MITM_PASS,    /* as they come */
    MITM_RECORD,  /* as they come, keeping a copy of segment 0's payload and tag */
    MITM_FLIP,    /* one bit of segment 1's payload flipped */
    MITM_REPLAY,  /* segment 0's payload and tag again in place of segment 1's (its header kept) */
    MITM_REORDER, /* segments 1 and 2 swapped under their own headers */
    MITM_SPLICE,  /* segment 0's payload and tag recorded on a connection of an earlier
                     generation (which, as every connection, had keys of its own) */
} mitm_mode;

typedef struct {
    int in, out; /* reads node 0's end, writes node 1's */
    mitm_mode mode;
    size_t taglen;
    uint8_t kept[2][1 << 16]; /* bodies held back: segment 0 (REPLAY, RECORD), 1 (REORDER) */
    uint8_t hdr1[RD_SEG_HEADER];
    size_t kept_len;
    uint8_t *recording; /* SPLICE: a RECORD relay's kept[0], kept_len long */
    pthread_t thread;
} mitm;

static int read_full(int fd, uint8_t *buf, size_t len)
{
    for (size_t got = 0; got < len;) {
        ssize_t n = read(fd, buf + got, len - got);
        if (n <= 0)
            return -1;
        got += (size_t)n;
    }
    return 0;
}

static int write_full(int fd, const uint8_t *buf, size_t len)
{
    for (size_t put = 0; put < len;) {
        ssize_t n = send(fd, buf + put, len - put, MSG_NOSIGNAL);
        if (n <= 0)
            return -1;
        put += (size_t)n;
    }
    return 0;
}

static void *mitm_main(void *arg)
{
    mitm *m = arg;
    uint8_t hdr[RD_SEG_HEADER], body[sizeof(m->kept[0])];
    for (int k = 0;; k++) {
        rd_seg h;
        if (read_full(m->in, hdr, sizeof(hdr)) != 0 || rd_seg_decode(hdr, &h) != 0)
            break;
        size_t len = h.len + m->taglen;
        if (len > sizeof(body) || read_full(m->in, body, len) != 0)
            break;
        if (k == 0 && (m->mode == MITM_REPLAY || m->mode == MITM_RECORD)) {
            memcpy(m->kept[0], body, len);
            m->kept_len = len;
        }
        if (k == 0 && m->mode == MITM_SPLICE && m->kept_len == len)
            memcpy(body, m->recording, len);
        if (k == 1 && m->mode == MITM_FLIP)
            body[len / 2] ^= 0x10;
        if (k == 1 && m->mode == MITM_REPLAY && m->kept_len == len)
            memcpy(body, m->kept[0], len);
        if (k == 1 && m->mode == MITM_REORDER) { /* held until segment 2 is in */
            memcpy(m->hdr1, hdr, sizeof(hdr));
            memcpy(m->kept[1], body, len);
            continue;
        }
        if (k == 2 && m->mode == MITM_REORDER) {
            if (write_full(m->out, m->hdr1, sizeof(hdr)) != 0 || write_full(m->out, body, len) != 0)
                break;
            memcpy(body, m->kept[1], len);
        }
        if (write_full(m->out, hdr, sizeof(hdr)) != 0 || write_full(m->out, body, len) != 0)
            break;
    }
    close(m->in);
    close(m->out);
    return NULL;
}

/* Builds n nodes with the given local sizes; node i's generation is gens[i]. sealed: every
 * connection has keys of its own; m: a man in the middle of node 0's connection 0 to node 1. */
static void ring_new_with(ring *r, int n, const uint32_t *local, const uint64_t *gens, uint64_t seg,
                          int sealed, mitm *m)
{
    int sp[MAXN][CONNS][2];
    rd_seal cs[MAXN][CONNS], ss[MAXN][CONNS]; /* node i's sending ends, and their receiving ones */
    memset(cs, 0, sizeof(cs));
    memset(ss, 0, sizeof(ss));
    memset(r, 0, sizeof(*r));
    r->n = n;
    r->base = event_base_new();
    cr_assert_not_null(r->base);
    for (int i = 0; i < n; i++)
        for (int c = 0; c < CONNS; c++) {
            cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sp[i][c]), 0);
            if (sealed)
                link_seals(&cs[i][c], &ss[i][c]);
        }
    int relay[2] = {-1, -1};
    if (m != NULL) { /* node 0 -> m->in ... m->out -> node 1 */
        cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, relay), 0);
        m->in = sp[0][0][1];
        m->out = relay[0];
        sp[0][0][1] = relay[1];
        m->taglen = sealed ? RD_SEAL_TAG : 0;
        cr_assert_eq(pthread_create(&m->thread, NULL, mitm_main, m), 0);
    }
    static char name_buf[MAXN][16];
    static const char *names[MAXN];
    for (int i = 0; i < n; i++) {
        snprintf(name_buf[i], sizeof(name_buf[i]), "n%d", i);
        names[i] = name_buf[i];
    }
    for (int i = 0; i < n; i++) {
        int sfd[CONNS], rfd[CONNS];
        rd_seal sseal[CONNS], rseal[CONNS];
        for (int c = 0; c < CONNS; c++) {
            sfd[c] = sp[i][c][0];
            rfd[c] = sp[(i + n - 1) % n][c][1];
            sseal[c] = cs[i][c];
            rseal[c] = ss[(i + n - 1) % n][c];
        }
        rd_xfer_config cfg = {
            .nnodes = n,
            .position = i,
            .local_sizes = local,
            .generation = gens[i],
            .segment_size = seg,
            .conns = CONNS,
            .send_fds = sfd,
            .recv_fds = rfd,
            .send_seals = sealed ? sseal : NULL,
            .recv_seals = sealed ? rseal : NULL,
            .timeout_ms = m != NULL ? 1000 : 5000,
            .poll_us = 50,
            .next_node = i == 0 ? "n1" : "next",
            .prev_node = i == 1 ? "n0" : "prev",
            .pair_links = 8,
            .nodes = names,
            .pairs_wanted = on_pairs_wanted,
        };
        char err[256];
        r->x[i] = rd_xfer_new(r->base, &cfg, on_done, r, err, sizeof(err));
        cr_assert_not_null(r->x[i], "%s", err);
    }
}

static void ring_new(ring *r, int n, const uint32_t *local, const uint64_t *gens, uint64_t seg)
{
    ring_new_with(r, n, local, gens, seg, 0, NULL);
}

static void ring_free(ring *r)
{
    for (int i = 0; i < r->n; i++)
        rd_xfer_free(r->x[i], RINGD_E_MEMBERSHIP, "test over");
    event_base_free(r->base);
}

/* Runs the loop until want tasks are done (10 s at most). */
static void ring_wait(ring *r, int want)
{
    for (int k = 0; k < 10000 && r->done < want; k++) {
        struct timeval tv = {0, 1000};
        event_base_loopexit(r->base, &tv);
        event_base_dispatch(r->base);
    }
    cr_assert_eq(r->done, want, "only %d of %d tasks ended", r->done, want);
}

/* One node's buffers: L inputs and outputs of count elements (allgather: world * count out). */
typedef struct {
    uint8_t *in[4], *out[4];
    const uint8_t *cin[4];
    rd_xfer_member m;
    rd_xfer_task t;
} node_bufs;

static void bufs_new(node_bufs *b, uint32_t L, size_t in_bytes, size_t out_bytes)
{
    memset(b, 0, sizeof(*b));
    for (uint32_t l = 0; l < L; l++) {
        b->in[l] = calloc(1, in_bytes ? in_bytes : 1);
        b->out[l] = calloc(1, out_bytes ? out_bytes : 1);
        b->cin[l] = b->in[l];
    }
    b->m.in = b->cin;
    b->m.out = b->out;
    b->t.members = &b->m;
    b->t.nmembers = 1;
}

/* Makes b's task an allreduce (dtype, redop) of count elements on the CPU, unscaled. */
static void allreduce_task(node_bufs *b, rd_dtype dtype, rd_redop redop, uint64_t count)
{
    b->m.count = count;
    b->t.backend = rd_backend_cpu();
    b->t.coll = RD_COLL_ALLREDUCE;
    b->t.dtype = dtype;
    b->t.redop = redop;
    b->t.args = (rd_reduce_args)RD_REDUCE_ARGS_INIT;
}

/* Submits b's task to x as an f32 sum allreduce of count elements. */
static void submit_f32_sum(rd_xfer *x, node_bufs *b, uint64_t count)
{
    allreduce_task(b, RD_DT_F32, RD_OP_SUM, count);
    rd_xfer_submit(x, &b->t);
}

static void bufs_free(node_bufs *b, uint32_t L)
{
    for (uint32_t l = 0; l < L; l++) {
        free(b->in[l]);
        free(b->out[l]);
    }
}

static int32_t value(uint32_t rank, uint64_t i)
{
    return (int32_t)((i * 7 + rank * 13) % 101) - 50;
}

/* The ranks of a ring of n nodes with local[i] ranks each. */
static uint32_t world_of(int n, const uint32_t *local)
{
    uint32_t world = 0;
    for (int i = 0; i < n; i++)
        world += local[i];
    return world;
}

/* Allreduce (i32 sum) of count elements over n nodes with the given local sizes, on links in the
 * clear or sealed. */
static void check_allreduce_on(int n, const uint32_t *local, uint64_t count, uint64_t seg,
                               int sealed)
{
    uint64_t gens[MAXN] = {7, 7, 7, 7};
    ring r;
    node_bufs b[MAXN];
    ring_new_with(&r, n, local, gens, seg, sealed, NULL);
    uint32_t first = 0;
    for (int i = 0; i < n; i++) {
        bufs_new(&b[i], local[i], count * 4, count * 4);
        for (uint32_t l = 0; l < local[i]; l++)
            for (uint64_t e = 0; e < count; e++)
                ((int32_t *)b[i].in[l])[e] = value(first + l, e);
        first += local[i];
        allreduce_task(&b[i], RD_DT_I32, RD_OP_SUM, count);
        rd_xfer_submit(r.x[i], &b[i].t);
    }
    ring_wait(&r, n);
    for (int i = 0; i < n; i++) {
        cr_assert_eq(b[i].t.status, RINGD_OK, "node %d: %s", i, b[i].t.message);
        for (uint32_t l = 0; l < local[i]; l++)
            for (uint64_t e = 0; e < count; e++) {
                int32_t want = 0;
                for (uint32_t k = 0; k < first; k++)
                    want += value(k, e);
                cr_assert_eq(((int32_t *)b[i].out[l])[e], want, "node %d local %u element %llu", i,
                             l, (unsigned long long)e);
            }
        bufs_free(&b[i], local[i]);
    }
    ring_free(&r);
}

static void check_allreduce(int n, const uint32_t *local, uint64_t count, uint64_t seg)
{
    check_allreduce_on(n, local, count, seg, 0);
}

Test(xfer, allreduce_over_two_nodes_pipelines_many_segments)
{
    uint32_t local[] = {1, 1};
    check_allreduce(2, local, 300007, 4096);
}

Test(xfer, allreduce_handles_counts_smaller_than_and_not_divisible_by_the_ring)
{
    uint32_t local[] = {1, 2, 1, 1};
    for (uint64_t count = 1; count <= 9; count++)
        check_allreduce(4, local, count, 4096);
    check_allreduce(3, local, 1001, 4096);
}

/* A fused allreduce of i32 sums on n nodes (local ranks each as given; doubling off, so it
 * goes round the ring in segments of 4 KiB): members of the counts given, member m in place
 * where m is even, its own output otherwise. With one local rank the ring works in the
 * members' buffers (segments that span members gathered and scattered); with more, through one
 * buffer. Every output is the exact sum, and an input not in place is left as it was. */
/* The CPU backend, counting the bytes it copies (every node's thread together): whether a fused
 * pass ran in the members' buffers. */
static _Atomic uint64_t copied;

static int counting_copy(void *dst, const void *src, size_t bytes)
{
    atomic_fetch_add(&copied, bytes);
    return rd_backend_cpu()->copy(dst, src, bytes);
}

static const rd_backend *counting_cpu(void)
{
    static rd_backend b;
    b = *rd_backend_cpu();
    b.copy = counting_copy;
    return &b;
}

static void check_fused_on(int n, const uint32_t *local, const uint64_t *counts, size_t nm,
                           int sealed)
{
    enum { NM = 8 };
    cr_assert_leq(nm, NM);
    uint64_t gens[MAXN];
    for (int i = 0; i < MAXN; i++)
        gens[i] = 3;
    ring r;
    ring_new_with(&r, n, local, gens, 4096, sealed, NULL);
    struct {
        int32_t *in[NM][4], *out[NM][4];
        const uint8_t *cin[NM][4];
        rd_xfer_member m[NM];
        rd_xfer_task t;
    } b[MAXN];
    uint32_t first = 0, world = world_of(n, local);
    atomic_store(&copied, 0);
    for (int i = 0; i < n; i++) {
        memset(&b[i], 0, sizeof(b[i]));
        for (size_t m = 0; m < nm; m++) {
            for (uint32_t l = 0; l < local[i]; l++) {
                b[i].in[m][l] = calloc(counts[m] + 1, 4);
                b[i].out[m][l] = m % 2 == 0 ? b[i].in[m][l] : calloc(counts[m] + 1, 4);
                for (uint64_t e = 0; e < counts[m]; e++)
                    b[i].in[m][l][e] = value(first + l, e + 1000 * m);
                b[i].cin[m][l] = (const uint8_t *)b[i].in[m][l];
            }
            b[i].m[m] = (rd_xfer_member){
                .in = b[i].cin[m], .out = (uint8_t **)b[i].out[m], .count = counts[m]};
        }
        first += local[i];
        b[i].t.backend = counting_cpu();
        b[i].t.coll = RD_COLL_ALLREDUCE;
        b[i].t.dtype = RD_DT_I32;
        b[i].t.redop = RD_OP_SUM;
        b[i].t.args = (rd_reduce_args)RD_REDUCE_ARGS_INIT;
        b[i].t.members = b[i].m;
        b[i].t.nmembers = nm;
        rd_xfer_submit(r.x[i], &b[i].t);
    }
    ring_wait(&r, n);
    uint64_t bytes = 0;
    for (size_t m = 0; m < nm; m++)
        bytes += counts[m] * 4;
    int ones = 1;
    for (int i = 0; i < n; i++)
        ones = ones && local[i] == 1;
    /* In the members' buffers only segments that span two members are copied, through a buffer
     * every byte twice (in, and out) */
    if (ones)
        cr_assert_lt(atomic_load(&copied), n * bytes,
                     "n %d: %llu bytes copied for %llu fused: not in the members' buffers", n,
                     (unsigned long long)atomic_load(&copied), (unsigned long long)(n * bytes));
    first = 0;
    for (int i = 0; i < n; i++) {
        cr_assert_eq(b[i].t.status, RINGD_OK, "node %d: %s", i, b[i].t.message);
        for (size_t m = 0; m < nm; m++)
            for (uint32_t l = 0; l < local[i]; l++) {
                for (uint64_t e = 0; e < counts[m]; e++) {
                    int32_t want = 0;
                    for (uint32_t k = 0; k < world; k++)
                        want += value(k, e + 1000 * m);
                    cr_assert_eq(b[i].out[m][l][e], want,
                                 "n %d: node %d local %u member %zu element %llu", n, i, l, m,
                                 (unsigned long long)e);
                    if (m % 2 == 1)
                        cr_assert_eq(b[i].in[m][l][e], value(first + l, e + 1000 * m));
                }
                if (m % 2 == 1)
                    free(b[i].out[m][l]);
                free(b[i].in[m][l]);
            }
        first += local[i];
    }
    ring_free(&r);
}

/* Fused allreduces: members of one element and of none, members that span segments and
 * segments that span members, on rings of 2 to 4 nodes, in the clear and sealed. */
Test(xfer, a_fused_allreduce_works_in_the_members_buffers, .timeout = 60)
{
    static const uint64_t counts[] = {3, 0, 1000, 1, 4096, 77, 2500, 1};
    static const uint32_t ones[] = {1, 1, 1, 1}, two[] = {1, 2, 1};
    for (int n = 2; n <= 4; n++) {
        check_fused_on(n, ones, counts, 8, 0);
        check_fused_on(n, ones, counts + 1, 3, 0); /* a first member of none */
    }
    check_fused_on(3, two, counts, 8, 0); /* through one buffer */
    check_fused_on(3, ones, counts, 8, 1);
    check_fused_on(2, ones, counts, 8, 1);
}

Test(xfer, broadcast_and_allgather_cross_every_node)
{
    uint32_t local[] = {2, 1, 1};
    uint64_t gens[MAXN] = {3, 3, 3};
    uint64_t count = 5003;
    for (uint32_t root = 0; root < 4; root++) {
        ring r;
        node_bufs b[MAXN];
        ring_new(&r, 3, local, gens, 8192);
        uint32_t first = 0;
        for (int i = 0; i < 3; i++) {
            bufs_new(&b[i], local[i], count * 4, count * 4 * 4);
            for (uint32_t l = 0; l < local[i]; l++)
                for (uint64_t e = 0; e < count; e++)
                    ((int32_t *)b[i].in[l])[e] = value(first + l, e);
            first += local[i];
            b[i].m.count = count;
            b[i].t.backend = rd_backend_cpu();
            b[i].t.coll = root % 2 ? RD_COLL_ALLGATHER : RD_COLL_BROADCAST;
            b[i].t.dtype = RD_DT_I32;
            b[i].t.root = root;
            rd_xfer_submit(r.x[i], &b[i].t);
        }
        ring_wait(&r, 3);
        for (int i = 0; i < 3; i++) {
            cr_assert_eq(b[i].t.status, RINGD_OK, "%s", b[i].t.message);
            for (uint32_t l = 0; l < local[i]; l++) {
                const int32_t *o = (const int32_t *)b[i].out[l];
                if (root % 2 == 0)
                    for (uint64_t e = 0; e < count; e++)
                        cr_assert_eq(o[e], value(root, e));
                else
                    for (uint32_t k = 0; k < 4; k++)
                        for (uint64_t e = 0; e < count; e++)
                            cr_assert_eq(o[k * count + e], value(k, e));
            }
            bufs_free(&b[i], local[i]);
        }
        ring_free(&r);
    }
}

Test(xfer, a_frame_of_another_generation_fails_the_op_and_breaks_the_ring)
{
    uint32_t local[] = {1, 1};
    uint64_t gens[MAXN] = {5, 6};
    ring r;
    node_bufs b[2];
    ring_new(&r, 2, local, gens, 4096);
    for (int i = 0; i < 2; i++) {
        bufs_new(&b[i], 1, 4096, 4096);
        submit_f32_sum(r.x[i], &b[i], 1024);
    }
    ring_wait(&r, 2);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(b[i].t.status, RINGD_E_MEMBERSHIP, "node %d: status %d", i, b[i].t.status);
        cr_assert(rd_xfer_broken(r.x[i]));
    }
    cr_assert(strstr(b[0].t.message, "generation") != NULL || strstr(b[1].t.message, "generation"),
              "%s / %s", b[0].t.message, b[1].t.message);
    /* Later tasks fail at once with the reason. */
    rd_xfer_submit(r.x[0], &b[0].t);
    ring_wait(&r, 3);
    cr_assert_eq(b[0].t.status, RINGD_E_MEMBERSHIP);
    for (int i = 0; i < 2; i++)
        bufs_free(&b[i], 1);
    ring_free(&r);
}

Test(xfer, garbage_and_a_closed_link_fail_the_op_without_harm)
{
    /* One real node whose previous node is the test: garbage, then EOF. */
    for (int mode = 0; mode < 2; mode++) {
        int to_next[CONNS][2], from_prev[CONNS][2];
        int sfd[CONNS], rfd[CONNS];
        for (int c = 0; c < CONNS; c++) {
            cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, to_next[c]), 0);
            cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, from_prev[c]), 0);
            sfd[c] = to_next[c][0];
            rfd[c] = from_prev[c][1];
        }
        uint32_t local[] = {1, 1};
        ring r;
        memset(&r, 0, sizeof(r));
        r.n = 1;
        r.base = event_base_new();
        rd_xfer_config cfg = {.nnodes = 2,
                              .position = 1,
                              .local_sizes = local,
                              .generation = 9,
                              .segment_size = 4096,
                              .conns = CONNS,
                              .send_fds = sfd,
                              .recv_fds = rfd,
                              .timeout_ms = 5000,
                              .poll_us = 0,
                              .next_node = "t",
                              .prev_node = "t"};
        char err[256];
        r.x[0] = rd_xfer_new(r.base, &cfg, on_done, &r, err, sizeof(err));
        cr_assert_not_null(r.x[0], "%s", err);
        node_bufs b;
        bufs_new(&b, 1, 1 << 20, 1 << 20);
        submit_f32_sum(r.x[0], &b, 1 << 18);
        if (mode == 0) {
            char junk[4096];
            memset(junk, 0xa5, sizeof(junk));
            cr_assert_eq(write(from_prev[0][0], junk, sizeof(junk)), (ssize_t)sizeof(junk));
        } else {
            for (int c = 0; c < CONNS; c++)
                close(from_prev[c][0]);
        }
        ring_wait(&r, 1);
        cr_assert_neq(b.t.status, RINGD_OK);
        cr_assert(rd_xfer_broken(r.x[0]));
        ring_free(&r);
        bufs_free(&b, 1);
        for (int c = 0; c < CONNS; c++) {
            close(to_next[c][1]);
            if (mode == 0)
                close(from_prev[c][0]);
        }
    }
}

/* A link that cannot be made non-blocking (here a bad descriptor) fails the ring's start naming
 * the call, rather than leaving the ring's thread to block on it. */
Test(xfer, a_link_that_cannot_be_made_non_blocking_fails_the_start)
{
    int sp[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
    int sfd[1] = {sp[0]}, rfd[1] = {-1};
    const uint32_t local[2] = {1, 1};
    rd_xfer_config cfg = {
        .nnodes = 2,
        .position = 0,
        .local_sizes = local,
        .generation = 1,
        .segment_size = 1 << 16,
        .conns = 1,
        .send_fds = sfd,
        .recv_fds = rfd,
        .timeout_ms = 5000,
        .poll_us = 50,
        .next_node = "next",
        .prev_node = "prev",
    };
    struct event_base *base = event_base_new();
    cr_assert_not_null(base);
    char err[256] = "";
    rd_xfer *x = rd_xfer_new(base, &cfg, on_done, NULL, err, sizeof(err));
    if (x != NULL)
        rd_xfer_free(x, RINGD_E_MEMBERSHIP, "test over");
    event_base_free(base);
    close(sp[1]);
    cr_expect_null(x, "the ring started on a bad descriptor");
    cr_expect(strstr(err, "fcntl O_NONBLOCK: Bad file descriptor") != NULL, "err: \"%s\"", err);
}

Test(xfer, sealed_links_reduce_exactly_as_links_in_the_clear)
{
    uint32_t local[] = {1, 2, 1, 1};
    check_allreduce_on(2, local, 300007, 4096, 1);
    check_allreduce_on(3, local, 1001, 4096, 1);
    check_allreduce_on(4, local, 5, 4096, 1);
}

/* A 2-node f32 allreduce of 64 Ki elements (32 segments of 4 KiB each way) through a man in the
 * middle; returns node 1's task status, its message in msg, and whether its output is the sum. */
static int mitm_allreduce(int sealed, mitm *m, uint64_t gen, char *msg, size_t msglen, int *right)
{
    uint32_t local[] = {1, 1};
    uint64_t gens[MAXN] = {gen, gen};
    const uint64_t count = 1 << 16;
    ring r;
    node_bufs b[2];
    ring_new_with(&r, 2, local, gens, 4096, sealed, m);
    for (int i = 0; i < 2; i++) {
        bufs_new(&b[i], 1, count * 4, count * 4);
        for (uint64_t e = 0; e < count; e++)
            ((float *)b[i].in[0])[e] = (float)value((uint32_t)i, e);
        submit_f32_sum(r.x[i], &b[i], count);
    }
    ring_wait(&r, 2);
    int status = b[1].t.status;
    snprintf(msg, msglen, "%s", b[1].t.message);
    *right = 1;
    for (uint64_t e = 0; e < count; e++)
        *right &= ((float *)b[1].out[0])[e] == (float)(value(0, e) + value(1, e));
    /* node 0 gets nothing more from node 1 once it stopped: never a success with a wrong sum */
    cr_expect(b[0].t.status != RINGD_OK || status == RINGD_OK, "node 0 ended well, node 1 not");
    ring_free(&r);
    pthread_join(m->thread, NULL);
    for (int i = 0; i < 2; i++)
        bufs_free(&b[i], 1);
    return status;
}

/* The relay really tampers: in the clear, a flipped bit lands in the result unnoticed. */
Test(xfer, in_the_clear_a_bit_flipped_in_flight_reaches_the_result)
{
    mitm *m = calloc(1, sizeof(*m));
    char msg[320];
    int right;
    m->mode = MITM_FLIP;
    int st = mitm_allreduce(0, m, 7, msg, sizeof(msg), &right);
    cr_assert_eq(st, RINGD_OK, "%s", msg);
    cr_assert(!right, "the flipped bit did not reach the result: the relay tampers with nothing");
    free(m);
}

Test(xfer, sealed_segments_altered_replayed_reordered_or_spliced_fail_the_op_naming_the_node)
{
    mitm *rec = calloc(1, sizeof(*rec)), *m = calloc(1, sizeof(*m));
    char msg[320];
    int right;
    /* first a ring of generation 6, its segment 0 recorded, for the splice */
    rec->mode = MITM_RECORD;
    cr_assert_eq(mitm_allreduce(1, rec, 6, msg, sizeof(msg), &right), RINGD_OK, "%s", msg);
    cr_assert(right && rec->kept_len > 0);
    const mitm_mode modes[] = {MITM_FLIP, MITM_REPLAY, MITM_REORDER, MITM_SPLICE};
    const char *const names[] = {"flip", "replay", "reorder", "splice"};
    for (size_t k = 0; k < sizeof(modes) / sizeof(modes[0]); k++) {
        memset(m, 0, sizeof(*m));
        m->mode = modes[k];
        m->recording = rec->kept[0];
        m->kept_len = modes[k] == MITM_SPLICE ? rec->kept_len : 0;
        int st = mitm_allreduce(1, m, 7, msg, sizeof(msg), &right);
        cr_expect_eq(st, RINGD_E_PROTOCOL, "%s: status %d (%s)", names[k], st, msg);
        cr_expect(strstr(msg, "from node n0 fails authentication") != NULL, "%s: \"%s\"", names[k],
                  msg);
        cr_expect(!right, "%s: the result is complete although a segment was refused", names[k]);
    }
    /* and untouched, the same sealed ring gives the exact sum */
    memset(m, 0, sizeof(*m));
    m->mode = MITM_PASS;
    cr_expect_eq(mitm_allreduce(1, m, 7, msg, sizeof(msg), &right), RINGD_OK, "%s", msg);
    cr_expect(right);
    free(m);
    free(rec);
}

/* A sealed ring takes no direct link in the clear (nor a ring in the clear a sealed one): the
 * connection is closed at once, never used. */
Test(xfer, a_direct_link_sealed_otherwise_than_the_ring_is_closed_unused)
{
    uint32_t local[] = {1, 1, 1};
    uint64_t gens[MAXN] = {3, 3, 3};
    for (int sealed = 0; sealed < 2; sealed++) {
        ring r;
        ring_new_with(&r, 3, local, gens, 4096, sealed, NULL);
        rd_seal other, unused;
        memset(&other, 0, sizeof(other));
        if (!sealed)
            link_seals(&other, &unused);
        int sp[2];
        cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
        rd_xfer_pair(r.x[0], 1, sp[0], &other);
        char c;
        cr_assert_eq(read(sp[1], &c, 1), 0, "sealed %d: the link was kept", sealed);
        int64_t used;
        int busy;
        cr_assert_eq(rd_xfer_pairs_open(r.x[0], &used, &busy), 0);
        close(sp[1]);
        ring_free(&r);
    }
}

/* Hands every two nodes of r a direct link beforehand (what the loop dials on a daemon), sealed
 * with keys of its own or in the clear (on_pairs_wanted makes only those asked for, in the
 * clear). */
static void pairs_link(ring *r, int sealed)
{
    for (int i = 0; i < r->n; i++)
        for (int j = i + 1; j < r->n; j++) {
            rd_seal a, b;
            memset(&a, 0, sizeof(a));
            memset(&b, 0, sizeof(b));
            if (sealed)
                link_seals(&a, &b);
            int sp[2];
            cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
            rd_xfer_pair(r->x[i], j, sp[0], &a);
            rd_xfer_pair(r->x[j], i, sp[1], &b);
        }
}

/* A ring of n nodes at generation gen for recursive doubling: sealed, its direct links are
 * handed in beforehand; in the clear, on_pairs_wanted makes those asked for. */
static void ring_new_direct(ring *r, int n, const uint32_t *local, uint64_t gen, int sealed)
{
    uint64_t gens[MAXN];
    for (int i = 0; i < MAXN; i++)
        gens[i] = gen;
    ring_new_with(r, n, local, gens, 4096, sealed, NULL);
    if (sealed)
        pairs_link(r, 1);
}

/* An f32 that sums differently in other orders: magnitudes 2^-20 to 2^20 and both signs. */
static float uneven(uint32_t rank, uint64_t e)
{
    uint32_t h = (uint32_t)(rank * 2654435761u) ^ (uint32_t)(e * 40503u);
    float m = (float)((h % 1000) + 1) / 7.0f;
    int exp = (int)((h >> 10) % 41) - 20;
    return (h & 1 ? -m : m) *
           (exp >= 0 ? (float)(1u << (exp > 20 ? 20 : exp)) : 1.0f / (float)(1u << -exp));
}

/* Allreduce by recursive doubling on n nodes (local ranks each as given), count elements of
 * dtype (i32 or f32) summed: an i32's result is the exact sum; an f32's is bit for bit the same
 * on every node and every local rank. Returns the payload moved over direct links. */
static uint64_t check_doubling_on(int n, const uint32_t *local, rd_dtype dtype, uint64_t count,
                                  rd_redop redop, uint32_t divisor, int sealed)
{
    ring r;
    node_bufs b[MAXN];
    ring_new_direct(&r, n, local, 9, sealed);
    uint32_t first = 0;
    for (int i = 0; i < n; i++) {
        bufs_new(&b[i], local[i], count * 4, count * 4);
        for (uint32_t l = 0; l < local[i]; l++)
            for (uint64_t e = 0; e < count; e++) {
                if (dtype == RD_DT_I32)
                    ((int32_t *)b[i].in[l])[e] = value(first + l, e);
                else
                    ((float *)b[i].in[l])[e] = uneven(first + l, e);
            }
        first += local[i];
        allreduce_task(&b[i], dtype, redop, count);
        b[i].t.args.divisor = divisor;
        b[i].t.doubling_bytes = count * 4;
        rd_xfer_submit(r.x[i], &b[i].t);
    }
    ring_wait(&r, n);
    uint64_t moved = 0;
    for (int i = 0; i < n; i++) {
        cr_assert_eq(b[i].t.status, RINGD_OK, "node %d: %s", i, b[i].t.message);
        moved += rd_xfer_pair_bytes(r.x[i]);
        for (uint32_t l = 0; l < local[i]; l++)
            for (uint64_t e = 0; e < count; e++) {
                if (dtype == RD_DT_I32) {
                    int32_t want = 0;
                    for (uint32_t k = 0; k < first; k++)
                        want = redop == RD_OP_MAX
                                   ? (value(k, e) > want || k == 0 ? value(k, e) : want)
                                   : want + value(k, e);
                    if (divisor > 1)
                        want /= (int32_t)divisor;
                    cr_assert_eq(((int32_t *)b[i].out[l])[e], want, "node %d local %u element %llu",
                                 i, l, (unsigned long long)e);
                } else {
                    cr_assert_eq(memcmp(b[i].out[l] + e * 4, b[0].out[0] + e * 4, 4), 0,
                                 "node %d local %u element %llu: %a, node 0 has %a", i, l,
                                 (unsigned long long)e, (double)((float *)b[i].out[l])[e],
                                 (double)((float *)b[0].out[0])[e]);
                }
            }
    }
    for (int i = 0; i < n; i++)
        bufs_free(&b[i], local[i]);
    ring_free(&r);
    return moved;
}

static uint64_t check_doubling(int n, const uint32_t *local, rd_dtype dtype, uint64_t count,
                               rd_redop redop, uint32_t divisor)
{
    return check_doubling_on(n, local, dtype, count, redop, divisor, 0);
}

/* Recursive doubling: exact for integers (as the ring), the same bits on every node for floats,
 * rings of a power of two and not (3: a pair folds first), one local rank or several, counts
 * over a segment; it moves its data over the direct links, not round the ring. */
Test(xfer, recursive_doubling_reduces_exactly_and_alike_on_every_node, .timeout = 60)
{
    static const struct {
        int n;
        uint32_t local[MAXN];
        uint64_t count;
    } cases[] = {
        {3, {1, 1, 1}, 1},
        {3, {2, 1, 3}, 5000},
        {4, {1, 1, 1, 1}, 4096},
        {4, {1, 2, 1, 1}, 7},
        {3, {1, 1, 1}, 1025},
        {5, {1, 1, 1, 1, 1}, 999},     /* one pair folds */
        {6, {1, 1, 2, 1, 1, 1}, 64},   /* two */
        {7, {1, 1, 1, 1, 1, 1, 1}, 3}, /* three */
        {8, {1, 1, 1, 1, 1, 1, 1, 1}, 2000},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        uint64_t moved =
            check_doubling(cases[c].n, cases[c].local, RD_DT_I32, cases[c].count, RD_OP_SUM, 1);
        cr_assert_gt(moved, 0, "case %zu: nothing crossed a direct link", c);
        check_doubling(cases[c].n, cases[c].local, RD_DT_F32, cases[c].count, RD_OP_SUM, 1);
    }
    /* the last exchange applies an average's divisor, and a max is a max */
    uint32_t ones[] = {1, 1, 1, 1, 1, 1, 1, 1};
    check_doubling(3, ones, RD_DT_I32, 100, RD_OP_SUM, 3);
    check_doubling(6, ones, RD_DT_I32, 100, RD_OP_SUM, 6);
    check_doubling(4, ones, RD_DT_I32, 100, RD_OP_MAX, 1);
}

/* On sealed direct links (--encrypt) too: the fold's empty frames included. */
Test(xfer, recursive_doubling_on_sealed_links_reduces_exactly, .timeout = 60)
{
    uint32_t ones[] = {1, 1, 1, 1, 1, 1, 1, 1};
    cr_assert_gt(check_doubling_on(3, ones, RD_DT_I32, 5000, RD_OP_SUM, 1, 1), 0);
    cr_assert_gt(check_doubling_on(5, ones, RD_DT_F32, 7, RD_OP_SUM, 1, 1), 0);
}

/* Above its order's doubling_bytes, or on a ring of two, an allreduce goes round the ring:
 * nothing crosses a direct link. */
Test(xfer, an_allreduce_over_its_doubling_bytes_goes_round_the_ring)
{
    uint64_t gens[MAXN] = {5, 5, 5, 5};
    uint32_t local[] = {1, 1, 1};
    for (int n = 2; n <= 3; n++) {
        ring r;
        node_bufs b[MAXN];
        ring_new(&r, n, local, gens, 4096);
        pairs_link(&r, 0);
        for (int i = 0; i < n; i++) {
            bufs_new(&b[i], 1, 4096, 4096);
            b[i].t.doubling_bytes = n == 2 ? 1 << 20 : 1024; /* two nodes: always the ring */
            submit_f32_sum(r.x[i], &b[i], 1024);
        }
        ring_wait(&r, n);
        for (int i = 0; i < n; i++) {
            cr_assert_eq(b[i].t.status, RINGD_OK, "%s", b[i].t.message);
            cr_assert_eq(rd_xfer_pair_bytes(r.x[i]), 0, "n %d node %d used a direct link", n, i);
            bufs_free(&b[i], 1);
        }
        ring_free(&r);
    }
}

/* The rings the tests of recursive doubling and halving run on: 3 to 8 nodes (folding pairs
 * where N is not a power of two), one local rank a node or several. */
static const struct {
    int n;
    uint32_t local[MAXN];
} doubling_rings[] = {
    {3, {1, 1, 1}},
    {3, {2, 1, 1}},
    {4, {1, 1, 1, 1}},
    {5, {1, 2, 1, 1, 1}},
    {6, {1, 1, 1, 1, 1, 1}},
    {7, {1, 1, 3, 1, 1, 1, 1}},
    {8, {1, 1, 1, 1, 1, 1, 1, 1}},
};

/* Whether a broadcast, allgather or reducescatter of n nodes (up to 8) goes by recursive
 * doubling or halving when small enough: on 3 and 5 nodes the folds (in before, out after) make
 * it no shorter than the ring's N - 1 steps, and it goes round the ring. */
static int folds_pay(int n)
{
    return n != 3 && n != 5;
}

/* A broadcast from root (coll RD_COLL_BROADCAST), or an allgather(v) (counts: each rank's, or
 * NULL for count each), of i32 on n nodes with doubling_bytes as given: every local output is
 * checked exactly. Returns the payload moved over direct links. */
/* at[k]: the first element of rank k's block of counts[k] elements (count each when counts is
 * NULL), at[world] their sum. */
static void block_starts(uint64_t *at, uint32_t world, const uint64_t *counts, uint64_t count)
{
    at[0] = 0;
    for (uint32_t k = 0; k < world; k++)
        at[k + 1] = at[k] + (counts != NULL ? counts[k] : count);
}

static uint64_t check_gather_on(int n, const uint32_t *local, rd_coll coll, uint32_t root,
                                uint64_t count, const uint64_t *counts, uint64_t doubling,
                                int sealed)
{
    ring r;
    node_bufs b[MAXN];
    ring_new_direct(&r, n, local, 4, sealed);
    uint32_t world = world_of(n, local);
    uint64_t at[MAXN * 4 + 1]; /* each rank's first element in the gathered buffer */
    block_starts(at, world, counts, count);
    uint64_t out = coll == RD_COLL_BROADCAST ? count : at[world];
    uint32_t first = 0;
    for (int i = 0; i < n; i++) {
        bufs_new(&b[i], local[i], (count + 2200) * 4, out * 4); /* an allgatherv's counts too */
        for (uint32_t l = 0; l < local[i]; l++)
            for (uint64_t e = 0; e < count + 2200; e++)
                ((int32_t *)b[i].in[l])[e] = value(first + l, e);
        first += local[i];
        b[i].m.count = count;
        b[i].t.backend = rd_backend_cpu();
        b[i].t.coll = coll;
        b[i].t.dtype = RD_DT_I32;
        b[i].t.root = root;
        b[i].t.counts = counts;
        b[i].t.doubling_bytes = doubling;
        rd_xfer_submit(r.x[i], &b[i].t);
    }
    ring_wait(&r, n);
    uint64_t moved = 0;
    first = 0;
    for (int i = 0; i < n; i++) {
        cr_assert_eq(b[i].t.status, RINGD_OK, "node %d: %s", i, b[i].t.message);
        moved += rd_xfer_pair_bytes(r.x[i]);
        for (uint32_t l = 0; l < local[i]; l++) {
            const int32_t *o = (const int32_t *)b[i].out[l];
            if (coll == RD_COLL_BROADCAST)
                for (uint64_t e = 0; e < count; e++)
                    cr_assert_eq(o[e], value(root, e),
                                 "n %d root %u: node %d local %u element %llu", n, root, i, l,
                                 (unsigned long long)e);
            else
                for (uint32_t k = 0; k < world; k++)
                    for (uint64_t e = at[k]; e < at[k + 1]; e++)
                        cr_assert_eq(o[e], value(k, e - at[k]),
                                     "n %d: node %d local %u, rank %u's element %llu", n, i, l, k,
                                     (unsigned long long)(e - at[k]));
        }
        first += local[i];
    }
    for (int i = 0; i < n; i++)
        bufs_free(&b[i], local[i]);
    ring_free(&r);
    return moved;
}

/* Broadcast by a binomial tree and allgather by recursive doubling, on rings of 4, 6, 7 and 8
 * nodes (folding pairs where N is not a power of two), round the ring on 3 and 5: from every
 * root rank (a root on a folding node, on the node that stands for it, on one that stands for
 * itself), gathers of equal and uneven counts (an empty block among them), one local rank or
 * several. Every result is exact, and the data crossed direct links where doubling pays; with
 * doubling_bytes 0 the same ops cross none. */
Test(xfer, broadcast_and_allgather_by_recursive_doubling_are_exact_on_every_node, .timeout = 120)
{
    for (size_t c = 0; c < sizeof(doubling_rings) / sizeof(doubling_rings[0]); c++) {
        int n = doubling_rings[c].n;
        const uint32_t *local = doubling_rings[c].local;
        uint32_t world = world_of(n, local);
        for (uint32_t root = 0; root < world; root++)
            cr_assert_eq(
                check_gather_on(n, local, RD_COLL_BROADCAST, root, 3001, NULL, 1 << 20, 0) > 0,
                folds_pay(n), "n %d root %u: direct links used or not, wrongly", n, root);
        cr_assert_eq(check_gather_on(n, local, RD_COLL_ALLGATHER, 0, 1001, NULL, 1 << 20, 0) > 0,
                     folds_pay(n));
        uint64_t counts[MAXN * 2];
        for (uint32_t k = 0; k < world; k++)
            counts[k] = k == 1 ? 0 : 1 + (k * 977) % 2100; /* rank 1's block is empty */
        cr_assert_eq(check_gather_on(n, local, RD_COLL_ALLGATHERV, 0, 0, counts, 1 << 20, 0) > 0,
                     folds_pay(n));
    }
    uint32_t ones[] = {1, 1, 1, 1, 1, 1};
    cr_assert_eq(check_gather_on(6, ones, RD_COLL_BROADCAST, 4, 3001, NULL, 0, 0), 0);
    cr_assert_eq(check_gather_on(6, ones, RD_COLL_ALLGATHER, 0, 1001, NULL, 0, 0), 0);
    /* over doubling_bytes (the gathered buffer's size for an allgather): round the ring */
    cr_assert_eq(check_gather_on(6, ones, RD_COLL_ALLGATHER, 0, 1001, NULL, 6 * 1001 * 4 - 1, 0),
                 0);
    cr_assert_gt(check_gather_on(6, ones, RD_COLL_ALLGATHER, 0, 1001, NULL, 6 * 1001 * 4, 0), 0);
}

/* On sealed direct links (--encrypt) too: a root that folds, and a fold's empty frames. */
Test(xfer, broadcast_and_allgather_by_recursive_doubling_on_sealed_links, .timeout = 60)
{
    uint32_t ones[] = {1, 1, 1, 1, 1, 1};
    cr_assert_gt(check_gather_on(6, ones, RD_COLL_BROADCAST, 2, 5000, NULL, 1 << 20, 1), 0);
    cr_assert_gt(check_gather_on(6, ones, RD_COLL_ALLGATHER, 0, 777, NULL, 1 << 20, 1), 0);
}

/* A reducescatter of dtype (i32 or f32) with redop, each rank's block counts[rank] elements, on
 * n nodes with doubling_bytes as given: an i32's every output is the exact result; an f32's is
 * within rounding of the sum in double precision. Returns the payload moved over direct links.
 */
static uint64_t check_scatter_on(int n, const uint32_t *local, rd_dtype dtype,
                                 const uint64_t *counts, rd_redop redop, uint32_t divisor,
                                 uint64_t doubling, int sealed)
{
    ring r;
    node_bufs b[MAXN];
    ring_new_direct(&r, n, local, 6, sealed);
    uint32_t world = world_of(n, local);
    uint64_t at[MAXN * 4 + 1]; /* each rank's block's first element in the vector */
    block_starts(at, world, counts, 0);
    uint64_t total = at[world];
    uint32_t first = 0;
    for (int i = 0; i < n; i++) {
        bufs_new(&b[i], local[i], total * 4, total * 4);
        for (uint32_t l = 0; l < local[i]; l++)
            for (uint64_t e = 0; e < total; e++) {
                if (dtype == RD_DT_I32)
                    ((int32_t *)b[i].in[l])[e] = value(first + l, e);
                else
                    ((float *)b[i].in[l])[e] = uneven(first + l, e);
            }
        first += local[i];
        allreduce_task(&b[i], dtype, redop, 0);
        b[i].t.coll = RD_COLL_REDUCESCATTER;
        b[i].t.counts = counts;
        b[i].t.args.divisor = divisor;
        b[i].t.doubling_bytes = doubling;
        rd_xfer_submit(r.x[i], &b[i].t);
    }
    ring_wait(&r, n);
    uint64_t moved = 0;
    first = 0;
    for (int i = 0; i < n; i++) {
        cr_assert_eq(b[i].t.status, RINGD_OK, "node %d: %s", i, b[i].t.message);
        moved += rd_xfer_pair_bytes(r.x[i]);
        for (uint32_t l = 0; l < local[i]; l++) {
            uint32_t k = first + l;
            for (uint64_t e = 0; e < counts[k]; e++) {
                if (dtype == RD_DT_I32) {
                    int32_t want = 0;
                    for (uint32_t j = 0; j < world; j++) {
                        int32_t v = value(j, at[k] + e);
                        want = redop == RD_OP_MAX ? (j == 0 || v > want ? v : want) : want + v;
                    }
                    if (divisor > 1)
                        want /= (int32_t)divisor;
                    cr_assert_eq(((int32_t *)b[i].out[l])[e], want,
                                 "n %d: node %d local %u element %llu", n, i, l,
                                 (unsigned long long)e);
                } else {
                    double want = 0, mag = 0;
                    for (uint32_t j = 0; j < world; j++) {
                        want += uneven(j, at[k] + e);
                        mag += fabs(uneven(j, at[k] + e));
                    }
                    double got = ((float *)b[i].out[l])[e];
                    cr_assert_leq(fabs(got - want), mag * world * 0x1p-23,
                                  "n %d: node %d local %u element %llu: %a, want %a", n, i, l,
                                  (unsigned long long)e, got, want);
                }
            }
        }
        first += local[i];
    }
    for (int i = 0; i < n; i++)
        bufs_free(&b[i], local[i]);
    ring_free(&r);
    return moved;
}

/* Reducescatter by recursive halving, on rings of 4, 6, 7 and 8 nodes (folding pairs where N is
 * not a power of two), and round the ring on 3 and 5: one local rank or several, equal and
 * uneven blocks (empty ones among them), integers exact and floats within rounding, a divisor
 * and a max; the data crossed direct links. With doubling_bytes 0, or under the vector's size,
 * the same op crosses none. */
Test(xfer, reducescatter_by_recursive_halving_is_exact_on_every_node, .timeout = 120)
{
    for (size_t c = 0; c < sizeof(doubling_rings) / sizeof(doubling_rings[0]); c++) {
        int n = doubling_rings[c].n;
        const uint32_t *local = doubling_rings[c].local;
        uint32_t world = world_of(n, local);
        uint64_t equal[MAXN * 2], uneven_[MAXN * 2];
        for (uint32_t k = 0; k < world; k++) {
            equal[k] = 1001;
            uneven_[k] = k % 3 == 1 ? 0 : 1 + (k * 977) % 2100; /* some blocks empty */
        }
        cr_assert_eq(check_scatter_on(n, local, RD_DT_I32, equal, RD_OP_SUM, 1, 1 << 20, 0) > 0,
                     folds_pay(n), "n %d: direct links used or not, wrongly", n);
        cr_assert_eq(check_scatter_on(n, local, RD_DT_I32, uneven_, RD_OP_SUM, 1, 1 << 20, 0) > 0,
                     folds_pay(n));
        cr_assert_eq(check_scatter_on(n, local, RD_DT_F32, uneven_, RD_OP_SUM, 1, 1 << 20, 0) > 0,
                     folds_pay(n));
    }
    uint32_t ones[] = {1, 1, 1, 1, 1, 1};
    uint64_t one[] = {1, 1, 1, 1, 1, 1}, some[] = {40, 3, 0, 17, 9, 100};
    cr_assert_gt(check_scatter_on(4, ones, RD_DT_I32, one, RD_OP_SUM, 1, 1 << 20, 0), 0);
    cr_assert_gt(check_scatter_on(6, ones, RD_DT_I32, some, RD_OP_SUM, 6, 1 << 20, 0), 0);
    cr_assert_gt(check_scatter_on(6, ones, RD_DT_I32, some, RD_OP_MAX, 1, 1 << 20, 0), 0);
    /* round the ring: doubling_bytes 0, or one byte under the vector's 169 elements */
    cr_assert_eq(check_scatter_on(6, ones, RD_DT_I32, some, RD_OP_SUM, 1, 0, 0), 0);
    cr_assert_eq(check_scatter_on(6, ones, RD_DT_I32, some, RD_OP_SUM, 1, 169 * 4 - 1, 0), 0);
    cr_assert_gt(check_scatter_on(6, ones, RD_DT_I32, some, RD_OP_SUM, 1, 169 * 4, 0), 0);
    /* on sealed direct links (--encrypt) too: a fold's empty frames included */
    cr_assert_gt(check_scatter_on(6, ones, RD_DT_I32, some, RD_OP_SUM, 1, 1 << 20, 1), 0);
}

/* A ring of 70 nodes (six pairs fold onto a hypercube of 64), its direct links made only as
 * the data planes ask for them (as a daemon's loop dials them): links of positions past 63 are
 * asked for and taken up like the others, and every result is exact. */
Test(xfer, a_ring_of_seventy_nodes_asks_for_its_direct_links_and_runs_exactly, .timeout = 120)
{
    uint32_t ones[MAXN];
    node_bufs b[MAXN];
    for (int i = 0; i < MAXN; i++)
        ones[i] = 1;
    int n = 70;
    uint64_t count = 300;
    ring r;
    ring_new_direct(&r, n, ones, 6, 0);
    for (int round = 0; round < 2; round++) { /* the second on the links the first asked for */
        for (int i = 0; i < n; i++) {
            bufs_new(&b[i], 1, count * 4, count * 4);
            for (uint64_t e = 0; e < count; e++)
                ((int32_t *)b[i].in[0])[e] = value((uint32_t)i, e);
            allreduce_task(&b[i], RD_DT_I32, RD_OP_SUM, count);
            b[i].t.doubling_bytes = 1 << 20;
            rd_xfer_submit(r.x[i], &b[i].t);
        }
        ring_wait(&r, n * (round + 1));
        for (int i = 0; i < n; i++) {
            cr_assert_eq(b[i].t.status, RINGD_OK, "node %d: %s", i, b[i].t.message);
            for (uint64_t e = 0; e < count; e++) {
                int32_t want = 0;
                for (int k = 0; k < n; k++)
                    want += value((uint32_t)k, e);
                cr_assert_eq(((int32_t *)b[i].out[0])[e], want, "node %d element %llu", i,
                             (unsigned long long)e);
            }
            bufs_free(&b[i], 1);
        }
    }
    int past63 = 0;
    for (int i = 0; i < n; i++)
        for (int q = 64; q < n; q++)
            past63 += r.linked[i][q];
    cr_assert_gt(past63, 0, "no link with a position past 63 was asked for");
    /* the hypercube's 64 x 6 / 2 links and the 6 folding pairs': made once, kept */
    cr_assert_eq(r.asked, 64 * 6 / 2 + 6, "%d links made", r.asked);
    ring_free(&r);
    cr_assert_gt(check_gather_on(n, ones, RD_COLL_BROADCAST, 68, 500, NULL, 1 << 20, 0), 0);
    cr_assert_gt(check_gather_on(n, ones, RD_COLL_ALLGATHER, 0, 20, NULL, 1 << 20, 0), 0);
}
