/* A job's device communicator across nodes: the devplan agreement wired to the transport, the
 * world and a timer. */
#include "devcomm.h"

#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "counters.h"
#include "devplan.h"
#include "frame.h"
#include "log.h"

/* How often a forming communicator is polled and the agreement's deadlines looked at. */
#define RD_DEVCOMM_TICK_MS 10

struct rd_devcomm {
    const rd_config *cfg;
    rd_devcomm_events ev;
    void *ev_arg;
    uint32_t *first_ranks, *local_sizes; /* of each ring position, this generation */
    int nnodes;
    rd_devcomm_gpus *gpus;
    int claimed; /* the GPU this job's communicator holds in gpus, or -1 */
    rd_world *w;
    char job[RD_NAME_MAX + 1];
    rd_devplan *dr;
    int chan; /* its subscription to the ring's control channel */
    struct event *ev_tick;
    rd_devcomm_local local;    /* what this node brought to the ring that is up */
    rd_transport *t;           /* this generation's communicator, once joined */
    char fallback[512];        /* "": NCCL may be tried; else why this job stays on TCP here */
    int faults;                /* generations in a row whose collectives failed */
    uint64_t fault_generation; /* the last of them */
    char why[RD_SCHEDMSG_MESSAGE_MAX + 1]; /* a TCP plan where NCCL is required: why */
};

static void arm(rd_devcomm *c)
{
    struct timeval tv = {0, RD_DEVCOMM_TICK_MS * 1000};
    if (!evtimer_pending(c->ev_tick, NULL))
        evtimer_add(c->ev_tick, &tv);
}

/* Lets go of the GPU this job's communicator held. */
static void gpu_release(rd_devcomm *c)
{
    if (c->claimed >= 0 && c->gpus->holder[c->claimed] == c)
        c->gpus->holder[c->claimed] = NULL;
    c->claimed = -1;
}

/* Takes gpu for this job's communicator (letting go of any other it held). Returns 0, or -1
 * with why saying which job holds it. */
static int gpu_claim(rd_devcomm *c, int gpu, char *why, size_t len)
{
    gpu_release(c);
    if (gpu < 0 || gpu >= RD_DEVCOMM_GPUS) {
        snprintf(why, len, "GPU %d is beyond the %d a daemon's communicators track", gpu,
                 RD_DEVCOMM_GPUS);
        return -1;
    }
    const rd_devcomm *other = c->gpus->holder[gpu];
    if (other != NULL && other != c) {
        snprintf(why, len,
                 "GPU %d carries the NCCL communicator of job '%s' (NCCL needs one "
                 "order of collectives on communicators sharing a GPU): TCP until it is free",
                 gpu, other->job);
        return -1;
    }
    c->gpus->holder[gpu] = c;
    c->claimed = gpu;
    return 0;
}

/* Ends this node's communicator, if any (NCCL stops, the device lets go of the buffers, off the
 * loop), and lets go of its GPU. */
static void comm_end(rd_devcomm *c)
{
    if (c->t != NULL) {
        c->local.ops->abort(c->t);
        c->t = NULL;
    }
    gpu_release(c);
}

static void on_send(void *arg, int to, const rd_schedmsg *m)
{
    rd_devcomm *c = arg;
    rd_world_send(c->w, to >= 0 ? &to : NULL, to >= 0 ? 1 : 0, m);
}

static int on_make_id(void *arg, uint8_t *id, size_t *len, char *err, size_t errlen)
{
    rd_devcomm *c = arg;
    _Static_assert(RD_TRANSPORT_ID_MAX == RD_SCHEDMSG_ID_MAX, "a transport id fits a DevPlan");
    if (c->local.ops == NULL) {
        snprintf(err, errlen, "no device transport");
        return -1;
    }
    return c->local.ops->make_id(id, len, err, errlen);
}

static int on_join(void *arg, const uint8_t *id, size_t len, int nranks, int rank, char *err,
                   size_t errlen)
{
    rd_devcomm *c = arg;
    if (c->local.ops == NULL || !c->local.device) {
        snprintf(err, errlen, "no GPU serves the job here");
        return -1;
    }
    c->t =
        c->local.ops->init(id, len, nranks, rank, c->local.gpu, c->cfg->peer_timeout, err, errlen);
    if (c->t == NULL)
        return -1;
    rd_log(RD_LOG_INFO, "devcomm", "job '%s': NCCL communicator rank %d of %d on GPU %d forming",
           c->job, rank, nranks, c->local.gpu);
    arm(c);
    return 0;
}

