/* Control queues of frames in shared memory: single producer, single consumer, byte-granular with
 * wrap-around, indices published with release/acquire and the sleep handshake fenced. */
#include "ctlq.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QUEUE_MASK (RD_CTLQ_BYTES - 1)
#define CTRL_VERSION 1

void rd_ctrl_init(void *base)
{
    rd_ctrl *c = base;
    memset(c, 0, sizeof(*c));
    c->magic = RD_CTRL_MAGIC;
    c->version = CTRL_VERSION;
}

int rd_ctrl_valid(const void *base)
{
    const rd_ctrl *c = base;
    return c->magic == RD_CTRL_MAGIC && c->version == CTRL_VERSION;
}

void rd_ctlq_attach_producer(rd_ctlq *r, rd_ctlq_shm *shm)
{
    r->shm = shm;
    r->pos = atomic_load_explicit(&shm->head, memory_order_relaxed);
}

void rd_ctlq_attach_consumer(rd_ctlq *r, rd_ctlq_shm *shm)
{
    r->shm = shm;
    r->pos = atomic_load_explicit(&shm->tail, memory_order_relaxed);
}

/* Copies len bytes into the queue at logical position pos, wrapping. */
static void queue_write(rd_ctlq_shm *s, uint64_t pos, const uint8_t *src, size_t len)
{
    size_t off = (size_t)(pos & QUEUE_MASK), first = RD_CTLQ_BYTES - off;
    if (first > len)
        first = len;
    memcpy(s->data + off, src, first);
    memcpy(s->data, src + first, len - first);
}

static void queue_read(const rd_ctlq_shm *s, uint64_t pos, uint8_t *dst, size_t len)
{
    size_t off = (size_t)(pos & QUEUE_MASK), first = RD_CTLQ_BYTES - off;
    if (first > len)
        first = len;
    memcpy(dst, s->data + off, first);
    memcpy(dst + first, s->data, len - first);
}

rd_ctlq_status rd_ctlq_put(rd_ctlq *r, const rd_msg *msg)
{
    uint8_t buf[1024];
    size_t n = rd_frame_size(msg);
    uint64_t tail = atomic_load_explicit(&r->shm->tail, memory_order_acquire);
    uint64_t used = r->pos - tail;
    if (used > RD_CTLQ_BYTES)
        return RD_CTLQ_BROKEN;
    if (n > sizeof(buf) || n > RD_CTLQ_BYTES - used)
        return RD_CTLQ_FULL;
    rd_frame_pack(msg, buf);
    queue_write(r->shm, r->pos, buf, n);
    r->pos += n;
    atomic_store_explicit(&r->shm->head, r->pos, memory_order_release);
    return RD_CTLQ_OK;
}

int rd_ctlq_consumer_asleep(rd_ctlq *r)
{
    atomic_thread_fence(memory_order_seq_cst);
    return atomic_load_explicit(&r->shm->consumer_sleeping, memory_order_relaxed) != 0;
}

rd_ctlq_status rd_ctlq_get(rd_ctlq *r, uint32_t max_payload, rd_msg **msg, char *err, size_t errlen)
{
    uint8_t small[1024];
    uint8_t hdr[RD_FRAME_HEADER];
    uint64_t head = atomic_load_explicit(&r->shm->head, memory_order_acquire);
    uint64_t avail = head - r->pos;

    *msg = NULL;
    if (avail == 0)
        return RD_CTLQ_EMPTY;
    if (avail > RD_CTLQ_BYTES) {
        snprintf(err, errlen, "control queue holds %llu bytes, more than its %u",
                 (unsigned long long)avail, RD_CTLQ_BYTES);
        return RD_CTLQ_BROKEN;
    }
    if (avail < RD_FRAME_HEADER) {
        snprintf(err, errlen, "control queue holds a partial frame header");
        return RD_CTLQ_BROKEN;
    }
    queue_read(r->shm, r->pos, hdr, sizeof(hdr));
    uint32_t n = rd_frame_payload_len(hdr);
    if (n > max_payload || n > avail - RD_FRAME_HEADER) {
        snprintf(err, errlen, "control queue frame of %u bytes with %llu available", n,
                 (unsigned long long)(avail - RD_FRAME_HEADER));
        return RD_CTLQ_BROKEN;
    }
    /* Copy first: the producer can rewrite shared bytes while they are being decoded. */
    size_t total = RD_FRAME_HEADER + (size_t)n;
    uint8_t *buf = total <= sizeof(small) ? small : malloc(total);
    if (buf == NULL) {
        snprintf(err, errlen, "out of memory reading a %zu-byte frame", total);
        return RD_CTLQ_BROKEN;
    }
    queue_read(r->shm, r->pos, buf, total);
    memcpy(buf, hdr, sizeof(hdr)); /* the length checked above, whatever the producer did since */
    r->pos += total;
    atomic_store_explicit(&r->shm->tail, r->pos, memory_order_release);
    size_t used;
    rd_frame_status st = rd_frame_decode(buf, total, max_payload, msg, &used, err, errlen);
    if (buf != small)
        free(buf);
    return st == RD_FRAME_OK ? RD_CTLQ_OK : RD_CTLQ_BROKEN; /* NEED cannot happen: whole frame */
}

int rd_ctlq_prepare_sleep(rd_ctlq *r)
{
    atomic_store_explicit(&r->shm->consumer_sleeping, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&r->shm->head, memory_order_relaxed) != r->pos) {
        rd_ctlq_wake(r);
        return 0;
    }
    return 1;
}

void rd_ctlq_wake(rd_ctlq *r)
{
    atomic_store_explicit(&r->shm->consumer_sleeping, 0, memory_order_relaxed);
}
