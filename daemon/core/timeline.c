/* Timeline records in bounded rings: ops and membership marks. */
#include "timeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "counters.h"

#define RD_TIMELINE_MARKS 1024

struct rd_timeline {
    rd_trace_op *ops; /* max slots, a ring: the oldest at head */
    rd_trace_mark *marks;
    size_t max, head, n;
    size_t mmax, mhead, mn; /* marks: membership changes are rare; RD_TIMELINE_MARKS at most */
    uint64_t dropped;
};

rd_timeline *rd_timeline_new(size_t max_ops)
{
    rd_timeline *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    t->max = max_ops > 0 ? max_ops : 1;
    t->ops = calloc(t->max, sizeof(*t->ops));
    t->mmax = t->max < RD_TIMELINE_MARKS ? t->max : RD_TIMELINE_MARKS;
    t->marks = calloc(t->mmax, sizeof(*t->marks));
    if (t->ops == NULL || t->marks == NULL) {
        rd_timeline_free(t);
        return NULL;
    }
    return t;
}

static void op_clear(rd_trace_op *o)
{
    free((char *)o->name);
    free(o->submit_us);
    memset(o, 0, sizeof(*o));
}

void rd_timeline_free(rd_timeline *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; t->ops != NULL && i < t->n; i++)
        op_clear(&t->ops[(t->head + i) % t->max]);
    free(t->ops);
    free(t->marks);
    free(t);
}

void rd_timeline_op(rd_timeline *t, const rd_trace_op *op)
{
    char *name = strdup(op->name != NULL ? op->name : "");
    int64_t *sub = op->nranks > 0 ? malloc(op->nranks * sizeof(*sub)) : NULL;
    if (name == NULL || (op->nranks > 0 && sub == NULL)) {
        free(name);
        free(sub);
        t->dropped++;
        return;
    }
    if (op->nranks > 0)
        memcpy(sub, op->submit_us, op->nranks * sizeof(*sub));
    rd_trace_op *slot;
    if (t->n == t->max) { /* full: the oldest goes */
        slot = &t->ops[t->head];
        op_clear(slot);
        t->head = (t->head + 1) % t->max;
        t->dropped++;
    } else {
        slot = &t->ops[(t->head + t->n++) % t->max];
    }
    *slot = *op;
    slot->name = name;
    slot->submit_us = sub;
}

void rd_timeline_mark(rd_timeline *t, uint64_t generation, const char *what)
{
    rd_trace_mark *m;
    if (t->mn == t->mmax) {
        m = &t->marks[t->mhead];
        t->mhead = (t->mhead + 1) % t->mmax;
        t->dropped++;
    } else {
        m = &t->marks[(t->mhead + t->mn++) % t->mmax];
    }
    m->t_us = rd_now_us();
    m->generation = generation;
    snprintf(m->what, sizeof(m->what), "%s", what);
}

const rd_trace_op *rd_timeline_ops(const rd_timeline *t, size_t i)
{
    return i < t->n ? &t->ops[(t->head + i) % t->max] : NULL;
}

size_t rd_timeline_nops(const rd_timeline *t)
{
    return t->n;
}

const rd_trace_mark *rd_timeline_marks(const rd_timeline *t, size_t i)
{
    return i < t->mn ? &t->marks[(t->mhead + i) % t->mmax] : NULL;
}

size_t rd_timeline_nmarks(const rd_timeline *t)
{
    return t->mn;
}

uint64_t rd_timeline_dropped(const rd_timeline *t)
{
    return t->dropped;
}