static void on_settled(void *arg, rd_devplan_state st, const char *why)
{
    rd_devcomm *c = arg;
    if (rd_devplan_required(c->dr))
        snprintf(c->why, sizeof(c->why), "--gpu-transport nccl, and NCCL cannot run: %.900s", why);
    rd_log(RD_LOG_INFO, "devcomm", "job '%s': generation %" PRIu64 " crosses nodes on %s%s%s",
           c->job, rd_devplan_generation(c->dr), st == RD_DEVPLAN_NCCL ? "NCCL" : "the TCP ring",
           why[0] ? ": " : "", why);
    if (st != RD_DEVPLAN_NCCL)
        gpu_release(c);
    c->ev.settled(c->ev_arg, st == RD_DEVPLAN_NCCL);
}

static void on_failed(void *arg, const char *why, const int *aside, int naside, int nccl)
{
    rd_devcomm *c = arg;
    comm_end(c);
    /* Under auto, a job whose communicator failed here stays on TCP from this node's side (one
     * node's offer is enough); a node that went quiet is not NCCL's fault, and --gpu-transport
     * nccl tries again at every generation. */
    if (nccl && c->cfg->gpu_transport == RD_GPU_TRANSPORT_AUTO)
        snprintf(c->fallback, sizeof(c->fallback), "NCCL failed at generation %" PRIu64 ": %.400s",
                 rd_devplan_generation(c->dr), why);
    for (int k = 0; k < naside; k++)
        rd_world_set_aside(c->w, aside[k], why);
    rd_world_reform(c->w, why);
}

static const rd_devplan_events devplan_events = {
    .send = on_send,
    .make_id = on_make_id,
    .join = on_join,
    .settled = on_settled,
    .failed = on_failed,
};

/* Polls the forming communicator and keeps the agreement's deadlines. */
static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    rd_devcomm *c = arg;
    char err[512] = "";
    (void)fd;
    (void)what;
    if (c->t != NULL && rd_devplan_state_of(c->dr) == RD_DEVPLAN_JOINING) {
        int st = c->local.ops->poll(c->t, err, sizeof(err));
        if (st <= 0)
            rd_devplan_formed(c->dr, st == 0, err);
    }
    rd_devplan_tick(c->dr, rd_now_ms());
    if (rd_devplan_deadline(c->dr) != 0)
        arm(c);
}

/* The ring's control channel, heard by the agreement itself (rd_world_subscribe). */
static rd_status chan_forming(void *arg, uint64_t generation, int nnodes, int position,
                              const rd_ring_node *nodes)
{
    return rd_devcomm_ring_forming(arg, generation, nnodes, position, nodes);
}

static void chan_ended(void *arg)
{
    rd_devcomm_ring_ended(arg);
}

static void chan_message(void *arg, int from, const rd_schedmsg *m)
{
    rd_devcomm_message(arg, from, m);
}

rd_devcomm *rd_devcomm_new(struct event_base *base, const rd_config *cfg, rd_devcomm_gpus *gpus,
                           rd_world *w, const char *job, const rd_devcomm_events *ev, void *arg)
{
    rd_devcomm *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->ev = *ev;
    c->ev_arg = arg;
    c->cfg = cfg;
    c->gpus = gpus;
    c->claimed = -1;
    c->w = w;
    snprintf(c->job, sizeof(c->job), "%s", job);
    static const rd_ring_channel chan = {
        .kinds = 1u << RD_SCHEDMSG_DEV_OFFER | 1u << RD_SCHEDMSG_DEV_PLAN |
                 1u << RD_SCHEDMSG_DEV_CONFIRM,
        .forming = chan_forming,
        .ended = chan_ended,
        .message = chan_message,
    };
    if ((c->dr = rd_devplan_new(&devplan_events, c)) == NULL ||
        (c->ev_tick = evtimer_new(base, on_tick, c)) == NULL ||
        (c->chan = rd_world_subscribe(w, &chan, c)) < 0) {
        if (c->ev_tick != NULL)
            event_free(c->ev_tick);
        rd_devplan_free(c->dr);
        free(c);
        return NULL;
    }
    return c;
}

void rd_devcomm_free(rd_devcomm *c)
{
    if (c == NULL)
        return;
    rd_world_unsubscribe(c->w, c->chan);
    if (c->t != NULL) /* the job goes with its ops: nothing may call back into them */
        c->local.ops->forget(c->t);
    c->t = NULL;
    comm_end(c);
    event_free(c->ev_tick);
    rd_devplan_free(c->dr);
    free(c->first_ranks);
    free(c->local_sizes);
    free(c);
}

rd_status rd_devcomm_ring_forming(rd_devcomm *c, uint64_t generation, int nnodes, int position,
                                  const rd_ring_node *nodes)
{
    comm_end(c);
    free(c->first_ranks);
    free(c->local_sizes);
    c->nnodes = 0;
    c->first_ranks = malloc((size_t)nnodes * sizeof(*c->first_ranks));
    c->local_sizes = malloc((size_t)nnodes * sizeof(*c->local_sizes));
    const char **names = malloc((size_t)nnodes * sizeof(*names));
    if (names == NULL || c->first_ranks == NULL || c->local_sizes == NULL) {
        free(names);
        return RINGD_E_NOMEM; /* the arrays go with the next ring, or c */
    }
    c->nnodes = nnodes;
    for (int i = 0; i < nnodes; i++) {
        names[i] = nodes[i].node;
        c->first_ranks[i] = nodes[i].first_rank;
        c->local_sizes[i] = nodes[i].local_size;
    }
    int rc = rd_devplan_start(c->dr, generation, nnodes, position, names, c->cfg->peer_timeout);
    free(names);
    return rc == 0 ? RINGD_OK : RINGD_E_NOMEM;
}

