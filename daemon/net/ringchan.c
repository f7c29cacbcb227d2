/* The subscribers of a ring's control channel and the fan-out of its news to them. */
#include "ringchan.h"

#include <assert.h>
#include <string.h>

int rd_ringchan_subscribe(rd_ringchan *t, const rd_ring_channel *ch, void *arg)
{
    assert(!t->calling);
    if (t->n == RD_RINGCHAN_MAX)
        return -1;
    t->ch[t->n] = *ch;
    t->arg[t->n] = arg;
    t->handle[t->n] = t->next_handle++;
    return t->handle[t->n++];
}

void rd_ringchan_unsubscribe(rd_ringchan *t, int handle)
{
    assert(!t->calling);
    int i = 0;
    while (i < t->n && t->handle[i] != handle)
        i++;
    if (handle < 0 || i == t->n)
        return;
    t->n--;
    memmove(&t->ch[i], &t->ch[i + 1], (size_t)(t->n - i) * sizeof(t->ch[0]));
    memmove(&t->arg[i], &t->arg[i + 1], (size_t)(t->n - i) * sizeof(t->arg[0]));
    memmove(&t->handle[i], &t->handle[i + 1], (size_t)(t->n - i) * sizeof(t->handle[0]));
}

rd_status rd_ringchan_forming(rd_ringchan *t, uint64_t generation, int nnodes, int position,
                              const rd_ring_node *nodes)
{
    rd_status st = RINGD_OK;
    t->calling++;
    for (int i = 0; i < t->n && st == RINGD_OK; i++)
        if (t->ch[i].forming != NULL)
            st = t->ch[i].forming(t->arg[i], generation, nnodes, position, nodes);
    t->calling--;
    return st;
}

void rd_ringchan_ended(rd_ringchan *t)
{
    t->calling++;
    for (int i = t->n - 1; i >= 0; i--)
        if (t->ch[i].ended != NULL)
            t->ch[i].ended(t->arg[i]);
    t->calling--;
}

int rd_ringchan_message(rd_ringchan *t, int from, const rd_schedmsg *m)
{
    int took = 0;
    uint32_t bit = (unsigned)m->kind < 32 ? 1u << m->kind : 0;
    t->calling++;
    for (int i = 0; i < t->n; i++) {
        if (!(t->ch[i].kinds & bit) || t->ch[i].message == NULL)
            continue;
        t->ch[i].message(t->arg[i], from, m);
        took++;
    }
    t->calling--;
    return took;
}

void rd_ringchan_flush(rd_ringchan *t)
{
    t->calling++;
    for (int i = 0; i < t->n; i++)
        if (t->ch[i].flush != NULL)
            t->ch[i].flush(t->arg[i]);
    t->calling--;
}
