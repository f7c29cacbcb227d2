/* Negotiation: parameter comparison shared by local and cross-node matching, and the
 * coordinator's per-name FIFO of partly ready ops. */
#include "negotiate.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "frame.h"
#include "log.h"
#include "ringd.h"

#define RD_NEG_BUCKETS 1024
#define RD_NEG_PENDING_MAX (1u << 20) /* partly ready ops; beyond this a node is misbehaving */

uint64_t rd_counts_digest(const uint64_t *counts, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i <= n; i++) {
        uint64_t v = i < n ? counts[i] : (uint64_t)n;
        for (int b = 0; b < 8; b++) {
            h ^= (v >> (8 * b)) & 0xff;
            h *= 0x100000001b3ull;
        }
    }
    return h != 0 ? h : 1;
}

/* " shape (d0, d1)" of a packed shape (ringd_next_shape), or " shape #value" of a hashed one
 * and of any value that is not a well-formed packing (so that two such values never read
 * alike). */
static void describe_shape(char *buf, size_t len, uint64_t shape)
{
    unsigned n = (unsigned)(shape >> 60) & 7;
    uint64_t dims = shape & ((1ull << 60) - 1);
    if ((shape >> 63) || n == 0 || n > 3 || (dims >> (20 * n)) != 0) {
        snprintf(buf, len, " shape #%016" PRIx64, shape);
        return;
    }
    int at = snprintf(buf, len, " shape (");
    for (unsigned k = 0; k < n && n <= 3 && at > 0 && (size_t)at < len; k++)
        at += snprintf(buf + at, len - (size_t)at, "%s%" PRIu64, k ? ", " : "",
                       (shape >> (20 * (n - 1 - k))) & ((1u << 20) - 1));
    if (at > 0 && (size_t)at < len)
        snprintf(buf + at, len - (size_t)at, "%s)", n == 1 ? "," : "");
}

void rd_op_params_describe(char *buf, size_t len, const rd_op_params *p)
{
    int n = snprintf(buf, len, "%s %s count %" PRIu64,
                     rd_coll_valid(p->coll) ? rd_coll_name((rd_coll)p->coll) : "invalid-op",
                     rd_dtype_name((rd_dtype)p->dtype), p->count);
    if (n < 0 || (size_t)n >= len)
        return;
    if (p->coll == RD_COLL_ALLREDUCE || p->coll == RD_COLL_REDUCESCATTER)
        n += snprintf(buf + n, len - (size_t)n, " op %s prescale %g postscale %g",
                      rd_redop_name((rd_redop)p->redop), p->prescale, p->postscale);
    else if (p->coll == RD_COLL_BROADCAST)
        snprintf(buf + n, len - (size_t)n, " root %u", p->root);
    if ((p->coll == RD_COLL_REDUCESCATTER || p->coll == RD_COLL_ALLGATHERV) && n > 0 &&
        (size_t)n < len) {
        if (p->counts_digest != 0)
            snprintf(buf + n, len - (size_t)n, " counts #%016" PRIx64, p->counts_digest);
        else
            snprintf(buf + n, len - (size_t)n, " equal counts");
    }
    if (p->group_digest != 0) {
        size_t used = strlen(buf);
        snprintf(buf + used, len - used, " in group #%016" PRIx64, p->group_digest);
    }
    if (p->device) {
        size_t used = strlen(buf);
        snprintf(buf + used, len - used, " in device memory");
    }
    if (p->shape != 0) {
        size_t used = strlen(buf);
        describe_shape(buf + used, len - used, p->shape);
    }
}

rd_op_params rd_op_params_announceable(rd_op_params p)
{
    if (!rd_coll_valid(p.coll) || !rd_dtype_valid(p.dtype) || !rd_redop_valid(p.redop))
        p = (rd_op_params){RD_COLL_BARRIER, RD_DT_U8, RD_OP_SUM, 0, 0, 1.0, 1.0, 0, 0, 0, 0};
    return p;
}

/* 1 when nodes may pass an op's tensors in host or device memory alike: an alltoall or
 * allgatherv that moves data crosses nodes on the TCP ring either way (from host staging on a
 * node that passes device memory), never directly through the negotiation. */
static int either_memory(const rd_op_params *p)
{
    return (p->coll == RD_COLL_ALLTOALL || p->coll == RD_COLL_ALLGATHERV) && p->count > 0;
}