void rd_devcomm_ring_up(rd_devcomm *c, const rd_devcomm_local *local)
{
    char why[512] = "";
    c->local = *local;
    int can = local->device && local->ops != NULL && c->fallback[0] == '\0' &&
              local->ops->probe(why, sizeof(why)) == 0;
    if (c->fallback[0] != '\0')
        snprintf(why, sizeof(why), "%s", c->fallback);
    else if (!local->device)
        snprintf(why, sizeof(why), "its ranks pass host memory");
    else if (local->ops == NULL)
        snprintf(why, sizeof(why), "no device transport in this build");
    if (can && gpu_claim(c, local->gpu, why, sizeof(why)) != 0)
        can = 0;
    rd_devplan_offer own = {(int)c->cfg->gpu_transport, local->device, can, why,
                            local->device ? local->gpu_uuid : NULL};
    if (rd_devplan_up(c->dr, &own, rd_now_ms()) != 0) {
        rd_world_drop(c->w, "out of memory offering a device transport");
        return;
    }
    if (rd_devplan_deadline(c->dr) != 0)
        arm(c);
}

void rd_devcomm_ring_ended(rd_devcomm *c)
{
    if (c == NULL) /* a job whose communicator could not be made */
        return;
    comm_end(c);
    c->why[0] = '\0';
    rd_devplan_end(c->dr);
    evtimer_del(c->ev_tick);
}

void rd_devcomm_message(rd_devcomm *c, int from, const rd_schedmsg *m)
{
    char err[256] = "", why[512];
    if (rd_devplan_message(c->dr, from, m, rd_now_ms(), err, sizeof(err)) == 0) {
        if (rd_devplan_deadline(c->dr) != 0)
            arm(c);
        return;
    }
    snprintf(why, sizeof(why), "device transport message from the node at position %d: %s", from,
             err);
    rd_world_drop(c->w, why);
}

void rd_devcomm_outcome(rd_devcomm *c, int ok, const char *why)
{
    uint64_t g = rd_devplan_generation(c->dr);
    if (ok) {
        c->faults = 0;
        return;
    }
    if (c->fault_generation == g) /* every collective of a generation fails with it: once */
        return;
    c->fault_generation = g;
    if (++c->faults >= 2 && c->cfg->gpu_transport == RD_GPU_TRANSPORT_AUTO &&
        c->fallback[0] == '\0')
        snprintf(c->fallback, sizeof(c->fallback),
                 "NCCL collectives failed at two generations in a row, the last %" PRIu64
                 ": %.380s",
                 g, why != NULL ? why : "");
}

int rd_devcomm_nccl(const rd_devcomm *c)
{
    return rd_devplan_state_of(c->dr) == RD_DEVPLAN_NCCL && c->t != NULL;
}

const char *rd_devcomm_refusal(const rd_devcomm *c)
{
    return rd_devplan_required(c->dr) ? c->why : NULL;
}

int rd_devcomm_position_of(const rd_devcomm *c, uint32_t rank)
{
    for (int i = 0; i < c->nnodes; i++)
        if (rank >= c->first_ranks[i] && rank - c->first_ranks[i] < c->local_sizes[i])
            return i;
    return -1;
}

uint32_t rd_devcomm_even(const rd_devcomm *c)
{
    for (int i = 1; i < c->nnodes; i++)
        if (c->local_sizes[i] != c->local_sizes[0])
            return 0;
    return c->nnodes > 0 ? c->local_sizes[0] : 0;
}

int rd_devcomm_run(rd_devcomm *c, struct event_base *base, int coll, rd_dtype dt, rd_redop op,
                   const void *in, void *out, size_t count, int root, rd_backend_done_fn done,
                   void *arg, char *err, size_t errlen)
{
    if (!rd_devcomm_nccl(c)) {
        snprintf(err, errlen, "no NCCL communicator at this generation");
        return -1;
    }
    return c->local.ops->run(c->t, base, coll, dt, op, in, out, count, root, done, arg, err,
                             errlen);
}

void rd_devcomm_describe(const rd_devcomm *c, const char **transport, const char **why)
{
    *transport = rd_devplan_state_name(rd_devplan_state_of(c->dr));
    *why = c->why[0] != '\0' ? c->why : rd_devplan_why(c->dr);
}
