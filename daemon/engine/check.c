/* The checks of what a client sends, on their own: a Hello, a Submit, and a Submit against the
 * first one of its op (matching, and memory that moves alike). Pure functions: they read only
 * what they are given and write only their outputs. */
#include "check.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "frame.h"
#include "ctlq.h"

/* 1 for the collectives that take every rank's count. */
static int takes_counts(int op)
{
    return op == RD_COLL_REDUCESCATTER || op == RD_COLL_ALLGATHERV || op == RD_COLL_ALLTOALL;
}

/* The sum of a Submit's counts (wrapping: rd_check_submit bounds it before anyone relies on it). */
static uint64_t counts_sum(const rd_submit *m)
{
    uint64_t t = 0;
    for (size_t i = 0; i < m->ncounts; i++)
        t += m->counts[i];
    return t;
}

rd_op_params rd_check_params(const rd_submit *m, uint32_t size)
{
    rd_op_params p = {0};
    int reduces = m->op == RD_COLL_ALLREDUCE || m->op == RD_COLL_REDUCESCATTER;
    p.coll = (int)m->op;
    p.dtype = m->op == RD_COLL_BARRIER ? RD_DT_U8 : (int)m->dtype;
    p.redop = reduces ? (int)m->redop : RD_OP_SUM;
    p.root = m->op == RD_COLL_BROADCAST ? m->root : 0;
    p.count = m->op == RD_COLL_BARRIER ? 0 : m->count;
    p.prescale = reduces ? m->prescale : 1.0;
    p.postscale = reduces ? m->postscale : 1.0;
    p.shape = m->op == RD_COLL_BARRIER ? 0 : m->shape;
    if (takes_counts(m->op)) {
        uint64_t equal = m->count * size * (m->op == RD_COLL_ALLTOALL ? size : 1);
        int same = 1; /* counts all alike are equal counts, however they came */
        for (size_t i = 1; i < m->ncounts && same; i++)
            same = m->counts[i] == m->counts[0];
        p.count = m->ncounts > 0 ? counts_sum(m) : equal;
        p.counts_digest = m->ncounts > 0 && !same ? rd_counts_digest(m->counts, m->ncounts) : 0;
    }
    if (m->group != NULL && m->group[0] != '\0') {
        uint64_t g[3] = {rd_name_hash(m->group), m->group_size, m->group_index};
        p.group_digest = rd_counts_digest(g, 3);
    }
    return p;
}

/* An alltoall's elements from rank (its row of the matrix) or to it (its column). */
static uint64_t row_sum(const rd_submit *m, uint32_t size, uint32_t rank)
{
    uint64_t t = 0;
    for (uint32_t j = 0; j < size; j++)
        t += m->counts[(size_t)rank * size + j];
    return t;
}

static uint64_t column_sum(const rd_submit *m, uint32_t size, uint32_t rank)
{
    uint64_t t = 0;
    for (uint32_t i = 0; i < size; i++)
        t += m->counts[(size_t)i * size + rank];
    return t;
}

void rd_check_lengths(const rd_submit *m, uint32_t size, uint32_t rank, uint64_t *in_len,
                      uint64_t *out_len)
{
    uint64_t esz = rd_dtype_size((rd_dtype)m->dtype), own = m->count * esz;
    uint64_t total = rd_check_params(m, size).count * esz;
    *in_len = *out_len = own;
    if (m->op == RD_COLL_ALLGATHER)
        *out_len = own * size;
    else if (m->op == RD_COLL_REDUCESCATTER)
        *in_len = total;
    else if (m->op == RD_COLL_ALLGATHERV)
        *out_len = total;
    else if (m->op == RD_COLL_ALLTOALL && m->ncounts == 0)
        *in_len = *out_len = own * size;
    else if (m->op == RD_COLL_ALLTOALL && m->ncounts == (size_t)size * size && rank < size)
        *out_len = column_sum(m, size, rank) * esz;
    else if (m->op == RD_COLL_BARRIER)
        *in_len = *out_len = 0;
}

uint64_t rd_check_own_offset(const rd_submit *m, uint32_t rank)
{
    uint64_t off = 0;
    if (m->ncounts == 0)
        return m->count * rank;
    for (uint32_t i = 0; i < rank && i < m->ncounts; i++)
        off += m->counts[i];
    return off;
}