int rd_op_params_compare(const rd_op_params *a, const rd_op_params *b, char *fields, size_t len)
{
    const struct {
        int differs;
        const char *name;
    } f[] = {
        {a->coll != b->coll, "op"},
        {a->dtype != b->dtype, "dtype"},
        {a->count != b->count, "count"},
        {a->redop != b->redop, "reduce op"},
        {a->root != b->root, "root"},
        {a->prescale != b->prescale, "prescale"},
        {a->postscale != b->postscale, "postscale"},
        {a->device != b->device && !either_memory(a), "memory"},
        {a->counts_digest != b->counts_digest, "counts"},
        {a->group_digest != b->group_digest, "group"},
        {a->shape != b->shape, "shape"},
    };
    int same = 1;
    if (len > 0)
        fields[0] = '\0';
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
        if (!f[i].differs)
            continue;
        size_t n = strlen(fields);
        snprintf(fields + n, len - n, "%s%s", same ? "" : ", ", f[i].name);
        same = 0;
    }
    return same;
}

/* A node's contribution to a direct op. */
typedef struct {
    uint8_t *data;
    size_t len;
} contribution;

/* One op, by name, as far as the nodes have reported it. */
typedef struct rec {
    char *name;
    rd_op_params first;
    int first_node;
    int nhave;
    int ndirect;
    uint32_t status;
    char *message;
    contribution *data; /* direct: each node's */
    void *own;
    int nbelow;       /* of the nodes below this one (rd_neg.below), how many have it */
    int before_join;  /* a node announced it before announcing the join pending then */
    struct rec *next; /* same bucket, oldest first */
    uint8_t have[];   /* by node */
} rec;

struct rd_neg {
    int nnodes, self;
    uint64_t max_data; /* --direct-bytes: the most a node's contribution can be */
    rd_ring_node *nodes;
    char **names;
    uint8_t *below; /* by node: its announcements reach the coordinator through this node */
    int nbelow;
    unsigned news; /* rd_neg_news */
    rec *buckets[RD_NEG_BUCKETS];
    size_t pending;
    rd_neg_done *out;
    size_t nout, capout;
};

rd_neg *rd_neg_new(int nnodes, const rd_ring_node *nodes, int self, uint64_t max_data,
                   const uint8_t *below)
{
    rd_neg *n = calloc(1, sizeof(*n));
    if (n == NULL)
        return NULL;
    n->nnodes = nnodes;
    n->self = self;
    n->max_data = max_data;
    n->nodes = calloc((size_t)nnodes, sizeof(*n->nodes));
    n->names = calloc((size_t)nnodes, sizeof(*n->names));
    n->below = calloc((size_t)nnodes, 1);
    if (n->nodes == NULL || n->names == NULL || n->below == NULL) {
        rd_neg_free(n);
        return NULL;
    }
    for (int i = 0; i < nnodes; i++) {
        n->below[i] = below != NULL ? below[i] != 0 : i == self;
        n->nbelow += n->below[i];
        n->nodes[i] = nodes[i];
        n->names[i] = strdup(nodes[i].node);
        if (n->names[i] == NULL) {
            rd_neg_free(n);
            return NULL;
        }
        n->nodes[i].node = n->names[i];
    }
    return n;
}

static void rec_free(rec *r, int nnodes)
{
    for (int i = 0; r->data != NULL && i < nnodes; i++)
        free(r->data[i].data);
    free(r->data);
    free(r->name);
    free(r->message);
    free(r);
}

void rd_neg_free(rd_neg *n)
{
    if (n == NULL)
        return;
    for (size_t b = 0; b < RD_NEG_BUCKETS; b++) {
        while (n->buckets[b] != NULL) {
            rec *r = n->buckets[b];
            n->buckets[b] = r->next;
            rec_free(r, n->nnodes);
        }
    }
    for (int i = 0; n->names != NULL && i < n->nnodes; i++)
        free(n->names[i]);
    free(n->names);
    free(n->nodes);
    free(n->below);
    rd_neg_done_free(n->out, n->nout);
    free(n);
}

const char *rd_neg_node(const rd_neg *n, int node)
{
    return n->nodes[node].node;
}

/* "ranks 2-3 (node b)" */
static void ranks_of(const rd_neg *n, int node, char *buf, size_t len)
{
    const rd_ring_node *x = &n->nodes[node];
    if (x->local_size == 1)
        snprintf(buf, len, "rank %u (node %s)", x->first_rank, x->node);
    else
        snprintf(buf, len, "ranks %u-%u (node %s)", x->first_rank,
                 x->first_rank + x->local_size - 1, x->node);
}

