/* Unit tests for daemon/engine/devcomm.c on the CPU: a job's device communicator between the
 * agreement (devplan.c, real) and a fake world and transport (linked in place of world.c and
 * NCCL) that record what is sent and called. Two jobs of one daemon on one GPU: one holds it
 * with its NCCL communicator, the other crosses on TCP, saying why, until the GPU is free. */
#include <criterion/criterion.h>

#include <event2/event.h>
#include <stdio.h>
#include <string.h>

#include "devcomm.h"

/* ---- the fake world: what devcomm sends and asks of the ring ---- */

struct rd_world {
    int plans, transport; /* DevPlans sent, and the last one's transport */
    char plan_why[1100];
    int reforms, drops;
    int subscribed; /* devcomm subscribed to the ring's control channel (the tests drive it) */
};

int rd_world_subscribe(rd_world *w, const rd_ring_channel *ch, void *arg)
{
    (void)arg;
    cr_assert(ch->kinds & (1u << RD_SCHEDMSG_DEV_OFFER), "devcomm takes DevOffer");
    return w->subscribed++;
}

void rd_world_unsubscribe(rd_world *w, int handle)
{
    cr_assert(handle >= 0 && w->subscribed > 0);
    w->subscribed--;
}

void rd_world_send(rd_world *w, const int *to, int nto, const rd_schedmsg *m)
{
    (void)to, (void)nto;
    if (m->kind == RD_SCHEDMSG_DEV_PLAN) {
        w->plans++;
        w->transport = m->dev.transport;
        snprintf(w->plan_why, sizeof(w->plan_why), "%s", m->dev.why != NULL ? m->dev.why : "");
    }
}

void rd_world_set_aside(rd_world *w, int position, const char *why)
{
    (void)w, (void)position, (void)why;
}

void rd_world_reform(rd_world *w, const char *why)
{
    (void)why;
    w->reforms++;
}

void rd_world_drop(rd_world *w, const char *why)
{
    (void)why;
    w->drops++;
}

/* ---- the fake transport ---- */

struct rd_transport {
    int device;
};

static int ids, inits, aborts, abort_device;

static int f_setup(const char *ifname, char *err, size_t errlen)
{
    (void)ifname, (void)err, (void)errlen;
    return 0;
}

static int f_probe(char *err, size_t errlen)
{
    (void)err, (void)errlen;
    return 0;
}

static int f_make_id(uint8_t *id, size_t *len, char *err, size_t errlen)
{
    (void)err, (void)errlen;
    memset(id, ++ids, 16);
    *len = 16;
    return 0;
}

static rd_transport *f_init(const uint8_t *id, size_t len, int nranks, int rank, int device,
                            int64_t timeout_ms, char *err, size_t errlen)
{
    (void)id, (void)len, (void)nranks, (void)rank, (void)timeout_ms, (void)err, (void)errlen;
    static struct rd_transport t[8];
    inits++;
    t[inits % 8].device = device;
    return &t[inits % 8];
}

static int f_poll(rd_transport *t, char *err, size_t errlen)
{
    (void)t, (void)err, (void)errlen;
    return 1; /* forming: the tests look at the plan */
}

static int f_run(rd_transport *t, struct event_base *base, int coll, rd_dtype dt, rd_redop op,
                 const void *in, void *out, size_t count, int root, rd_backend_done_fn done,
                 void *arg, char *err, size_t errlen)
{
    (void)t, (void)base, (void)coll, (void)dt, (void)op, (void)in, (void)out, (void)count;
    (void)root, (void)done, (void)arg, (void)err, (void)errlen;
    return -1;
}

static void f_abort(rd_transport *t)
{
    aborts++;
    abort_device = t->device;
}

static const rd_transport_ops fake_ops = {
    .setup = f_setup,
    .probe = f_probe,
    .make_id = f_make_id,
    .init = f_init,
    .poll = f_poll,
    .run = f_run,
    .abort = f_abort,
    .forget = f_abort,
};

/* ---- two jobs of one daemon, each the coordinator of a ring of two nodes ---- */

static struct event_base *base;
static rd_config cfg;
static rd_devcomm_gpus gpus;
static const rd_devcomm_events events = {.settled = NULL};

static void on_settled(void *arg, int nccl)
{
    *(int *)arg = nccl ? 1 : 2;
}

typedef struct {
    rd_world w;
    rd_devcomm *c;
    int settled; /* 0, 1 (NCCL) or 2 (TCP) */
} job;

static void setup(void)
{
    base = event_base_new();
    memset(&cfg, 0, sizeof(cfg));
    cfg.gpu_transport = RD_GPU_TRANSPORT_AUTO;
    cfg.peer_timeout = 5000;
    memset(&gpus, 0, sizeof(gpus));
}

static void teardown(void)
{
    event_base_free(base);
}

TestSuite(devcomm, .init = setup, .fini = teardown, .timeout = 10);

static void job_new(job *j, const char *name)
{
    rd_devcomm_events ev = events;
    ev.settled = on_settled;
    memset(j, 0, sizeof(*j));
    j->c = rd_devcomm_new(base, &cfg, &gpus, &j->w, name, &ev, &j->settled);
    cr_assert_not_null(j->c);
}

/* j's ring of generation forms with a second node that offers NCCL on a GPU of its own; this
 * node's ranks are on gpu. */