int rd_check_on_device(const rd_submit *m)
{
    return m->op != RD_COLL_BARRIER && m->input.present && m->input.kind == RD_MEM_DEVICE;
}

/* The Submit's tensor descriptors (where present) against the session's arenas: host memory
 * at the arena offsets, or the session's device arena (handle 1). Returns RINGD_OK, or
 * RINGD_E_INVALID with err set. */
static rd_status check_refs(const rd_check_session *s, const rd_submit *m, char *err, size_t errlen)
{
    const rd_tensor_ref *refs[2] = {&m->input, &m->output};
    const uint64_t offs[2] = {m->in_offset, m->out_offset};
    for (int k = 0; k < 2; k++) {
        const rd_tensor_ref *t = refs[k];
        const char *which = k == 0 ? "input" : "output";
        if (!t->present)
            continue; /* a library that predates tensor descriptors: the arena offsets */
        if (t->kind == RD_MEM_DEVICE) {
            if (s->device_arena == NULL) {
                snprintf(err, errlen,
                         "tensor '%s': its %s is in device memory, and this session has no "
                         "device arena on node %s: open it with device_arena_size "
                         "(RINGD_DEVICE_ARENA) on a ringd that serves a GPU",
                         m->name, which, s->node);
                return RINGD_E_INVALID;
            }
            if (t->device != (uint32_t)s->device || t->handle != 1 || t->offset != offs[k]) {
                snprintf(err, errlen,
                         "tensor '%s': the %s's descriptor (device %u, handle %" PRIu64
                         ", offset %" PRIu64 ") does not describe offset %" PRIu64
                         " of the session's device arena (device %d, handle 1)",
                         m->name, which, t->device, t->handle, t->offset, offs[k], s->device);
                return RINGD_E_INVALID;
            }
            continue;
        }
        if (t->kind != RD_MEM_ARENA) {
            snprintf(err, errlen, "tensor '%s': its %s is in unknown memory (kind %d)", m->name,
                     which, (int)t->kind);
            return RINGD_E_INVALID;
        }
        if (t->device != 0 || t->handle != 0 || t->offset != offs[k]) {
            snprintf(err, errlen,
                     "tensor '%s': the %s's descriptor (device %u, handle %" PRIu64
                     ", offset %" PRIu64 ") does not describe arena offset %" PRIu64,
                     m->name, which, t->device, t->handle, t->offset, offs[k]);
            return RINGD_E_INVALID;
        }
    }
    return RINGD_OK;
}

/* The arena a checked Submit's buffers are in (its device arena checked to exist). */
static const rd_arena *op_arena(const rd_check_session *s, const rd_submit *m)
{
    return rd_check_on_device(m) ? s->device_arena : s->arena;
}

/* Every rank's counts of a reducescatter or allgatherv: one per rank of the job (or none: a
 * reducescatter of equal counts), this rank's being count, their sum within the arena; an
 * alltoall's matrix as check_matrix says. Returns RINGD_OK, or RINGD_E_INVALID with err set. */
/* An alltoall's matrix: size x size entries, or none (count between every two ranks); every
 * entry, this rank's row (its count) and its column within the arena. Every rank checks its
 * own row and column of the one matrix the ranks agree on (its digest): so every row and
 * column of an op that runs fits some rank's arena. */
static rd_status check_matrix(const rd_check_session *s, const rd_submit *m, char *err,
                              size_t errlen)
{
    uint64_t esz = rd_dtype_size((rd_dtype)m->dtype), room = op_arena(s, m)->size / esz;
    if (m->ncounts == 0) {
        if (m->count > room / s->size) {
            snprintf(err, errlen,
                     "tensor '%s': %u x %" PRIu64 " elements to send does not fit the arena",
                     m->name, s->size, m->count);
            return RINGD_E_INVALID;
        }
        return RINGD_OK;
    }
    if (m->ncounts != (size_t)s->size * s->size) {
        snprintf(err, errlen,
                 "tensor '%s': the matrix of counts has %zu entries; the job has %u ranks, "
                 "so %u x %u",
                 m->name, m->ncounts, s->size, s->size, s->size);
        return RINGD_E_INVALID;
    }
    for (size_t i = 0; i < m->ncounts; i++)
        if (m->counts[i] > room) {
            snprintf(err, errlen,
                     "tensor '%s': rank %zu's count for rank %zu does not fit the arena", m->name,
                     i / s->size, i % s->size);
            return RINGD_E_INVALID;
        }
    uint64_t sent = row_sum(m, s->size, s->rank), got = column_sum(m, s->size, s->rank);
    if (sent > room || got > room) {
        snprintf(err, errlen,
                 "tensor '%s': rank %u sends %" PRIu64 " and receives %" PRIu64
                 " elements: more than fit the arena",
                 m->name, s->rank, sent, got);
        return RINGD_E_INVALID;
    }
    if (sent != m->count) {
        snprintf(err, errlen,
                 "tensor '%s': rank %u's row of the matrix adds up to %" PRIu64
                 ", its own count is %" PRIu64,
                 m->name, s->rank, sent, m->count);
        return RINGD_E_INVALID;
    }
    return RINGD_OK;
}

