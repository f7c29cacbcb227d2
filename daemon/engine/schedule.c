/* Scheduling across nodes: announcements, the negotiation table, the coordinator's order, and
 * the ordered batches run with fusion. */
#include "schedule.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autotune.h"
#include "backend.h"
#include "frame.h"
#include "log.h"
#include "opcache.h"
#include "xfer.h"

/* One order of the coordinator: names of ops bound for the ring, run in that order with its
 * tuning. */
typedef struct batch {
    size_t n;
    char **names;
    rd_tuning tuning;
    struct batch *next;
} batch;

/* An op negotiated here for the ring, waiting for the coordinator's order (oldest first). */
typedef struct ready {
    void *own;
    char *name;
    rd_op_params p;
    struct ready *next;
} ready;

struct rd_sched {
    const rd_config *cfg;
    rd_world *w;
    char job[RD_NAME_MAX + 1];
    rd_sched_events ev;
    void *arg;
    rd_neg *neg;       /* from the ring's forming to its end */
    rd_opcache *cache; /* likewise: the ops the nodes announced, by slot */
    int nnodes, position;
    /* coordinator: names of ring-bound ops done negotiating this loop turn, sent at its end */
    char **order;
    size_t norder, caporder;
    struct event *ev_order;
    batch *orders, *orders_tail; /* orders received, not yet started */
    ready *ready, *ready_tail;   /* this node's ops negotiated for the ring, not yet started */
    int chan;                    /* its subscription to the ring's control channel */
    int held; /* coordinator: orders wait (the ring's device transport is not settled) */
    /* The tuning orders carry: the coordinator's (its flags, or its tuner's), or on another node
     * the last one received; has_tuning 0 before this ring's first order. */
    rd_tuning tuning;
    int has_tuning;
    rd_tuning settled;     /* what autotuning last settled on, at any generation */
    int has_settled;       /* where a tuner this node runs as coordinator starts */
    rd_tuner *tuner;       /* coordinator with --autotune, for the ring's life */
    int64_t last_order_us; /* coordinator: when it last sent an order (--fusion-cycle-us) */
    int refused;           /* the coordinator sent a tuning this node cannot run: no more
                              orders are taken until the ring re-forms */
    /* This node's announcements of this loop turn (copies: names, messages and data owned),
     * sent to every node as one Ready at its end: ops that reach readiness together (a
     * training step's gradients submitted back to back) cost a message per node, not one
     * each, and reach the coordinator together, which orders them as one batch. */
    rd_op_spec *out;
    size_t nout, capout, outbytes;
    struct event *ev_ready;
};

#define RD_GO_OVERHEAD 64       /* a Go's frame around its entries: length, tags, generation */
#define RD_GO_ENTRY_OVERHEAD 16 /* an entry's tags and lengths around its name */
static void on_order(evutil_socket_t fd, short what, void *arg);
static void on_ready(evutil_socket_t fd, short what, void *arg);
static void ready_flush(rd_sched *s);
static void announced_clear(rd_sched *s);

static rd_status ring_forming(rd_sched *s, int nnodes, int position, const rd_ring_node *nodes);
static void ring_ended(rd_sched *s);
static void message_received(rd_sched *s, int from, const rd_schedmsg *m);
static void flush_orders(rd_sched *s);

/* The ring's control channel, heard by the scheduler itself (rd_world_subscribe). */
static rd_status chan_forming(void *arg, uint64_t generation, int nnodes, int position,
                              const rd_ring_node *nodes)
{
    (void)generation;
    return ring_forming(arg, nnodes, position, nodes);
}

static void chan_ended(void *arg)
{
    ring_ended(arg);
}

static void chan_message(void *arg, int from, const rd_schedmsg *m)
{
    message_received(arg, from, m);
}

static void chan_flush(void *arg)
{
    ready_flush(arg);
    flush_orders(arg);
}

