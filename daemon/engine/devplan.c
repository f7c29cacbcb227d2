/* The device transport of a ring generation: offers, the coordinator's plan, communicators
 * confirmed, and the deadlines that keep every step bounded. */
#include "devplan.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

static const char *const state_names[RD_DEVPLAN_NSTATES] = {
    "idle", "linking", "offering", "joining", "formed", "nccl", "tcp", "failed"};

/* Which state may follow which (bit per state); every state may go back to idle. */
#define B(st) (1u << (st))
static const unsigned moves[RD_DEVPLAN_NSTATES] = {
    [RD_DEVPLAN_IDLE] = B(RD_DEVPLAN_LINKING),
    [RD_DEVPLAN_LINKING] = B(RD_DEVPLAN_OFFERING),
    [RD_DEVPLAN_OFFERING] = B(RD_DEVPLAN_JOINING) | B(RD_DEVPLAN_TCP) | B(RD_DEVPLAN_FAILED),
    [RD_DEVPLAN_JOINING] = B(RD_DEVPLAN_FORMED) | B(RD_DEVPLAN_NCCL) | B(RD_DEVPLAN_FAILED),
    [RD_DEVPLAN_FORMED] = B(RD_DEVPLAN_NCCL) | B(RD_DEVPLAN_FAILED),
    [RD_DEVPLAN_NCCL] = 0,
    [RD_DEVPLAN_TCP] = 0,
    [RD_DEVPLAN_FAILED] = 0,
};
#undef B

struct rd_devplan {
    rd_devplan_events ev;
    void *arg;
    rd_devplan_state state;
    uint64_t generation;
    int nnodes, position;
    char **names;
    int64_t timeout_ms, deadline_ms;
    /* coordinator: each node's offer (its why owned) and how far its communicator came (0, or
     * RD_DEV_JOINED / RD_DEV_FORMED) */
    rd_devplan_offer *offers;
    unsigned char *offered, *progress;
    int required;
    char why[RD_SCHEDMSG_MESSAGE_MAX + 1];
};

const char *rd_devplan_state_name(rd_devplan_state st)
{
    return st < RD_DEVPLAN_NSTATES ? state_names[st] : "?";
}

static void set_state(rd_devplan *d, rd_devplan_state st)
{
    if (st != RD_DEVPLAN_IDLE && !(moves[d->state] & (1u << st))) {
        rd_log(RD_LOG_ERROR, "devplan", "illegal move %s -> %s at generation %" PRIu64,
               state_names[d->state], state_names[st], d->generation);
        abort(); /* a programmer error: every caller checks the state first */
    }
    rd_log(RD_LOG_DEBUG, "devplan", "generation %" PRIu64 ": %s -> %s", d->generation,
           state_names[d->state], state_names[st]);
    d->state = st;
}

int rd_devplan_decide(const rd_devplan_offer *offers, const char *const *names, int n, char *why,
                      size_t len)
{
    static const char *const wants[] = {"auto", "nccl", "tcp"};
    for (int i = 0; i < n; i++) {
        const rd_devplan_offer *o = &offers[i];
        if (o->want == RD_DEV_WANT_TCP)
            snprintf(why, len, "node %s: --gpu-transport %s", names[i], wants[o->want]);
        else if (!o->device)
            snprintf(why, len, "node %s: its ranks pass host memory", names[i]);
        else if (!o->can)
            snprintf(why, len, "node %s: %s", names[i], o->why != NULL ? o->why : "no NCCL");
        else
            continue;
        return RD_DEV_TCP;
    }
    for (int i = 0; i < n; i++)
        for (int k = i + 1; k < n && offers[i].gpu != NULL && offers[i].gpu[0] != '\0'; k++)
            if (offers[k].gpu != NULL && strcmp(offers[i].gpu, offers[k].gpu) == 0) {
                snprintf(why, len, "nodes %s and %s share GPU %s (NCCL takes one rank per GPU)",
                         names[i], names[k], offers[i].gpu);
                return RD_DEV_TCP;
            }
    if (len > 0)
        why[0] = '\0';
    return RD_DEV_NCCL;
}

