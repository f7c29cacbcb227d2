/* The data plane of a job's ring (xfer.c) as the ring sees it: started once every link of a
 * generation is up, ring passes submitted to it, their ends, data planes of earlier generations
 * retiring, and the links' bytes and throughput for status. */
#define _GNU_SOURCE
#include "world_int.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>

#include "counters.h"
#include "log.h"

/* A data plane whose ring is gone: its running task ends by itself (a graceful change) or fails
 * at once (rd_xfer_cut: the ring broke), then on_retired frees it. */
typedef struct retiring {
    struct rd_xfer *x;
    struct retiring *next;
} retiring;

static void on_retired(void *arg, struct rd_xfer *x)
{
    rd_world *w = arg;
    for (retiring **pp = &w->retiring; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->x == x) {
            retiring *r = *pp;
            *pp = r->next;
            free(r);
            break;
        }
    }
    rd_xfer_free(x, RINGD_E_MEMBERSHIP, "the ring is gone");
}

/* A ring task ended (on the current data plane or a retiring one). A data plane that broke
 * stays broken: every node re-forms the ring, at the same generation when nobody left. */
static void on_task_done(void *arg, rd_xfer_task *t)
{
    rd_world *w = arg;
    int current = t->ring == w->xfer;
    if (current)
        w->ntasks--;
    if (w->xfer != NULL && rd_xfer_broken(w->xfer)) {
        w->ev.disrupted(w->arg);  /* its failures are answered once the ring is back */
        if (w->resync == RS_NONE) /* even if a graceful change takes the ring down first */
            world_resync_set(w, RS_BROKEN, "the ring's data links broke");
        /* A node that breaks off the ring says why on its control link (Error, Bye), or that
         * link ends too: a moment for that to arrive first, so the clients hear the cause. */
        struct timeval tv = {0, 20 * 1000};
        if (!event_pending(w->ev_reform, EV_TIMEOUT, NULL))
            event_add(w->ev_reform, &tv);
    }
    w->ev.task_done(w->arg, t);
    if (current)
        world_carry_check(w);
}

/* Payload bytes this node sent to the next node and received from the previous one, in all
 * generations of the job. */
static void link_bytes(const rd_world *w, uint64_t *sent, uint64_t *received)
{
    *sent = w->bytes_sent;
    *received = w->bytes_recv;
    if (w->xfer != NULL) {
        uint64_t s, r;
        rd_xfer_bytes(w->xfer, &s, &r);
        *sent += s;
        *received += r;
    }
}

/* Once a second: the links' throughput over the last second, for status. */
static void on_sample(evutil_socket_t fd, short what, void *arg)
{
    rd_world *w = arg;
    (void)fd;
    (void)what;
    uint64_t s, r;
    link_bytes(w, &s, &r);
    int64_t now = rd_now_ms();
    double dt = (double)(now - w->last_sample_ms) / 1000.0;
    if (dt > 0) {
        w->rate_sent = (double)(s - w->last_sent) / dt;
        w->rate_recv = (double)(r - w->last_recv) / dt;
    }
    w->last_sent = s;
    w->last_recv = r;
    w->last_sample_ms = now;
}

void rd_world_submit(rd_world *w, struct rd_xfer_task *t)
{
    w->net->counters->ring_passes++;
    w->net->counters->ring_ops += t->nmembers;
    w->ntasks++;
    t->ring = w->xfer;
    rd_xfer_submit(w->xfer, t);
}

int world_plane_init(rd_world *w)
{
    struct timeval sec = {1, 0};
    w->ev_sample = event_new(w->net->base, -1, EV_PERSIST, on_sample, w);
    if (w->ev_sample == NULL || event_add(w->ev_sample, &sec) != 0)
        return -1;
    w->last_sample_ms = rd_now_ms();
    return 0;
}

void world_plane_free(rd_world *w)
{
    if (w->ev_sample != NULL)
        event_free(w->ev_sample);
}