static rd_status check_counts(const rd_check_session *s, const rd_submit *m, char *err,
                              size_t errlen)
{
    uint64_t esz = rd_dtype_size((rd_dtype)m->dtype), room = op_arena(s, m)->size / esz, sum = 0;
    if (m->op == RD_COLL_ALLTOALL)
        return check_matrix(s, m, err, errlen);
    const char *what = m->op == RD_COLL_REDUCESCATTER ? "recvcounts" : "counts";
    if (m->ncounts == 0 && m->op == RD_COLL_REDUCESCATTER) {
        if (m->count > room / s->size) {
            snprintf(err, errlen,
                     "tensor '%s': reducing %u x %" PRIu64 " elements does not fit the arena",
                     m->name, s->size, m->count);
            return RINGD_E_INVALID;
        }
        return RINGD_OK;
    }
    if (m->ncounts != s->size) {
        snprintf(err, errlen,
                 "tensor '%s': %s has %zu entries; the job has %u ranks (one count per rank, "
                 "in rank order)",
                 m->name, what, m->ncounts, s->size);
        return RINGD_E_INVALID;
    }
    for (size_t i = 0; i < m->ncounts; i++) {
        if (m->counts[i] > room - sum) {
            snprintf(err, errlen,
                     "tensor '%s': the %s add up to more elements than fit the arena of %" PRIu64
                     " bytes",
                     m->name, what, op_arena(s, m)->size);
            return RINGD_E_INVALID;
        }
        sum += m->counts[i];
    }
    if (m->counts[s->rank] != m->count) {
        snprintf(err, errlen,
                 "tensor '%s': rank %u's entry of %s is %" PRIu64 ", its own count %" PRIu64,
                 m->name, s->rank, what, m->counts[s->rank], m->count);
        return RINGD_E_INVALID;
    }
    return RINGD_OK;
}

/* 1 when the bytes [a, a+alen) and [b, b+blen) share none. */
static int apart(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
    return alen == 0 || blen == 0 || a + alen <= b || b + blen <= a;
}

/* Where a checked Submit's buffers lie: inside the arena's data area, aligned, and in place or
 * apart (an allgather's input may be a whole slot of its output). A buffer of no bytes lies
 * nowhere. Returns RINGD_OK, or RINGD_E_INVALID with err set. */
