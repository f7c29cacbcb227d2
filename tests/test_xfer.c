/* The ring data plane on its own: rings of 2-4 in-process "nodes" joined by socket pairs, each
 * with its real thread, checked against references; frames of another generation and garbage on
 * a link fail the op cleanly. */
#include <criterion/criterion.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "xfer.h"

#define MAXN 4
#define CONNS 2

typedef struct {
    int n;
    struct event_base *base;
    rd_xfer *x[MAXN];
    int done;
} ring;

static void on_done(void *arg, rd_xfer_task *t)
{
    (void)t;
    ((ring *)arg)->done++;
}

/* Builds n nodes with the given local sizes; node i's generation is gens[i]. */
static void ring_new(ring *r, int n, const uint32_t *local, const uint64_t *gens, uint64_t seg)
{
    int sp[MAXN][CONNS][2];
    memset(r, 0, sizeof(*r));
    r->n = n;
    r->base = event_base_new();
    cr_assert_not_null(r->base);
    for (int i = 0; i < n; i++)
        for (int c = 0; c < CONNS; c++)
            cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sp[i][c]), 0);
    for (int i = 0; i < n; i++) {
        int sfd[CONNS], rfd[CONNS];
        for (int c = 0; c < CONNS; c++) {
            sfd[c] = sp[i][c][0];
            rfd[c] = sp[(i + n - 1) % n][c][1];
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
            .timeout_ms = 5000,
            .poll_us = 50,
            .next_node = "next",
            .prev_node = "prev",
        };
        char err[256];
        r->x[i] = rd_xfer_new(r->base, &cfg, on_done, r, err, sizeof(err));
        cr_assert_not_null(r->x[i], "%s", err);
    }
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

/* Allreduce (i32 sum) of count elements over n nodes with the given local sizes. */
static void check_allreduce(int n, const uint32_t *local, uint64_t count, uint64_t seg)
{
    uint64_t gens[MAXN] = {7, 7, 7, 7};
    ring r;
    node_bufs b[MAXN];
    ring_new(&r, n, local, gens, seg);
    uint32_t first = 0;
    for (int i = 0; i < n; i++) {
        bufs_new(&b[i], local[i], count * 4, count * 4);
        for (uint32_t l = 0; l < local[i]; l++)
            for (uint64_t e = 0; e < count; e++)
                ((int32_t *)b[i].in[l])[e] = value(first + l, e);
        first += local[i];
        b[i].m.count = count;
        b[i].t.backend = rd_backend_cpu();
        b[i].t.coll = RD_COLL_ALLREDUCE;
        b[i].t.dtype = RD_DT_I32;
        b[i].t.redop = RD_OP_SUM;
        b[i].t.args = (rd_reduce_args)RD_REDUCE_ARGS_INIT;
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
        b[i].m.count = 1024;
        b[i].t.backend = rd_backend_cpu();
        b[i].t.coll = RD_COLL_ALLREDUCE;
        b[i].t.dtype = RD_DT_F32;
        b[i].t.redop = RD_OP_SUM;
        b[i].t.args = (rd_reduce_args)RD_REDUCE_ARGS_INIT;
        rd_xfer_submit(r.x[i], &b[i].t);
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
        b.m.count = 1 << 18;
        b.t.backend = rd_backend_cpu();
        b.t.coll = RD_COLL_ALLREDUCE;
        b.t.dtype = RD_DT_F32;
        b.t.redop = RD_OP_SUM;
        b.t.args = (rd_reduce_args)RD_REDUCE_ARGS_INIT;
        rd_xfer_submit(r.x[0], &b.t);
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