rd_sched *rd_sched_new(struct event_base *base, const rd_config *cfg, rd_world *w, const char *job,
                       const rd_sched_events *ev, void *arg)
{
    rd_sched *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->cfg = cfg;
    s->w = w;
    snprintf(s->job, sizeof(s->job), "%s", job);
    s->ev = *ev;
    s->arg = arg;
    s->ev_order = event_new(base, -1, 0, on_order, s);
    s->ev_ready = event_new(base, -1, 0, on_ready, s);
    if (s->ev_order == NULL || s->ev_ready == NULL) {
        if (s->ev_order != NULL)
            event_free(s->ev_order);
        if (s->ev_ready != NULL)
            event_free(s->ev_ready);
        free(s);
        return NULL;
    }
    static const rd_ring_channel chan = {
        .kinds = 1u << RD_SCHEDMSG_READY | 1u << RD_SCHEDMSG_GO,
        .forming = chan_forming,
        .ended = chan_ended,
        .message = chan_message,
        .flush = chan_flush,
    };
    if ((s->chan = rd_world_subscribe(w, &chan, s)) < 0) {
        event_free(s->ev_ready);
        event_free(s->ev_order);
        free(s);
        return NULL;
    }
    return s;
}

static void order_clear(rd_sched *s)
{
    for (size_t i = 0; i < s->norder; i++)
        free(s->order[i]);
    s->norder = 0;
}

/* Removes r (after prev, NULL: the head) from the ready list and frees it. */
static void ready_del(rd_sched *s, ready *prev, ready *r)
{
    if (prev != NULL)
        prev->next = r->next;
    else
        s->ready = r->next;
    if (s->ready_tail == r)
        s->ready_tail = prev;
    free(r->name);
    free(r);
}

void rd_sched_forget(rd_sched *s, const void *own)
{
    if (s == NULL)
        return;
    for (ready *r = s->ready, *prev = NULL; r != NULL; prev = r, r = r->next) {
        if (r->own == own) {
            ready_del(s, prev, r);
            return;
        }
    }
}

static void batch_free(batch *b)
{
    for (size_t i = 0; i < b->n; i++)
        free(b->names[i]);
    free(b->names);
    free(b);
}

static void ring_ended(rd_sched *s)
{
    if (s == NULL) /* a job whose scheduler was never made: nothing of a ring to end */
        return;
    rd_neg_free(s->neg);
    s->neg = NULL;
    rd_opcache_free(s->cache);
    s->cache = NULL;
    event_del(s->ev_order);
    order_clear(s);
    announced_clear(s); /* the next ring hears them anew */
    while (s->orders != NULL) {
        batch *b = s->orders;
        s->orders = b->next;
        batch_free(b);
    }
    s->orders_tail = NULL;
    while (s->ready != NULL)
        ready_del(s, NULL, s->ready);
    rd_tuner_free(s->tuner);
    s->tuner = NULL;
    s->has_tuning = 0;
    s->refused = 0;
}

void rd_sched_free(rd_sched *s)
{
    if (s == NULL)
        return;
    rd_world_unsubscribe(s->w, s->chan);
    ring_ended(s);
    event_free(s->ev_ready);
    event_free(s->ev_order);
    free(s->out);
    free(s->order);
    free(s);
}

