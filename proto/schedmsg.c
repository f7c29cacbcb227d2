/* Scheduling messages (Ready, Go, and the device transport's DevOffer, DevPlan, DevConfirm)
 * between plain values and control messages, checked coming in. */
#include "schedmsg.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "frame.h"

/* rd_schedmsg_encode lays these out back to back in one block. */
_Static_assert(sizeof(rd_msg) % 8 == 0 && sizeof(Ringd__Ready) % 8 == 0 &&
                   sizeof(Ringd__Go) % 8 == 0 && sizeof(Ringd__OpSpec) % 8 == 0 &&
                   sizeof(Ringd__GoEntry) % 8 == 0 && sizeof(Ringd__Tuning) % 8 == 0 &&
                   _Alignof(Ringd__OpSpec) <= 8 && _Alignof(Ringd__Tuning) <= 8 &&
                   _Alignof(Ringd__GoEntry) <= 8 && _Alignof(void *) <= 8,
               "the parts of an encoded message keep one another aligned");

/* 1 when len bytes are a contribution a node can make to a direct op of p (dtype valid). */
static int data_fits(const rd_op_params *p, size_t len)
{
    if (p->count > RD_SCHEDMSG_DATA_MAX) /* no direct op is that large: nor is its product */
        return len == 0 && p->coll != RINGD__OP_TYPE__OP_ALLREDUCE &&
               p->coll != RINGD__OP_TYPE__OP_REDUCESCATTER;
    uint64_t per = p->count * rd_dtype_size((rd_dtype)p->dtype);
    switch (p->coll) {
    case RINGD__OP_TYPE__OP_ALLREDUCE:
    case RINGD__OP_TYPE__OP_REDUCESCATTER: return len == per;         /* the node's partial sum */
    case RINGD__OP_TYPE__OP_BROADCAST: return len == 0 || len == per; /* 0: the root is elsewhere */
    case RINGD__OP_TYPE__OP_ALLGATHER: return per > 0 ? len % per == 0 : len == 0;
    default: return len == 0;
    }
}

int rd_schedmsg_spec_check(const rd_op_spec *s, char *err, size_t errlen)
{
    const rd_op_params *p = &s->p;
    if (!rd_name_valid(s->name)) {
        snprintf(err, errlen, "an op with an invalid name");
        return -1;
    }
    if (!rd_coll_valid(p->coll)) {
        snprintf(err, errlen, "tensor '%s' with op %d", s->name, p->coll);
        return -1;
    }
    /* A failure may be announced with the very parameters it failed for; an op that goes on must
     * have ones every node can compute with. */
    if (s->status == 0 && (!rd_dtype_valid(p->dtype) || !rd_redop_valid(p->redop))) {
        snprintf(err, errlen, "tensor '%s' with dtype %d, reduce op %d", s->name, p->dtype,
                 p->redop);
        return -1;
    }
    size_t mlen = strnlen(s->message, RD_SCHEDMSG_MESSAGE_MAX + 1);
    if (mlen > RD_SCHEDMSG_MESSAGE_MAX) {
        snprintf(err, errlen, "tensor '%s' with a message over %u bytes", s->name,
                 RD_SCHEDMSG_MESSAGE_MAX);
        return -1;
    }
    if (s->len > RD_SCHEDMSG_DATA_MAX) {
        snprintf(err, errlen, "tensor '%s' with %zu bytes of data, over %u", s->name, s->len,
                 RD_SCHEDMSG_DATA_MAX);
        return -1;
    }
    if (s->len > 0 && (!s->direct || s->status != 0)) {
        snprintf(err, errlen, "tensor '%s' with %zu bytes of data, %s", s->name, s->len,
                 s->status != 0 ? "failed" : "not direct");
        return -1;
    }
    if (s->direct && s->status == 0 && !data_fits(p, s->len)) {
        snprintf(err, errlen,
                 "tensor '%s' with %zu bytes of data for op %d of %" PRIu64 " elements of dtype %d",
                 s->name, s->len, p->coll, p->count, p->dtype);
        return -1;
    }
    return 0;
}

/* Checks a cached op (cached != 0) as far as it can be without the sender's slot: nothing but
 * its slot, direct and data set. Returns 0, or -1 with err set. */
