/* Ring data plane: one thread per ring runs each collective as a list of send and receive steps
 * split into segments, over non-blocking sockets driven by poll. A segment of a send step waits
 * only for the segment of the receive step it forwards, so segments pipeline around the ring.
 * Payloads are written straight from and read straight into their buffers (received partial sums
 * go through one segment of staging to be reduced). On sealed links (--encrypt) a segment is
 * sealed into a segment of room per connection and sent with its tag, and opened where it lands. */
#define _GNU_SOURCE
#include "xfer.h"

#include <errno.h>
#include <fcntl.h>
#include <event2/event.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "counters.h"
#include "frame.h"
#include "segment.h"
#include "log.h"

#define RD_XFER_SEGMENT_MIN (64u << 10)
#define RD_XFER_SPIN_US 2000 /* spin this long for a link mid-collective before sleeping */

/* A fused allreduce's members as one vector, in place: bytes [at[i], at[i + 1]) of it are
 * piece i, at base[i] (a member's buffer). Two views of one task (its outputs, its inputs) are
 * cut alike. */
typedef struct {
    size_t n;
    uint8_t *const *base;
    const uint64_t *at; /* n + 1 offsets */
} vview;

typedef struct {
    const uint8_t *src;
    uint64_t len;
    int dep; /* receive step whose segment k must have arrived before segment k goes; -1 none */
    const vview *v; /* non-NULL: src is bytes vat.. of v, not a pointer */
    uint64_t vat;
} send_step;

typedef struct {
    uint8_t *dst;
    const uint8_t *local; /* reduce: this node's contribution at the same place */
    uint64_t len;
    int reduce;      /* dst = received op local, instead of storing */
    int final;       /* reduce with postscale and divisor */
    const vview *dv; /* non-NULL: dst and local are bytes vat.. of dv and lv */
    const vview *lv;
    uint64_t vat;
} recv_step;

/* One task's steps. */
typedef struct {
    int nsend, nrecv;
    uint64_t maxlen; /* the longest step of any node's plan, when it may exceed this one's
                        (0: none does): every node cuts its steps into the same segments */
    send_step send[2 * RD_RING_NODES_MAX];
    recv_step recv[2 * RD_RING_NODES_MAX];
} plan;

typedef struct {
    int fd;
    uint64_t g;   /* next segment of this connection */
    uint64_t pos; /* bytes of it (header included) done */
    uint8_t hdr[RD_SEG_HEADER];
    int blocked; /* send: waiting for POLLOUT */
    int staged;  /* send: segment g's header (and sealed payload) are made: none of it sent yet */
    rd_cipher cipher; /* RD_CIPHER_NONE: in the clear */
    rd_seal_dir *dir; /* sealed: this direction's keys */
    uint8_t *box;     /* sealed, send: the segment sealed */
    uint8_t tag[RD_SEAL_TAG];
    const uint8_t *payload; /* send: segment g's bytes as they go (in the clear or sealed) */
    uint8_t *gather;        /* send over views: a segment that spans pieces, gathered */
} lane;

struct rd_xfer {
    rd_xfer_config cfg;
    uint32_t *local_sizes;
    char next_node[RD_NAME_MAX + 1], prev_node[RD_NAME_MAX + 1];
    int send_fds[RD_RING_CONNS_MAX], recv_fds[RD_RING_CONNS_MAX];
    rd_xfer_done_fn done;
    void *arg;

    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    rd_xfer_task *head, *tail; /* queued, guarded by lock */
    rd_xfer_task *done_head, *done_tail;
    atomic_int queued;
    int sleeping;
    atomic_int stopping;
    atomic_int cut;      /* the links are shut: the running task fails */
    atomic_int retiring; /* finish the running task, fail the queue, stop */
    int exited;          /* guarded by lock: the thread has posted its last task and touches
                            nothing of x any more */
    rd_status retire_status;
    char retire_why[320];
    void (*retired)(void *arg, rd_xfer *x);
    void *retired_arg;
    atomic_int broken;
    char broken_why[320];
    uint64_t seq;

    int efd;
    struct event *ev;

    /* Buffers kept between tasks, thread-private (kept_buf): */
    uint8_t *scratch; /* the ring's vector when it is not the members' */
    size_t scratch_len;
    uint8_t *partner; /* a recursive doubling's vector from the other node */
    size_t partner_len;
    uint8_t *gather; /* a fused pass's segments that span members, a segment per connection */
    size_t gather_len;
    uint8_t *staging[RD_RING_CONNS_MAX];

    atomic_uint_least64_t sent, received;
    int sealed; /* the links are sealed (--encrypt): the direct links too */

    /* --encrypt: each connection's keys (cipher RD_CIPHER_NONE: in the clear) and, per sending
     * connection, a segment of room to seal into; the thread's once started. */
    rd_seal send_seal[RD_RING_CONNS_MAX], recv_seal[RD_RING_CONNS_MAX];
    uint8_t *send_box[RD_RING_CONNS_MAX];

    /* Direct links (alltoall): pair_fd[q] the connection with node q the thread uses,
     * pair_next[q] one the loop handed in and the thread has not taken up yet (-1: none); both,
     * pairs_busy and pairs_used_ms guarded by lock (the thread reads pair_fd unlocked while
     * busy: nobody else changes it then). */
    char (*names)[RD_NAME_MAX + 1]; /* by position */
    int pair_fd[RD_RING_NODES_MAX];
    int pair_next[RD_RING_NODES_MAX];
    rd_seal pair_seal[RD_RING_NODES_MAX], pair_next_seal[RD_RING_NODES_MAX]; /* as the fds */
    uint8_t *pair_box[RD_RING_NODES_MAX]; /* the thread's: room to seal a segment for node q */
    size_t pair_box_len[RD_RING_NODES_MAX];
    int pairs_busy;
    int pairs_held; /* the thread's: a recursive doubling keeps its links busy between exchanges */
    int64_t pairs_used_ms;
    atomic_int pairs_handed;          /* bumped with each connection handed in */
    atomic_uint_least64_t pair_bytes; /* payload moved over direct links, both ways */
    /* positions whose link the thread waits for, a bit each */
    atomic_uint_least64_t wanted[(RD_RING_NODES_MAX + 63) / 64];
};

static uint64_t step_segments(uint64_t len, uint64_t seg)
{
    return len == 0 ? 0 : (len + seg - 1) / seg;
}

/* *buf, of *have bytes, grown to at least len bytes (what it held is not kept); NULL when out of
 * memory. */
static uint8_t *kept_buf(uint8_t **buf, size_t *have, size_t len)
{
    if (*have < len) {
        free(*buf);
        *buf = malloc(len);
        *have = *buf != NULL ? len : 0;
    }
    return *buf;
}

static uint8_t *scratch(rd_xfer *x, size_t len)
{
    return kept_buf(&x->scratch, &x->scratch_len, len);
}

static uint8_t *partner_buf(rd_xfer *x, size_t len)
{
    return kept_buf(&x->partner, &x->partner_len, len);
}

/* Fails t for want of a bytes-long ring buffer. Returns -1. */
static int no_memory(rd_xfer_task *t, uint64_t bytes)
{
    t->status = RINGD_E_NOMEM;
    snprintf(t->message, sizeof(t->message), "out of memory for a %llu-byte ring buffer",
             (unsigned long long)bytes);
    return -1;
}

typedef struct {
    rd_xfer *x;
    rd_xfer_task *t;
    const plan *p;
    int C;        /* connections used: segment g goes over connection g mod C */
    uint64_t seg; /* bytes per segment, a multiple of the element size */
    uint64_t S;   /* segments per step */
    uint8_t *recv_done;
    uint64_t scatter_left; /* segments of reduce steps not yet received: 0 ends reduce-scatter */
    rd_reduce_args mid, fin;
    size_t esz;
} run;

/* A segment of a recv step is in: the reduce-scatter ends with the last of its steps'. */
static void recv_counted(run *r, const recv_step *st)
{
    if (st->reduce && r->scatter_left > 0 && --r->scatter_left == 0)
        r->t->phase_us[RD_PHASE_SCATTERED] = rd_now_us();
}

