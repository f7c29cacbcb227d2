/* The timeline's records, and the OpTrace and TimelineReply messages they become. */
#include "trace.h"

#include <stdlib.h>

#include "ringd.pb-c.h"

void rd_trace_msg(Ringd__OpTrace *m, const rd_trace_op *t)
{
    ringd__op_trace__init(m);
    m->seq = t->seq;
    m->name = (char *)(t->name != NULL ? t->name : "");
    m->kind = t->kind;
    m->status = t->status;
    m->bytes = t->bytes;
    m->generation = t->generation;
    m->first_rank = t->first_rank;
    m->n_submit_us = t->submit_us != NULL ? t->nranks : 0;
    m->submit_us = t->submit_us;
    m->ready_us = t->ready_us;
    m->negotiated_us = t->negotiated_us;
    m->started_us = t->started_us;
    m->n_ring_us = t->ring_us[RD_PHASE_BEGIN] != 0 ? RD_PHASES : 0;
    m->ring_us = (int64_t *)t->ring_us;
    m->end_us = t->end_us;
    m->pass = t->pass;
    m->pass_ops = t->pass_ops;
    m->direct = t->direct != 0;
}

/* The reply and its messages, in one allocation after it: ops' pointers, then marks', then the
 * OpTrace and TraceMark messages they point at. */
Ringd__TimelineReply *rd_trace_reply_new(const rd_trace_op *const *ops, size_t nops,
                                         const rd_trace_mark *const *marks, size_t nmarks)
{
    Ringd__TimelineReply *r =
        calloc(1, sizeof(*r) + (nops + nmarks) * sizeof(void *) + nops * sizeof(Ringd__OpTrace) +
                      nmarks * sizeof(Ringd__TraceMark));
    if (r == NULL)
        return NULL;
    ringd__timeline_reply__init(r);
    Ringd__OpTrace **op = (Ringd__OpTrace **)(r + 1);
    Ringd__TraceMark **mk = (Ringd__TraceMark **)(op + nops);
    Ringd__OpTrace *om = (Ringd__OpTrace *)(mk + nmarks);
    Ringd__TraceMark *mm = (Ringd__TraceMark *)(om + nops);
    for (size_t i = 0; i < nops; i++) {
        rd_trace_msg(&om[i], ops[i]);
        op[i] = &om[i];
    }
    for (size_t i = 0; i < nmarks; i++) {
        ringd__trace_mark__init(&mm[i]);
        mm[i].t_us = marks[i]->t_us;
        mm[i].generation = marks[i]->generation;
        mm[i].what = (char *)marks[i]->what;
        mk[i] = &mm[i];
    }
    r->n_ops = nops;
    r->ops = nops > 0 ? op : NULL;
    r->n_marks = nmarks;
    r->marks = nmarks > 0 ? mk : NULL;
    return r;
}

void rd_trace_reply_free(Ringd__TimelineReply *r)
{
    free(r);
}
