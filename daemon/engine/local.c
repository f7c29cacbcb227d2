/* Local collectives: reduce straight out of the arenas in cache-sized chunks, then copy the
 * result to the other ranks while it is still in cache. */
#include "local.h"

#include <stdio.h>
#include <string.h>

/* Bytes per source handled between copies: small enough that the n inputs and the result of a
 * chunk stay in L2. */
#define RD_LOCAL_CHUNK (64u << 10)

size_t rd_local_units(const rd_local_plan *p)
{
    if (p->backend->device_memory)
        return p->coll == RD_COLL_BARRIER ? 0 : 1;
    switch (p->coll) {
    case RD_COLL_ALLREDUCE:
    case RD_COLL_BROADCAST:
    case RD_COLL_REDUCESCATTER:
    case RD_COLL_ALLGATHERV:
    case RD_COLL_ALLTOALL: return p->count;
    case RD_COLL_ALLGATHER: return (size_t)p->n * p->count;
    case RD_COLL_BARRIER: return 0;
    }
    return 0;
}

uint64_t rd_local_bytes(const rd_local_plan *p)
{
    uint64_t per = p->count * rd_dtype_size(p->dtype);
    switch (p->coll) {
    case RD_COLL_ALLREDUCE:
    case RD_COLL_BROADCAST: return per * (uint64_t)p->n;
    case RD_COLL_REDUCESCATTER:
    case RD_COLL_ALLTOALL: return per;
    case RD_COLL_ALLGATHER: return per * (uint64_t)p->n * (uint64_t)p->n;
    case RD_COLL_ALLGATHERV: return per * (uint64_t)p->n;
    case RD_COLL_BARRIER: return 0;
    }
    return 0;
}

/* Copies len bytes unless source and destination are the same place (in-place ranks). */
static void copy_if_moved(const rd_local_plan *p, uint8_t *dst, const uint8_t *src, size_t len)
{
    if (dst != src)
        p->backend->copy(dst, src, len);
}

/* Each chunk is reduced into daemon-private scratch and copied from there: an allreduce's to
 * every rank, a reducescatter's (the whole input's chunks) in parts to the ranks whose blocks
 * they are. No client can alter another rank's result by writing its own arena while the op
 * runs. */
static void run_reduced(const rd_local_plan *p, size_t begin, size_t end)
{
    size_t esz = rd_dtype_size(p->dtype);
    size_t step = RD_LOCAL_CHUNK / esz;
    uint8_t scratch[RD_LOCAL_CHUNK] __attribute__((aligned(64)));
    const void *src[p->n];

    for (size_t i = begin; i < end; i += step) {
        size_t len = end - i < step ? end - i : step;
        for (int k = 0; k < p->n; k++)
            src[k] = p->in[k] + i * esz;
        p->backend->reduce(p->dtype, p->redop, scratch, src, p->n, len, &p->args);
        if (p->coll == RD_COLL_ALLREDUCE) {
            for (int k = 0; k < p->n; k++)
                p->backend->copy(p->out[k] + i * esz, scratch, len * esz);
            continue;
        }
        uint64_t off = 0;
        for (int k = 0; k < p->n && off < i + len; off += p->counts[k], k++) {
            uint64_t lo = off > i ? off : i, hi = off + p->counts[k];
            if (hi > i + len)
                hi = i + len;
            if (lo < hi)
                p->backend->copy(p->out[k] + (lo - off) * esz, scratch + (lo - i) * esz,
                                 (hi - lo) * esz);
        }
    }
}

static void run_broadcast(const rd_local_plan *p, size_t begin, size_t end)
{
    size_t esz = rd_dtype_size(p->dtype);
    const uint8_t *src = p->in[p->root] + begin * esz;
    for (int k = 0; k < p->n; k++)
        copy_if_moved(p, p->out[k] + begin * esz, src, (end - begin) * esz);
}

/* Units are (source rank, element) pairs laid out as the gathered result. */
static void run_allgather(const rd_local_plan *p, size_t begin, size_t end)
{
    size_t esz = rd_dtype_size(p->dtype);
    while (begin < end) {
        size_t r = begin / p->count, off = begin % p->count;
        size_t len = p->count - off < end - begin ? p->count - off : end - begin;
        const uint8_t *src = p->in[r] + off * esz;
        for (int k = 0; k < p->n; k++)
            copy_if_moved(p, p->out[k] + begin * esz, src, len * esz);
        begin += len;
    }
}

/* Units are the elements of the gathered result; each rank's block comes from its input. */
static void run_allgatherv(const rd_local_plan *p, size_t begin, size_t end)
{
    size_t esz = rd_dtype_size(p->dtype);
    uint64_t off = 0;
    for (int r = 0; r < p->n && off < end; off += p->counts[r], r++) {
        uint64_t a = off > begin ? off : begin, b = off + p->counts[r];
        if (b > end)
            b = end;
        for (int k = 0; a < b && k < p->n; k++)
            copy_if_moved(p, p->out[k] + a * esz, p->in[r] + (a - off) * esz, (b - a) * esz);
    }
}

/* Units are the elements of every block, sender by sender and, within a sender's, receiver by
 * receiver (the order of the senders' inputs); each block goes from its sender's input to its
 * place in its receiver's output. */