/* Fails t with st and a message, unless it failed already. */
static void fail_task(rd_xfer_task *t, rd_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail_task(rd_xfer_task *t, rd_status st, const char *fmt, ...)
{
    va_list ap;
    if (t->status != RINGD_OK)
        return;
    va_start(ap, fmt);
    vsnprintf(t->message, sizeof(t->message), fmt, ap);
    va_end(ap);
    t->status = st;
}

/* A frame on a link is a segment header, then len payload bytes, then on a sealed link their
 * tag (taglen bytes, else 0); pos of its bytes are done. */

/* One send of what is left of a frame (header hdr, payload at payload, tag): the bytes sent, or
 * -1 with errno (EINTR retried). */
static ssize_t frame_write(int fd, const uint8_t *hdr, const uint8_t *payload, uint64_t len,
                           const uint8_t *tag, size_t taglen, uint64_t pos)
{
    struct iovec iov[3];
    int n = 0;
    if (pos < RD_SEG_HEADER)
        iov[n++] = (struct iovec){(void *)(hdr + pos), RD_SEG_HEADER - pos};
    uint64_t done = pos > RD_SEG_HEADER ? pos - RD_SEG_HEADER : 0;
    if (done < len)
        iov[n++] = (struct iovec){(void *)(payload + done), len - done};
    uint64_t tdone = done > len ? done - len : 0;
    if (tdone < taglen)
        iov[n++] = (struct iovec){(void *)(tag + tdone), taglen - tdone};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    ssize_t w;
    do
        w = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (w < 0 && errno == EINTR);
    return w;
}

/* One read of what is left of a frame: its header into hdr first, alone, so that a payload
 * lands in dst only after its header passed; a tag into tag. The bytes read, 0 at the peer's
 * close, or -1 with errno (EINTR retried). */
static ssize_t frame_read(int fd, uint8_t *hdr, uint8_t *dst, uint64_t len, uint8_t *tag,
                          size_t taglen, uint64_t pos)
{
    struct iovec iov;
    if (pos < RD_SEG_HEADER)
        iov = (struct iovec){hdr + pos, RD_SEG_HEADER - pos};
    else if (pos < RD_SEG_HEADER + len)
        iov = (struct iovec){dst + (pos - RD_SEG_HEADER), len - (pos - RD_SEG_HEADER)};
    else
        iov =
            (struct iovec){tag + (pos - RD_SEG_HEADER - len), taglen - (pos - RD_SEG_HEADER - len)};
    ssize_t got;
    do
        got = readv(fd, &iov, 1);
    while (got < 0 && errno == EINTR);
    return got;
}

/* Whether a frame's header, just read whole into hdr, is the one expected (generation, op seq,
 * segment g of len bytes): 0 when it is; else what the peer sent into why, and
 * RINGD_E_MEMBERSHIP when it is of another generation (the ring moved on), RINGD_E_PROTOCOL when
 * it is out of step or not a header at all. */
static int frame_check(const uint8_t *hdr, uint64_t generation, uint64_t seq, uint64_t g,
                       uint64_t len, char *why, size_t whylen)
{
    rd_seg h;
    if (rd_seg_decode(hdr, &h) != 0) {
        snprintf(why, whylen, "sent bytes that are not a segment header");
        return RINGD_E_PROTOCOL;
    }
    if (h.generation == generation && h.seq == seq && h.g == g && h.len == len)
        return 0;
    snprintf(why, whylen,
             "sent a frame of generation %llu (op %llu, segment %llu, %u bytes) where generation "
             "%llu (op %llu, segment %llu, %llu bytes) was expected",
             (unsigned long long)h.generation, (unsigned long long)h.seq, (unsigned long long)h.g,
             h.len, (unsigned long long)generation, (unsigned long long)seq, (unsigned long long)g,
             (unsigned long long)len);
    return h.generation != generation ? RINGD_E_MEMBERSHIP : RINGD_E_PROTOCOL;
}

/* Opens a sealed segment of len bytes in place at dst (its header hdr, just checked, is bound
 * with it). Returns 0, or -1 with t failed naming node: the segment was altered in flight,
 * replayed, reordered or spliced from another link or generation, and nothing of it is kept. */
static int seg_open(const char *node, rd_cipher cipher, rd_seal_dir *dir, uint8_t *dst,
                    uint64_t len, const uint8_t *tag, const uint8_t *hdr, rd_xfer_task *t)
{
    int rc = rd_seal_open(cipher, dir, dst, dst, len, tag, hdr, RD_SEG_HEADER);
    if (rc == 0)
        return 0;
    if (rc == -2) {
        fail_task(t, RINGD_E_NOMEM, "opening a sealed segment from node %s failed (out of memory)",
                  node);
        return -1;
    }
    rd_seg h;
    rd_seg_decode(hdr, &h);
    rd_log(RD_LOG_WARN, "xfer",
           "node %s: segment %llu of op %llu fails authentication (tampered with in flight, "
           "replayed or out of order): link dropped",
           node, (unsigned long long)h.g, (unsigned long long)h.seq);
    fail_task(t, RINGD_E_PROTOCOL,
              "a sealed segment from node %s fails authentication (tampered with in flight, "
              "replayed or out of order; --encrypt); nothing of it was used, and the ring must "
              "re-form",
              node);
    return -1;
}

/* The piece of v that holds byte off. */
static size_t vv_piece(const vview *v, uint64_t off)
{
    size_t lo = 0, hi = v->n; /* at[lo] <= off < at[hi] */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (v->at[mid] <= off)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Bytes [off, off + len) of v where they lie whole in one piece, else NULL. */
static uint8_t *vv_ptr(const vview *v, uint64_t off, uint64_t len)
{
    size_t i = vv_piece(v, off);
    return off + len <= v->at[i + 1] ? v->base[i] + (off - v->at[i]) : NULL;
}

/* The bytes of piece i of v from off on, at most len of them. */
static uint64_t vv_run(const vview *v, size_t i, uint64_t off, uint64_t len)
{
    return v->at[i + 1] - off < len ? v->at[i + 1] - off : len;
}

/* Copies bytes [off, off + len) of v into buf, piece by piece. */
static void vv_gather(const rd_backend *b, const vview *v, uint64_t off, uint64_t len, uint8_t *buf)
{
    for (size_t i = vv_piece(v, off); len > 0; i++) {
        uint64_t n = vv_run(v, i, off, len);
        b->copy(buf, v->base[i] + (off - v->at[i]), n);
        buf += n;
        off += n;
        len -= n;
    }
}

/* Copies buf into bytes [off, off + len) of v, piece by piece. */
static void vv_scatter(const rd_backend *b, const vview *v, uint64_t off, uint64_t len,
                       const uint8_t *buf)
{
    for (size_t i = vv_piece(v, off); len > 0; i++) {
        uint64_t n = vv_run(v, i, off, len);
        b->copy(v->base[i] + (off - v->at[i]), buf, n);
        buf += n;
        off += n;
        len -= n;
    }
}

/* Sends what lane l can send now. Returns 1 on progress, 0 when waiting, -1 on failure. */
static int lane_send(run *r, lane *l, int idx)
{
    rd_xfer *x = r->x;
    int C = r->C, progress = 0;
    uint64_t total = (uint64_t)r->p->nsend * r->S;
    while (l->g < total) {
        const send_step *st = &r->p->send[l->g / r->S];
        uint64_t k = l->g % r->S, off = k * r->seg;
        if (off >= st->len) {
            l->g += (uint64_t)C;
            continue;
        }
        uint64_t len = st->len - off < r->seg ? st->len - off : r->seg;
        if (!l->staged) { /* sealed once: each seal takes the next nonce */
            if (st->dep >= 0 && !r->recv_done[(uint64_t)st->dep * r->S + k])
                return progress;
            rd_seg h = {(uint32_t)len, x->cfg.generation, r->t->seq, l->g};
            rd_seg_encode(&h, l->hdr);
            const uint8_t *src = st->v == NULL ? st->src + off : vv_ptr(st->v, st->vat + off, len);
            if (src == NULL) { /* spans members: gathered */
                vv_gather(r->t->backend, st->v, st->vat + off, len, l->gather);
                src = l->gather;
            }
            if (l->cipher != RD_CIPHER_NONE && rd_seal_seal(l->cipher, l->dir, l->box, l->tag, src,
                                                            len, l->hdr, RD_SEG_HEADER) != 0) {
                fail_task(r->t, RINGD_E_NOMEM, "link to node %s: sealing a segment failed",
                          x->next_node);
                return -1;
            }
            l->payload = l->cipher != RD_CIPHER_NONE ? l->box : src;
            l->staged = 1;
        }
        size_t taglen = l->cipher != RD_CIPHER_NONE ? RD_SEAL_TAG : 0;
        ssize_t w = frame_write(l->fd, l->hdr, l->payload, len, l->tag, taglen, l->pos);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                l->blocked = 1;
                return progress;
            }
            fail_task(r->t, RINGD_E_MEMBERSHIP, "link to node %s (connection %d): send: %s",
                      x->next_node, idx, strerror(errno));
            return -1;
        }
        progress = 1;
        l->blocked = 0;
        l->pos += (uint64_t)w;
        if (l->pos == RD_SEG_HEADER + len + taglen) {
            atomic_fetch_add_explicit(&x->sent, len, memory_order_relaxed);
            l->pos = 0;
            l->staged = 0;
            l->g += (uint64_t)C;
        }
    }
    return progress;
}

/* A reduce step's segment (bytes off.. of step st, len of them) is in staging: what it received
 * reduced with this node's contribution into the destination, member by member over views. */
static void recv_reduce(run *r, const recv_step *st, uint64_t off, uint64_t len,
                        const uint8_t *staging)
{
    const rd_reduce_args *a = st->final ? &r->fin : &r->mid;
    if (st->dv == NULL) {
        const void *src[2] = {staging, st->local + off};
        r->t->backend->reduce(r->t->dtype, r->t->redop, st->dst + off, src, 2, len / r->esz, a);
        return;
    }
    uint64_t at = st->vat + off;
    for (size_t i = vv_piece(st->dv, at); len > 0; i++) {
        uint64_t in = at - st->dv->at[i], n = vv_run(st->dv, i, at, len);
        const void *src[2] = {staging, st->lv->base[i] + in};
        r->t->backend->reduce(r->t->dtype, r->t->redop, st->dv->base[i] + in, src, 2, n / r->esz,
                              a);
        staging += n;
        at += n;
        len -= n;
    }
}

/* Receives what lane l has. Returns 1 on progress, 0 when nothing is there, -1 on failure. */
static int lane_recv(run *r, lane *l, int idx)
{
    rd_xfer *x = r->x;
    int C = r->C, progress = 0;
    uint64_t total = (uint64_t)r->p->nrecv * r->S;
    uint8_t *staging = x->staging[idx];
    while (l->g < total) {
        const recv_step *st = &r->p->recv[l->g / r->S];
        uint64_t k = l->g % r->S, off = k * r->seg;
        if (off >= st->len) {
            r->recv_done[l->g] = 1;
            recv_counted(r, st);
            l->g += (uint64_t)C;
            continue;
        }
        uint64_t len = st->len - off < r->seg ? st->len - off : r->seg;
        uint8_t *dst;
        if (st->reduce)
            dst = staging;
        else if (st->dv == NULL)
            dst = st->dst + off;
        else if ((dst = vv_ptr(st->dv, st->vat + off, len)) == NULL)
            dst = staging; /* spans members: scattered once in */
        size_t taglen = l->cipher != RD_CIPHER_NONE ? RD_SEAL_TAG : 0;
        ssize_t got = frame_read(l->fd, l->hdr, dst, len, l->tag, taglen, l->pos);
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return progress;
        if (got <= 0) {
            fail_task(r->t, RINGD_E_MEMBERSHIP, "link from node %s (connection %d): %s",
                      x->prev_node, idx, got == 0 ? "closed by the peer" : strerror(errno));
            return -1;
        }
        progress = 1;
        uint64_t before = l->pos;
        l->pos += (uint64_t)got;
        if (before < RD_SEG_HEADER && l->pos >= RD_SEG_HEADER) {
            char why[224];
            int wrong =
                frame_check(l->hdr, x->cfg.generation, r->t->seq, l->g, len, why, sizeof(why));
            if (wrong != 0) {
                rd_log(RD_LOG_WARN, "xfer", "node %s %s: link dropped", x->prev_node, why);
                fail_task(r->t, (rd_status)wrong, "node %s %s; the ring must re-form", x->prev_node,
                          why);
                return -1;
            }
        }
        if (l->pos == RD_SEG_HEADER + len + taglen) {
            if (taglen != 0 &&
                seg_open(x->prev_node, l->cipher, l->dir, dst, len, l->tag, l->hdr, r->t) != 0)
                return -1;
            if (st->reduce)
                recv_reduce(r, st, off, len, staging);
            else if (st->dv != NULL && dst == staging)
                vv_scatter(r->t->backend, st->dv, st->vat + off, len, staging);
            atomic_fetch_add_explicit(&x->received, len, memory_order_relaxed);
            r->recv_done[l->g] = 1;
            recv_counted(r, st);
            l->pos = 0;
            l->g += (uint64_t)C;
        }
    }
    return progress;
}

/* The order's segment size, within what this ring has. */
static uint64_t task_segment(const rd_xfer *x, const rd_xfer_task *t)
{
    return t->segment_size >= 1 && t->segment_size < x->cfg.segment_size ? t->segment_size
                                                                         : x->cfg.segment_size;
}

/* Runs a plan's steps over the links. Returns 0, or -1 with the task failed. */
static int run_plan(rd_xfer *x, rd_xfer_task *t, const plan *p, size_t esz)
{
    /* The order's tuning, within what this ring has (the scheduler checked it came so). */
    int C = t->conns >= 1 && t->conns < x->cfg.conns ? t->conns : x->cfg.conns;
    uint64_t segmax = task_segment(x, t);
    uint64_t maxlen = 0;
    for (int i = 0; i < p->nsend; i++)
        maxlen = p->send[i].len > maxlen ? p->send[i].len : maxlen;
    for (int i = 0; i < p->nrecv; i++)
        maxlen = p->recv[i].len > maxlen ? p->recv[i].len : maxlen;
    maxlen = p->maxlen > maxlen ? p->maxlen : maxlen;
    run r = {.x = x, .t = t, .p = p, .C = C, .esz = esz};
    /* Steps shorter than a few segments would not pipeline: cut them in four, down to 64 KiB. */
    uint64_t seg = maxlen / 4 > segmax ? segmax : maxlen / 4;
    if (seg < RD_XFER_SEGMENT_MIN)
        seg = RD_XFER_SEGMENT_MIN < segmax ? RD_XFER_SEGMENT_MIN : segmax;
    r.seg = seg / esz * esz;
    r.S = step_segments(maxlen, r.seg);
    if (r.S == 0)
        return 0;
    r.mid = (rd_reduce_args)RD_REDUCE_ARGS_INIT;
    r.fin = r.mid;
    r.fin.postscale = t->args.postscale;
    r.fin.divisor = t->args.divisor;
    for (int i = 0; i < p->nrecv; i++)
        r.scatter_left += p->recv[i].reduce ? r.S : 0;
    int views = 0;
    for (int i = 0; i < p->nsend; i++)
        views |= p->send[i].v != NULL;
    r.recv_done = calloc((size_t)(p->nrecv ? p->nrecv : 1) * r.S, 1);
    uint8_t *gather = views ? kept_buf(&x->gather, &x->gather_len, (size_t)C * r.seg) : NULL;
    if (r.recv_done == NULL || (views && gather == NULL)) {
        free(r.recv_done);
        fail_task(r.t, RINGD_E_NOMEM, "out of memory");
        return -1;
    }
    lane sl[RD_RING_CONNS_MAX], rl[RD_RING_CONNS_MAX];
    for (int c = 0; c < C; c++) {
        sl[c] = (lane){.fd = x->send_fds[c],
                       .g = (uint64_t)c,
                       .cipher = x->send_seal[c].cipher,
                       .dir = &x->send_seal[c].tx,
                       .box = x->send_box[c],
                       .gather = views ? gather + (size_t)c * r.seg : NULL};
        rl[c] = (lane){.fd = x->recv_fds[c],
                       .g = (uint64_t)c,
                       .cipher = x->recv_seal[c].cipher,
                       .dir = &x->recv_seal[c].rx};
    }
    uint64_t send_total = (uint64_t)p->nsend * r.S, recv_total = (uint64_t)p->nrecv * r.S;
    int64_t last = rd_now_us();
    int rc = 0;
    for (;;) {
        int progress = 0, pending = 0;
        for (int c = 0; c < C && rc == 0; c++) {
            int s = lane_send(&r, &sl[c], c);
            int v = s < 0 ? -1 : lane_recv(&r, &rl[c], c);
            if (s < 0 || v < 0)
                rc = -1;
            progress |= s > 0 || v > 0;
            pending |= sl[c].g < send_total || rl[c].g < recv_total;
        }
        if (rc != 0 || !pending)
            break;
        if (atomic_load(&x->stopping) || atomic_load(&x->cut)) {
            fail_task(r.t, RINGD_E_MEMBERSHIP, "the ring is being re-formed");
            rc = -1;
            break;
        }
        int64_t now = rd_now_us();
        if (progress) {
            last = now;
            continue;
        }
        /* Mid-collective the next segment is usually a socket-buffer's drain away: yielding beats a
         * sleep and a wake-up, and a core this leaves idle has nothing better to do. */
        if (now - last < (x->cfg.poll_us > RD_XFER_SPIN_US ? x->cfg.poll_us : RD_XFER_SPIN_US)) {
            sched_yield();
            continue;
        }
        struct pollfd pf[2 * RD_RING_CONNS_MAX];
        int n = 0;
        for (int c = 0; c < C; c++) {
            if (sl[c].g < send_total && sl[c].blocked)
                pf[n++] = (struct pollfd){.fd = sl[c].fd, .events = POLLOUT};
            if (rl[c].g < recv_total)
                pf[n++] = (struct pollfd){.fd = rl[c].fd, .events = POLLIN};
        }
        int left = (int)(x->cfg.timeout_ms - (now - last) / 1000);
        if (left <= 0 ||
            (n > 0 && poll(pf, (nfds_t)n, left > 100 ? 100 : left) < 0 && errno != EINTR)) {
            fail_task(r.t, RINGD_E_MEMBERSHIP,
                      "no progress on the links to node %s and from node %s for %lld ms",
                      x->next_node, x->prev_node, (long long)x->cfg.timeout_ms);
            rc = -1;
            break;
        }
        if (n == 0) { /* cannot happen: something is always pending on a socket */
            fail_task(r.t, RINGD_E_PROTOCOL, "ring plan stalled");
            rc = -1;
            break;
        }
    }
    free(r.recv_done);
    return rc;
}