static void ring(job *j, uint64_t generation, int gpu)
{
    rd_ring_node nodes[2] = {{"n0", 0, 1}, {"n1", 1, 1}};
    cr_assert_eq(rd_devcomm_ring_forming(j->c, generation, 2, 0, nodes), RINGD_OK);
    rd_devcomm_local local = {.device = 1, .gpu = gpu, .gpu_uuid = "GPU-here", .ops = &fake_ops};
    rd_devcomm_ring_up(j->c, &local);
    rd_schedmsg offer = {
        .kind = RD_SCHEDMSG_DEV_OFFER,
        .generation = generation,
        .dev = {.want = RD_DEV_WANT_AUTO, .device = 1, .can = 1, .why = "", .gpu = "GPU-there"}};
    rd_devcomm_message(j->c, 1, &offer);
}

Test(devcomm, a_gpu_carries_one_jobs_nccl_communicator_at_a_time)
{
    job a, b;
    job_new(&a, "alpha");
    job_new(&b, "beta");
    ring(&a, 1, 0);
    cr_assert_eq(a.w.transport, RD_DEV_NCCL, "alpha: %s", a.w.plan_why);
    cr_assert_eq(inits, 1, "alpha's communicator starts on GPU 0");
    ring(&b, 1, 0);
    cr_assert_eq(b.w.plans, 1);
    cr_assert_eq(b.w.transport, RD_DEV_TCP, "beta was planned on NCCL on alpha's GPU");
    cr_assert(strstr(b.w.plan_why, "GPU 0 carries the NCCL communicator of job 'alpha'") != NULL,
              "%s", b.w.plan_why);
    cr_assert_eq(b.settled, 2);
    cr_assert_eq(inits, 1, "beta started a communicator on alpha's GPU");
    /* beta on GPU 1: NCCL */
    job c;
    job_new(&c, "gamma");
    ring(&c, 1, 1);
    cr_assert_eq(c.w.transport, RD_DEV_NCCL, "gamma: %s", c.w.plan_why);
    /* alpha's ring ends: its communicator is aborted and GPU 0 is free for beta's next ring */
    rd_devcomm_ring_ended(a.c);
    cr_assert_eq(aborts, 1);
    cr_assert_eq(abort_device, 0);
    ring(&b, 2, 0);
    cr_assert_eq(b.w.transport, RD_DEV_NCCL, "beta after alpha: %s", b.w.plan_why);
    rd_devcomm_free(a.c);
    rd_devcomm_free(b.c);
    rd_devcomm_free(c.c);
    cr_assert_eq(aborts, 3, "every communicator is aborted with its job");
}

/* A job that settled on TCP (its peer cannot run NCCL) holds no GPU. */
Test(devcomm, a_job_on_tcp_leaves_its_gpu_to_others)
{
    job a, b;
    job_new(&a, "alpha");
    job_new(&b, "beta");
    rd_ring_node nodes[2] = {{"n0", 0, 1}, {"n1", 1, 1}};
    cr_assert_eq(rd_devcomm_ring_forming(a.c, 1, 2, 0, nodes), RINGD_OK);
    rd_devcomm_local local = {.device = 1, .gpu = 0, .gpu_uuid = "GPU-here", .ops = &fake_ops};
    rd_devcomm_ring_up(a.c, &local);
    rd_schedmsg offer = {.kind = RD_SCHEDMSG_DEV_OFFER,
                         .generation = 1,
                         .dev = {.want = RD_DEV_WANT_AUTO,
                                 .device = 1,
                                 .can = 0,
                                 .why = "no NCCL library",
                                 .gpu = "GPU-there"}};
    rd_devcomm_message(a.c, 1, &offer);
    cr_assert_eq(a.w.transport, RD_DEV_TCP);
    ring(&b, 1, 0);
    cr_assert_eq(b.w.transport, RD_DEV_NCCL, "beta: %s", b.w.plan_why);
    rd_devcomm_free(a.c);
    rd_devcomm_free(b.c);
}

/* A GPU is let go when the communicator holding it fails (the ring re-forms), and when its job
 * goes while holding it. */
Test(devcomm, a_failed_or_freed_communicator_lets_go_of_its_gpu)
{
    job a, b, c;
    job_new(&a, "alpha");
    job_new(&b, "beta");
    job_new(&c, "gamma");
    ring(&a, 1, 0);
    cr_assert_eq(a.w.transport, RD_DEV_NCCL);
    rd_schedmsg failed = {.kind = RD_SCHEDMSG_DEV_CONFIRM,
                          .generation = 1,
                          .dev = {.confirm = RD_DEV_FAILED,
                                  .why = "ncclCommInitRankConfig: "
                                         "unhandled system error"}};
    rd_devcomm_message(a.c, 1, &failed);
    cr_assert_eq(a.w.reforms, 1, "a failed communicator re-forms the ring");
    cr_assert_eq(aborts, 1);
    ring(&b, 1, 0);
    cr_assert_eq(b.w.transport, RD_DEV_NCCL, "beta after alpha failed: %s", b.w.plan_why);
    rd_devcomm_free(b.c); /* beta goes while holding GPU 0 */
    ring(&c, 1, 0);
    cr_assert_eq(c.w.transport, RD_DEV_NCCL, "gamma after beta went: %s", c.w.plan_why);
    rd_devcomm_free(a.c);
    rd_devcomm_free(c.c);
}