static int cached_check(const Ringd__OpSpec *o, const rd_op_spec *s, char *err, size_t errlen)
{
    if (s->cached > RD_SCHEDMSG_CACHE_MAX || s->fill != 0 || s->name[0] != '\0' || s->status != 0 ||
        s->message[0] != '\0' || o->op != 0 || o->dtype != 0 || o->redop != 0 || o->root != 0 ||
        o->count != 0 || o->prescale != 0 || o->postscale != 0 || o->device ||
        o->counts_digest != 0 || o->group_digest != 0 || o->shape != 0) {
        snprintf(err, errlen, "an op cached in slot %" PRIu32 " that carries more than its data",
                 s->cached);
        return -1;
    }
    return 0; /* its data: once the receiver has the slot's op (rd_schedmsg_spec_check) */
}

/* The plain value of n announced ops o[0..n) into a new array *out (NULL when n is 0); cache
 * (0: none may use the sender's cache, as stall requests) says they may. Returns 0, or -1 with
 * err set. */
static int specs_decode(Ringd__OpSpec *const *o, size_t n, int cache, rd_op_spec **out, char *err,
                        size_t errlen)
{
    *out = NULL;
    if (n == 0)
        return 0;
    rd_op_spec *s = calloc(n, sizeof(*s));
    if (s == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        s[i].name = o[i]->name;
        s[i].p = (rd_op_params){(int)o[i]->op,      (int)o[i]->dtype,  (int)o[i]->redop,
                                o[i]->root,         o[i]->count,       o[i]->prescale,
                                o[i]->postscale,    o[i]->device != 0, o[i]->counts_digest,
                                o[i]->group_digest, o[i]->shape};
        s[i].status = o[i]->status;
        s[i].message = o[i]->message != NULL ? o[i]->message : "";
        s[i].direct = o[i]->direct != 0;
        s[i].data = o[i]->data.data;
        s[i].len = o[i]->data.len;
        s[i].fill = o[i]->fill;
        s[i].cached = o[i]->cached;
        int bad;
        if (!cache && (s[i].fill != 0 || s[i].cached != 0)) {
            snprintf(err, errlen, "a stall request naming a slot of the sender's cache");
            bad = 1;
        } else if (s[i].cached != 0) {
            bad = cached_check(o[i], &s[i], err, errlen) != 0;
        } else if (s[i].fill > RD_SCHEDMSG_CACHE_MAX || (s[i].fill != 0 && s[i].status != 0)) {
            snprintf(err, errlen, "tensor '%s' filling slot %" PRIu32 " of the cache%s", s[i].name,
                     s[i].fill, s[i].status != 0 ? ", failed" : "");
            bad = 1;
        } else {
            bad = rd_schedmsg_spec_check(&s[i], err, errlen) != 0;
        }
        if (bad) {
            free(s);
            return -1;
        }
    }
    *out = s;
    return 0;
}

/* A Ready's plain value, its arrays new. */
static rd_schedmsg_status ready_decode(const Ringd__Ready *r, rd_schedmsg *out, char *err,
                                       size_t errlen)
{
    rd_op_spec *ops, *stalled;
    if (r->n_ops > RD_SCHEDMSG_OPS_MAX || r->n_stalled > RD_SCHEDMSG_OPS_MAX) {
        snprintf(err, errlen, "Ready with %zu ops and %zu stalled, over %u", r->n_ops, r->n_stalled,
                 RD_SCHEDMSG_OPS_MAX);
        return RD_SCHEDMSG_BAD;
    }
    if (specs_decode(r->ops, r->n_ops, 1, &ops, err, errlen) != 0)
        return RD_SCHEDMSG_BAD;
    if (specs_decode(r->stalled, r->n_stalled, 0, &stalled, err, errlen) != 0) {
        free(ops);
        return RD_SCHEDMSG_BAD;
    }
    *out = (rd_schedmsg){.kind = RD_SCHEDMSG_READY,
                         .generation = r->generation,
                         .ops = ops,
                         .nops = r->n_ops,
                         .stalled = stalled,
                         .nstalled = r->n_stalled};
    return RD_SCHEDMSG_DECODED;
}