/* Byte offset of chunk c when n bytes... in elements: the ring's split of count elements. */
static uint64_t chunk_start(uint64_t count, int nnodes, int c)
{
    return count * (uint64_t)c / (uint64_t)nnodes;
}

static int mod(int a, int n)
{
    return ((a % n) + n) % n;
}

/* A fused allreduce's staging: every member's L local inputs reduced (the task's prescale
 * applied) into W, the members one after the other. */
static void members_reduce(rd_xfer_task *t, uint8_t *W, int L, size_t esz)
{
    rd_reduce_args pre = RD_REDUCE_ARGS_INIT;
    pre.prescale = t->args.prescale;
    uint64_t off = 0;
    for (size_t m = 0; m < t->nmembers; m++) {
        t->backend->reduce(t->dtype, t->redop, W + off * esz, (const void *const *)t->members[m].in,
                           L, t->members[m].count, &pre);
        off += t->members[m].count;
    }
}

/* The result in W copied to every member's L local outputs. */
static void members_write_back(rd_xfer_task *t, const uint8_t *W, int L, size_t esz)
{
    uint64_t off = 0;
    for (size_t m = 0; m < t->nmembers; m++) {
        for (int l = 0; l < L; l++)
            t->backend->copy(t->members[m].out[l], W + off * esz, t->members[m].count * esz);
        off += t->members[m].count;
    }
}

/* Allreduce of every member, fused when there are several: the local ranks' inputs are reduced
 * into one buffer, the ring reduces and gathers it, the result is copied to every local output.
 * For one local rank with nothing to scale the ring works in place instead: in its output,
 * reading its input; fused, in the members' outputs and inputs as one vector each (views), with
 * no copy in or out. */
static int do_allreduce(rd_xfer *x, rd_xfer_task *t)
{
    int N = x->cfg.nnodes, P = x->cfg.position, L = (int)x->local_sizes[P];
    size_t esz = rd_dtype_size(t->dtype);
    uint64_t total = 0;
    for (size_t m = 0; m < t->nmembers; m++)
        total += t->members[m].count;
    int direct = L == 1 && t->args.prescale == 1.0;
    int views = direct && t->nmembers > 1;
    uint8_t *W = NULL, **outs = NULL;
    const uint8_t *local = NULL;
    uint64_t *at = NULL;
    vview wv = {0}, lv = {0};
    if (views) {
        outs = malloc(2 * t->nmembers * sizeof(*outs));
        at = malloc((t->nmembers + 1) * sizeof(*at));
        if (outs == NULL || at == NULL) {
            free(outs);
            free(at);
            fail_task(t, RINGD_E_NOMEM, "out of memory for the views of %zu fused tensors",
                      t->nmembers);
            return -1;
        }
        at[0] = 0;
        for (size_t m = 0; m < t->nmembers; m++) {
            outs[m] = t->members[m].out[0];
            /* the inputs' view is only read (sends, and a reduction's other operand) */
            outs[t->nmembers + m] = (uint8_t *)t->members[m].in[0];
            at[m + 1] = at[m] + t->members[m].count * esz;
        }
        wv = (vview){.n = t->nmembers, .base = outs, .at = at};
        lv = (vview){.n = t->nmembers, .base = outs + t->nmembers, .at = at};
    } else if (direct) {
        W = t->members[0].out[0];
        local = t->members[0].in[0];
    } else {
        W = scratch(x, total * esz);
        if (W == NULL)
            return no_memory(t, total * esz);
        members_reduce(t, W, L, esz);
        local = W;
    }
    plan p;
    memset(&p, 0, sizeof(p));
    for (int s = 0; s < 2 * (N - 1); s++) {
        int sc, rc;
        if (s < N - 1) {
            sc = mod(P - s, N);
            rc = mod(P - s - 1, N);
        } else {
            int u = s - (N - 1);
            sc = mod(P + 1 - u, N);
            rc = mod(P - u, N);
        }
        uint64_t so = chunk_start(total, N, sc), se = chunk_start(total, N, sc + 1);
        uint64_t ro = chunk_start(total, N, rc), re = chunk_start(total, N, rc + 1);
        if (views) {
            p.send[s] = (send_step){
                .len = (se - so) * esz, .dep = s - 1, .v = s == 0 ? &lv : &wv, .vat = so * esz};
            p.recv[s] = (recv_step){.len = (re - ro) * esz,
                                    .reduce = s < N - 1,
                                    .final = s == N - 2,
                                    .dv = &wv,
                                    .lv = &lv,
                                    .vat = ro * esz};
            continue;
        }
        p.send[s] = (send_step){
            .src = (s == 0 ? local : W) + so * esz, .len = (se - so) * esz, .dep = s - 1};
        p.recv[s] = (recv_step){.dst = W + ro * esz,
                                .local = local + ro * esz,
                                .len = (re - ro) * esz,
                                .reduce = s < N - 1,
                                .final = s == N - 2};
    }
    p.nsend = p.nrecv = 2 * (N - 1);
    t->phase_us[RD_PHASE_STAGED] = rd_now_us();
    int ran = run_plan(x, t, &p, esz);
    t->phase_us[RD_PHASE_MOVED] = rd_now_us();
    if (ran == 0 && !direct)
        members_write_back(t, W, L, esz);
    free(outs);
    free(at);
    return ran;
}

/* The position of the node that holds rank root; *first set to its first rank. */
static int root_node(const rd_xfer *x, uint32_t root, uint32_t *first)
{
    int rp = 0;
    *first = 0;
    while (rp < x->cfg.nnodes && root >= *first + x->local_sizes[rp])
        *first += x->local_sizes[rp++];
    return rp;
}

static int pow2_floor(int n);
static int fold_vnode(int P, int r);
static int doubling_fits(const rd_xfer *x, const rd_xfer_task *t, uint64_t bytes, int ring_steps);
static int doubling_held(rd_xfer *x, rd_xfer_task *t,
                         int (*body)(rd_xfer *, rd_xfer_task *, void *), void *arg);
static int broadcast_doubling(rd_xfer *x, rd_xfer_task *t, void *arg);
static int allgather_doubling(rd_xfer *x, rd_xfer_task *t, void *arg);

/* Where a broadcast's data is on this node: the root's input on its node, else where it is
 * received (dst). */
typedef struct {
    int rp;
    const uint8_t *src;
    uint8_t *dst;
    uint64_t bytes;
} bcast_at;

/* Broadcast: by a binomial tree over the direct links when it is small enough, else round the
 * ring: the root's node sends, every other node receives and forwards to the next unless the
 * next is the root's node. */
static int do_broadcast(rd_xfer *x, rd_xfer_task *t)
{
    int N = x->cfg.nnodes, P = x->cfg.position, L = (int)x->local_sizes[P];
    size_t esz = rd_dtype_size(t->dtype);
    const rd_xfer_member *m = &t->members[0];
    uint32_t first;
    bcast_at b = {.rp = root_node(x, t->root, &first), .bytes = m->count * esz};
    if (b.rp == P) {
        b.src = m->in[t->root - first];
    } else {
        b.dst = L == 1 ? m->out[0] : scratch(x, b.bytes);
        if (b.dst == NULL)
            return no_memory(t, b.bytes);
        b.src = b.dst;
    }
    t->phase_us[RD_PHASE_STAGED] = rd_now_us();
    if (doubling_fits(x, t, b.bytes, N - 1)) {
        if (doubling_held(x, t, broadcast_doubling, &b) != 0)
            return -1;
    } else {
        plan p;
        memset(&p, 0, sizeof(p));
        if (b.rp == P) {
            p.send[0] = (send_step){.src = b.src, .len = b.bytes, .dep = -1};
            p.nsend = 1;
        } else {
            p.recv[0] = (recv_step){.dst = b.dst, .len = b.bytes};
            p.nrecv = 1;
            if (mod(P + 1, N) != b.rp) {
                p.send[0] = (send_step){.src = b.dst, .len = b.bytes, .dep = 0};
                p.nsend = 1;
            }
        }
        if (run_plan(x, t, &p, esz) != 0)
            return -1;
    }
    t->phase_us[RD_PHASE_MOVED] = rd_now_us();
    for (int l = 0; l < L; l++)
        if (m->out[l] != b.src)
            t->backend->copy(m->out[l], b.src, b.bytes);
    return 0;
}

/* Elements before each node's block (nnodes + 1 entries into off): its ranks' counts, or per
 * elements each. */
static void node_offsets(const rd_xfer *x, const uint64_t *counts, uint64_t per, uint64_t *off)
{
    uint32_t rank = 0;
    off[0] = 0;
    for (int i = 0; i < x->cfg.nnodes; i++) {
        uint64_t n = 0;
        for (uint32_t l = 0; l < x->local_sizes[i]; l++, rank++)
            n += counts != NULL ? counts[rank] : per;
        off[i + 1] = off[i] + n;
    }
}

/* A reducescatter's vector: W, the local ranks' inputs reduced (writable); R, room for the
 * partner's part of it; its nodes' blocks (in elements: off[0..N]). */
typedef struct {
    uint8_t *W;
    uint8_t *R;
    const uint64_t *off;
} scatter_at;

static int reducescatter_halving(rd_xfer *x, rd_xfer_task *t, void *arg);

/* Reducescatter: the local ranks' inputs are reduced into one buffer; by recursive halving over
 * the direct links when it is small enough, else by the ring's reduce-scatter over blocks that
 * are the nodes' ranks' blocks, shifted so that each node ends holding its own; each local
 * rank's part of it is then copied to its output. */