static rd_status check_layout(const rd_check_session *s, const rd_submit *m, char *err,
                              size_t errlen)
{
    uint64_t esz = rd_dtype_size((rd_dtype)m->dtype);
    const rd_arena *ar = op_arena(s, m);
    uint64_t size = ar->size, data = ar == s->arena ? RD_CTRL_BYTES : 0;
    if (m->count > size / esz) {
        snprintf(err, errlen,
                 "tensor '%s': count %" PRIu64 " of %s does not fit an arena of %" PRIu64 " bytes",
                 m->name, m->count, rd_dtype_name((rd_dtype)m->dtype), size);
        return RINGD_E_INVALID;
    }
    if (m->op == RD_COLL_ALLGATHER && m->count > size / esz / s->size) {
        snprintf(err, errlen,
                 "tensor '%s': gathering %u x %" PRIu64 " elements does not fit the arena", m->name,
                 s->size, m->count);
        return RINGD_E_INVALID;
    }
    uint64_t in_len, out_len;
    rd_check_lengths(m, s->size, s->rank, &in_len, &out_len);
    if ((in_len > 0 && (!rd_arena_contains(ar, m->in_offset, in_len) || m->in_offset < data)) ||
        (out_len > 0 && (!rd_arena_contains(ar, m->out_offset, out_len) || m->out_offset < data))) {
        snprintf(err, errlen,
                 "tensor '%s': input [%" PRIu64 ", +%" PRIu64 ") or output [%" PRIu64 ", +%" PRIu64
                 ") lies outside the %sarena's data area [%" PRIu64 ", %" PRIu64 ")",
                 m->name, m->in_offset, in_len, m->out_offset, out_len,
                 ar == s->arena ? "" : "device ", data, size);
        return RINGD_E_INVALID;
    }
    if ((in_len > 0 && m->in_offset % esz != 0) || (out_len > 0 && m->out_offset % esz != 0)) {
        snprintf(err, errlen,
                 "tensor '%s': input offset %" PRIu64 " or output offset %" PRIu64
                 " is not a multiple of the %s element size (%" PRIu64 " bytes)",
                 m->name, m->in_offset, m->out_offset, rd_dtype_name((rd_dtype)m->dtype), esz);
        return RINGD_E_INVALID;
    }
    /* Input and output are the same place (in place), or apart. An allgather's input may be
     * any whole slot of its output: the start (sendbuf == recvbuf) or this rank's own slot (MPI's
     * form). Which slot is its own is decided when data moves (rd_ops_resolve): ranks may shift in
     * between, and a client may not have heard of it yet. A reducescatter's output may be the
     * start of its input (MPI's in place) or the rank's own block of it (NCCL's); an
     * allgatherv's input may be the rank's own block of its output (MPI's in place). */
    uint64_t a = m->in_offset, b = m->out_offset;
    uint64_t own = rd_check_own_offset(m, s->rank) * esz;
    int ok = apart(a, in_len, b, out_len);
    switch (m->op) {
    case RD_COLL_ALLGATHER: ok |= a >= b && in_len > 0 && (a - b) % in_len == 0; break;
    case RD_COLL_REDUCESCATTER: ok |= b == a || b == a + own; break;
    case RD_COLL_ALLGATHERV: ok |= a == b + own; break;
    case RD_COLL_ALLTOALL: break; /* blocks move between ranks: never in place */
    default: ok |= a == b; break;
    }
    if (!ok) {
        snprintf(err, errlen, "tensor '%s': input and output overlap without being in place",
                 m->name);
        return RINGD_E_INVALID;
    }
    /* A GPU kernel reads and writes its elements in no order: a block reduced to the start of
     * its own input must not overlap where it is read from. */
    if (m->op == RD_COLL_REDUCESCATTER && b == a && own > 0 && own < out_len &&
        rd_check_on_device(m)) {
        snprintf(
            err, errlen,
            "tensor '%s': in place at the start of a device buffer, rank %u's block of %" PRIu64
            " elements would be written over itself (it is read from element %" PRIu64
            "): put the output at the rank's own block of the input, or apart",
            m->name, s->rank, out_len / esz, own / esz);
        return RINGD_E_INVALID;
    }
    return RINGD_OK;
}

/* ringd_join's op is an allgather of one int64 per rank in host memory, named RD_JOIN_NAME,
 * alone; no other op takes that name (a rank's join would be matched with it). */
static rd_status check_join(const rd_submit *m, char *err, size_t errlen)
{
    int named = strcmp(m->name, RD_JOIN_NAME) == 0;
    if (!m->join && !named)
        return RINGD_OK;
    if (!m->join) {
        snprintf(err, errlen, "tensor '%s': the name is ringd_join's: choose another", m->name);
        return RINGD_E_INVALID;
    }
    if (!named || m->op != RD_COLL_ALLGATHER || m->dtype != RD_DT_I64 || m->count != 1 ||
        (m->group != NULL && m->group[0] != '\0') || rd_check_on_device(m)) {
        snprintf(err, errlen,
                 "tensor '%s': a join is an allgather named '" RD_JOIN_NAME
                 "' of one int64 in host memory, outside any group",
                 m->name);
        return RINGD_E_INVALID;
    }
    return RINGD_OK;
}

