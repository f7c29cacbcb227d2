/* Local collectives: reduce straight out of the arenas in cache-sized chunks, then copy the
 * result to the other ranks while it is still in cache. */
#include "local.h"

#include <string.h>

/* Bytes per source handled between copies: small enough that the n inputs and the result of a
 * chunk stay in L2. */
#define RD_LOCAL_CHUNK (64u << 10)

size_t rd_local_units(const rd_local_plan *p)
{
    switch (p->coll) {
    case RD_COLL_ALLREDUCE:
    case RD_COLL_BROADCAST: return p->count;
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
    case RD_COLL_ALLGATHER: return per * (uint64_t)p->n * (uint64_t)p->n;
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

/* Each chunk is reduced into daemon-private scratch and copied from there to every rank: no
 * client can alter another rank's result by writing its own arena while the op runs. */
static void run_allreduce(const rd_local_plan *p, size_t begin, size_t end)
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
        for (int k = 0; k < p->n; k++)
            p->backend->copy(p->out[k] + i * esz, scratch, len * esz);
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

void rd_local_run(void *plan, size_t begin, size_t end)
{
    const rd_local_plan *p = plan;
    if (begin >= end)
        return;
    switch (p->coll) {
    case RD_COLL_ALLREDUCE: run_allreduce(p, begin, end); break;
    case RD_COLL_BROADCAST: run_broadcast(p, begin, end); break;
    case RD_COLL_ALLGATHER: run_allgather(p, begin, end); break;
    case RD_COLL_BARRIER: break;
    }
}