rd_devplan *rd_devplan_new(const rd_devplan_events *ev, void *arg)
{
    rd_devplan *d = calloc(1, sizeof(*d));
    if (d == NULL)
        return NULL;
    d->ev = *ev;
    d->arg = arg;
    return d;
}

/* Forgets the generation's nodes. */
static void nodes_free(rd_devplan *d)
{
    for (int i = 0; i < d->nnodes; i++) {
        free(d->names[i]);
        if (d->offers != NULL) {
            free((char *)d->offers[i].why);
            free((char *)d->offers[i].gpu);
        }
    }
    free(d->names);
    free(d->offers);
    free(d->offered);
    free(d->progress);
    d->names = NULL;
    d->offers = NULL;
    d->offered = d->progress = NULL;
    d->nnodes = 0;
}

void rd_devplan_free(rd_devplan *d)
{
    if (d == NULL)
        return;
    nodes_free(d);
    free(d);
}

void rd_devplan_end(rd_devplan *d)
{
    if (d->state != RD_DEVPLAN_IDLE)
        set_state(d, RD_DEVPLAN_IDLE);
    nodes_free(d);
    d->deadline_ms = 0;
    d->why[0] = '\0';
    d->required = 0;
}

/* Settles the generation on st (NCCL or TCP; why for TCP). */
static void settle(rd_devplan *d, rd_devplan_state st, const char *why)
{
    set_state(d, st);
    d->deadline_ms = 0;
    snprintf(d->why, sizeof(d->why), "%s", why);
    rd_log(RD_LOG_INFO, "devplan", "generation %" PRIu64 ": device ops cross nodes on %s%s%s",
           d->generation, st == RD_DEVPLAN_NCCL ? "NCCL" : "the TCP ring", why[0] ? ": " : "", why);
    d->ev.settled(d->arg, st, d->why);
}

static void fail(rd_devplan *d, const int *aside, int naside, int nccl, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Fails the generation (why from fmt), naming aside[0..naside) for setting aside; nccl: NCCL
 * itself failed. */
static void fail(rd_devplan *d, const int *aside, int naside, int nccl, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->why, sizeof(d->why), fmt, ap);
    va_end(ap);
    set_state(d, RD_DEVPLAN_FAILED);
    d->deadline_ms = 0;
    rd_log(RD_LOG_WARN, "devplan", "generation %" PRIu64 ": NCCL failed: %s", d->generation,
           d->why);
    d->ev.failed(d->arg, d->why, aside, naside, nccl);
}

/* Sends a DevConfirm of state (why for a failure) to the coordinator. */
static void confirm(rd_devplan *d, int state, const char *why)
{
    rd_schedmsg m = {.kind = RD_SCHEDMSG_DEV_CONFIRM,
                     .generation = d->generation,
                     .dev = {.confirm = state, .why = why}};
    d->ev.send(d->arg, 0, &m);
}

/* Starts this node's communicator from the plan's id; confirms it joined, or fails. */
static void join(rd_devplan *d, const uint8_t *id, size_t len, int64_t now_ms)
{
    char err[512] = "";
    set_state(d, RD_DEVPLAN_JOINING);
    d->deadline_ms = now_ms + (d->position == 0 ? 1 : 2) * d->timeout_ms;
    if (d->ev.join(d->arg, id, len, d->nnodes, d->position, err, sizeof(err)) != 0) {
        if (d->position != 0)
            confirm(d, RD_DEV_FAILED, err);
        fail(d, NULL, 0, 1, "node %s could not start its NCCL communicator: %s",
             d->names[d->position], err);
        return;
    }
    if (d->position == 0)
        d->progress[0] = RD_DEV_JOINED;
    else
        confirm(d, RD_DEV_JOINED, "");
}