static void rec_fail(rec *r, uint32_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void rec_fail(rec *r, uint32_t status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    free(r->message);
    r->status = status;
    r->message = strdup(msg);
}

/* The result of a direct op from every node's contribution, into out->data (malloc'd) and
 * out->len. Returns 0, or -1 with the record failed. */
static int direct_result(const rd_neg *n, rec *r, rd_neg_outcome *out)
{
    const rd_op_params *p = &r->first;
    size_t esz = rd_dtype_size((rd_dtype)p->dtype);
    uint64_t per = p->count * esz, world = 0;
    for (int i = 0; i < n->nnodes; i++)
        world += n->nodes[i].local_size;
    if ((p->coll == RD_COLL_ALLGATHERV || p->coll == RD_COLL_ALLTOALL) && p->count > 0) {
        /* the table knows no node's counts */
        rec_fail(r, RINGD_E_PROTOCOL, "tensor '%s': an %s's data came with its negotiation",
                 r->name, rd_coll_name((rd_coll)p->coll));
        return -1;
    }
    for (int i = 0; i < n->nnodes; i++) {
        uint64_t want = per;
        if (p->coll == RD_COLL_ALLGATHER)
            want = per * n->nodes[i].local_size;
        else if (p->coll == RD_COLL_BROADCAST)
            want = p->root >= n->nodes[i].first_rank &&
                           p->root < n->nodes[i].first_rank + n->nodes[i].local_size
                       ? per
                       : 0;
        if (r->data[i].len != want) {
            rec_fail(r, RINGD_E_PROTOCOL,
                     "tensor '%s': node %s sent %zu bytes of data, %" PRIu64 " expected", r->name,
                     n->nodes[i].node, r->data[i].len, want);
            return -1;
        }
    }
    out->len = p->coll == RD_COLL_ALLGATHER ? per * world : per;
    out->data = malloc(out->len ? out->len : 1);
    if (out->data == NULL) {
        rec_fail(r, RINGD_E_NOMEM, "out of memory");
        return -1;
    }
    if (p->coll == RD_COLL_ALLREDUCE || p->coll == RD_COLL_REDUCESCATTER) {
        const void *src[n->nnodes];
        for (int i = 0; i < n->nnodes; i++)
            src[i] = r->data[i].data;
        rd_reduce_args a = RD_REDUCE_ARGS_INIT;
        a.postscale = p->postscale;
        a.divisor = p->redop == RD_OP_AVG ? (uint32_t)world : 1;
        /* The nodes' contributions arrived over the network into host memory. */
        rd_backend_cpu()->reduce((rd_dtype)p->dtype,
                                 p->redop == RD_OP_AVG ? RD_OP_SUM : (rd_redop)p->redop, out->data,
                                 src, n->nnodes, p->count, &a);
    } else {
        size_t off = 0;
        for (int i = 0; i < n->nnodes; i++) {
            if (r->data[i].len > 0)
                memcpy(out->data + off, r->data[i].data, r->data[i].len);
            off += r->data[i].len;
        }
    }
    return 0;
}

/* Queues the outcome of a record every node has reported. */
static int emit(rd_neg *n, rec *r)
{
    rd_neg_outcome result = {0};
    int direct = 0;
    if (r->status == 0 && r->ndirect > 0 && r->ndirect < n->nnodes)
        rec_fail(r, RINGD_E_REFUSED,
                 "tensor '%s': the nodes disagree on --direct-bytes (%d of %d sent data)", r->name,
                 r->ndirect, n->nnodes);
    if (r->status == 0 && r->ndirect == n->nnodes && r->first.coll != RD_COLL_BARRIER)
        direct = direct_result(n, r, &result) == 0;
    if (r->status == 0 && r->first.coll == RD_COLL_BARRIER)
        direct = 1; /* every rank has arrived: done, nothing for the ring */
    if (n->nout == n->capout) {
        size_t cap = n->capout ? n->capout * 2 : 16;
        rd_neg_done *o = realloc(n->out, cap * sizeof(*o));
        if (o == NULL) {
            free(result.data);
            return -1;
        }
        n->out = o;
        n->capout = cap;
    }
    rd_neg_done *d = &n->out[n->nout];
    rd_neg_outcome *e = &d->e;
    d->own = r->own;
    *e = result;
    e->direct = direct;
    e->name = r->name;
    e->status = r->status;
    e->message = r->message != NULL ? r->message : strdup("");
    if (e->message == NULL) {
        free(result.data);
        return -1;
    }
    r->name = NULL; /* now owned by the entry */
    r->message = NULL;
    n->nout++;
    n->news |= RD_RELEASE_DOWN;
    return 0;
}

size_t rd_neg_unannounced(const rd_neg *n, rd_neg_unheard *out, size_t max)
{
    size_t count = 0;
    for (size_t b = 0; b < RD_NEG_BUCKETS; b++)
        for (const rec *r = n->buckets[b]; r != NULL; r = r->next) {
            if (r->have[n->self] || !r->before_join)
                continue;
            if (count < max)
                out[count] = (rd_neg_unheard){r->name, r->first, r->status,
                                              r->message != NULL ? r->message : ""};
            count++;
        }
    return count;
}

/* The join pending after r (NULL: the first), oldest first, or NULL. */
static const rec *join_next(const rd_neg *n, const rec *r)
{
    r = r != NULL ? r->next : n->buckets[rd_name_hash(RD_JOIN_NAME) % RD_NEG_BUCKETS];
    while (r != NULL && strcmp(r->name, RD_JOIN_NAME) != 0)
        r = r->next;
    return r;
}

/* 1 when node has announced the join this table has pending. */
static int announced_join(const rd_neg *n, int node)
{
    for (const rec *r = join_next(n, NULL); r != NULL; r = join_next(n, r))
        if (r->have[node])
            return 1;
    return 0;
}

rd_status rd_neg_ready(rd_neg *n, int node, const rd_op_spec *spec, void *own, char *err,
                       size_t errlen)
{
    if (spec->len > n->max_data) {
        snprintf(err, errlen, "node %s sent %zu bytes of data for tensor '%s', over --direct-bytes",
                 n->nodes[node].node, spec->len, spec->name);
        return RINGD_E_PROTOCOL;
    }
    rec **pp = &n->buckets[rd_name_hash(spec->name) % RD_NEG_BUCKETS], *r;
    for (r = *pp; r != NULL; pp = &r->next, r = r->next)
        if (strcmp(r->name, spec->name) == 0 && !r->have[node])
            break;
    if (r == NULL) {
        if (n->pending >= RD_NEG_PENDING_MAX) {
            snprintf(err, errlen, "over %u ops pending negotiation (node %s announced one more)",
                     RD_NEG_PENDING_MAX, n->nodes[node].node);
            return RINGD_E_PROTOCOL;
        }
        r = calloc(1, sizeof(*r) + (size_t)n->nnodes);
        if (r == NULL || (r->name = strdup(spec->name)) == NULL) {
            free(r);
            snprintf(err, errlen, "out of memory");
            return RINGD_E_NOMEM;
        }
        r->first = spec->p;
        r->first_node = node;
        while (*pp != NULL)
            pp = &(*pp)->next;
        *pp = r;
        n->pending++;
    }
    if (!r->before_join && strcmp(spec->name, RD_JOIN_NAME) != 0 && !announced_join(n, node))
        r->before_join = 1;
    r->have[node] = 1;
    r->nhave++;
    if (n->below[node] && ++r->nbelow == n->nbelow)
        n->news |= RD_RELEASE_UP;
    if (join_next(n, NULL) != NULL) /* a join pending */
        n->news |= RD_RELEASE_UP | RD_RELEASE_DOWN;
    if (node == n->self)
        r->own = own;
    if (spec->direct) {
        if (r->data == NULL && (r->data = calloc((size_t)n->nnodes, sizeof(*r->data))) == NULL) {
            snprintf(err, errlen, "out of memory");
            return RINGD_E_NOMEM;
        }
        r->ndirect++;
        if (spec->len > 0) {
            r->data[node].data = malloc(spec->len);
            if (r->data[node].data == NULL) {
                snprintf(err, errlen, "out of memory");
                return RINGD_E_NOMEM;
            }
            memcpy(r->data[node].data, spec->data, spec->len);
            r->data[node].len = spec->len;
        }
    }
    uint32_t was = r->status;
    if (r->status == 0 && spec->status != 0) {
        r->status = spec->status;
        r->message = strdup(spec->message != NULL ? spec->message : "failed on another node");
    }
    char fields[96];
    if (r->status == 0 && !rd_op_params_compare(&r->first, &spec->p, fields, sizeof(fields))) {
        char a[256], b[256], ra[96], rb[96], msg[1024];
        rd_op_params_describe(a, sizeof(a), &r->first);
        rd_op_params_describe(b, sizeof(b), &spec->p);
        ranks_of(n, r->first_node, ra, sizeof(ra));
        ranks_of(n, node, rb, sizeof(rb));
        snprintf(msg, sizeof(msg), "tensor '%s' mismatch (%s): %s submitted %s; %s submitted %s",
                 r->name, fields, ra, a, rb, b);
        r->status = RINGD_E_MISMATCH;
        r->message = strdup(msg);
    }
    if (was == 0 && r->status != 0) /* known here: the nodes that have not announced it end it */
        n->news |= RD_RELEASE_UP | RD_RELEASE_DOWN;
    if (r->nhave < n->nnodes)
        return RINGD_OK;
    /* every node has it: out of the table, onto the queue */
    pp = &n->buckets[rd_name_hash(r->name) % RD_NEG_BUCKETS];
    while (*pp != r)
        pp = &(*pp)->next;
    *pp = r->next;
    n->pending--;
    int rc = emit(n, r);
    rec_free(r, n->nnodes);
    if (rc != 0) {
        snprintf(err, errlen, "out of memory");
        return RINGD_E_NOMEM;
    }
    return RINGD_OK;
}

unsigned rd_neg_news(rd_neg *n)
{
    unsigned k = n->news;
    n->news = 0;
    return k;
}

size_t rd_neg_take(rd_neg *n, rd_neg_done **out)
{
    size_t k = n->nout;
    *out = n->out;
    n->out = NULL;
    n->nout = n->capout = 0;
    return k;
}

void rd_neg_done_free(rd_neg_done *d, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(d[i].e.name);
        free(d[i].e.message);
        free(d[i].e.data);
    }
    free(d);
}