static void run_alltoall(const rd_local_plan *p, size_t begin, size_t end)
{
    size_t esz = rd_dtype_size(p->dtype), n = (size_t)p->n;
    uint64_t below[n]; /* of each receiver: elements from the senders before this one */
    uint64_t at = 0;
    memset(below, 0, sizeof(below));
    for (size_t k = 0; k < n && at < end; k++) {
        uint64_t sent = 0; /* elements of sender k's input before this block */
        for (size_t l = 0; l < n; l++) {
            uint64_t c = p->counts[k * n + l], a = at > begin ? at : begin, b = at + c;
            if (b > end)
                b = end;
            if (a < b)
                p->backend->copy(p->out[l] + (below[l] + (a - at)) * esz,
                                 p->in[k] + (sent + (a - at)) * esz, (b - a) * esz);
            sent += c;
            below[l] += c;
            at += c;
        }
    }
}

/* Records the backend's failure of what (the first one only). */
static int device_failed(rd_local_plan *p, const char *what)
{
    if (!p->failed) {
        p->failed = 1;
        snprintf(p->why, sizeof(p->why), "%s on the device: %s", what, p->backend->error());
    }
    return -1;
}

/* A reducescatter on device memory: one kernel per rank's block, reading that block of every
 * input, in rank order. In place, a block lands where it lies (the kernel's output is one of its
 * inputs) or at the start of its rank's input, over blocks read already (the check refused that
 * form where the block would overlap its own input: the kernel would read what it wrote). */
static int device_reducescatter(rd_local_plan *p, const void **src)
{
    size_t esz = rd_dtype_size(p->dtype);
    uint64_t off = 0;
    for (int k = 0; k < p->n; off += p->counts[k], k++) {
        if (p->counts[k] == 0)
            continue;
        for (int r = 0; r < p->n; r++)
            src[r] = p->in[r] + off * esz;
        if (p->backend->reduce(p->dtype, p->redop, p->out[k], src, p->n, p->counts[k], &p->args) !=
            0)
            return device_failed(p, "reducing");
    }
    return 0;
}

/* An allgatherv on device memory: each rank's input copied to its place in every output (in
 * place, a rank's own input is there already). */
static int device_allgatherv(rd_local_plan *p)
{
    size_t esz = rd_dtype_size(p->dtype);
    uint64_t off = 0;
    for (int r = 0; r < p->n; off += p->counts[r], r++)
        for (int k = 0; k < p->n && p->counts[r] > 0; k++)
            if (p->out[k] + off * esz != p->in[r] &&
                p->backend->copy(p->out[k] + off * esz, p->in[r], p->counts[r] * esz) != 0)
                return device_failed(p, "gathering");
    return 0;
}

/* An alltoall on device memory: each block copied from its sender's input to its receiver's
 * output (never in place). */
static int device_alltoall(rd_local_plan *p)
{
    size_t esz = rd_dtype_size(p->dtype), n = (size_t)p->n;
    uint64_t below[n]; /* of each receiver: elements from the senders before this one */
    memset(below, 0, sizeof(below));
    for (size_t k = 0; k < n; k++) {
        uint64_t sent = 0;
        for (size_t l = 0; l < n; l++) {
            uint64_t c = p->counts[k * n + l];
            if (c > 0 &&
                p->backend->copy(p->out[l] + below[l] * esz, p->in[k] + sent * esz, c * esz) != 0)
                return device_failed(p, "exchanging blocks");
            sent += c;
            below[l] += c;
        }
    }
    return 0;
}

/* The whole op on device memory: reduced into rank 0's output by one kernel launch (it may be
 * rank 0's input too: in place), then copied device to device. */
static int run_device(rd_local_plan *p)
{
    size_t esz = rd_dtype_size(p->dtype), per = p->count * esz;
    const void *src[p->n];
    if (p->backend->bind != NULL && p->backend->bind(p->device) != 0)
        return device_failed(p, "using the GPU");
    switch (p->coll) {
    case RD_COLL_ALLREDUCE:
        for (int k = 0; k < p->n; k++)
            src[k] = p->in[k];
        if (p->backend->reduce(p->dtype, p->redop, p->out[0], src, p->n, p->count, &p->args) != 0)
            return device_failed(p, "reducing");
        for (int k = 1; k < p->n; k++)
            if (p->backend->copy(p->out[k], p->out[0], per) != 0)
                return device_failed(p, "copying the result");
        return 0;
    case RD_COLL_BROADCAST:
        for (int k = 0; k < p->n; k++)
            if (p->backend->copy(p->out[k], p->in[p->root], per) != 0)
                return device_failed(p, "copying the root's tensor");
        return 0;
    case RD_COLL_ALLGATHER:
        for (int r = 0; r < p->n; r++)
            for (int k = 0; k < p->n; k++)
                if (p->backend->copy(p->out[k] + (size_t)r * per, p->in[r], per) != 0)
                    return device_failed(p, "gathering");
        return 0;
    case RD_COLL_REDUCESCATTER: return device_reducescatter(p, src);
    case RD_COLL_ALLGATHERV: return device_allgatherv(p);
    case RD_COLL_ALLTOALL: return device_alltoall(p);
    case RD_COLL_BARRIER: return 0;
    }
    return 0;
}

void rd_local_run(void *plan, size_t begin, size_t end)
{
    rd_local_plan *p = plan;
    if (begin >= end)
        return;
    if (p->backend->device_memory) {
        run_device(p);
        return;
    }
    switch (p->coll) {
    case RD_COLL_ALLREDUCE:
    case RD_COLL_REDUCESCATTER: run_reduced(p, begin, end); break;
    case RD_COLL_BROADCAST: run_broadcast(p, begin, end); break;
    case RD_COLL_ALLGATHER: run_allgather(p, begin, end); break;
    case RD_COLL_ALLGATHERV: run_allgatherv(p, begin, end); break;
    case RD_COLL_ALLTOALL: run_alltoall(p, begin, end); break;
    case RD_COLL_BARRIER: break;
    }
}