static int do_reducescatter(rd_xfer *x, rd_xfer_task *t)
{
    int N = x->cfg.nnodes, P = x->cfg.position, L = (int)x->local_sizes[P];
    size_t esz = rd_dtype_size(t->dtype);
    const rd_xfer_member *m = &t->members[0];
    uint64_t off[N + 1];
    node_offsets(x, t->counts, 0, off);
    uint64_t total = off[N];
    int halving = doubling_fits(x, t, total * esz, N - 1);
    uint8_t *W = scratch(x, total > 0 ? total * esz : 1);
    uint8_t *R = halving && fold_vnode(P, N - pow2_floor(N)) >= 0 ? partner_buf(x, total * esz) : W;
    if (W == NULL || R == NULL)
        return no_memory(t, total * esz);
    const uint8_t *local = m->in[0];
    if (halving || L > 1 || t->args.prescale != 1.0 || N == 1) {
        rd_reduce_args pre = RD_REDUCE_ARGS_INIT;
        pre.prescale = t->args.prescale;
        if (N == 1) { /* no ring step to finish the reduction */
            pre.postscale = t->args.postscale;
            pre.divisor = t->args.divisor;
        }
        t->backend->reduce(t->dtype, t->redop, W, (const void *const *)m->in, L, total, &pre);
        local = W;
    }
    t->phase_us[RD_PHASE_STAGED] = rd_now_us();
    if (halving) {
        scatter_at sa = {.W = W, .R = R, .off = off};
        if (doubling_held(x, t, reducescatter_halving, &sa) != 0)
            return -1;
    } else {
        plan p;
        memset(&p, 0, sizeof(p));
        for (int s = 0; s < N - 1; s++) {
            int sc = mod(P - s - 1, N), rc = mod(P - s - 2, N);
            p.send[s] = (send_step){.src = (s == 0 ? local : W) + off[sc] * esz,
                                    .len = (off[sc + 1] - off[sc]) * esz,
                                    .dep = s - 1};
            p.recv[s] = (recv_step){.dst = W + off[rc] * esz,
                                    .local = local + off[rc] * esz,
                                    .len = (off[rc + 1] - off[rc]) * esz,
                                    .reduce = 1,
                                    .final = s == N - 2};
        }
        p.nsend = p.nrecv = N - 1;
        if (run_plan(x, t, &p, esz) != 0)
            return -1;
    }
    t->phase_us[RD_PHASE_MOVED] = rd_now_us();
    uint64_t at = off[P];
    uint32_t first = 0;
    for (int i = 0; i < P; i++)
        first += x->local_sizes[i];
    for (int l = 0; l < L; l++) {
        uint64_t n = t->counts[first + (uint32_t)l];
        if (n > 0)
            t->backend->copy(m->out[l], W + at * esz, n * esz);
        at += n;
    }
    return 0;
}

/* An allgather's gathered buffer, and its nodes' blocks (in elements: off[0..N]). */
typedef struct {
    uint8_t *W;
    const uint64_t *off;
} gather_at;

/* Allgather (equal counts, or an allgatherv's): each node's block is its local ranks' inputs in
 * rank order; blocks go into the gathered buffer by recursive doubling over the direct links
 * when it is small enough, else round the ring; it is then copied to every local output. */
static int do_allgather(rd_xfer *x, rd_xfer_task *t)
{
    int N = x->cfg.nnodes, P = x->cfg.position, L = (int)x->local_sizes[P];
    size_t esz = rd_dtype_size(t->dtype);
    const rd_xfer_member *m = &t->members[0];
    const uint64_t *counts = t->coll == RD_COLL_ALLGATHERV ? t->counts : NULL;
    uint64_t off[N + 1];
    node_offsets(x, counts, m->count, off);
    uint64_t bytes = off[N] * esz;
    uint8_t *W = L == 1 ? m->out[0] : scratch(x, bytes > 0 ? bytes : 1);
    if (W == NULL)
        return no_memory(t, bytes);
    uint64_t at = off[P];
    uint32_t first = 0;
    for (int i = 0; i < P; i++)
        first += x->local_sizes[i];
    for (int l = 0; l < L; l++) {
        uint64_t n = counts != NULL ? counts[first + (uint32_t)l] : m->count;
        if (n > 0 && W + at * esz != m->in[l])
            t->backend->copy(W + at * esz, m->in[l], n * esz);
        at += n;
    }
    t->phase_us[RD_PHASE_STAGED] = rd_now_us();
    if (doubling_fits(x, t, bytes, N - 1)) {
        gather_at g = {W, off};
        if (doubling_held(x, t, allgather_doubling, &g) != 0)
            return -1;
    } else {
        plan p;
        memset(&p, 0, sizeof(p));
        for (int u = 0; u < N - 1; u++) {
            int sb = mod(P - u, N), rb = mod(P - u - 1, N);
            p.send[u] = (send_step){
                .src = W + off[sb] * esz, .len = (off[sb + 1] - off[sb]) * esz, .dep = u - 1};
            p.recv[u] = (recv_step){.dst = W + off[rb] * esz, .len = (off[rb + 1] - off[rb]) * esz};
        }
        p.nsend = p.nrecv = N - 1;
        if (run_plan(x, t, &p, esz) != 0)
            return -1;
    }
    t->phase_us[RD_PHASE_MOVED] = rd_now_us();
    for (int l = 0; l < L; l++)
        if (m->out[l] != W && bytes > 0)
            t->backend->copy(m->out[l], W, bytes);
    return 0;
}

/* What both alltoalls (round the ring, and direct) lay out alike: the nodes' first ranks
 * (first[N] is the job's size), and where each local rank's elements for (from) every rank
 * start in its input (output). A block of node o for node d holds, for each of d's ranks l in
 * turn, each of o's ranks' elements for l. */
typedef struct {
    rd_xfer_task *t;
    const uint64_t *m; /* the n x n matrix of counts */
    uint32_t first[RD_RING_NODES_MAX + 1];
    uint32_t n, me, L;
    size_t esz;
    uint64_t *sd, *rd; /* L x (n + 1) each, one allocation */
} a2a_layout;

/* Lays out t on x. Returns 0, or -1 with t failed (out of memory). */
static int a2a_layout_init(const rd_xfer *x, rd_xfer_task *t, a2a_layout *a)
{
    int N = x->cfg.nnodes, P = x->cfg.position;
    a->t = t;
    a->m = t->counts;
    a->esz = rd_dtype_size(t->dtype);
    a->first[0] = 0;
    for (int i = 0; i < N; i++)
        a->first[i + 1] = a->first[i] + x->local_sizes[i];
    uint32_t n = a->n = a->first[N], me = a->me = a->first[P], L = a->L = x->local_sizes[P];
    a->sd = calloc((size_t)L * (n + 1) * 2, sizeof(uint64_t));
    if (a->sd == NULL)
        return no_memory(t, (uint64_t)L * (n + 1) * 16);
    a->rd = a->sd + (size_t)L * (n + 1);
    for (uint32_t r = 0; r < L; r++)
        for (uint32_t b = 0; b < n; b++) {
            a->sd[r * (n + 1) + b + 1] = a->sd[r * (n + 1) + b] + a->m[(size_t)(me + r) * n + b];
            a->rd[r * (n + 1) + b + 1] = a->rd[r * (n + 1) + b] + a->m[(size_t)b * n + me + r];
        }
    return 0;
}

/* Elements from node o's ranks to node d's. */
static uint64_t a2a_block(const a2a_layout *a, int o, int d)
{
    uint64_t t = 0;
    for (uint32_t k = a->first[o]; k < a->first[o + 1]; k++)
        for (uint32_t l = a->first[d]; l < a->first[d + 1]; l++)
            t += a->m[(size_t)k * a->n + l];
    return t;
}

/* Packs this node's block for node d at at, from its ranks' inputs; returns where it ends. */
static uint8_t *a2a_pack(const a2a_layout *a, int d, uint8_t *at)
{
    const rd_xfer_member *mb = &a->t->members[0];
    for (uint32_t l = a->first[d]; l < a->first[d + 1]; l++)
        for (uint32_t r = 0; r < a->L; r++) {
            uint64_t c = a->m[(size_t)(a->me + r) * a->n + l];
            if (c > 0)
                a->t->backend->copy(at, mb->in[r] + a->sd[r * (a->n + 1) + l] * a->esz, c * a->esz);
            at += c * a->esz;
        }
    return at;
}

/* Copies the blocks between this node's own ranks, input to output. */
static void a2a_local(const a2a_layout *a)
{
    const rd_xfer_member *mb = &a->t->members[0];
    uint32_t n = a->n, me = a->me;
    for (uint32_t b = 0; b < a->L; b++)
        for (uint32_t r = 0; r < a->L; r++) {
            uint64_t c = a->m[(size_t)(me + r) * n + me + b];
            if (c > 0)
                a->t->backend->copy(mb->out[b] + a->rd[b * (n + 1) + me + r] * a->esz,
                                    mb->in[r] + a->sd[r * (n + 1) + me + b] * a->esz, c * a->esz);
        }
}

/* Unpacks node o's block for this node, at from, into its ranks' outputs. */
static void a2a_unpack(const a2a_layout *a, int o, const uint8_t *from)
{
    const rd_xfer_member *mb = &a->t->members[0];
    for (uint32_t b = 0; b < a->L; b++)
        for (uint32_t k = a->first[o]; k < a->first[o + 1]; k++) {
            uint64_t c = a->m[(size_t)k * a->n + a->me + b];
            if (c > 0)
                a->t->backend->copy(mb->out[b] + a->rd[b * (a->n + 1) + k] * a->esz, from,
                                    c * a->esz);
            from += c * a->esz;
        }
}

/* Alltoall round the ring, each node's data for each other node relayed by the nodes between:
 * in round u (0-based) node P sends the next node the blocks that node P-u's ranks have for
 * nodes P+1 .. P+N-1-u, farthest first, and receives from the previous node those of node
 * P-1-u for nodes P .. P+N-2-u: it keeps the last (its own) and forwards the rest, a prefix,
 * in the next round, segment by segment as it arrives. A block of node o for node d holds, for
 * each of d's ranks l in turn, each of o's ranks' elements for l. Round 0 packs this node's
 * blocks from its ranks' inputs; the blocks between its own ranks are copied directly; at the
 * end each block kept is copied into its ranks' outputs. On two nodes it is one exchange. */
static int do_alltoall(rd_xfer *x, rd_xfer_task *t)
{
    int N = x->cfg.nnodes, P = x->cfg.position;
    a2a_layout a;
    if (a2a_layout_init(x, t, &a) != 0)
        return -1;
    size_t esz = a.esz;
    const rd_xfer_member *mb = &t->members[0];
    /* each node's blocks for each node, and the bundle node q sends in round u: what it
     * receives in round u is its predecessor's */
    uint64_t *nb = calloc((size_t)N * N, sizeof(uint64_t));
    if (nb == NULL) {
        free(a.sd);
        return no_memory(t, (uint64_t)N * N * 8);
    }
    for (int o = 0; o < N; o++)
        for (int d = 0; d < N; d++)
            nb[o * N + d] = a2a_block(&a, o, d);
    uint64_t slen[RD_RING_NODES_MAX], rlen[RD_RING_NODES_MAX], total = 0, longest = 0;
    for (int q = 0; q < N; q++)
        for (int u = 0; u < N - 1; u++) {
            uint64_t len = 0;
            for (int d = 1; d <= N - 1 - u; d++)
                len += nb[mod(q - u, N) * N + mod(q + d, N)];
            longest = len > longest ? len : longest;
            if (q == P)
                slen[u] = len;
            if (q == mod(P - 1, N))
                rlen[u] = len;
        }
    free(nb);
    for (int u = 0; u < N - 1; u++)
        total += (u == 0 ? slen[u] : 0) + rlen[u];
    uint8_t *W = scratch(x, total > 0 ? total * esz : 1);
    if (W == NULL) {
        free(a.sd);
        return no_memory(t, total * esz);
    }
    /* One rank on each end of two nodes: the block to send is a slice of its input and the one
     * received a slice of its output: they go straight from and into them. */
    int direct = N == 2 && a.L == 1;
    /* round 0's bundle: this node's blocks for the others, farthest first */
    uint8_t *at = W;
    for (int d = N - 1; d >= 1 && !direct; d--)
        at = a2a_pack(&a, mod(P + d, N), at);
    a2a_local(&a);
    plan p;
    memset(&p, 0, sizeof(p));
    uint8_t *recv[RD_RING_NODES_MAX];
    for (int u = 0; u < N - 1; u++) {
        recv[u] = at;
        at += rlen[u] * esz;
        p.send[u] =
            (send_step){.src = u == 0 ? W : recv[u - 1], .len = slen[u] * esz, .dep = u - 1};
        p.recv[u] = (recv_step){.dst = recv[u], .len = rlen[u] * esz};
    }
    if (direct) {
        int other = mod(P + 1, N);
        p.send[0].src = mb->in[0] + a.sd[a.first[other]] * esz;
        p.recv[0].dst = mb->out[0] + a.rd[a.first[other]] * esz;
    }
    p.nsend = p.nrecv = N - 1;
    p.maxlen = longest * esz; /* the bundles differ from node to node */
    t->phase_us[RD_PHASE_STAGED] = rd_now_us();
    if (run_plan(x, t, &p, esz) != 0) {
        free(a.sd);
        return -1;
    }
    t->phase_us[RD_PHASE_MOVED] = rd_now_us();
    /* the block each round brought for this node: the last of its bundle */
    for (int u = 0; u < N - 1 && !direct; u++) {
        int o = mod(P - 1 - u, N);
        a2a_unpack(&a, o, recv[u] + (rlen[u] - a2a_block(&a, o, P)) * esz);
    }
    free(a.sd);
    return 0;
}