size_t rd_neg_pending(const rd_neg *n)
{
    return n->pending;
}

/* The record own belongs to, or (own NULL) the oldest of that name this node has not
 * announced. */
static rec *rec_find(const rd_neg *n, const char *name, const void *own)
{
    for (rec *r = n->buckets[rd_name_hash(name) % RD_NEG_BUCKETS]; r != NULL; r = r->next)
        if (strcmp(r->name, name) == 0 && (own != NULL ? r->own == own : !r->have[n->self]))
            return r;
    return NULL;
}

void rd_neg_missing(const rd_neg *n, const char *name, const void *own, char *buf, size_t len)
{
    const rec *r = rec_find(n, name, own);
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < n->nnodes && k + 8 < len; i++) {
        if (i == n->self || (r != NULL && r->have[i]))
            continue;
        char who[128];
        ranks_of(n, i, who, sizeof(who));
        k += (size_t)snprintf(buf + k, len - k, "%s%s", k ? "; " : "", who);
    }
}

const char *rd_neg_failed(const rd_neg *n, const char *name, uint32_t *status, rd_op_params *p)
{
    const rec *r = rec_find(n, name, NULL);
    if (r == NULL || r->status == 0)
        return NULL;
    *status = r->status;
    *p = r->first;
    return r->message != NULL ? r->message : "failed on another node";
}