/* Coordinator: settles on NCCL once every node's communicator formed. */
static void all_formed(rd_devplan *d)
{
    for (int i = 0; i < d->nnodes; i++)
        if (d->progress[i] != RD_DEV_FORMED)
            return;
    settle(d, RD_DEVPLAN_NCCL, "");
}

/* Coordinator: once every node has offered, plans the generation and tells every node. */
static void plan(rd_devplan *d, int64_t now_ms)
{
    char why[RD_SCHEDMSG_MESSAGE_MAX + 1], err[512] = "";
    uint8_t id[RD_SCHEDMSG_ID_MAX];
    size_t len = 0;
    for (int i = 0; i < d->nnodes; i++)
        if (!d->offered[i])
            return;
    int transport =
        rd_devplan_decide(d->offers, (const char *const *)d->names, d->nnodes, why, sizeof(why));
    if (transport == RD_DEV_NCCL && (d->ev.make_id(d->arg, id, &len, err, sizeof(err)) != 0 ||
                                     len == 0 || len > RD_SCHEDMSG_ID_MAX)) {
        transport = RD_DEV_TCP;
        snprintf(why, sizeof(why), "node %s could not make an NCCL id: %.400s", d->names[0],
                 err[0] ? err : "an id of no length");
    }
    rd_schedmsg m = {.kind = RD_SCHEDMSG_DEV_PLAN,
                     .generation = d->generation,
                     .dev = {.transport = transport, .why = why}};
    if (transport == RD_DEV_NCCL) {
        m.dev.id = id;
        m.dev.id_len = len;
    } else {
        for (int i = 0; i < d->nnodes; i++)
            d->required |= d->offers[i].want == RD_DEV_WANT_NCCL;
        m.dev.required = d->required;
    }
    d->ev.send(d->arg, -1, &m);
    if (transport == RD_DEV_TCP)
        settle(d, RD_DEVPLAN_TCP, why);
    else
        join(d, id, len, now_ms);
}

/* Records offer o of the node at position i (its strings copied). Returns 0, or -1 out of
 * memory. */
static int offer_keep(rd_devplan *d, int i, const rd_devplan_offer *o)
{
    char *why = strdup(o->why != NULL ? o->why : ""), *gpu = strdup(o->gpu != NULL ? o->gpu : "");
    if (why == NULL || gpu == NULL) {
        free(why);
        free(gpu);
        return -1;
    }
    d->offers[i] = *o;
    d->offers[i].why = why;
    d->offers[i].gpu = gpu;
    d->offered[i] = 1;
    return 0;
}

int rd_devplan_start(rd_devplan *d, uint64_t generation, int nnodes, int position,
                     const char *const *names, int64_t timeout_ms)
{
    rd_devplan_end(d);
    d->generation = generation;
    if ((d->names = calloc((size_t)nnodes, sizeof(*d->names))) == NULL)
        return -1;
    d->nnodes = nnodes;
    for (int i = 0; i < nnodes; i++)
        if ((d->names[i] = strdup(names[i])) == NULL) {
            nodes_free(d);
            return -1;
        }
    d->position = position;
    d->timeout_ms = timeout_ms;
    if (position == 0 && ((d->offers = calloc((size_t)nnodes, sizeof(*d->offers))) == NULL ||
                          (d->offered = calloc((size_t)nnodes, 1)) == NULL ||
                          (d->progress = calloc((size_t)nnodes, 1)) == NULL)) {
        nodes_free(d);
        return -1;
    }
    set_state(d, RD_DEVPLAN_LINKING);
    return 0;
}