/* One other node's part of a direct alltoall: the block this node sends it and the one it
 * sends here, each cut into segments with the ring's header, over the direct link between the
 * two. */
typedef struct {
    int q;                   /* its position */
    int fd;                  /* -1: waiting for the link */
    const uint8_t *src;      /* the block for it */
    uint64_t slen, sg, spos; /* its length; the next segment, and bytes of it sent (header too) */
    uint8_t *dst;            /* the block from it */
    uint64_t rlen, rg, rpos;
    uint8_t shdr[RD_SEG_HEADER], rhdr[RD_SEG_HEADER];
    uint8_t stag[RD_SEAL_TAG], rtag[RD_SEAL_TAG];
    int blocked; /* send: waiting for POLLOUT */
    int staged;  /* send: segment sg's header (and sealed payload) are made, none of it sent */
} pair_part;

/* Frames of a block of len bytes: at least one, so that each end hears from the other on the
 * link itself before its part is done (a link the other end closed is found closed, never
 * written into and left for done). */
static uint64_t pair_frames(uint64_t len, uint64_t seg)
{
    return len == 0 ? 1 : step_segments(len, seg);
}

static int pair_done(const pair_part *pp, uint64_t seg)
{
    return pp->sg >= pair_frames(pp->slen, seg) && pp->rg >= pair_frames(pp->rlen, seg);
}

/* Sends and receives what the link with pp->q can move now. Returns 1 on progress, 0 when
 * waiting, -1 when the link failed (why set). A frame that is not the one expected fails the
 * task: *fatal is then the status to fail it with. */
static int pair_move(rd_xfer *x, rd_xfer_task *t, pair_part *pp, uint64_t seg, int *fatal,
                     char *why, size_t whylen)
{
    int progress = 0;
    uint64_t ns = pair_frames(pp->slen, seg), nr = pair_frames(pp->rlen, seg);
    rd_seal *sl = &x->pair_seal[pp->q]; /* the thread's while the alltoall runs */
    size_t taglen = sl->cipher != RD_CIPHER_NONE ? RD_SEAL_TAG : 0;
    while (pp->sg < ns) {
        uint64_t off = pp->sg * seg, len = pp->slen - off < seg ? pp->slen - off : seg;
        if (!pp->staged) {
            rd_seg h = {(uint32_t)len, x->cfg.generation, t->seq, pp->sg};
            rd_seg_encode(&h, pp->shdr);
            if (taglen != 0 && rd_seal_seal(sl->cipher, &sl->tx, x->pair_box[pp->q], pp->stag,
                                            pp->src + off, len, pp->shdr, RD_SEG_HEADER) != 0) {
                snprintf(why, whylen, "sealing a segment failed (out of memory)");
                *fatal = RINGD_E_NOMEM; /* not the link's fault: no redial helps */
                return -1;
            }
            pp->staged = 1;
        }
        ssize_t w = frame_write(pp->fd, pp->shdr, taglen ? x->pair_box[pp->q] : pp->src + off, len,
                                pp->stag, taglen, pp->spos);
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            pp->blocked = 1;
            break;
        }
        if (w < 0) {
            snprintf(why, whylen, "send: %s", strerror(errno));
            return -1;
        }
        progress = 1;
        pp->blocked = 0;
        pp->spos += (uint64_t)w;
        if (pp->spos == RD_SEG_HEADER + len + taglen) {
            atomic_fetch_add_explicit(&x->pair_bytes, len, memory_order_relaxed);
            pp->spos = 0;
            pp->staged = 0;
            pp->sg++;
        }
    }
    while (pp->rg < nr) {
        uint64_t off = pp->rg * seg, len = pp->rlen - off < seg ? pp->rlen - off : seg;
        ssize_t got = frame_read(pp->fd, pp->rhdr, pp->dst + off, len, pp->rtag, taglen, pp->rpos);
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (got <= 0) {
            snprintf(why, whylen, "%s", got == 0 ? "closed by the peer" : strerror(errno));
            return -1;
        }
        progress = 1;
        uint64_t before = pp->rpos;
        pp->rpos += (uint64_t)got;
        if (before < RD_SEG_HEADER && pp->rpos >= RD_SEG_HEADER) {
            int wrong = frame_check(pp->rhdr, x->cfg.generation, t->seq, pp->rg, len, why, whylen);
            if (wrong != 0) {
                *fatal = wrong;
                return -1;
            }
        }
        if (pp->rpos == RD_SEG_HEADER + len + taglen) {
            if (taglen != 0 && seg_open(x->names[pp->q], sl->cipher, &sl->rx, pp->dst + off, len,
                                        pp->rtag, pp->rhdr, t) != 0) {
                snprintf(why, whylen, "sent a segment that fails authentication");
                *fatal = t->status;
                return -1;
            }
            atomic_fetch_add_explicit(&x->pair_bytes, len, memory_order_relaxed);
            pp->rpos = 0;
            pp->rg++;
        }
    }
    return progress;
}

/* No direct link wanted any more. */
static void pairs_unwant(rd_xfer *x)
{
    for (int w = 0; w < (RD_RING_NODES_MAX + 63) / 64; w++)
        atomic_store(&x->wanted[w], 0);
}

/* 1 when some direct link is wanted. */
static int pairs_wanted_any(rd_xfer *x)
{
    for (int w = 0; w < (RD_RING_NODES_MAX + 63) / 64; w++)
        if (atomic_load(&x->wanted[w]) != 0)
            return 1;
    return 0;
}

/* Takes up the links the loop handed in, for the parts without one (at the start of an
 * alltoall, or once theirs closed: a node's part starts again on the new link), and asks for
 * those still missing: the loop hears it through the completion wake-up. A part that still has
 * its link reads it to the end: a new link that came meanwhile was made by the other end for its
 * next alltoall (it closed the old one after sending this one's blocks on it), and waits. */
static void pairs_take(rd_xfer *x, pair_part *parts, int np)
{
    uint64_t want[(RD_RING_NODES_MAX + 63) / 64] = {0};
    pthread_mutex_lock(&x->lock);
    for (int i = 0; i < np; i++) {
        pair_part *pp = &parts[i];
        if (x->pair_next[pp->q] >= 0 && pp->fd < 0) {
            if (x->pair_fd[pp->q] >= 0)
                close(x->pair_fd[pp->q]);
            x->pair_fd[pp->q] = x->pair_next[pp->q];
            x->pair_seal[pp->q] = x->pair_next_seal[pp->q];
            rd_seal_wipe(&x->pair_next_seal[pp->q]);
            x->pair_next[pp->q] = -1;
            pp->sg = pp->spos = pp->rg = pp->rpos = 0;
            pp->staged = 0;
            pp->blocked = 0;
        }
        pp->fd = x->pair_fd[pp->q];
        if (pp->fd < 0)
            want[pp->q / 64] |= 1ull << (pp->q % 64);
    }
    /* published under the lock that rd_xfer_pair clears a bit under: a link handed in meanwhile
     * is never asked for again */
    int changed = 0, any = 0;
    for (int w = 0; w < (RD_RING_NODES_MAX + 63) / 64; w++) {
        changed |= atomic_exchange(&x->wanted[w], want[w]) != want[w];
        any |= want[w] != 0;
    }
    int tell = changed && any;
    pthread_mutex_unlock(&x->lock);
    if (tell) {
        uint64_t one = 1;
        ssize_t w = write(x->efd, &one, sizeof(one));
        (void)w;
    }
}

/* Exchanges the blocks of parts[0..np) over the direct links, waiting for links the loop opens;
 * a link that fails is dropped and its node's part starts again on the next one (a node that
 * closed its links to make room in its pool connects again). Returns 0, or -1 with t failed
 * when nothing moved for --peer-timeout, or a frame was wrong. */
static int pairs_exchange(rd_xfer *x, rd_xfer_task *t, pair_part *parts, int np, uint64_t seg)
{
    for (int i = 0; i < np && x->sealed; i++) {
        int q = parts[i].q;
        if (x->pair_box_len[q] >= seg)
            continue;
        free(x->pair_box[q]);
        x->pair_box[q] = malloc(seg);
        x->pair_box_len[q] = x->pair_box[q] != NULL ? seg : 0;
        if (x->pair_box[q] == NULL)
            return no_memory(t, seg);
    }
    pthread_mutex_lock(&x->lock);
    x->pairs_busy = 1;
    x->pairs_used_ms = rd_now_ms();
    pthread_mutex_unlock(&x->lock);
    int handed = atomic_load(&x->pairs_handed), rc = 0;
    pairs_take(x, parts, np);
    int64_t last = rd_now_us();
    for (;;) {
        int progress = 0, pending = 0, waiting = -1, stuck = -1;
        if (atomic_load(&x->pairs_handed) != handed) {
            handed = atomic_load(&x->pairs_handed);
            pairs_take(x, parts, np);
        }
        for (int i = 0; i < np; i++) {
            pair_part *pp = &parts[i];
            if (pair_done(pp, seg))
                continue;
            pending = 1;
            if (pp->fd < 0) {
                waiting = pp->q;
                continue;
            }
            stuck = pp->q;
            char why[256];
            int fatal = 0, m = pair_move(x, t, pp, seg, &fatal, why, sizeof(why));
            if (m < 0 && fatal) {
                fail_task(t, (rd_status)fatal,
                          "node %s %s on the direct link; the ring must re-form", x->names[pp->q],
                          why);
                rc = -1;
                break;
            }
            if (m < 0) { /* dropped: its node's part starts again on the next link */
                rd_log(RD_LOG_DEBUG, "xfer", "direct link with node %s: %s; waiting for another",
                       x->names[pp->q], why);
                pthread_mutex_lock(&x->lock);
                close(x->pair_fd[pp->q]);
                x->pair_fd[pp->q] = -1;
                rd_seal_wipe(&x->pair_seal[pp->q]);
                pthread_mutex_unlock(&x->lock);
                pp->fd = -1;
                pp->sg = pp->spos = pp->rg = pp->rpos = 0;
                pp->staged = 0;
                pairs_take(x, parts, np); /* not progress: a link that keeps closing times out */
                continue;
            }
            progress |= m;
        }
        if (rc != 0 || !pending)
            break;
        /* a retiring data plane gets no new links: the ring moved on */
        if (atomic_load(&x->stopping) || atomic_load(&x->cut) ||
            (waiting >= 0 && atomic_load(&x->retiring))) {
            fail_task(t, RINGD_E_MEMBERSHIP, "the ring is being re-formed");
            rc = -1;
            break;
        }
        int64_t now = rd_now_us();
        if (progress) {
            last = now;
            continue;
        }
        if (now - last < RD_XFER_SPIN_US) {
            sched_yield();
            continue;
        }
        struct pollfd pf[RD_RING_NODES_MAX];
        int n = 0;
        for (int i = 0; i < np; i++) {
            pair_part *pp = &parts[i];
            if (pp->fd >= 0 && !pair_done(pp, seg))
                pf[n++] = (struct pollfd){.fd = pp->fd,
                                          .events = (short)(POLLIN | (pp->blocked ? POLLOUT : 0))};
        }
        int left = (int)(x->cfg.timeout_ms - (now - last) / 1000);
        if (left <= 0) {
            if (waiting >= 0)
                fail_task(t, RINGD_E_MEMBERSHIP,
                          "no direct link with node %s came within %lld ms (%s)", x->names[waiting],
                          (long long)x->cfg.timeout_ms, rd_coll_name(t->coll));
            else
                fail_task(t, RINGD_E_MEMBERSHIP,
                          "no progress on the direct link with node %s for %lld ms (%s)",
                          stuck >= 0 ? x->names[stuck] : "?", (long long)x->cfg.timeout_ms,
                          rd_coll_name(t->coll));
            rc = -1;
            break;
        }
        /* links still to come are handed in by the loop: look again within 10 ms */
        int wait = waiting >= 0 ? 10 : (left > 100 ? 100 : left);
        if (poll(pf, (nfds_t)n, wait) < 0 && errno != EINTR) {
            fail_task(t, RINGD_E_MEMBERSHIP, "poll: %s", strerror(errno));
            rc = -1;
            break;
        }
    }
    pthread_mutex_lock(&x->lock);
    x->pairs_busy = x->pairs_held;
    pthread_mutex_unlock(&x->lock);
    pairs_unwant(x);
    return rc;
}