size_t rd_neg_failed_names(const rd_neg *n, char ***names)
{
    size_t k = 0, cap = 0;
    *names = NULL;
    for (size_t b = 0; b < RD_NEG_BUCKETS; b++) {
        for (const rec *r = n->buckets[b]; r != NULL; r = r->next) {
            if (r->status == 0 || r->have[n->self])
                continue;
            if (k == cap) {
                size_t c = cap ? cap * 2 : 8;
                char **x = realloc(*names, c * sizeof(*x));
                if (x == NULL)
                    return k;
                *names = x;
                cap = c;
            }
            if (((*names)[k] = strdup(r->name)) != NULL)
                k++;
        }
    }
    return k;
}

int rd_neg_awaits(const rd_neg *n, const char *name, int from)
{
    for (const rec *r = n->buckets[rd_name_hash(name) % RD_NEG_BUCKETS]; r != NULL; r = r->next)
        if (strcmp(r->name, name) == 0 && !r->have[n->self])
            return r->have[from]; /* the oldest this node owes: the one from is waiting in */
    return 0;
}

int rd_neg_missing_nodes(const rd_neg *n, const void *own, int *pos, int max)
{
    int k = 0;
    for (size_t b = 0; b < RD_NEG_BUCKETS; b++)
        for (const rec *r = n->buckets[b]; r != NULL; r = r->next)
            if (r->own == own)
                for (int i = 0; i < n->nnodes && k < max; i++)
                    if (!r->have[i])
                        pos[k++] = i;
    return k;
}