static rd_status ring_forming(rd_sched *s, int nnodes, int position, const rd_ring_node *nodes)
{
    ring_ended(s);
    /* The nodes whose announcements pass this one on their way to the coordinator: once they
     * have all announced an op, what this node holds of theirs goes up (negotiated). */
    uint8_t below[RD_RING_NODES_MAX];
    if (nnodes > RD_RING_NODES_MAX)
        return RINGD_E_PROTOCOL;
    for (int i = 0; i < nnodes; i++)
        below[i] = (uint8_t)rd_world_below(s->w, i);
    s->neg = rd_neg_new(nnodes, nodes, position, s->cfg->direct_bytes, below);
    s->cache = rd_opcache_new(nnodes, position);
    if (s->neg == NULL || s->cache == NULL) {
        ring_ended(s);
        return RINGD_E_NOMEM;
    }
    s->nnodes = nnodes;
    s->position = position;
    s->held = 1;
    if (position != 0)
        return RINGD_OK; /* it runs the coordinator's tuning, as its orders carry it */
    /* The coordinator's flags; a tuner starts from what autotuning settled on at the last
     * generation (here or on the coordinator then), as the best setting of a ring one node
     * larger or smaller is likely near it. A ring of one node has nothing to tune. */
    rd_tuning start = {.fusion_threshold = s->cfg->fusion_threshold,
                       .segment_size = s->cfg->segment_size,
                       .conns = (uint32_t)s->cfg->conns_per_link,
                       .cycle_us = (uint32_t)s->cfg->fusion_cycle_us};
    if (s->cfg->autotune && s->has_settled && s->settled.segment_size <= s->cfg->segment_size &&
        s->settled.conns <= (uint32_t)s->cfg->conns_per_link)
        start = s->settled;
    start.autotune = RD_AUTOTUNE_OFF;
    start.doubling_bytes = s->cfg->doubling_bytes; /* not tuned: this coordinator's flag */
    if (s->cfg->autotune && nnodes > 1 &&
        (s->tuner = rd_tuner_new(&start, s->cfg->segment_size, (uint32_t)s->cfg->conns_per_link,
                                 s->cfg->autotune_window_ms * 1000)) == NULL)
        return RINGD_E_NOMEM;
    s->tuning = s->tuner != NULL ? *rd_tuner_current(s->tuner) : start;
    s->last_order_us = 0;
    return RINGD_OK;
}

/* When the oldest op named name that this node has not announced failed on another node, it
 * ends here too. */
static void failed_elsewhere(rd_sched *s, const char *name)
{
    uint32_t status;
    rd_op_params p;
    const char *why = rd_neg_failed(s->neg, name, &status, &p);
    if (why != NULL)
        s->ev.failed_elsewhere(s->arg, name, &p, status, why);
}

void rd_sched_ring_up(rd_sched *s)
{
    char **names;
    size_t nfailed = s->neg != NULL ? rd_neg_failed_names(s->neg, &names) : 0;
    for (size_t i = 0; i < nfailed; i++) {
        if (rd_world_up(s->w) && s->neg != NULL)
            failed_elsewhere(s, names[i]);
        free(names[i]);
    }
    if (nfailed > 0)
        free(names);
}

static int64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Coordinator: the queued order goes out at the end of this loop turn, or with a fusion cycle
 * once a cycle has passed since the last. */
static void order_soon(rd_sched *s)
{
    int64_t wait = s->tuning.cycle_us == 0 ? 0 : s->last_order_us + s->tuning.cycle_us - mono_us();
    if (wait <= 0) {
        event_active(s->ev_order, 0, 0);
        return;
    }
    struct timeval tv = {.tv_sec = wait / 1000000, .tv_usec = wait % 1000000};
    event_add(s->ev_order, &tv);
}

/* Coordinator: queues a ring-bound op for the next order. Ops done negotiating in one loop turn
 * (announcements read together, as they are when ranks submit back to back) go out as one
 * batch, which is what fusion works within. */
static void order_add(rd_sched *s, const char *name)
{
    if (s->norder == s->caporder) {
        size_t cap = s->caporder ? s->caporder * 2 : 64;
        char **o = realloc(s->order, cap * sizeof(*o));
        if (o == NULL) {
            rd_world_drop(s->w, "out of memory ordering ops");
            return;
        }
        s->order = o;
        s->caporder = cap;
    }
    if ((s->order[s->norder] = strdup(name)) == NULL) {
        rd_world_drop(s->w, "out of memory ordering ops");
        return;
    }
    if (s->norder++ == 0)
        order_soon(s);
}

static void go_received(rd_sched *s, const char *const *names, size_t n, const rd_tuning *u);

/* Coordinator, end of a loop turn: sends the queued order to every node and applies it here.
 * An order longer than one Go may carry goes out in parts, one a turn. */