int world_plane_start(rd_world *w, char *err, size_t errlen)
{
    int C = world_conns(w);
    uint32_t sizes[RD_RING_NODES_MAX];
    const char *nodes[RD_RING_NODES_MAX];
    for (int i = 0; i < w->nnodes; i++) {
        sizes[i] = world_member(w, i)->local_size;
        nodes[i] = world_member(w, i)->node;
    }
    int sfd[RD_RING_CONNS_MAX], rfd[RD_RING_CONNS_MAX];
    rd_seal sseal[RD_RING_CONNS_MAX], rseal[RD_RING_CONNS_MAX];
    for (int c = 0; c < C; c++) {
        sfd[c] = w->out_data[c].fd;
        rfd[c] = w->in_data[c];
        sseal[c] = w->out_data[c].seal;
        rseal[c] = w->in_seal[c];
        w->out_data[c].fd = w->in_data[c] = -1;
        rd_seal_wipe(&w->out_data[c].seal);
        rd_seal_wipe(&w->in_seal[c]);
    }
    rd_xfer_config xc = {
        .nnodes = w->nnodes,
        .position = w->position,
        .local_sizes = sizes,
        .generation = w->generation,
        .segment_size = w->net->cfg->segment_size,
        .conns = C,
        .send_fds = sfd,
        .recv_fds = rfd,
        .send_seals = w->net->cfg->encrypt ? sseal : NULL,
        .recv_seals = w->net->cfg->encrypt ? rseal : NULL,
        .timeout_ms = w->net->cfg->peer_timeout,
        .poll_us = w->net->cfg->poll_us,
        .next_node = world_member(w, (w->position + 1) % w->nnodes)->node,
        .prev_node = world_member(w, (w->position + w->nnodes - 1) % w->nnodes)->node,
        .pair_links = (int)w->net->cfg->pair_links,
        .nodes = nodes,
        .pairs_wanted = world_pairs_wanted,
    };
    w->xfer = rd_xfer_new(w->net->base, &xc, on_task_done, w, err, errlen);
    for (int c = 0; c < C; c++) {
        rd_seal_wipe(&sseal[c]);
        rd_seal_wipe(&rseal[c]);
    }
    if (w->xfer != NULL && (w->xfer_link = malloc(sizeof(*w->xfer_link))) == NULL) {
        rd_xfer_free(w->xfer, RINGD_E_NOMEM, "out of memory"); /* nothing submitted yet */
        w->xfer = NULL;
        snprintf(err, errlen, "out of memory starting the data plane");
    }
    return w->xfer != NULL ? 0 : -1;
}

void world_plane_retire(rd_world *w, const char *why, teardown_how how)
{
    /* A broken ring's pass on the wire is cut: a node may be gone, and its ops are doomed anyway.
     */
    int graceful = how == TD_CARRY || how == TD_LEAVE;
    if (w->xfer != NULL) {
        uint64_t sent, received;
        rd_xfer_bytes(w->xfer, &sent, &received);
        w->bytes_sent += sent;
        w->bytes_recv += received;
        w->pair_bytes += rd_xfer_pair_bytes(w->xfer);
        struct rd_xfer *x = w->xfer;
        w->xfer = NULL;
        w->ntasks = 0;
        retiring *r = w->xfer_link;
        w->xfer_link = NULL;
        /* Its thread ends off the loop, reported by on_retired, unless the world ends now. */
        if (how != TD_END) {
            r->x = x;
            r->next = w->retiring;
            w->retiring = r;
            rd_xfer_retire(x, RINGD_E_MEMBERSHIP, why, on_retired, w);
        } else {
            free(r);
            rd_xfer_free(x, RINGD_E_MEMBERSHIP, why);
        }
    }
    for (retiring *r = w->retiring; !graceful && how != TD_END && r != NULL; r = r->next)
        rd_xfer_cut(r->x);
    while (how == TD_END && w->retiring != NULL) {
        retiring *r = w->retiring;
        w->retiring = r->next;
        rd_xfer_free(r->x, RINGD_E_MEMBERSHIP, why);
        free(r);
    }
}

int world_plane_retiring_pairs(const rd_world *w)
{
    int n = 0, busy;
    int64_t used;
    for (const retiring *r = w->retiring; r != NULL; r = r->next)
        n += rd_xfer_pairs_open(r->x, &used, &busy);
    return n;
}

void world_plane_describe(const rd_world *w, rd_world_status *r)
{
    uint64_t s, rv;
    link_bytes(w, &s, &rv);
    if (w->xfer != NULL) {
        int64_t used;
        int busy;
        r->pair_links = (uint32_t)rd_xfer_pairs_open(w->xfer, &used, &busy);
    }
    r->pair_bytes = w->pair_bytes + (w->xfer != NULL ? rd_xfer_pair_bytes(w->xfer) : 0);
    for (int k = 0; k < 2; k++) {
        rd_link_status *l = &r->links[r->nlinks++];
        int peer =
            k == 0 ? (w->position + 1) % w->nnodes : (w->position + w->nnodes - 1) % w->nnodes;
        l->peer = world_member(w, peer)->node;
        l->direction = k == 0 ? "send" : "recv";
        l->conns = (uint32_t)world_conns(w);
        l->bytes = k == 0 ? s : rv;
        l->throughput_bps = k == 0 ? w->rate_sent : w->rate_recv;
    }
}