/* Alltoall straight between every two nodes (do_alltoall's layout of a node's block for
 * another): this node's blocks for the others are packed, exchanged over the direct links,
 * and unpacked into its ranks' outputs; the blocks between its own ranks are copied directly. */
static int do_alltoall_direct(rd_xfer *x, rd_xfer_task *t)
{
    int N = x->cfg.nnodes, P = x->cfg.position;
    a2a_layout a;
    if (a2a_layout_init(x, t, &a) != 0)
        return -1;
    pair_part parts[RD_RING_NODES_MAX];
    uint64_t total = 0;
    int np = 0;
    for (int q = 0; q < N; q++) {
        if (q == P)
            continue;
        uint64_t out = a2a_block(&a, P, q), in = a2a_block(&a, q, P);
        if (out == 0 && in == 0)
            continue; /* nothing to move: no link needed */
        parts[np++] = (pair_part){.q = q, .fd = -1, .slen = out * a.esz, .rlen = in * a.esz};
        total += out + in;
    }
    uint8_t *W = scratch(x, total > 0 ? total * a.esz : 1);
    if (W == NULL) {
        free(a.sd);
        return no_memory(t, total * a.esz);
    }
    uint8_t *at = W;
    for (int i = 0; i < np; i++) {
        parts[i].src = at;
        at = a2a_pack(&a, parts[i].q, at);
    }
    for (int i = 0; i < np; i++) {
        parts[i].dst = at;
        at += parts[i].rlen;
    }
    a2a_local(&a);
    uint64_t seg = task_segment(x, t) / a.esz * a.esz;
    t->phase_us[RD_PHASE_STAGED] = rd_now_us();
    if (np > 0 && pairs_exchange(x, t, parts, np, seg) != 0) {
        free(a.sd);
        return -1;
    }
    t->phase_us[RD_PHASE_MOVED] = rd_now_us();
    for (int i = 0; i < np; i++)
        a2a_unpack(&a, parts[i].q, parts[i].dst);
    free(a.sd);
    return 0;
}

/* The largest power of two not above n (n >= 1). */
static int pow2_floor(int n)
{
    int p = 1;
    while (p <= n / 2)
        p *= 2;
    return p;
}

/* k, where a recursive doubling of an N-node ring runs over 2^k virtual nodes: its exchanges
 * besides the folds. */
static int hypercube_dims(int N)
{
    int k = 0;
    for (int d = 1; d < pow2_floor(N); d *= 2)
        k++;
    return k;
}

/* Direct links a recursive doubling of an N-node ring needs on each node, at most: one per
 * doubling, and one more where N is not a power of two (the pairs that fold first). */
static int doubling_links(int N)
{
    return hypercube_dims(N) + (N != pow2_floor(N));
}

/* Exchanges a recursive doubling of an N-node ring makes one after the other: one per doubling,
 * and two more where pairs fold (the fold in before, the result out after). */
static int doubling_steps(int N)
{
    return hypercube_dims(N) + 2 * (N != pow2_floor(N));
}

/* Recursive doubling on N = 2^k + r nodes runs over 2^k virtual nodes: the first 2r nodes fold
 * in pairs (the odd one of each stands for both), the others stand for themselves. The node
 * that stands for virtual node v: */
static int fold_node(int v, int r)
{
    return v < r ? 2 * v + 1 : v + r;
}

/* The first node virtual node v stands for (v up to 2^k: the ring's length), so that virtual
 * nodes [a, b) stand for nodes [fold_first(a), fold_first(b)). */
static int fold_first(int v, int r)
{
    return v < r ? 2 * v : v + r;
}

/* The virtual node node P stands for, or -1 for the even one of a folding pair. */
static int fold_vnode(int P, int r)
{
    if (P < 2 * r)
        return P % 2 ? P / 2 : -1;
    return P - r;
}

/* 1 when the collective t of bytes bytes (an allreduce's vector, a broadcast's, an allgather's
 * gathered buffer, a reducescatter's vector), which takes ring_steps steps round the ring, goes
 * by recursive doubling (or halving): as small as its order says (the coordinator's
 * --doubling-bytes, in the order's tuning), in fewer exchanges one after the other than the
 * ring's steps (a broadcast, allgather or reducescatter of 3 or 5 nodes is no shorter: the
 * folds add two), and the direct-link pool large enough (--pair-links, the same on every
 * node). The same answer on every node. */
static int doubling_fits(const rd_xfer *x, const rd_xfer_task *t, uint64_t bytes, int ring_steps)
{
    return x->cfg.nnodes >= 3 && bytes > 0 && bytes <= t->doubling_bytes &&
           doubling_steps(x->cfg.nnodes) < ring_steps &&
           doubling_links(x->cfg.nnodes) <= x->cfg.pair_links;
}

/* Sends len bytes of src to the node at position q and receives rlen bytes from it into dst,
 * over the direct link between the two (either length may be 0, its buffer still valid).
 * Returns 0, or -1 with t failed. */
static int doubling_swap(rd_xfer *x, rd_xfer_task *t, int q, const uint8_t *src, uint64_t len,
                         uint8_t *dst, uint64_t rlen, uint64_t seg)
{
    pair_part pp = {.q = q, .fd = -1, .src = src, .slen = len, .dst = dst, .rlen = rlen};
    return pairs_exchange(x, t, &pp, 1, seg);
}

/* Allreduce by recursive doubling over the direct links, for small and middle sizes: log2 N
 * exchanges of the whole vector where the ring takes 2(N - 1) steps. When N is not a power of
 * two, the first 2r nodes (r = N - 2^k) fold in pairs beforehand: each even one hands its vector
 * to the odd one after it, which stands for both, and gets the result back at the end. Both
 * nodes of an exchange reduce the lower half's partial with the higher half's, in that order,
 * so every node ends with the same bits. */
static int doubling_run(rd_xfer *x, rd_xfer_task *t, uint64_t total)
{
    int N = x->cfg.nnodes, P = x->cfg.position, L = (int)x->local_sizes[P];
    size_t esz = rd_dtype_size(t->dtype);
    uint64_t bytes = total * esz;
    int p2 = pow2_floor(N), r = N - p2, v = fold_vnode(P, r);
    int folds = v < 0; /* hands its vector on: receives no partner's */
    int in_place = t->nmembers == 1 && L == 1 && t->args.prescale == 1.0;
    uint8_t *W = in_place ? t->members[0].out[0] : scratch(x, bytes);
    uint8_t *R = folds ? W : partner_buf(x, bytes);
    if (W == NULL || R == NULL)
        return no_memory(t, bytes);
    if (in_place) {
        if (W != t->members[0].in[0])
            t->backend->copy(W, t->members[0].in[0], bytes);
    } else {
        members_reduce(t, W, L, esz);
    }
    rd_reduce_args mid = RD_REDUCE_ARGS_INIT, fin = RD_REDUCE_ARGS_INIT;
    fin.postscale = t->args.postscale;
    fin.divisor = t->args.divisor;
    uint64_t seg = task_segment(x, t) / esz * esz;
    t->phase_us[RD_PHASE_STAGED] = rd_now_us();
    if (folds) { /* into P + 1, which hands the result back */
        if (doubling_swap(x, t, P + 1, W, bytes, R, 0, seg) != 0 ||
            doubling_swap(x, t, P + 1, W, 0, W, bytes, seg) != 0)
            return -1;
        t->phase_us[RD_PHASE_SCATTERED] = t->phase_us[RD_PHASE_MOVED] = rd_now_us();
        goto out;
    }
    if (P < 2 * r) {
        if (doubling_swap(x, t, P - 1, W, 0, R, bytes, seg) != 0)
            return -1;
        const void *src[2] = {R, W}; /* P - 1 is the lower */
        t->backend->reduce(t->dtype, t->redop, W, src, 2, total, &mid);
    }
    for (int d = 1; d < p2; d *= 2) {
        int pv = v ^ d, q = fold_node(pv, r);
        if (doubling_swap(x, t, q, W, bytes, R, bytes, seg) != 0)
            return -1;
        const void *lo_hi[2] = {W, R}, *hi_lo[2] = {R, W};
        t->backend->reduce(t->dtype, t->redop, W, v < pv ? lo_hi : hi_lo, 2, total,
                           2 * d >= p2 ? &fin : &mid);
    }
    t->phase_us[RD_PHASE_SCATTERED] = rd_now_us();
    if (P < 2 * r && doubling_swap(x, t, P - 1, W, bytes, R, 0, seg) != 0)
        return -1;
    t->phase_us[RD_PHASE_MOVED] = rd_now_us();
out:
    if (!in_place)
        members_write_back(t, W, L, esz);
    return 0;
}

static int allreduce_doubling(rd_xfer *x, rd_xfer_task *t, void *total)
{
    return doubling_run(x, t, *(const uint64_t *)total);
}

/* Broadcast by a binomial tree over recursive doubling's virtual nodes and links: the nodes
 * that hold the data double at each exchange, log2 N of them where the ring takes N - 1 steps.
 * A root that folds first hands the data to the node that stands for it; each folding node
 * gets it from that node last. */
static int broadcast_doubling(rd_xfer *x, rd_xfer_task *t, void *arg)
{
    const bcast_at *b = arg;
    int N = x->cfg.nnodes, P = x->cfg.position;
    int p2 = pow2_floor(N), r = N - p2, v = fold_vnode(P, r), vroot = fold_vnode(b->rp, r);
    uint64_t seg = task_segment(x, t) / rd_dtype_size(t->dtype) * rd_dtype_size(t->dtype);
    uint8_t none[1];
    if (vroot < 0) { /* the root folds: into the node after it */
        vroot = fold_vnode(b->rp + 1, r);
        if (P == b->rp)
            return doubling_swap(x, t, P + 1, b->src, b->bytes, none, 0, seg);
        if (P == b->rp + 1 && doubling_swap(x, t, P - 1, none, 0, b->dst, b->bytes, seg) != 0)
            return -1;
    }
    for (int d = 1; v >= 0 && d < p2; d *= 2) {
        int u = v ^ vroot, q = fold_node(v ^ d, r); /* u < d: holds the data by now */
        if (u < d && doubling_swap(x, t, q, b->src, b->bytes, none, 0, seg) != 0)
            return -1;
        if (u >= d && u < 2 * d && doubling_swap(x, t, q, none, 0, b->dst, b->bytes, seg) != 0)
            return -1;
    }
    if (P < 2 * r && v >= 0 && P - 1 != b->rp)
        return doubling_swap(x, t, P - 1, b->src, b->bytes, none, 0, seg);
    if (P < 2 * r && v < 0 && P != b->rp)
        return doubling_swap(x, t, P + 1, none, 0, b->dst, b->bytes, seg);
    return 0;
}