static void on_order(evutil_socket_t fd, short what, void *arg)
{
    rd_sched *s = arg;
    (void)fd;
    (void)what;
    ready_flush(s); /* this node's announcements of the ops ordered go first */
    if (s->norder == 0 || !rd_world_up(s->w)) {
        order_clear(s);
        return;
    }
    if (s->held) /* sent once released */
        return;
    if (rd_world_sealed(s->w)) /* after this node's Bye: the next ring orders them */
        return;
    /* As many names as one Go carries within --max-frame: each costs its bytes and, as an entry
     * of the message, at most RD_GO_ENTRY_OVERHEAD more. */
    size_t n = 0, bytes = RD_GO_OVERHEAD;
    while (n < s->norder && n < RD_SCHEDMSG_OPS_MAX &&
           (n == 0 || bytes + strlen(s->order[n]) + RD_GO_ENTRY_OVERHEAD <= s->cfg->max_frame)) {
        bytes += strlen(s->order[n]) + RD_GO_ENTRY_OVERHEAD;
        n++;
    }
    char **names = malloc(n * sizeof(*names));
    if (names == NULL) {
        order_clear(s);
        rd_world_drop(s->w, "out of memory ordering ops");
        return;
    }
    /* Out of the queue first: applying the order may end the ring, which clears the queue. */
    memcpy(names, s->order, n * sizeof(*names));
    s->norder -= n;
    memmove(s->order, s->order + n, s->norder * sizeof(*s->order));
    if (s->norder > 0)
        event_active(s->ev_order, 0, 0);
    s->last_order_us = mono_us();
    s->has_tuning = 1;
    rd_schedmsg go = {.kind = RD_SCHEDMSG_GO,
                      .names = (const char *const *)names,
                      .nnames = n,
                      .tuning = s->tuning};
    rd_world_send(s->w, NULL, 0, &go);
    go_received(s, go.names, n, &go.tuning);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

int rd_sched_held(const rd_sched *s)
{
    return s != NULL && s->held;
}

void rd_sched_settled(void *arg, int nccl)
{
    rd_sched *s = arg;
    (void)nccl;
    s->held = 0;
    if (s->norder > 0)
        order_soon(s);
}

static void flush_orders(rd_sched *s)
{
    if (s->position == 0)
        on_order(-1, 0, s);
}

static void spec_free(rd_op_spec *spec)
{
    free((char *)spec->name);
    free((char *)spec->message);
    free((uint8_t *)spec->data);
}

/* Forgets the announcements not sent yet. */
static void announced_clear(rd_sched *s)
{
    event_del(s->ev_ready);
    for (size_t i = 0; i < s->nout; i++)
        spec_free(&s->out[i]);
    s->nout = 0;
    s->outbytes = RD_SCHEDMSG_READY_OVERHEAD;
}

/* This node's announcements not sent yet go to every other node as one Ready: at the end of the
 * loop turn, and before an order, a Bye, a stall request, or a Ready that would grow too big. */
static void ready_flush(rd_sched *s)
{
    if (s->nout == 0)
        return;
    rd_schedmsg r = {.kind = RD_SCHEDMSG_READY, .ops = s->out, .nops = s->nout};
    if (rd_world_up(s->w)) {
        /* each op as the other nodes will have it: by the slot it filled, or filling the next
         * (only what is sent fills a slot; should the send fail, nothing more goes out at this
         * generation) */
        for (size_t i = 0; i < s->nout; i++)
            if (s->out[i].status == 0)
                rd_opcache_own(s->cache, &s->out[i]);
        rd_world_send(s->w, NULL, 0, &r);
    }
    announced_clear(s);
}

static void on_ready(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ready_flush(arg);
}

/* Queues spec (copied), an op ready here or failed here, for this turn's Ready. Returns 0, or -1
 * when out of memory. */
static int announced_add(rd_sched *s, const rd_op_spec *spec)
{
    size_t bytes = rd_schedmsg_spec_bound(spec);
    /* --max-frame: every node's, as the nodes of a ring agree on it (PeerHello) */
    if (s->nout > 0 && (s->outbytes + bytes > s->cfg->max_frame || s->nout == RD_SCHEDMSG_OPS_MAX))
        ready_flush(s);
    if (s->nout == s->capout) {
        size_t cap = s->capout ? s->capout * 2 : 16;
        rd_op_spec *o = realloc(s->out, cap * sizeof(*o));
        if (o == NULL)
            return -1;
        s->out = o;
        s->capout = cap;
    }
    rd_op_spec c = *spec;
    c.name = strdup(spec->name);
    c.message = strdup(spec->message);
    c.data = spec->len > 0 ? malloc(spec->len) : NULL;
    if (c.name == NULL || c.message == NULL || (spec->len > 0 && c.data == NULL)) {
        spec_free(&c);
        return -1;
    }
    if (spec->len > 0)
        memcpy((uint8_t *)c.data, spec->data, spec->len);
    if (s->nout == 0) {
        s->outbytes = RD_SCHEDMSG_READY_OVERHEAD;
        event_active(s->ev_ready, 0, 0);
    }
    s->out[s->nout++] = c;
    s->outbytes += bytes;
    return 0;
}

/* Keeps this node's op own, named name with params p, for the coordinator's order. Returns 1,
 * or 0 when out of memory. */
static int ready_add(rd_sched *s, void *own, const char *name, const rd_op_params *p)
{
    ready *r = calloc(1, sizeof(*r));
    if (r == NULL || (r->name = strdup(name)) == NULL) {
        free(r);
        return 0;
    }
    r->own = own;
    r->p = *p;
    if (s->ready_tail != NULL)
        s->ready_tail->next = r;
    else
        s->ready = r;
    s->ready_tail = r;
    return 1;
}

/* Releases what the control tree holds that the announcements just recorded make wanted, and
 * hands every op now done negotiating to the job; the coordinator also orders those bound for
 * the ring, for every node, in the order they got done here. */
static void negotiated(rd_sched *s)
{
    unsigned news = rd_neg_news(s->neg);
    if (news != 0)
        rd_world_release(s->w, news);
    rd_neg_done *done;
    size_t n = rd_neg_take(s->neg, &done);
    if (n == 0)
        return;
    for (size_t i = 0; i < n; i++) {
        rd_op_params p;
        int kept = s->ev.negotiated(s->arg, done[i].own, &done[i].e, &p);
        if (kept == 1)
            rd_sched_keep(s, done[i].own, done[i].e.name, &p);
        if (s->neg == NULL) /* the job ended the ring meanwhile */
            break;
    }
    rd_neg_done_free(done, n);
}

void rd_sched_keep(rd_sched *s, void *own, const char *name, const rd_op_params *p)
{
    if (!ready_add(s, own, name, p)) {
        rd_world_drop(s->w, "out of memory keeping an op for the coordinator's order");
        return;
    }
    /* A sealed coordinator orders nothing more: what it has not ordered carries over. */
    if (s->position == 0 && !rd_world_sealed(s->w))
        order_add(s, name);
    rd_sched_run(s);
}

int rd_sched_announce(rd_sched *s, const char *name, const rd_op_params *p, rd_status status,
                      const char *message, int direct, const uint8_t *data, size_t len, void *own)
{
    if (!rd_world_up(s->w) || rd_world_sealed(s->w) || s->neg == NULL)
        return 0; /* held for the next ring */
    rd_op_spec spec = {.name = name,
                       .p = *p,
                       .status = (uint32_t)status,
                       .message = message != NULL ? message : "",
                       .direct = direct,
                       .data = data,
                       .len = len};
    if (announced_add(s, &spec) != 0) {
        rd_world_drop(s->w, "out of memory queueing an announcement");
        return 1;
    }
    char err[256];
    if (rd_neg_ready(s->neg, s->position, &spec, own, err, sizeof(err)) != 0) {
        rd_world_drop(s->w, err);
        return 1;
    }
    negotiated(s);
    return 1;
}

/* A node's Ready: ops it has ready (or failed there), and ops it asks to end as stalled. */
static void ready_received(rd_sched *s, int from, const rd_schedmsg *r)
{
    char err[256];
    for (size_t i = 0; i < r->nops; i++) {
        rd_op_spec op = r->ops[i], *spec = &op;
        if (rd_opcache_heard(s->cache, from, spec, err, sizeof(err)) != 0) {
            char why[RD_NAME_MAX + 300];
            snprintf(why, sizeof(why), "announcement of node %s: %s", rd_neg_node(s->neg, from),
                     err);
            rd_world_drop(s->w, why);
            return;
        }
        if (rd_neg_ready(s->neg, from, spec, NULL, err, sizeof(err)) != 0) {
            rd_world_drop(s->w, err);
            return;
        }
        /* A failure known elsewhere ends the op here now, not once this node's ranks all
         * submitted it: no rank waits for what another already knows. (While the ring forms,
         * its clients are still on the last one: rd_sched_ring_up looks then.) */
        /* (its name may be the cache's, which ends with the ring) */
        char name[RD_NAME_MAX + 1];
        snprintf(name, sizeof(name), "%s", spec->name);
        if (rd_world_up(s->w))
            failed_elsewhere(s, name);
        if (s->neg == NULL)
            return;
        /* One op at a time, in the node's order: a join it announced ends (is negotiated) before
         * this node hears what that node's ranks submit after it, and after its part in what
         * they submitted before. */
        if (rd_world_up(s->w) && s->ev.heard != NULL)
            s->ev.heard(s->arg);
        if (s->neg == NULL)
            return;
        negotiated(s);
        if (s->neg == NULL)
            return;
    }
    /* Ops a node asks to end as stalled: ended here only if this node has not announced them,
     * by announcing them failed, which every node then sees alike. */
    for (size_t i = 0; i < r->nstalled && rd_world_up(s->w) && s->neg != NULL; i++) {
        const rd_op_spec *spec = &r->stalled[i];
        if (!rd_neg_awaits(s->neg, spec->name, from))
            continue;
        rd_op_params p = rd_op_params_announceable(spec->p);
        s->ev.failed_elsewhere(s->arg, spec->name, &p, RINGD_E_STALLED, spec->message);
    }
    if (s->neg != NULL)
        negotiated(s);
}

size_t rd_sched_unannounced(const rd_sched *s, rd_neg_unheard *out, size_t max)
{
    if (s == NULL || s->neg == NULL || !rd_world_up(s->w) || rd_world_sealed(s->w))
        return 0;
    return rd_neg_unannounced(s->neg, out, max);
}

/* An order of the coordinator (or this node's own, as coordinator), names[0..n) with tuning u:
 * queued, then started in order as its ops are negotiated here. */
static void go_received(rd_sched *s, const char *const *names, size_t n, const rd_tuning *u)
{
    if (s->refused) /* the ring re-forms: running later orders would pair passes wrongly */
        return;
    if (s->position != 0 &&
        (u->segment_size > s->cfg->segment_size || u->conns > (uint32_t)s->cfg->conns_per_link)) {
        char why[200];
        snprintf(why, sizeof(why),
                 "the coordinator ordered segments of %llu bytes over %u connections, beyond "
                 "this node's --segment-size %llu or --conns-per-link %lld",
                 (unsigned long long)u->segment_size, u->conns,
                 (unsigned long long)s->cfg->segment_size, (long long)s->cfg->conns_per_link);
        s->refused = 1;
        rd_world_drop(s->w, why);
        return;
    }
    if (s->position != 0) {
        if (u->autotune == RD_AUTOTUNE_SETTLED &&
            (!s->has_tuning || s->tuning.autotune != RD_AUTOTUNE_SETTLED)) {
            char what[160];
            rd_tuning_describe(what, sizeof(what), u);
            rd_log(RD_LOG_INFO, "schedule", "job '%s': autotune settled on %s (the coordinator's)",
                   s->job, what);
        }
        s->tuning = *u;
        s->has_tuning = 1;
        if (u->autotune == RD_AUTOTUNE_SETTLED) {
            s->settled = *u;
            s->has_settled = 1;
        }
    }
    batch *b = calloc(1, sizeof(*b));
    if (b == NULL || (b->names = calloc(n ? n : 1, sizeof(char *))) == NULL) {
        free(b);
        rd_world_drop(s->w, "out of memory queueing the coordinator's order");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if ((b->names[b->n] = strdup(names[i])) == NULL)
            continue;
        b->n++;
    }
    b->tuning = *u;
    if (s->orders_tail != NULL)
        s->orders_tail->next = b;
    else
        s->orders = b;
    s->orders_tail = b;
    rd_sched_run(s);
}

static void message_received(rd_sched *s, int from, const rd_schedmsg *m)
{
    if (s->neg == NULL)
        return;
    if (m->kind == RD_SCHEDMSG_READY)
        ready_received(s, from, m);
    else if (m->kind == RD_SCHEDMSG_GO && from == 0 && s->position != 0)
        go_received(s, m->names, m->nnames, &m->tuning);
}

void rd_sched_missing(const rd_sched *s, const char *name, const void *own, char *buf, size_t len)
{
    buf[0] = '\0';
    if (s->neg != NULL)
        rd_neg_missing(s->neg, name, own, buf, len);
}

void rd_sched_stalled(rd_sched *s, const char *name, const void *own, const char *message)
{
    int to[RD_RING_NODES_MAX];
    if (!rd_world_up(s->w) || s->neg == NULL)
        return;
    int nto = rd_neg_missing_nodes(s->neg, own, to, RD_RING_NODES_MAX);
    rd_op_spec spec = {.name = name,
                       .p = {.coll = RD_COLL_BARRIER},
                       .status = RINGD_E_STALLED,
                       .message = message};
    ready_flush(s); /* after what this node announced */
    rd_schedmsg r = {.kind = RD_SCHEDMSG_READY, .stalled = &spec, .nstalled = 1};
    rd_world_send(s->w, to, nto, &r);
}

int rd_sched_orders_waiting(const rd_sched *s)
{
    return s != NULL && s->orders != NULL;
}

/* 1 when o (params q, ob bytes) may join a group that starts with first and holds bytes. */
static int fuses(const rd_op_params *first, const rd_op_params *q, uint64_t ob, uint64_t bytes,
                 uint64_t threshold)
{
    return first->coll == RD_COLL_ALLREDUCE && q->coll == RD_COLL_ALLREDUCE && !first->device &&
           !q->device && first->dtype == q->dtype && first->redop == q->redop &&
           first->prescale == q->prescale && first->postscale == q->postscale &&
           bytes + ob <= threshold;
}

size_t rd_sched_group(const rd_op_params *p, size_t n, uint64_t threshold, size_t *group)
{
    size_t ngroups = 0;
    size_t *lead = malloc((n ? n : 1) * sizeof(*lead));
    uint64_t *gbytes = malloc((n ? n : 1) * sizeof(*gbytes));
    if (lead == NULL || gbytes == NULL) {
        free(lead);
        free(gbytes);
        return SIZE_MAX;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t ob = p[i].count * rd_dtype_size((rd_dtype)p[i].dtype);
        group[i] = SIZE_MAX;
        if (p[i].coll != RD_COLL_ALLREDUCE || p[i].device || ob >= threshold)
            continue;
        size_t g = 0;
        while (g < ngroups && !fuses(&p[lead[g]], &p[i], ob, gbytes[g], threshold))
            g++;
        if (g == ngroups) {
            lead[ngroups] = i;
            gbytes[ngroups++] = 0;
        }
        group[i] = g;
        gbytes[g] += ob;
    }
    free(lead);
    free(gbytes);
    return ngroups;
}

/* Coordinator with --autotune: the batch of p[0..n) starts now; the tuner may change the
 * setting the next orders carry. */
static void tune(rd_sched *s, const rd_op_params *p, size_t n)
{
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        bytes += p[i].count * rd_dtype_size((rd_dtype)p[i].dtype);
    if (!rd_tuner_feed(s->tuner, bytes, mono_us()))
        return;
    const rd_tuning *u = rd_tuner_current(s->tuner);
    uint32_t trials;
    double bps;
    rd_tuner_stats(s->tuner, &trials, &bps);
    char what[160];
    rd_tuning_describe(what, sizeof(what), u);
    if (u->autotune == RD_AUTOTUNE_SETTLED) {
        s->settled = *u;
        s->has_settled = 1;
        rd_log(RD_LOG_INFO, "schedule",
               "job '%s': autotune settled on %s: %.3f GB/s ordered, after %u settings tried",
               s->job, what, bps / 1e9, trials);
    } else {
        rd_log(RD_LOG_DEBUG, "schedule", "job '%s': autotune tries %s (best so far %.3f GB/s)",
               s->job, what, bps / 1e9);
    }
    s->tuning = *u;
}

/* Starts batch b if every op of it is negotiated here: each fused group as one ring pass, in
 * the order of its first op, other ops alone. Returns 1 when the batch started. */
static int batch_start(rd_sched *s, const batch *b)
{
    size_t n = b->n;
    void **owns = calloc(n ? n : 1, sizeof(*owns));
    void **members = calloc(n ? n : 1, sizeof(*members));
    rd_op_params *p = calloc(n ? n : 1, sizeof(*p));
    size_t *group = calloc(n ? n : 1, sizeof(*group));
    int started = 0;
    if (owns == NULL || members == NULL || p == NULL || group == NULL)
        goto out; /* tried again on the next order or negotiation */
    for (size_t i = 0; i < n; i++) {
        size_t skip = 0;
        for (size_t k = 0; k < i; k++)
            skip += strcmp(b->names[k], b->names[i]) == 0;
        ready *r = s->ready;
        while (r != NULL && (strcmp(r->name, b->names[i]) != 0 || skip-- > 0))
            r = r->next;
        if (r == NULL)
            goto out;
        owns[i] = r->own;
        p[i] = r->p;
    }
    if (rd_sched_group(p, n, b->tuning.fusion_threshold, group) == SIZE_MAX)
        goto out; /* every node must group alike: never fall back to running ops alone */
    for (size_t i = 0; i < n; i++) /* they start now: the job has them from here on */
        rd_sched_forget(s, owns[i]);
    if (s->tuner != NULL)
        tune(s, p, n);
    for (size_t i = 0; i < n; i++) {
        if (group[i] == SIZE_MAX) {
            s->ev.start(s->arg, &owns[i], 1, &b->tuning);
            continue;
        }
        size_t k, nm = 0;
        for (k = 0; k < i && group[k] != group[i]; k++)
            ;
        if (k < i) /* not the group's first op: started with it */
            continue;
        for (k = i; k < n; k++)
            if (group[k] == group[i])
                members[nm++] = owns[k];
        s->ev.start(s->arg, members, nm, &b->tuning);
    }
    started = 1;
out:
    free(group);
    free(p);
    free(members);
    free(owns);
    return started;
}

void rd_sched_run(rd_sched *s)
{
    while (s->orders != NULL && batch_start(s, s->orders)) {
        batch *b = s->orders;
        s->orders = b->next;
        if (s->orders == NULL)
            s->orders_tail = NULL;
        batch_free(b);
    }
}

void rd_sched_describe(const rd_sched *s, rd_world_status *ws)
{
    if (s == NULL || !s->has_tuning)
        return;
    ws->has_tuning = 1;
    ws->tuning = s->tuning;
    if (s->tuner != NULL)
        rd_tuner_stats(s->tuner, &ws->autotune_trials, &ws->autotune_best_bps);
}
