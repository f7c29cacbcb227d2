/* The caches of the ops the nodes of a ring announce: every node's slots in the order it filled
 * them, and this node's by name for lookup. */
#include "opcache.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"

#define RD_OPCACHE_BUCKETS 2048u /* this node's slots by name: twice their most */

/* What a slot holds: what an announcement of it leaves out. */
typedef struct {
    char *name;
    rd_op_params p;
    int direct;
} slot;

/* The slots one node filled, slot k at k - 1. */
typedef struct {
    slot *s;
    uint32_t n, cap;
} slots;

struct rd_opcache {
    int nnodes, self;
    slots *nodes;                             /* by node */
    uint16_t bucket[RD_OPCACHE_BUCKETS];      /* this node's first slot of a name hash */
    uint16_t next[RD_SCHEDMSG_CACHE_MAX + 1]; /* the slot after slot k in its bucket */
};

_Static_assert(RD_SCHEDMSG_CACHE_MAX < UINT16_MAX, "slots fit the buckets' links");

rd_opcache *rd_opcache_new(int nnodes, int self)
{
    rd_opcache *c = calloc(1, sizeof(*c));
    if (c == NULL || (c->nodes = calloc((size_t)nnodes, sizeof(*c->nodes))) == NULL) {
        free(c);
        return NULL;
    }
    c->nnodes = nnodes;
    c->self = self;
    return c;
}

void rd_opcache_free(rd_opcache *c)
{
    if (c == NULL)
        return;
    for (int i = 0; i < c->nnodes; i++) {
        for (uint32_t k = 0; k < c->nodes[i].n; k++)
            free(c->nodes[i].s[k].name);
        free(c->nodes[i].s);
    }
    free(c->nodes);
    free(c);
}

/* Appends what spec leaves out when cached to the slots of node. Returns 0, or -1 out of
 * memory. */
static int fill(slots *t, const rd_op_spec *spec)
{
    if (t->n == t->cap) {
        uint32_t cap = t->cap ? t->cap * 2 : 16;
        slot *s = realloc(t->s, cap * sizeof(*s));
        if (s == NULL)
            return -1;
        t->s = s;
        t->cap = cap;
    }
    char *name = strdup(spec->name);
    if (name == NULL)
        return -1;
    t->s[t->n++] = (slot){name, spec->p, spec->direct};
    return 0;
}

/* 1 when spec is the op slot s holds: the very same values (a scale's bits, not only its value,
 * since the receivers take the slot's). */
static int same(const slot *s, const rd_op_spec *spec)
{
    const rd_op_params *a = &s->p, *b = &spec->p;
    return s->direct == spec->direct && strcmp(s->name, spec->name) == 0 && a->coll == b->coll &&
           a->dtype == b->dtype && a->redop == b->redop && a->root == b->root &&
           a->count == b->count && memcmp(&a->prescale, &b->prescale, sizeof(a->prescale)) == 0 &&
           memcmp(&a->postscale, &b->postscale, sizeof(a->postscale)) == 0 &&
           a->device == b->device && a->counts_digest == b->counts_digest &&
           a->group_digest == b->group_digest && a->shape == b->shape;
}

void rd_opcache_own(rd_opcache *c, rd_op_spec *spec)
{
    slots *t = &c->nodes[c->self];
    size_t b = rd_name_hash(spec->name) % RD_OPCACHE_BUCKETS;
    spec->fill = spec->cached = 0;
    for (uint16_t k = c->bucket[b]; k != 0; k = c->next[k]) {
        if (same(&t->s[k - 1], spec)) {
            spec->cached = k;
            return;
        }
    }
    if (t->n == RD_SCHEDMSG_CACHE_MAX || fill(t, spec) != 0)
        return; /* it goes whole, filling nothing */
    spec->fill = t->n;
    c->next[t->n] = c->bucket[b];
    c->bucket[b] = (uint16_t)t->n;
}

int rd_opcache_heard(rd_opcache *c, int node, rd_op_spec *spec, char *err, size_t errlen)
{
    slots *t = &c->nodes[node];
    if (spec->cached != 0) {
        if (spec->cached > t->n) {
            snprintf(err, errlen, "an op in slot %" PRIu32 " of its cache, of %" PRIu32 " filled",
                     spec->cached, t->n);
            return -1;
        }
        const slot *s = &t->s[spec->cached - 1];
        if (s->direct != spec->direct) {
            snprintf(err, errlen, "tensor '%s' from slot %" PRIu32 " of its cache, %sdirect now",
                     s->name, spec->cached, spec->direct ? "" : "not ");
            return -1;
        }
        spec->name = s->name;
        spec->p = s->p;
        return rd_schedmsg_spec_check(spec, err, errlen);
    }
    if (spec->fill == 0)
        return 0;
    if (spec->fill != t->n + 1) {
        snprintf(err, errlen,
                 "tensor '%s' filling slot %" PRIu32 " of its cache where %" PRIu32 " comes next",
                 spec->name, spec->fill, t->n + 1);
        return -1;
    }
    if (fill(t, spec) != 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}