/* Allgather by recursive doubling: at each exchange a virtual node swaps the nodes' blocks it
 * holds (those of the virtual nodes of its half so far, contiguous in the gathered buffer) with
 * its partner, log2 N exchanges where the ring takes N - 1 steps. A folding node hands its
 * block to the node after it first and gets the whole buffer from it last. */
static int allgather_doubling(rd_xfer *x, rd_xfer_task *t, void *arg)
{
    const gather_at *g = arg;
    int N = x->cfg.nnodes, P = x->cfg.position;
    int p2 = pow2_floor(N), r = N - p2, v = fold_vnode(P, r);
    size_t esz = rd_dtype_size(t->dtype);
    uint64_t seg = task_segment(x, t) / esz * esz;
    const uint64_t *off = g->off;
    uint8_t *W = g->W, none[1];
    if (v < 0)
        return doubling_swap(x, t, P + 1, W + off[P] * esz, (off[P + 1] - off[P]) * esz, none, 0,
                             seg) != 0 ||
                       doubling_swap(x, t, P + 1, none, 0, W, off[N] * esz, seg) != 0
                   ? -1
                   : 0;
    if (P < 2 * r && doubling_swap(x, t, P - 1, none, 0, W + off[P - 1] * esz,
                                   (off[P] - off[P - 1]) * esz, seg) != 0)
        return -1;
    for (int d = 1; d < p2; d *= 2) {
        int pv = v ^ d, mine = v & ~(d - 1), theirs = pv & ~(d - 1);
        uint64_t so = off[fold_first(mine, r)], se = off[fold_first(mine + d, r)];
        uint64_t ro = off[fold_first(theirs, r)], re = off[fold_first(theirs + d, r)];
        if (doubling_swap(x, t, fold_node(pv, r), W + so * esz, (se - so) * esz, W + ro * esz,
                          (re - ro) * esz, seg) != 0)
            return -1;
    }
    if (P < 2 * r)
        return doubling_swap(x, t, P - 1, W, off[N] * esz, none, 0, seg);
    return 0;
}

/* Reducescatter by recursive halving: at each exchange a virtual node keeps the half of the
 * nodes' blocks it holds that has its own, sends its partner the other half and reduces the
 * partner's partial of its own half into it (the lower virtual node's partial first, so the
 * bits do not depend on who reduces), log2 N exchanges where the ring takes N - 1 steps and
 * the same bytes. A folding node hands its whole vector to the node after it first (which
 * reduces it, the folding node's first) and gets its own block back, finished, last. */
static int reducescatter_halving(rd_xfer *x, rd_xfer_task *t, void *arg)
{
    const scatter_at *sa = arg;
    int N = x->cfg.nnodes, P = x->cfg.position;
    int p2 = pow2_floor(N), r = N - p2, v = fold_vnode(P, r);
    size_t esz = rd_dtype_size(t->dtype);
    uint64_t seg = task_segment(x, t) / esz * esz;
    const uint64_t *off = sa->off;
    uint8_t *W = sa->W, *R = sa->R, none[1];
    rd_reduce_args mid = RD_REDUCE_ARGS_INIT, fin = RD_REDUCE_ARGS_INIT;
    fin.postscale = t->args.postscale;
    fin.divisor = t->args.divisor;
    if (v < 0)
        return doubling_swap(x, t, P + 1, W, off[N] * esz, none, 0, seg) != 0 ||
                       doubling_swap(x, t, P + 1, none, 0, W + off[P] * esz,
                                     (off[P + 1] - off[P]) * esz, seg) != 0
                   ? -1
                   : 0;
    if (P < 2 * r) {
        if (doubling_swap(x, t, P - 1, none, 0, R, off[N] * esz, seg) != 0)
            return -1;
        const void *src[2] = {R, W}; /* P - 1 is the lower */
        t->backend->reduce(t->dtype, t->redop, W, src, 2, off[N], &mid);
    }
    for (int d = p2 / 2; d >= 1; d /= 2) {
        int pv = v ^ d, keep = v & ~(d - 1), give = pv & ~(d - 1);
        uint64_t ko = off[fold_first(keep, r)], ke = off[fold_first(keep + d, r)];
        uint64_t go = off[fold_first(give, r)], ge = off[fold_first(give + d, r)];
        if (doubling_swap(x, t, fold_node(pv, r), W + go * esz, (ge - go) * esz, R, (ke - ko) * esz,
                          seg) != 0)
            return -1;
        const void *lo_hi[2] = {W + ko * esz, R}, *hi_lo[2] = {R, W + ko * esz};
        t->backend->reduce(t->dtype, t->redop, W + ko * esz, v < pv ? lo_hi : hi_lo, 2, ke - ko,
                           d == 1 ? &fin : &mid);
    }
    t->phase_us[RD_PHASE_SCATTERED] = rd_now_us();
    if (P < 2 * r)
        return doubling_swap(x, t, P - 1, W + off[P - 1] * esz, (off[P] - off[P - 1]) * esz, none,
                             0, seg);
    return 0;
}

/* body(x, t, arg) with the direct links held busy throughout: the pool (pairs_make_room on the
 * loop) closes none of them between a recursive doubling's exchanges. */
static int doubling_held(rd_xfer *x, rd_xfer_task *t,
                         int (*body)(rd_xfer *, rd_xfer_task *, void *), void *arg)
{
    pthread_mutex_lock(&x->lock);
    x->pairs_held = x->pairs_busy = 1;
    pthread_mutex_unlock(&x->lock);
    int rc = body(x, t, arg);
    pthread_mutex_lock(&x->lock);
    x->pairs_held = x->pairs_busy = 0;
    pthread_mutex_unlock(&x->lock);
    return rc;
}

/* An allreduce: by recursive doubling when it is small enough, else round the ring. */
static int allreduce(rd_xfer *x, rd_xfer_task *t)
{
    uint64_t total = 0;
    for (size_t m = 0; m < t->nmembers; m++)
        total += t->members[m].count;
    return doubling_fits(x, t, total * rd_dtype_size(t->dtype), 2 * (x->cfg.nnodes - 1))
               ? doubling_held(x, t, allreduce_doubling, &total)
               : do_allreduce(x, t);
}

static void run_task(rd_xfer *x, rd_xfer_task *t)
{
    t->status = RINGD_OK;
    t->message[0] = '\0';
    memset(t->phase_us, 0, sizeof(t->phase_us));
    t->phase_us[RD_PHASE_BEGIN] = rd_now_us();
    if (atomic_load(&x->broken)) {
        t->status = RINGD_E_MEMBERSHIP;
        snprintf(t->message, sizeof(t->message), "%s", x->broken_why);
        return;
    }
    int rc;
    switch (t->coll) {
    case RD_COLL_ALLREDUCE: rc = allreduce(x, t); break;
    case RD_COLL_BROADCAST: rc = do_broadcast(x, t); break;
    case RD_COLL_ALLGATHER:
    case RD_COLL_ALLGATHERV: rc = do_allgather(x, t); break;
    case RD_COLL_REDUCESCATTER: rc = do_reducescatter(x, t); break;
    case RD_COLL_ALLTOALL:
        rc = x->cfg.nnodes >= 3 && x->cfg.nnodes - 1 <= x->cfg.pair_links ? do_alltoall_direct(x, t)
                                                                          : do_alltoall(x, t);
        break;
    default: rc = 0; break;
    }
    t->phase_us[RD_PHASE_END] = rd_now_us();
    /* Any failure mid-collective leaves the nodes out of step: the ring must re-form. */
    if (rc != 0) {
        snprintf(x->broken_why, sizeof(x->broken_why), "%s", t->message);
        atomic_store(&x->broken, 1);
        rd_log(RD_LOG_WARN, "xfer", "ring of generation %llu broken: %s",
               (unsigned long long)x->cfg.generation, t->message);
    }
}

/* Hands a finished task to the loop. */
static void post_done(rd_xfer *x, rd_xfer_task *t)
{
    pthread_mutex_lock(&x->lock);
    t->next = NULL;
    if (x->done_tail != NULL)
        x->done_tail->next = t;
    else
        x->done_head = t;
    x->done_tail = t;
    pthread_mutex_unlock(&x->lock);
    uint64_t one = 1;
    ssize_t w = write(x->efd, &one, sizeof(one));
    (void)w;
}

/* Thread, retiring: fails what is still queued, in order, and says it is done. */
static void retire(rd_xfer *x)
{
    pthread_mutex_lock(&x->lock);
    rd_xfer_task *t = x->head;
    x->head = x->tail = NULL;
    pthread_mutex_unlock(&x->lock);
    while (t != NULL) {
        rd_xfer_task *next = t->next;
        t->status = x->retire_status;
        snprintf(t->message, sizeof(t->message), "%s", x->retire_why);
        post_done(x, t);
        t = next;
    }
    /* The wake-up is written under the lock: once the loop sees exited, it may free x at once. */
    pthread_mutex_lock(&x->lock);
    x->exited = 1;
    uint64_t one = 1;
    ssize_t w = write(x->efd, &one, sizeof(one));
    (void)w;
    pthread_mutex_unlock(&x->lock);
}

static void *thread_main(void *arg)
{
    rd_xfer *x = arg;
    int64_t last = rd_now_us();
    for (;;) {
        if (atomic_load_explicit(&x->queued, memory_order_acquire) == 0 &&
            !atomic_load(&x->stopping) && !atomic_load(&x->retiring)) {
            if (rd_now_us() - last < x->cfg.poll_us) {
                sched_yield();
                continue;
            }
            pthread_mutex_lock(&x->lock);
            x->sleeping = 1;
            while (x->head == NULL && !atomic_load(&x->stopping) && !atomic_load(&x->retiring))
                pthread_cond_wait(&x->cond, &x->lock);
            x->sleeping = 0;
            pthread_mutex_unlock(&x->lock);
        }
        if (atomic_load(&x->stopping))
            break;
        if (atomic_load(&x->retiring)) {
            retire(x);
            break;
        }
        pthread_mutex_lock(&x->lock);
        rd_xfer_task *t = x->head;
        if (t != NULL) {
            x->head = t->next;
            if (x->head == NULL)
                x->tail = NULL;
            atomic_fetch_sub(&x->queued, 1);
        }
        pthread_mutex_unlock(&x->lock);
        if (t == NULL)
            continue;
        run_task(x, t);
        post_done(x, t);
        last = rd_now_us();
    }
    return NULL;
}

static void on_done(evutil_socket_t fd, short what, void *arg)
{
    rd_xfer *x = arg;
    uint64_t n;
    ssize_t r = read(fd, &n, sizeof(n));
    (void)r;
    (void)what;
    for (;;) {
        pthread_mutex_lock(&x->lock);
        rd_xfer_task *t = x->done_head;
        if (t != NULL) {
            x->done_head = t->next;
            if (x->done_head == NULL)
                x->done_tail = NULL;
        }
        pthread_mutex_unlock(&x->lock);
        if (t == NULL)
            break;
        x->done(x->arg, t);
    }
    pthread_mutex_lock(&x->lock);
    int exited = x->exited && x->done_head == NULL;
    pthread_mutex_unlock(&x->lock);
    if (!exited && pairs_wanted_any(x) && x->cfg.pairs_wanted != NULL)
        x->cfg.pairs_wanted(x->arg, x);
    if (exited && x->retired != NULL)
        x->retired(x->retired_arg, x); /* frees x */
}

/* Sets O_NONBLOCK on fd. Returns 0, or -1 with errno set. */
/* Zeroes every key x holds. */
static void seals_wipe(rd_xfer *x)
{
    for (int i = 0; i < RD_RING_CONNS_MAX; i++) {
        rd_seal_wipe(&x->send_seal[i]);
        rd_seal_wipe(&x->recv_seal[i]);
    }
    for (int q = 0; q < RD_RING_NODES_MAX; q++) {
        rd_seal_wipe(&x->pair_seal[q]);
        rd_seal_wipe(&x->pair_next_seal[q]);
    }
}