/* A Go's plain value, its array of names new (the names are borrowed). */
static rd_schedmsg_status go_decode(const Ringd__Go *g, rd_schedmsg *out, char *err, size_t errlen)
{
    const char **names = NULL;
    if (g->n_ops > RD_SCHEDMSG_OPS_MAX) {
        snprintf(err, errlen, "Go with %zu ops, over %u", g->n_ops, RD_SCHEDMSG_OPS_MAX);
        return RD_SCHEDMSG_BAD;
    }
    if (g->n_ops > 0 && (names = calloc(g->n_ops, sizeof(*names))) == NULL) {
        snprintf(err, errlen, "out of memory");
        return RD_SCHEDMSG_BAD;
    }
    for (size_t i = 0; i < g->n_ops; i++) {
        if (!rd_name_valid(g->ops[i]->name)) {
            snprintf(err, errlen, "Go orders an op with an invalid name");
            free(names);
            return RD_SCHEDMSG_BAD;
        }
        names[i] = g->ops[i]->name;
    }
    const Ringd__Tuning *u = g->tuning;
    if (u == NULL || u->fusion_threshold > RD_SCHEDMSG_FUSION_MAX ||
        u->segment_size < RD_SCHEDMSG_SEGMENT_MIN || u->segment_size > RD_SCHEDMSG_SEGMENT_MAX ||
        u->conns < 1 || u->conns > RD_SCHEDMSG_CONNS_MAX || u->cycle_us > RD_SCHEDMSG_CYCLE_MAX ||
        u->autotune > RD_AUTOTUNE_SETTLED || u->doubling_bytes > RD_SCHEDMSG_DOUBLING_MAX) {
        if (u == NULL)
            snprintf(err, errlen, "Go without its tuning");
        else
            snprintf(err, errlen,
                     "Go with an impossible tuning: fusion threshold %" PRIu64 ", segment %" PRIu64
                     ", %" PRIu32 " connections, cycle %" PRIu32 " us, autotune %" PRIu32
                     ", doubling %" PRIu64,
                     u->fusion_threshold, u->segment_size, u->conns, u->cycle_us, u->autotune,
                     u->doubling_bytes);
        free(names);
        return RD_SCHEDMSG_BAD;
    }
    *out = (rd_schedmsg){.kind = RD_SCHEDMSG_GO,
                         .generation = g->generation,
                         .names = names,
                         .nnames = g->n_ops,
                         .tuning = {.fusion_threshold = u->fusion_threshold,
                                    .segment_size = u->segment_size,
                                    .conns = u->conns,
                                    .cycle_us = u->cycle_us,
                                    .autotune = (int)u->autotune,
                                    .doubling_bytes = u->doubling_bytes}};
    return RD_SCHEDMSG_DECODED;
}

/* why as decoded: "" for none; -1 with err set when over RD_SCHEDMSG_MESSAGE_MAX bytes. */
static int why_decode(const char *why, const char *what, const char **out, char *err, size_t errlen)
{
    *out = why != NULL ? why : "";
    if (strnlen(*out, RD_SCHEDMSG_MESSAGE_MAX + 1) > RD_SCHEDMSG_MESSAGE_MAX) {
        snprintf(err, errlen, "%s with a reason over %u bytes", what, RD_SCHEDMSG_MESSAGE_MAX);
        return -1;
    }
    return 0;
}

/* A DevOffer, DevPlan or DevConfirm's plain value. */
static rd_schedmsg_status dev_decode(const rd_msg *m, rd_schedmsg *out, char *err, size_t errlen)
{
    rd_schedmsg v = {0};
    const char *why;
    switch (m->body_case) {
    case RINGD__MSG__BODY_DEV_OFFER:
        if (m->dev_offer->want > RD_DEV_WANT_TCP) {
            snprintf(err, errlen, "DevOffer with transport choice %u", m->dev_offer->want);
            return RD_SCHEDMSG_BAD;
        }
        v.kind = RD_SCHEDMSG_DEV_OFFER;
        v.generation = m->dev_offer->generation;
        v.dev.want = (int)m->dev_offer->want;
        v.dev.device = m->dev_offer->device != 0;
        v.dev.can = m->dev_offer->can != 0;
        v.dev.gpu = m->dev_offer->gpu != NULL ? m->dev_offer->gpu : "";
        if (strnlen(v.dev.gpu, RD_SCHEDMSG_GPU_MAX + 1) > RD_SCHEDMSG_GPU_MAX) {
            snprintf(err, errlen, "DevOffer with a GPU name over %u bytes", RD_SCHEDMSG_GPU_MAX);
            return RD_SCHEDMSG_BAD;
        }
        why = m->dev_offer->why;
        break;
    case RINGD__MSG__BODY_DEV_PLAN: {
        const Ringd__DevPlan *p = m->dev_plan;
        if (p->transport > RD_DEV_NCCL ||
            (p->transport == RD_DEV_NCCL && (p->id.len == 0 || p->id.len > RD_SCHEDMSG_ID_MAX)) ||
            (p->transport == RD_DEV_TCP && p->id.len != 0)) {
            snprintf(err, errlen, "DevPlan of transport %u with a %zu-byte id", p->transport,
                     p->id.len);
            return RD_SCHEDMSG_BAD;
        }
        v.kind = RD_SCHEDMSG_DEV_PLAN;
        v.generation = p->generation;
        v.dev.transport = (int)p->transport;
        v.dev.required = p->required != 0;
        v.dev.id = p->id.data;
        v.dev.id_len = p->id.len;
        why = p->why;
        break;
    }
    default:
        if (m->dev_confirm->state < RD_DEV_JOINED || m->dev_confirm->state > RD_DEV_FAILED) {
            snprintf(err, errlen, "DevConfirm of state %u", m->dev_confirm->state);
            return RD_SCHEDMSG_BAD;
        }
        v.kind = RD_SCHEDMSG_DEV_CONFIRM;
        v.generation = m->dev_confirm->generation;
        v.dev.confirm = (int)m->dev_confirm->state;
        why = m->dev_confirm->why;
        break;
    }
    if (why_decode(why, "a device transport message", &v.dev.why, err, errlen) != 0)
        return RD_SCHEDMSG_BAD;
    *out = v;
    return RD_SCHEDMSG_DECODED;
}

