/* The caches of the ops the nodes of a ring announce: every node's slots in the order it filled
 * them, and this node's by name for lookup. */
#include "opcache.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "negotiate.h"

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

/* 1 when spec is the op slot s holds. */
static int same(const slot *s, const rd_op_spec *spec)
{
    char fields[96];
    return s->direct == spec->direct && s->p.device == spec->p.device &&
           strcmp(s->name, spec->name) == 0 &&
           rd_op_params_compare(&s->p, &spec->p, fields, sizeof(fields));
}

int rd_opcache_own(rd_opcache *c, rd_op_spec *spec)
{
    slots *t = &c->nodes[c->self];
    size_t b = rd_name_hash(spec->name) % RD_OPCACHE_BUCKETS;
    for (uint16_t k = c->bucket[b]; k != 0; k = c->next[k]) {
        if (same(&t->s[k - 1], spec)) {
            spec->cached = k;
            return 0;
        }
    }
    if (t->n == RD_SCHEDMSG_CACHE_MAX)
        return 0; /* it goes whole */
    if (fill(t, spec) != 0)
        return -1;
    spec->fill = t->n;
    c->next[t->n] = c->bucket[b];
    c->bucket[b] = (uint16_t)t->n;
    return 0;
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