rd_status rd_check_submit(const rd_check_session *s, const rd_submit *m, char *err, size_t errlen)
{
    if (!rd_coll_valid((int)m->op)) {
        snprintf(err, errlen, "tensor '%s': unknown op %d", m->name, (int)m->op);
        return RINGD_E_INVALID;
    }
    if (m->group != NULL && m->group[0] != '\0' &&
        (!rd_name_valid(m->group) || m->group_size < 1 || m->group_size > RD_GROUP_MAX ||
         m->group_index >= m->group_size || m->op == RD_COLL_BARRIER)) {
        snprintf(err, errlen,
                 "tensor '%s': its group (%u of %u, named %zu bytes) is not one: 1 to %u ops "
                 "under a valid name",
                 m->name, m->group_index, m->group_size, strlen(m->group), RD_GROUP_MAX);
        return RINGD_E_INVALID;
    }
    rd_status rc = check_join(m, err, errlen);
    if (rc != RINGD_OK || m->op == RD_COLL_BARRIER)
        return rc;
    rc = check_refs(s, m, err, errlen);
    if (rc != RINGD_OK)
        return rc;
    if (m->input.present != m->output.present ||
        (m->input.present && m->input.kind != m->output.kind)) {
        snprintf(err, errlen,
                 "tensor '%s': input and output are in different kinds of memory: pass both on "
                 "the device or both in host memory",
                 m->name);
        return RINGD_E_INVALID;
    }
    if (!rd_dtype_valid((int)m->dtype)) {
        snprintf(err, errlen, "tensor '%s': unknown dtype %d", m->name, (int)m->dtype);
        return RINGD_E_INVALID;
    }
    if (m->op == RD_COLL_ALLREDUCE || m->op == RD_COLL_REDUCESCATTER) {
        if (!rd_redop_valid((int)m->redop)) {
            snprintf(err, errlen, "tensor '%s': unknown reduce op %d", m->name, (int)m->redop);
            return RINGD_E_INVALID;
        }
        if (!isfinite(m->prescale) || !isfinite(m->postscale)) {
            snprintf(err, errlen, "tensor '%s': prescale and postscale must be finite", m->name);
            return RINGD_E_INVALID;
        }
        if (!rd_dtype_is_float((rd_dtype)m->dtype) && (m->prescale != 1.0 || m->postscale != 1.0)) {
            snprintf(err, errlen, "tensor '%s': prescale/postscale need a floating dtype, not %s",
                     m->name, rd_dtype_name((rd_dtype)m->dtype));
            return RINGD_E_INVALID;
        }
    }
    if (m->op == RD_COLL_BROADCAST && m->root >= s->size) {
        snprintf(err, errlen, "tensor '%s': root %u is not a rank of a job of size %u", m->name,
                 m->root, s->size);
        return RINGD_E_INVALID;
    }
    if (takes_counts(m->op)) {
        if (m->generation != 0 && m->generation != s->generation) {
            /* a graceful change (one that fails nothing else) renumbered the ranks since */
            snprintf(err, errlen,
                     "tensor '%s': its counts and blocks are for the job's ranks at generation "
                     "%" PRIu64 "; the job is at generation %" PRIu64
                     " with %u ranks: submit it again with counts for them",
                     m->name, m->generation, s->generation, s->size);
            return RINGD_E_MEMBERSHIP;
        }
        if (s->rank >= s->size) { /* its node's ranks are being renumbered */
            snprintf(err, errlen,
                     "tensor '%s': the job's ranks are changing (rank %u of %u): submit it again "
                     "once the next ring is up",
                     m->name, s->rank, s->size);
            return RINGD_E_MEMBERSHIP;
        }
        rc = check_counts(s, m, err, errlen);
        if (rc != RINGD_OK)
            return rc;
    } else if (m->ncounts > 0) {
        snprintf(err, errlen, "tensor '%s': a %s takes no per-rank counts", m->name,
                 rd_coll_name((rd_coll)m->op));
        return RINGD_E_INVALID;
    }
    return check_layout(s, m, err, errlen);
}

int rd_check_match(const rd_check_first *f, const rd_submit *m, uint32_t rank, char *msg,
                   size_t len)
{
    rd_op_params q = rd_check_params(m, f->size);
    char a[256], b[256], fields[96];
    if (rd_op_params_compare(f->p, &q, fields, sizeof(fields)))
        return 1;
    rd_op_params_describe(a, sizeof(a), f->p);
    rd_op_params_describe(b, sizeof(b), &q);
    if (!f->multinode)
        snprintf(
            msg, len,
            "tensor '%s' mismatch (%s): local rank %u submitted %s; local rank %u submitted %s",
            f->name, fields, f->rank, a, rank, b);
    else
        snprintf(
            msg, len,
            "tensor '%s' mismatch (%s): rank %u (node %.64s) submitted %s; rank %u (node %.64s) "
            "submitted %s",
            f->name, fields, f->base_rank + f->rank, f->node, a, f->base_rank + rank, f->node, b);
    return 0;
}