rd_schedmsg_status rd_schedmsg_decode(const rd_msg *m, rd_schedmsg *out, char *err, size_t errlen)
{
    switch (m->body_case) {
    case RINGD__MSG__BODY_READY: return ready_decode(m->ready, out, err, errlen);
    case RINGD__MSG__BODY_GO: return go_decode(m->go, out, err, errlen);
    case RINGD__MSG__BODY_DEV_OFFER:
    case RINGD__MSG__BODY_DEV_PLAN:
    case RINGD__MSG__BODY_DEV_CONFIRM: return dev_decode(m, out, err, errlen);
    default: return RD_SCHEDMSG_OTHER;
    }
}

void rd_schedmsg_release(rd_schedmsg *s)
{
    free((void *)s->ops);
    free((void *)s->stalled);
    free((void *)s->names);
    s->ops = s->stalled = NULL;
    s->names = NULL;
    s->nops = s->nstalled = s->nnames = 0;
}

/* An OpSpec's entry around its strings and data at its longest: the entry's tag and length (6),
 * 15 numbers and flags with their tags (at most 11 bytes each, an enum's negative varint), the
 * tags and lengths of name, message and data (6 each). */
#define SPEC_FIXED_MAX (6 + 15 * 11 + 3 * 6)

size_t rd_schedmsg_spec_bound(const rd_op_spec *spec)
{
    return strlen(spec->name) + (spec->message != NULL ? strlen(spec->message) : 0) + spec->len +
           SPEC_FIXED_MAX;
}

/* The OpSpec of s, borrowing its strings and data. */
static void spec_encode(const rd_op_spec *s, Ringd__OpSpec *o)
{
    ringd__op_spec__init(o);
    o->name = (char *)s->name;
    o->op = (Ringd__OpType)s->p.coll;
    o->dtype = (Ringd__DataType)s->p.dtype;
    o->redop = (Ringd__ReduceOp)s->p.redop;
    o->root = s->p.root;
    o->count = s->p.count;
    o->prescale = s->p.prescale;
    o->postscale = s->p.postscale;
    o->device = s->p.device != 0;
    o->counts_digest = s->p.counts_digest;
    o->group_digest = s->p.group_digest;
    o->shape = s->p.shape;
    o->status = s->status;
    o->message = (char *)(s->message != NULL ? s->message : "");
    o->direct = s->direct != 0;
    o->data.data = (uint8_t *)s->data;
    o->data.len = s->len;
    o->fill = s->fill;
    o->cached = s->cached;
    if (s->cached != 0) { /* the receivers have the rest in that slot */
        Ringd__OpSpec c = RINGD__OP_SPEC__INIT;
        c.cached = s->cached;
        c.direct = o->direct;
        c.data = o->data;
        *o = c;
    }
}

