/* Decoded client requests into the daemon's plain values. */
#include "request.h"

#include "ringd.pb-c.h"

void rd_hello_of(const Ringd__Hello *m, rd_hello *h)
{
    h->protocol = m->protocol;
    h->job = m->job != NULL ? m->job : "";
    h->world_size = m->world_size;
    h->local_size = m->local_size;
    h->min_size = m->min_size;
    h->arena_size = m->arena_size;
    h->open_timeout_ms = m->open_timeout_ms;
    h->local_rank = m->asks_local_rank ? (int64_t)m->local_rank : -1;
    h->device = m->asks_device ? (int64_t)m->device : -1;
    h->device_arena_size = m->device_arena_size;
    h->timeline = m->timeline;
}

static void tensor_ref_of(const Ringd__TensorRef *t, rd_tensor_ref *r)
{
    r->present = t != NULL;
    r->kind = t != NULL ? (int)t->kind : 0;
    r->device = t != NULL ? t->device : 0;
    r->handle = t != NULL ? t->handle : 0;
    r->offset = t != NULL ? t->offset : 0;
}

void rd_submit_of(const Ringd__Submit *m, rd_submit *s)
{
    s->request_id = m->request_id;
    s->op = (int)m->op;
    s->name = m->name != NULL ? m->name : "";
    s->dtype = (int)m->dtype;
    s->count = m->count;
    s->in_offset = m->in_offset;
    s->out_offset = m->out_offset;
    s->redop = (int)m->redop;
    s->root = m->root;
    s->prescale = m->prescale;
    s->postscale = m->postscale;
    s->generation = m->generation;
    s->refused = m->refused;
    s->refusal = m->refusal != NULL ? m->refusal : "";
    tensor_ref_of(m->input, &s->input);
    tensor_ref_of(m->output, &s->output);
    s->counts = m->counts;
    s->ncounts = m->n_counts;
    s->group = m->group != NULL ? m->group : "";
    s->group_size = m->group_size;
    s->group_index = m->group_index;
    s->join = m->join;
    s->shape = m->shape;
}