int rd_check_memory(const char *name, const char *node, const rd_backend *const *backends,
                    uint32_t nparts, uint32_t rank, char *msg, size_t len)
{
    const rd_backend *a = backends[rank];
    if (a->max_sources > 0 && nparts > (uint32_t)a->max_sources) {
        snprintf(msg, len,
                 "tensor '%s': %u local ranks on node %s pass device memory; ringd reduces at "
                 "most %d on one device: pass host memory, or run fewer ranks per node",
                 name, nparts, node, a->max_sources);
        return 0;
    }
    for (uint32_t k = 0; k < nparts; k++) {
        const rd_backend *b = backends[k];
        if (k == rank || b == NULL || b == a)
            continue;
        snprintf(msg, len,
                 "tensor '%s' mismatch (memory): local rank %u on node %s passed it in %s, "
                 "local rank %u in %s: every rank of a node passes device memory with a "
                 "device arena (RINGD_DEVICE_ARENA), or every rank host memory",
                 name, k, node, b->device_memory ? "its device arena" : "host memory", rank,
                 a->device_memory ? "its device arena" : "host memory");
        return 0;
    }
    return 1;
}

rd_status rd_check_hello(const rd_hello *h, const rd_check_daemon *d, uint32_t *min_size,
                         uint64_t *arena_size, char *err, size_t errlen)
{
    if (h->protocol != RD_PROTOCOL_VERSION) {
        snprintf(err, errlen, "protocol %u is not supported (this daemon speaks %d)", h->protocol,
                 RD_PROTOCOL_VERSION);
        return RINGD_E_PROTOCOL;
    }
    if (d->draining) {
        snprintf(err, errlen, "node %s is draining: it takes no new clients", d->node);
        return RINGD_E_REFUSED;
    }
    if (!rd_name_valid(h->job)) {
        snprintf(err, errlen, "job names are 1..%d printable ASCII bytes", RD_NAME_MAX);
        return RINGD_E_INVALID;
    }
    if (!rd_job_name_valid(h->job)) {
        snprintf(err, errlen,
                 "job '%s': names that start with '%c' are ringd's own; rename the job", h->job,
                 RD_JOB_RESERVED);
        return RINGD_E_INVALID;
    }
    if (h->local_size < 1 || h->local_size > RD_LOCAL_SIZE_MAX) {
        snprintf(err, errlen, "job '%s': local_size %u is outside 1..%d", h->job, h->local_size,
                 RD_LOCAL_SIZE_MAX);
        return RINGD_E_INVALID;
    }
    if (h->world_size < h->local_size || (h->world_size > h->local_size && !d->multinode)) {
        snprintf(err, errlen,
                 "job '%s': world_size %u differs from local_size %u, but this daemon runs "
                 "without --redis and serves this node alone",
                 h->job, h->world_size, h->local_size);
        return RINGD_E_REFUSED;
    }
    *min_size = h->min_size ? h->min_size : 1;
    if (*min_size > h->world_size) {
        snprintf(err, errlen, "job '%s': min_size %u is larger than world_size %u", h->job,
                 *min_size, h->world_size);
        return RINGD_E_INVALID;
    }
    *arena_size = h->arena_size ? h->arena_size : d->arena_size;
    if (*arena_size < RD_ARENA_MIN || *arena_size > d->arena_max) {
        snprintf(err, errlen, "arena of %" PRIu64 " bytes is outside %u..%" PRIu64 " (--arena-max)",
                 *arena_size, RD_ARENA_MIN, d->arena_max);
        return RINGD_E_INVALID;
    }
    if (h->local_rank >= (int64_t)h->local_size) {
        snprintf(err, errlen,
                 "job '%s': local rank %" PRId64 " asked for is not below local_size %u", h->job,
                 h->local_rank, h->local_size);
        return RINGD_E_INVALID;
    }
    return RINGD_OK;
}