static int set_nonblocking(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

rd_xfer *rd_xfer_new(struct event_base *base, const rd_xfer_config *c, rd_xfer_done_fn done,
                     void *arg, char *err, size_t errlen)
{
    rd_xfer *x = calloc(1, sizeof(*x));
    int ok = x != NULL && c->conns >= 1 && c->conns <= RD_RING_CONNS_MAX && c->nnodes >= 2 &&
             c->nnodes <= RD_RING_NODES_MAX;
    if (ok) {
        x->cfg = *c;
        x->local_sizes = calloc((size_t)c->nnodes, sizeof(uint32_t));
        x->names = calloc((size_t)c->nnodes, sizeof(*x->names));
        ok = x->local_sizes != NULL && x->names != NULL;
    }
    for (int i = 0; ok && i < c->conns; i++)
        ok = (x->staging[i] = malloc(c->segment_size)) != NULL;
    int unsealed = -1; /* a sealed ring's connection that is not */
    if (ok)
        x->sealed = c->send_seals != NULL;
    for (int i = 0; ok && x->sealed && i < c->conns; i++)
        if (c->send_seals[i].cipher == RD_CIPHER_NONE || c->recv_seals[i].cipher == RD_CIPHER_NONE)
            ok = 0, unsealed = i;
    for (int i = 0; ok && x->sealed && i < c->conns; i++)
        ok = (x->send_box[i] = malloc(c->segment_size)) != NULL;
    if (!ok) {
        for (int i = 0; i < c->conns; i++) {
            close(c->send_fds[i]);
            close(c->recv_fds[i]);
        }
        if (unsealed >= 0)
            snprintf(err, errlen, "connection %d of a sealed ring (--encrypt) is not sealed",
                     unsealed);
        else
            snprintf(err, errlen, "cannot start a ring of %d nodes with %d connections per link",
                     c->nnodes, c->conns);
        if (x != NULL) {
            for (int i = 0; i < RD_RING_CONNS_MAX; i++) {
                free(x->staging[i]);
                free(x->send_box[i]);
            }
            free(x->local_sizes);
            free(x->names);
            free(x);
        }
        return NULL;
    }
    memcpy(x->local_sizes, c->local_sizes, (size_t)c->nnodes * sizeof(uint32_t));
    x->cfg.local_sizes = x->local_sizes;
    x->cfg.nodes = NULL;
    for (int i = 0; i < RD_RING_NODES_MAX; i++)
        x->pair_fd[i] = x->pair_next[i] = -1;
    for (int i = 0; i < c->nnodes; i++)
        snprintf(x->names[i], sizeof(x->names[i]), "%s", c->nodes != NULL ? c->nodes[i] : "?");
    snprintf(x->next_node, sizeof(x->next_node), "%s", c->next_node);
    snprintf(x->prev_node, sizeof(x->prev_node), "%s", c->prev_node);
    for (int i = 0; i < c->conns; i++) {
        x->send_fds[i] = c->send_fds[i];
        x->recv_fds[i] = c->recv_fds[i];
        if (x->sealed) {
            x->send_seal[i] = c->send_seals[i];
            x->recv_seal[i] = c->recv_seals[i];
        }
    }
    x->done = done;
    x->arg = arg;
    x->efd = -1;
    /* inited: 1 once the lock is initialised, 2 once the condition is too */
    int rc, inited = 0;
    for (int i = 0; i < c->conns; i++) { /* reads and writes below must never block */
        if (set_nonblocking(x->send_fds[i]) != 0 || set_nonblocking(x->recv_fds[i]) != 0) {
            snprintf(err, errlen, "cannot start the ring thread: fcntl O_NONBLOCK: %s",
                     strerror(errno));
            goto fail;
        }
    }
    if ((rc = pthread_mutex_init(&x->lock, NULL)) != 0) {
        snprintf(err, errlen, "cannot start the ring thread: pthread_mutex_init: %s", strerror(rc));
        goto fail;
    }
    inited = 1;
    if ((rc = pthread_cond_init(&x->cond, NULL)) != 0) {
        snprintf(err, errlen, "cannot start the ring thread: pthread_cond_init: %s", strerror(rc));
        goto fail;
    }
    inited = 2;
    x->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (x->efd < 0) {
        snprintf(err, errlen, "cannot start the ring thread: eventfd: %s", strerror(errno));
        goto fail;
    }
    x->ev = event_new(base, x->efd, EV_READ | EV_PERSIST, on_done, x);
    if (x->ev == NULL || event_add(x->ev, NULL) != 0) {
        snprintf(err, errlen, "cannot start the ring thread: cannot watch its completions");
        goto fail;
    }
    /* pthread_create returns its error; it does not set errno */
    if ((rc = pthread_create(&x->thread, NULL, thread_main, x)) != 0) {
        snprintf(err, errlen, "cannot start the ring thread: pthread_create: %s", strerror(rc));
        goto fail;
    }
    return x;

fail:
    if (x->ev != NULL)
        event_free(x->ev);
    if (x->efd >= 0)
        close(x->efd);
    for (int i = 0; i < c->conns; i++) {
        close(x->send_fds[i]);
        close(x->recv_fds[i]);
        free(x->staging[i]);
        free(x->send_box[i]);
    }
    seals_wipe(x);
    if (inited == 2)
        pthread_cond_destroy(&x->cond);
    if (inited >= 1)
        pthread_mutex_destroy(&x->lock);
    free(x->local_sizes);
    free(x->names);
    free(x);
    return NULL;
}

void rd_xfer_submit(rd_xfer *x, rd_xfer_task *t)
{
    t->seq = x->seq++;
    t->next = NULL;
    pthread_mutex_lock(&x->lock);
    if (x->tail != NULL)
        x->tail->next = t;
    else
        x->head = t;
    x->tail = t;
    atomic_fetch_add_explicit(&x->queued, 1, memory_order_release);
    if (x->sleeping)
        pthread_cond_signal(&x->cond);
    pthread_mutex_unlock(&x->lock);
}

void rd_xfer_cut(rd_xfer *x)
{
    atomic_store(&x->cut, 1);
    for (int i = 0; i < x->cfg.conns; i++) {
        shutdown(x->send_fds[i], SHUT_RDWR);
        shutdown(x->recv_fds[i], SHUT_RDWR);
    }
    pthread_mutex_lock(&x->lock);
    for (int q = 0; q < x->cfg.nnodes; q++)
        if (x->pair_fd[q] >= 0)
            shutdown(x->pair_fd[q], SHUT_RDWR);
    pthread_mutex_unlock(&x->lock);
}

void rd_xfer_free(rd_xfer *x, rd_status status, const char *why)
{
    if (x == NULL)
        return;
    pthread_mutex_lock(&x->lock);
    int exited = x->exited;
    pthread_mutex_unlock(&x->lock);
    if (exited) { /* retired: the thread only returns now; nobody needs to wait for it */
        pthread_detach(x->thread);
    } else {
        atomic_store(&x->stopping, 1);
        rd_xfer_cut(x);
        pthread_mutex_lock(&x->lock);
        pthread_cond_signal(&x->cond);
        pthread_mutex_unlock(&x->lock);
        pthread_join(x->thread, NULL); /* within one segment's work: its links are shut */
    }
    /* Reported first what finished, then what never ran, in order. */
    for (rd_xfer_task *t = x->done_head; t != NULL;) {
        rd_xfer_task *next = t->next;
        x->done(x->arg, t);
        t = next;
    }
    for (rd_xfer_task *t = x->head; t != NULL;) {
        rd_xfer_task *next = t->next;
        t->status = status;
        snprintf(t->message, sizeof(t->message), "%s", why);
        x->done(x->arg, t);
        t = next;
    }
    event_free(x->ev);
    close(x->efd);
    for (int i = 0; i < x->cfg.conns; i++) {
        close(x->send_fds[i]);
        close(x->recv_fds[i]);
        free(x->staging[i]);
        free(x->send_box[i]);
    }
    for (int q = 0; q < x->cfg.nnodes; q++) {
        if (x->pair_fd[q] >= 0)
            close(x->pair_fd[q]);
        if (x->pair_next[q] >= 0)
            close(x->pair_next[q]);
        free(x->pair_box[q]);
    }
    seals_wipe(x);
    free(x->gather);
    free(x->partner);
    free(x->scratch);
    pthread_cond_destroy(&x->cond);
    pthread_mutex_destroy(&x->lock);
    free(x->local_sizes);
    free(x->names);
    free(x);
}

void rd_xfer_retire(rd_xfer *x, rd_status status, const char *why,
                    void (*retired)(void *arg, rd_xfer *x), void *arg)
{
    x->retire_status = status;
    snprintf(x->retire_why, sizeof(x->retire_why), "%s", why);
    x->retired = retired;
    x->retired_arg = arg;
    pthread_mutex_lock(&x->lock);
    atomic_store(&x->retiring, 1);
    pthread_cond_signal(&x->cond);
    pthread_mutex_unlock(&x->lock);
}

int rd_xfer_broken(const rd_xfer *x)
{
    return atomic_load(&((rd_xfer *)x)->broken);
}

void rd_xfer_bytes(const rd_xfer *x, uint64_t *sent, uint64_t *received)
{
    *sent = atomic_load(&((rd_xfer *)x)->sent);
    *received = atomic_load(&((rd_xfer *)x)->received);
}

void rd_xfer_pair(rd_xfer *x, int q, int fd, const rd_seal *seal)
{
    if ((seal->cipher != RD_CIPHER_NONE) != x->sealed) { /* never the clear on a sealed ring */
        rd_log(RD_LOG_ERROR, "xfer", "direct link with node %s is %s, the ring's links %s; closed",
               q >= 0 && q < x->cfg.nnodes ? x->names[q] : "?",
               seal->cipher != RD_CIPHER_NONE ? "sealed" : "in the clear",
               x->sealed ? "sealed" : "not");
        close(fd);
        return;
    }
    if (q < 0 || q >= x->cfg.nnodes || q == x->cfg.position || set_nonblocking(fd) != 0) {
        close(fd);
        return;
    }
    pthread_mutex_lock(&x->lock);
    if (x->pair_next[q] >= 0)
        close(x->pair_next[q]);
    x->pair_next[q] = fd;
    x->pair_next_seal[q] = *seal;
    /* here: not to be dialled again meanwhile */
    atomic_fetch_and(&x->wanted[q / 64], ~(1ull << (q % 64)));
    atomic_fetch_add(&x->pairs_handed, 1);
    pthread_mutex_unlock(&x->lock);
}

int rd_xfer_pair_wanted(rd_xfer *x, int q)
{
    if (q < 0 || q >= RD_RING_NODES_MAX)
        return 0;
    return (atomic_load(&x->wanted[q / 64]) >> (q % 64)) & 1;
}

int rd_xfer_pairs_open(rd_xfer *x, int64_t *used_ms, int *busy)
{
    int n = 0;
    pthread_mutex_lock(&x->lock);
    for (int q = 0; q < x->cfg.nnodes; q++)
        n += (x->pair_fd[q] >= 0) + (x->pair_next[q] >= 0);
    *used_ms = x->pairs_used_ms;
    *busy = x->pairs_busy;
    pthread_mutex_unlock(&x->lock);
    return n;
}

int rd_xfer_pairs_close(rd_xfer *x)
{
    int n = 0;
    pthread_mutex_lock(&x->lock);
    for (int q = 0; q < x->cfg.nnodes && !x->pairs_busy; q++) {
        n += (x->pair_fd[q] >= 0) + (x->pair_next[q] >= 0);
        if (x->pair_fd[q] >= 0)
            close(x->pair_fd[q]);
        if (x->pair_next[q] >= 0)
            close(x->pair_next[q]);
        x->pair_fd[q] = x->pair_next[q] = -1;
        rd_seal_wipe(&x->pair_seal[q]);
        rd_seal_wipe(&x->pair_next_seal[q]);
    }
    pthread_mutex_unlock(&x->lock);
    return n;
}

uint64_t rd_xfer_pair_bytes(const rd_xfer *x)
{
    return atomic_load(&((rd_xfer *)x)->pair_bytes);
}