int rd_devplan_up(rd_devplan *d, const rd_devplan_offer *own, int64_t now_ms)
{
    if (d->state != RD_DEVPLAN_LINKING)
        return 0;
    if (d->position == 0 && offer_keep(d, 0, own) != 0)
        return -1;
    set_state(d, RD_DEVPLAN_OFFERING);
    d->deadline_ms = now_ms + (d->position == 0 ? 1 : 2) * d->timeout_ms;
    if (d->nnodes == 1) {
        settle(d, RD_DEVPLAN_TCP, "the ring is one node");
        return 0;
    }
    if (d->position == 0) {
        plan(d, now_ms);
        return 0;
    }
    rd_schedmsg m = {.kind = RD_SCHEDMSG_DEV_OFFER,
                     .generation = d->generation,
                     .dev = {.want = own->want,
                             .device = own->device,
                             .can = own->can,
                             .why = own->why,
                             .gpu = own->gpu}};
    d->ev.send(d->arg, 0, &m);
    return 0;
}

/* Coordinator: a node's DevConfirm. Returns 0, or -1 with err set. */
static int confirmed(rd_devplan *d, int from, const rd_devmsg *c, char *err, size_t errlen)
{
    if (d->state != RD_DEVPLAN_JOINING && d->state != RD_DEVPLAN_FORMED) {
        snprintf(err, errlen, "a DevConfirm with no NCCL plan (%s)", state_names[d->state]);
        return -1;
    }
    if (c->confirm == RD_DEV_FAILED) {
        fail(d, NULL, 0, 1, "node %s: %s", d->names[from], c->why);
        return 0;
    }
    if (c->confirm != d->progress[from] + 1) { /* joined, then formed: once each */
        snprintf(err, errlen, "a DevConfirm of state %d after state %d", c->confirm,
                 d->progress[from]);
        return -1;
    }
    d->progress[from] = (unsigned char)c->confirm;
    if (c->confirm == RD_DEV_FORMED && d->state == RD_DEVPLAN_FORMED)
        all_formed(d);
    return 0;
}

int rd_devplan_message(rd_devplan *d, int from, const rd_schedmsg *m, int64_t now_ms, char *err,
                       size_t errlen)
{
    if (d->state == RD_DEVPLAN_IDLE || d->state == RD_DEVPLAN_FAILED ||
        m->generation != d->generation) {
        rd_log(RD_LOG_DEBUG, "devplan",
               "ignoring a device transport message of generation %" PRIu64
               " at generation %" PRIu64 " (%s)",
               m->generation, d->generation, state_names[d->state]);
        return 0;
    }
    if (from < 0 || from >= d->nnodes || from == d->position) {
        snprintf(err, errlen, "a device transport message from position %d of %d", from, d->nnodes);
        return -1;
    }
    if (from == 0 && m->kind != RD_SCHEDMSG_DEV_PLAN) {
        snprintf(err, errlen,
                 "a device transport message from the coordinator that only "
                 "nodes send");
        return -1;
    }
    switch (m->kind) {
    case RD_SCHEDMSG_DEV_OFFER: {
        rd_devplan_offer o = {m->dev.want, m->dev.device, m->dev.can, m->dev.why, m->dev.gpu};
        if (d->position != 0 || d->offered[from] ||
            (d->state != RD_DEVPLAN_LINKING && d->state != RD_DEVPLAN_OFFERING)) {
            snprintf(err, errlen, "a DevOffer %s",
                     d->position != 0 ? "to a node that does "
                                        "not coordinate"
                                      : "from a node that offered already");
            return -1;
        }
        if (offer_keep(d, from, &o) != 0) {
            snprintf(err, errlen, "out of memory keeping a DevOffer");
            return -1;
        }
        if (d->state == RD_DEVPLAN_OFFERING) /* else: once this node offers */
            plan(d, now_ms);
        return 0;
    }
    case RD_SCHEDMSG_DEV_PLAN:
        if (from != 0 || d->state != RD_DEVPLAN_OFFERING) {
            snprintf(err, errlen, "a DevPlan %s",
                     from != 0 ? "from a node that does not "
                                 "coordinate"
                               : "after the plan of this generation");
            return -1;
        }
        d->required = m->dev.required;
        if (m->dev.transport == RD_DEV_TCP)
            settle(d, RD_DEVPLAN_TCP, m->dev.why);
        else
            join(d, m->dev.id, m->dev.id_len, now_ms);
        return 0;
    case RD_SCHEDMSG_DEV_CONFIRM:
        if (d->position != 0) {
            snprintf(err, errlen, "a DevConfirm to a node that does not coordinate");
            return -1;
        }
        return confirmed(d, from, &m->dev, err, errlen);
    default:
        snprintf(err, errlen, "a scheduling message of kind %d for the device transport",
                 (int)m->kind);
        return -1;
    }
}