/* A device-transport message: the message and its body in one block. */
static rd_msg *dev_encode(const rd_schedmsg *v)
{
    union {
        Ringd__DevOffer offer;
        Ringd__DevPlan plan;
        Ringd__DevConfirm confirm;
    } * b;
    rd_msg *m = malloc(sizeof(*m) + sizeof(*b));
    if (m == NULL)
        return NULL;
    ringd__msg__init(m);
    b = (void *)(m + 1);
    char *why = (char *)(v->dev.why != NULL ? v->dev.why : "");
    if (v->kind == RD_SCHEDMSG_DEV_OFFER) {
        ringd__dev_offer__init(&b->offer);
        b->offer.generation = v->generation;
        b->offer.want = (uint32_t)v->dev.want;
        b->offer.device = v->dev.device != 0;
        b->offer.can = v->dev.can != 0;
        b->offer.why = why;
        b->offer.gpu = (char *)(v->dev.gpu != NULL ? v->dev.gpu : "");
        m->body_case = RINGD__MSG__BODY_DEV_OFFER;
        m->dev_offer = &b->offer;
    } else if (v->kind == RD_SCHEDMSG_DEV_PLAN) {
        ringd__dev_plan__init(&b->plan);
        b->plan.generation = v->generation;
        b->plan.transport = (uint32_t)v->dev.transport;
        b->plan.id.data = (uint8_t *)v->dev.id;
        b->plan.id.len = v->dev.id_len;
        b->plan.why = why;
        b->plan.required = v->dev.required != 0;
        m->body_case = RINGD__MSG__BODY_DEV_PLAN;
        m->dev_plan = &b->plan;
    } else {
        ringd__dev_confirm__init(&b->confirm);
        b->confirm.generation = v->generation;
        b->confirm.state = (uint32_t)v->dev.confirm;
        b->confirm.why = why;
        m->body_case = RINGD__MSG__BODY_DEV_CONFIRM;
        m->dev_confirm = &b->confirm;
    }
    return m;
}

/* One block holds the message, its body, the body's array of pointers and the entries they
 * point to: every part has a size that is a multiple of 8, which keeps the next one aligned. */
rd_msg *rd_schedmsg_encode(const rd_schedmsg *v)
{
    if (v->kind != RD_SCHEDMSG_READY && v->kind != RD_SCHEDMSG_GO)
        return dev_encode(v);
    int ready = v->kind == RD_SCHEDMSG_READY;
    size_t n = ready ? v->nops + v->nstalled : v->nnames;
    size_t body = ready ? sizeof(Ringd__Ready) : sizeof(Ringd__Go);
    size_t entry = ready ? sizeof(Ringd__OpSpec) : sizeof(Ringd__GoEntry);
    size_t tail = ready ? 0 : sizeof(Ringd__Tuning);
    rd_msg *m = malloc(sizeof(*m) + body + n * (sizeof(void *) + entry) + tail);
    if (m == NULL)
        return NULL;
    ringd__msg__init(m);
    void **ptrs = (void **)((char *)(m + 1) + body);
    char *entries = (char *)(ptrs + n);
    if (ready) {
        Ringd__Ready *r = (Ringd__Ready *)(m + 1);
        ringd__ready__init(r);
        r->generation = v->generation;
        r->ops = (Ringd__OpSpec **)ptrs;
        r->n_ops = v->nops;
        r->stalled = r->ops + v->nops;
        r->n_stalled = v->nstalled;
        for (size_t i = 0; i < n; i++) {
            r->ops[i] = (Ringd__OpSpec *)(entries + i * entry);
            spec_encode(i < v->nops ? &v->ops[i] : &v->stalled[i - v->nops], r->ops[i]);
        }
        m->body_case = RINGD__MSG__BODY_READY;
        m->ready = r;
    } else {
        Ringd__Go *g = (Ringd__Go *)(m + 1);
        ringd__go__init(g);
        g->generation = v->generation;
        g->ops = (Ringd__GoEntry **)ptrs;
        g->n_ops = n;
        for (size_t i = 0; i < n; i++) {
            g->ops[i] = (Ringd__GoEntry *)(entries + i * entry);
            ringd__go_entry__init(g->ops[i]);
            g->ops[i]->name = (char *)v->names[i];
        }
        Ringd__Tuning *u = (Ringd__Tuning *)(entries + n * entry);
        ringd__tuning__init(u);
        u->fusion_threshold = v->tuning.fusion_threshold;
        u->segment_size = v->tuning.segment_size;
        u->conns = v->tuning.conns;
        u->cycle_us = v->tuning.cycle_us;
        u->autotune = (uint32_t)v->tuning.autotune;
        u->doubling_bytes = v->tuning.doubling_bytes;
        g->tuning = u;
        m->body_case = RINGD__MSG__BODY_GO;
        m->go = g;
    }
    return m;
}

void rd_schedmsg_encoded_free(rd_msg *m)
{
    free(m);
}