void rd_devplan_formed(rd_devplan *d, int ok, const char *why)
{
    if (d->state != RD_DEVPLAN_JOINING)
        return;
    if (!ok) {
        if (d->position != 0)
            confirm(d, RD_DEV_FAILED, why);
        fail(d, NULL, 0, 1, "node %s: its NCCL communicator failed to form: %s",
             d->names[d->position], why);
        return;
    }
    if (d->position != 0) {
        confirm(d, RD_DEV_FORMED, "");
        settle(d, RD_DEVPLAN_NCCL, "");
        return;
    }
    d->progress[0] = RD_DEV_FORMED;
    set_state(d, RD_DEVPLAN_FORMED);
    all_formed(d);
}

int64_t rd_devplan_deadline(const rd_devplan *d)
{
    return d->deadline_ms;
}

void rd_devplan_tick(rd_devplan *d, int64_t now_ms)
{
    if (d->deadline_ms == 0 || now_ms < d->deadline_ms)
        return;
    if (d->position != 0) {
        if (d->state == RD_DEVPLAN_OFFERING)
            fail(d, NULL, 0, 0, "node %s had no plan from the coordinator %s within %" PRId64 " ms",
                 d->names[d->position], d->names[0], 2 * d->timeout_ms);
        else
            fail(d, NULL, 0, 0, "node %s: its NCCL communicator did not form within %" PRId64 " ms",
                 d->names[d->position], 2 * d->timeout_ms);
        return;
    }
    /* Coordinator: the nodes that never offered or never joined are named, as a node the ring
     * cannot reach would be; with every node joined, NCCL itself did not form in time. */
    int *aside = malloc((size_t)d->nnodes * sizeof(*aside)), naside = 0;
    char names[RD_SCHEDMSG_MESSAGE_MAX / 2] = "";
    size_t used = 0;
    for (int i = 1; i < d->nnodes && aside != NULL; i++) {
        int missing = d->state == RD_DEVPLAN_OFFERING ? !d->offered[i] : d->progress[i] == 0;
        if (!missing)
            continue;
        aside[naside++] = i;
        int w = snprintf(names + used, sizeof(names) - used, "%s%s", used ? ", " : "", d->names[i]);
        if (w > 0 && (size_t)w < sizeof(names) - used)
            used += (size_t)w;
    }
    if (naside > 0)
        fail(d, aside, naside, 0, "node%s %s did not %s within %" PRId64 " ms",
             naside > 1 ? "s" : "", names,
             d->state == RD_DEVPLAN_OFFERING ? "offer a device transport"
                                             : "join the NCCL communicator",
             d->timeout_ms);
    else
        fail(d, NULL, 0, 1,
             "the NCCL communicator did not form within %" PRId64 " ms (every "
             "node joined)",
             d->timeout_ms);
    free(aside);
}

rd_devplan_state rd_devplan_state_of(const rd_devplan *d)
{
    return d->state;
}

uint64_t rd_devplan_generation(const rd_devplan *d)
{
    return d->generation;
}

const char *rd_devplan_why(const rd_devplan *d)
{
    return d->why;
}

int rd_devplan_required(const rd_devplan *d)
{
    return d->state == RD_DEVPLAN_TCP && d->required;
}
