/* Elastic membership and faults (/tmp/elastic/SPEC.md, issue 4): real redis-server and ringd
 * daemons on loopback with a short lease, and clients in forked processes that loop allreduces
 * whose results they check exactly (th_loop). A daemon killed or stopped, a graceful drain by
 * ringctl or SIGTERM, a node joining a running job, a training process dying, a job below its
 * min_size, a Redis restart, and the stall inspector: each must reach the clients as the SPEC
 * says (which error, naming what, how fast) and leave a ring that serves every remaining rank. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "ringd.h"
#include "th_ring.h"

#define LEASE_MS 1000 /* th_ring's --lease-ttl */
#define PEER_TIMEOUT "3000"
#define RECOVERY_MS (LEASE_MS + 3000) /* a lost node to the first success without it */
#define MAX_LOOPS 24

static th_ring ring_;
static th_loop *loops_;
static int node_of_[MAX_LOOPS]; /* the daemon each loop's client talks to */
static int nloops_;             /* loops started so far */
static size_t loop_count_;      /* elements per allreduce of the loops added; 0: the default */
static char job_[64];
static int64_t t0_; /* times in the evidence are relative to it */

/* Ringd options of every test here: a link that makes no progress counts as failed soon. */
static const char *const extra_[] = {"--peer-timeout", PEER_TIMEOUT, NULL};
/* The options start_ring gives (extra_, or a test's own before it starts its ring). */
static const char *const *ring_extra_ = extra_;

static void teardown(void)
{
    ring_extra_ = extra_;
    loop_count_ = 0;
    th_loop_free(loops_, MAX_LOOPS);
    loops_ = NULL;
    th_ring_teardown(&ring_);
}

TestSuite(elastic, .fini = teardown);

/* Every loop's events and the end of every daemon's log, next to a failure. */
static void evidence(void)
{
    for (int i = 0; i < nloops_; i++) {
        char label[32];
        snprintf(label, sizeof(label), "client %d (n%d)", i, node_of_[i]);
        th_loop_print(&loops_[i], label, t0_);
    }
    th_ring_dump_logs(&ring_, 12000);
}

#define MUST(cond, ...) TH_MUST(evidence, cond, __VA_ARGS__)

/* Adds a looping client of job_ on node k (world, local, min_size; open_timeout_ms 0: the
 * default) and starts it. */
static th_loop *add_loop(int k, int world, int local, int min_size, int open_timeout_ms)
{
    cr_assert_lt(nloops_, MAX_LOOPS);
    th_loop *l = &loops_[nloops_];
    node_of_[nloops_++] = k;
    snprintf(l->sock, sizeof(l->sock), "%s", ring_.d[k].sock);
    snprintf(l->job, sizeof(l->job), "%s", job_);
    l->world = world;
    l->local = local;
    l->min_size = min_size;
    if (loop_count_ > 0)
        l->count = loop_count_;
    if (open_timeout_ms > 0)
        l->open_timeout_ms = open_timeout_ms;
    cr_assert_eq(th_loop_start(l), 0, "fork failed");
    return l;
}

/* Starts redis and nnodes daemons; the job's name; room for the loops. */
static void start_ring(int nnodes)
{
    cr_assert_eq(th_ring_start(&ring_, nnodes, ring_extra_), 0,
                 "redis-server and %d ringd did not start", nnodes);
    snprintf(job_, sizeof(job_), "elastic.%d", (int)getpid());
    loops_ = th_loop_alloc(MAX_LOOPS);
    cr_assert_not_null(loops_);
    t0_ = th_now_ms();
}

#define ALL_LOOPS (~0u)

/* Every loop i that still runs, with bit i in mask, has opened and done at least n more
 * allreduces than it had. */
static void wait_progress(unsigned mask, int n, int timeout_ms, const char *when)
{
    int base[MAX_LOOPS];
    for (int i = 0; i < nloops_; i++)
        base[i] = loops_[i].ok;
    for (int i = 0; i < nloops_; i++) {
        if (loops_[i].pid <= 0 || !(mask & (1u << i)))
            continue;
        MUST(th_loop_wait_open(&loops_[i], timeout_ms), "%s: client %d did not open the job: %s",
             when, i, loops_[i].open_msg);
        MUST(TH_WAIT(loops_[i].ok >= base[i] + n, timeout_ms),
             "%s: client %d did only %d allreduces in %d ms (want %d more)", when, i,
             loops_[i].ok - base[i], timeout_ms, n);
    }
}

/* Starts nnodes daemons with local[k] looping clients of a job of their sum on node k, and waits
 * until each has done a few allreduces. */
static void start_job(int nnodes, const int *local, int min_size)
{
    start_ring(nnodes);
    int world = 0;
    for (int k = 0; k < nnodes; k++)
        world += local[k];
    for (int k = 0; k < nnodes; k++)
        for (int l = 0; l < local[k]; l++)
            add_loop(k, world, local[k], min_size, 0);
    wait_progress(ALL_LOOPS, 3, 30000, "the job's start");
    for (int i = 0; i < nloops_; i++)
        MUST(loops_[i].size == world && loops_[i].failed == 0 && loops_[i].wrong == 0,
             "client %d: size %d (want %d), %d failed and %d wrong calls at the start", i,
             loops_[i].size, world, loops_[i].failed, loops_[i].wrong);
}

static uint64_t max_generation(void)
{
    uint64_t g = 0;
    for (int i = 0; i < nloops_; i++)
        g = loops_[i].generation > g ? loops_[i].generation : g;
    return g;
}

static int on_node(int i, int k)
{
    return node_of_[i] == k;
}

/* The message of a failure that a membership change caused names what changed (want, say "n1"),
 * also where it rejects a Submit tagged with an older generation. */
static int names_change(const th_loop_event *e, const char *want)
{
    return strstr(e->msg, want) != NULL;
}

/* For every loop i with keep(i): the first failure at or after t is RINGD_E_MEMBERSHIP naming
 * want; the call right after it succeeds with size new_size, a rank below it (distinct across
 * those loops) and a generation above old_gen. Waits for it (30 s at most); returns the slowest
 * time from t to that success. */
static int64_t expect_one_change(int (*keep)(int i, int arg), int arg, int64_t t, const char *want,
                                 int new_size, uint64_t old_gen)
{
    int64_t slowest = 0;
    unsigned ranks = 0;
    for (int i = 0; i < nloops_; i++) {
        if (!keep(i, arg))
            continue;
        const th_loop *l = &loops_[i];
        MUST(TH_WAIT(th_loop_next_failure(l, 0, t) >= 0 &&
                         th_loop_next_ok(l, th_loop_next_failure(l, 0, t), t) >= 0,
                     30000),
             "client %d: no failure, or no success after it, within 30 s of the change", i);
        int f = th_loop_next_failure(l, 0, t), o = th_loop_next_ok(l, f, t);
        const th_loop_event *ef = &l->ev[f], *eo = &l->ev[o];
        MUST(ef->rc == RINGD_E_MEMBERSHIP && names_change(ef, want),
             "client %d: the op in flight failed with %s (\"%s\"), want RINGD_E_MEMBERSHIP naming "
             "%s",
             i, ringd_strerror((ringd_result_t)ef->rc), ef->msg, want);
        MUST(o == f + 1 && ef->repeats == 0,
             "client %d: the call after the membership failure failed too", i);
        MUST(eo->size == new_size && eo->rank >= 0 && eo->rank < new_size &&
                 !(ranks & (1u << eo->rank)) && eo->generation > old_gen,
             "client %d: after the change rank %d of %d at generation %" PRIu64
             "; want size %d, a rank of its own, a generation above %" PRIu64,
             i, eo->rank, eo->size, eo->generation, new_size, old_gen);
        ranks |= 1u << eo->rank;
        slowest = eo->t1_ms - t > slowest ? eo->t1_ms - t : slowest;
    }
    return slowest;
}

static int survivor_of(int i, int dead_node)
{
    return !on_node(i, dead_node);
}

/* Loops that are not on node k and still run. */
static int alive_not_on(int i, int k)
{
    return !on_node(i, k) && loops_[i].pid > 0;
}

/* Stops every loop that still runs; each must close its session cleanly. */
static void stop_loops(void)
{
    for (int i = 0; i < nloops_; i++)
        MUST(th_loop_stop(&loops_[i], 30000) == 0, "client %d did not close and exit cleanly", i);
}

/* No wrong result anywhere, ever. */
static void expect_no_wrong_results(void)
{
    for (int i = 0; i < nloops_; i++)
        MUST(loops_[i].wrong == 0, "client %d got %d wrong results", i, loops_[i].wrong);
}

/* ---- 1. a daemon killed mid-allreduce ---- */

static void kill_a_daemon_mid_allreduce(int per_node)
{
    int local[3] = {per_node, per_node, per_node};
    start_job(3, local, 0);
    int world = 3 * per_node;
    uint64_t gen0 = max_generation();
    MUST(th_ring_wait_up(&ring_, job_, 7, 3, 0, 5000) != 0, "the ring of 3 is not up everywhere");

    /* the clients run allreduces back to back: one is in flight on every survivor */
    int64_t t = th_now_ms();
    th_daemon_kill(&ring_.d[1]);
    for (int i = 0; i < nloops_; i++)
        if (on_node(i, 1))
            th_loop_kill(&loops_[i]); /* its host is gone: so are its training processes */

    int64_t took = expect_one_change(alive_not_on, 1, t, "n1", world - per_node, gen0);
    fprintf(stderr,
            "elastic: kill -9 of n1 (%d ranks each) to the first success without it: %lld "
            "ms\n",
            per_node, (long long)took);
    MUST(took < RECOVERY_MS, "the survivors took %lld ms to succeed without n1, want < %d",
         (long long)took, RECOVERY_MS);
    MUST(th_ring_wait_up(&ring_, job_, 1u | 4u, 2, gen0, 10000) != 0,
         "n0 and n2 do not show a ring of 2 above generation %" PRIu64, gen0);
    wait_progress(ALL_LOOPS, 5, 20000, "after the kill");
    for (int i = 0; i < nloops_; i++)
        if (survivor_of(i, 1))
            MUST(loops_[i].failed == 1 && loops_[i].size == world - per_node,
                 "client %d: %d failed calls (want 1), size %d", i, loops_[i].failed,
                 loops_[i].size);
    expect_no_wrong_results();
    stop_loops();
    th_ring_finish(&ring_);
}

Test(
    elastic,
    a_daemon_killed_mid_allreduce_fails_the_op_on_the_survivors_naming_it_and_they_go_on_without_it,
    .timeout = 120)
{
    kill_a_daemon_mid_allreduce(1);
}

Test(elastic, a_daemon_of_two_ranks_killed_mid_allreduce_leaves_four_ranks_numbered_0_to_3,
     .timeout = 120)
{
    kill_a_daemon_mid_allreduce(2);
}

/* A ring of 16 daemons, one looping client each: checked allreduces, one kill -9, and the 15
 * survivors fail once naming the lost node, then go on at size 15. */
Test(elastic, a_ring_of_16_daemons_survives_a_kill_9_and_goes_on_at_15, .timeout = 180)
{
    enum { N = 16, LOST = 7 };
    /* 32 busy processes on a few cores: a lease of 3 s (later --lease-ttl wins), so that a
     * daemon starved for a second is not dropped; a kill -9 is seen by its links anyway. */
    static const char *const slow_lease[] = {"--peer-timeout", PEER_TIMEOUT, "--lease-ttl", "3000",
                                             NULL};
    ring_extra_ = slow_lease;
    int local[N];
    for (int k = 0; k < N; k++)
        local[k] = 1;
    start_job(N, local, 0);
    uint64_t gen0 = max_generation();
    MUST(th_ring_wait_up(&ring_, job_, (1u << N) - 1, N, 0, 20000) != 0,
         "the ring of %d is not up everywhere", N);
    wait_progress(ALL_LOOPS, 5, 30000, "the ring of 16");
    int64_t t = th_now_ms();
    th_daemon_kill(&ring_.d[LOST]);
    th_loop_kill(&loops_[LOST]);
    char lost[8];
    snprintf(lost, sizeof(lost), "n%d", LOST);
    int64_t took = expect_one_change(alive_not_on, LOST, t, lost, N - 1, gen0);
    fprintf(stderr, "elastic: kill -9 of n%d of 16 to the first success without it: %lld ms\n",
            LOST, (long long)took);
    MUST(took < RECOVERY_MS, "the survivors took %lld ms to succeed without n%d, want < %d",
         (long long)took, LOST, RECOVERY_MS);
    wait_progress(ALL_LOOPS & ~(1u << LOST), 5, 30000, "after the kill");
    expect_no_wrong_results();
    stop_loops();
    th_ring_finish(&ring_);
    ring_extra_ = extra_;
}

/* ---- 2. a silent daemon (SIGSTOP), then back ---- */

Test(elastic,
     a_stopped_daemon_is_dropped_after_its_lease_and_rejoins_with_its_client_when_continued,
     .timeout = 120)
{
    int local[3] = {1, 1, 1};
    start_job(3, local, 0);
    uint64_t gen0 = max_generation();

    int64_t t_stop = th_now_ms();
    cr_assert_eq(th_daemon_signal(&ring_.d[2], SIGSTOP), 0);
    int64_t took = expect_one_change(alive_not_on, 2, t_stop, "n2", 2, gen0);
    fprintf(stderr, "elastic: SIGSTOP of n2 to the first success without it: %lld ms\n",
            (long long)took);
    MUST(took < RECOVERY_MS + atoi(PEER_TIMEOUT),
         "the survivors took %lld ms to succeed without the silent n2", (long long)took);
    uint64_t gen1 = th_ring_wait_up(&ring_, job_, 3, 2, gen0, 10000);
    MUST(gen1 != 0, "n0 and n1 do not show a ring of 2 without n2");
    wait_progress(3, 5, 20000, "while n2 is stopped"); /* n2's client (2) waits in its op */

    int64_t t_cont = th_now_ms();
    cr_assert_eq(th_daemon_signal(&ring_.d[2], SIGCONT), 0);
    /* n2's client was in an op of the old generation all along: it fails, then it re-joins */
    th_loop *l2 = &loops_[2];
    MUST(TH_WAIT(th_loop_next_failure(l2, 0, t_stop) >= 0, 20000),
         "n2's client saw no failure within 20 s of SIGCONT");
    const th_loop_event *e = &l2->ev[th_loop_next_failure(l2, 0, t_stop)];
    MUST(e->rc == RINGD_E_MEMBERSHIP,
         "n2's client: the op it had in flight failed with %s (\"%s\"), want RINGD_E_MEMBERSHIP",
         ringd_strerror((ringd_result_t)e->rc), e->msg);
    uint64_t gen2 = th_ring_wait_up(&ring_, job_, 7, 3, gen1, 20000);
    MUST(gen2 != 0, "n2 did not rejoin: no ring of 3 above generation %" PRIu64, gen1);
    for (int i = 0; i < 3; i++)
        MUST(TH_WAIT(loops_[i].size == 3 && loops_[i].generation >= gen2 &&
                         loops_[i].last_ok_ms > t_cont,
                     20000),
             "client %d does not succeed at size 3 after n2 rejoined", i);
    wait_progress(ALL_LOOPS, 5, 20000, "after n2 rejoined");
    for (int i = 0; i < 3; i++) {
        MUST(loops_[i].size == 3 && loops_[i].generation == loops_[0].generation,
             "client %d: size %d at generation %" PRIu64 ", client 0 at %" PRIu64, i,
             loops_[i].size, loops_[i].generation, loops_[0].generation);
        for (int k = th_loop_next_failure(&loops_[i], 0, t_cont); k >= 0;
             k = th_loop_next_failure(&loops_[i], k + 1, t_cont))
            MUST(loops_[i].ev[k].rc == RINGD_E_MEMBERSHIP,
                 "client %d failed with %s after SIGCONT: \"%s\"", i,
                 ringd_strerror((ringd_result_t)loops_[i].ev[k].rc), loops_[i].ev[k].msg);
    }
    expect_no_wrong_results();
    stop_loops();
    th_ring_finish(&ring_);
}

/* ---- 3. a graceful drain: ringctl drain, SIGTERM ---- */

/* Drains node d of a job of 3 nodes while every client loops: by ringctl drain (by_signal 0),
 * SIGTERM (1), or ringctl drain and then SIGTERM, as Kubernetes does (2: preStop, then the
 * kill). */
static void drain_node(int d, int by_signal)
{
    int local[3] = {2, 2, 2};
    start_job(3, local, 0);
    uint64_t gen0 = max_generation();

    int64_t t = th_now_ms();
    if (by_signal == 1) {
        cr_assert_eq(th_daemon_signal(&ring_.d[d], SIGTERM), 0);
        int rc = th_daemon_wait_exit(&ring_.d[d], 30000);
        MUST(rc == 0, "n%d did not exit 0 after SIGTERM (%d; -2: still running after 30 s)", d, rc);
    } else {
        char *out;
        int rc = th_ringctl(ring_.d[d].sock, &out, 30000, "drain", "--timeout", "10000", NULL);
        fprintf(stderr, "elastic: ringctl drain: exit %d: %s", rc, out);
        int said = strstr(out, "drained") != NULL;
        free(out);
        MUST(rc == 0 && said, "ringctl drain exited %d (want 0, saying \"drained\")", rc);
        if (by_signal == 2) {
            cr_assert_eq(th_daemon_signal(&ring_.d[d], SIGTERM), 0);
            rc = th_daemon_wait_exit(&ring_.d[d], 30000);
            MUST(rc == 0, "n%d did not exit 0 after its drain and SIGTERM (%d)", d, rc);
        }
    }
    fprintf(stderr, "elastic: drain of n%d (%s) took %lld ms\n", d,
            by_signal == 1   ? "SIGTERM"
            : by_signal == 2 ? "ringctl, then SIGTERM"
                             : "ringctl",
            (long long)(th_now_ms() - t));

    /* the other nodes' clients: not one failure; the ops carry over and complete at size 4 */
    for (int i = 0; i < nloops_; i++) {
        if (on_node(i, d))
            continue;
        MUST(TH_WAIT(loops_[i].size == 4 || loops_[i].failed > 0, 20000),
             "client %d still at size %d 20 s after the drain", i, loops_[i].size);
    }
    MUST(th_ring_wait_up(&ring_, job_, 7u & ~(1u << d), 2, gen0, 10000) != 0,
         "the other nodes do not show a ring of 2 after n%d left", d);
    /* the drained node's clients: their session is over (RINGD_E_CLOSED, saying the node
     * drained), on their next submits */
    for (int i = 0; i < nloops_; i++) {
        if (!on_node(i, d))
            continue;
        MUST(TH_WAIT(th_loop_next_failure(&loops_[i], 0, t) >= 0, 20000),
             "client %d of the drained n%d saw no failure", i, d);
        const th_loop_event *e = &loops_[i].ev[th_loop_next_failure(&loops_[i], 0, t)];
        int ok = e->rc == RINGD_E_CLOSED && strstr(e->msg, "drain") != NULL;
        if (by_signal == 1) /* the node may be gone before the client's next submit */
            ok = ok || e->rc == RINGD_E_CLOSED || e->rc == RINGD_E_CONNECT;
        MUST(ok,
             "client %d of the drained n%d failed with %s (\"%s\"), want RINGD_E_CLOSED "
             "saying it drained",
             i, d, ringd_strerror((ringd_result_t)e->rc), e->msg);
    }
    if (by_signal == 0) {
        th_jobinfo info;
        MUST(th_job_info(ring_.d[d].sock, job_, &info) == 0 && info.draining,
             "the drained n%d does not say it is draining", d);
    }
    unsigned others = 0; /* the drained node's clients only fail now */
    for (int i = 0; i < nloops_; i++)
        others |= on_node(i, d) ? 0u : 1u << i;
    wait_progress(others, 5, 20000, "after the drain");
    for (int i = 0; i < nloops_; i++) {
        if (on_node(i, d))
            continue;
        MUST(loops_[i].failed == 0, "client %d on n%d: %d failed calls during n%d's drain", i,
             node_of_[i], loops_[i].failed, d);
        int k = 0, n = th_loop_nevents(&loops_[i]);
        while (k < n && loops_[i].ev[k].size != 4)
            k++;
        MUST(k < n && loops_[i].ev[k].rc == RINGD_OK && loops_[i].ev[k].generation > gen0,
             "client %d: the first call at size 4 did not succeed at a new generation", i);
    }
    expect_no_wrong_results();
    stop_loops();
    th_ring_finish(&ring_); /* the drained node still runs and exits 0 on SIGTERM */
}

Test(elastic, ringctl_drain_leaves_the_other_nodes_clients_without_one_failed_op, .timeout = 120)
{
    drain_node(1, 0);
}

Test(elastic, sigterm_drains_like_ringctl_drain_and_the_daemon_exits_0, .timeout = 120)
{
    drain_node(1, 1);
}

/* n0 is the root of the control tree: the other two nodes' Byes reach each other through it
 * while it leaves. */
Test(elastic, a_drain_of_the_node_that_relays_the_others_control_messages_fails_no_op_of_theirs,
     .timeout = 120)
{
    drain_node(0, 0);
}

Test(elastic, ringctl_drain_then_sigterm_of_the_relaying_node_fails_no_op_of_the_others,
     .timeout = 120)
{
    drain_node(0, 2);
}

/* ---- 4. a node joins a running job ---- */

Test(elastic, a_node_joining_a_running_job_fails_the_old_ranks_once_and_all_go_on_at_size_3,
     .timeout = 120)
{
    start_ring(3);
    add_loop(0, 2, 1, 0, 0);
    add_loop(1, 2, 1, 0, 0);
    wait_progress(ALL_LOOPS, 5, 30000, "the job of 2");
    uint64_t gen0 = max_generation();

    /* world_size 2 is fine for a newcomer: the job has started and may grow */
    int64_t t = th_now_ms();
    th_loop *l2 = add_loop(2, 2, 1, 0, 0);
    MUST(th_loop_wait_open(l2, 30000), "the newcomer could not open: %s", l2->open_msg);
    MUST(l2->opened_size == 3 && l2->opened_rank == 2 && l2->opened_generation > gen0,
         "the newcomer opened as rank %d of %d at generation %" PRIu64
         ", want rank 2 of 3 above %" PRIu64,
         l2->opened_rank, l2->opened_size, l2->opened_generation, gen0);
    for (int i = 0; i < 2; i++) {
        MUST(TH_WAIT(loops_[i].size == 3 && loops_[i].last_ok_ms > t, 20000),
             "old client %d does not succeed at size 3", i);
        int f = th_loop_next_failure(&loops_[i], 0, t);
        MUST(f >= 0 && loops_[i].ev[f].rc == RINGD_E_MEMBERSHIP &&
                 names_change(&loops_[i].ev[f], "n2"),
             "old client %d: want one RINGD_E_MEMBERSHIP naming n2's join", i);
        MUST(loops_[i].failed == 1, "old client %d: %d failed calls, want 1", i, loops_[i].failed);
    }
    MUST(th_ring_wait_up(&ring_, job_, 7, 3, gen0, 10000) != 0, "no ring of 3 after the join");
    wait_progress(ALL_LOOPS, 5, 20000, "after the join");
    for (int i = 0; i < 3; i++)
        MUST(loops_[i].size == 3 && loops_[i].rank == i && loops_[i].generation == l2->generation &&
                 loops_[i].generation > gen0,
             "client %d: rank %d of %d at generation %" PRIu64 " (the newcomer's: %" PRIu64 ")", i,
             loops_[i].rank, loops_[i].size, loops_[i].generation, l2->generation);
    MUST(l2->failed == 0, "the newcomer had %d failed calls", l2->failed);
    expect_no_wrong_results();
    stop_loops();
    th_ring_finish(&ring_);
}

/* bench/ringd-train prints `rank R size N gen G step S loss L checksum C` after every step; its
 * checksum after step S is the same whatever the size and history of the job. */
#define TRAIN_STEPS "150"
#define TRAIN_LINES 4096

typedef th_train_line train_line;

static pid_t trainers_[3];
static char train_logs_[3][256];

static void remove_train_logs(void)
{
    for (int k = 0; k < 3; k++)
        if (train_logs_[k][0] != '\0')
            unlink(train_logs_[k]);
}

static void stop_trainers(void)
{
    for (int k = 0; k < 3; k++) {
        if (trainers_[k] > 0) {
            kill(trainers_[k], SIGKILL);
            waitpid(trainers_[k], NULL, 0);
        }
        trainers_[k] = 0;
    }
    remove_train_logs();
    teardown();
}

/* Starts ringd-train on node k as one rank of a job of world 2, its output into log. */
static pid_t start_trainer(int k, const char *log)
{
    const char *argv[] = {getenv("RINGD_TRAIN_BIN"),
                          "--socket",
                          ring_.d[k].sock,
                          "--job",
                          job_,
                          "--world",
                          "2",
                          "--local",
                          "1",
                          "--steps",
                          TRAIN_STEPS,
                          "--sleep-ms",
                          "20",
                          NULL};
    return th_spawn(log, argv);
}

static int last_step(const char *log)
{
    static train_line lines[TRAIN_LINES];
    int n = th_train_log(log, 0, lines, TRAIN_LINES);
    return n > 0 ? lines[n - 1].step : -1;
}

Test(elastic, ringd_train_keeps_identical_checksums_on_every_rank_at_every_step_across_a_join,
     .fini = stop_trainers, .timeout = 180)
{
    if (getenv("RINGD_TRAIN_BIN") == NULL)
        cr_skip("bench/ringd-train is not built (RINGD_TRAIN_BIN unset in tests/meson.build)");
    start_ring(3);
    char(*logs)[256] = train_logs_;
    for (int k = 0; k < 3; k++)
        snprintf(logs[k], sizeof(logs[k]), "%s/train-n%d.log", ring_.dir, k);
    trainers_[0] = start_trainer(0, logs[0]);
    trainers_[1] = start_trainer(1, logs[1]);
    MUST(TH_WAIT(last_step(logs[0]) >= 10 && last_step(logs[1]) >= 10, 60000),
         "ringd-train on n0 and n1 did not reach step 10 in 60 s (logs in %s)", ring_.dir);
    trainers_[2] = start_trainer(2, logs[2]);
    for (int k = 0; k < 3; k++) {
        int ws = th_wait_pid(trainers_[k], 120000);
        if (ws >= 0)
            trainers_[k] = 0;
        if (ws < 0 || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
            for (int j = 0; j < 3; j++) {
                char *text = th_file_text(logs[j]);
                fprintf(stderr, "---- ringd-train on n%d ----\n%s\n", j, text ? text : "");
                free(text);
            }
            MUST(0, "ringd-train on n%d did not exit 0 within 120 s (status %d)", k, ws);
        }
    }
    /* every step: the same checksum on every rank that printed it, in every generation; every
     * (generation, step): the same size */
    static train_line all[3 * TRAIN_LINES];
    int n = 0, size3 = 0, size2 = 0;
    for (int k = 0; k < 3; k++) {
        int got = th_train_log(logs[k], k, all + n, TRAIN_LINES);
        MUST(got > 0, "ringd-train on n%d printed no step line (or a malformed one)", k);
        n += got;
    }
    uint64_t gmin = UINT64_MAX, gmax = 0;
    for (int i = 0; i < n; i++) {
        int count = 0;
        gmin = all[i].gen < gmin ? all[i].gen : gmin;
        gmax = all[i].gen > gmax ? all[i].gen : gmax;
        for (int j = 0; j < n; j++) {
            if (all[j].step != all[i].step)
                continue;
            MUST(strcmp(all[j].checksum, all[i].checksum) == 0,
                 "step %d: rank %d (generation %" PRIu64 ") has checksum %s, rank %d (generation "
                 "%" PRIu64 ") %s",
                 all[i].step, all[i].rank, all[i].gen, all[i].checksum, all[j].rank, all[j].gen,
                 all[j].checksum);
            if (all[j].gen != all[i].gen)
                continue;
            MUST(all[j].size == all[i].size,
                 "generation %" PRIu64 " step %d: rank %d has size %d, rank %d size %d", all[i].gen,
                 all[i].step, all[i].rank, all[i].size, all[j].rank, all[j].size);
            count++;
        }
        MUST(count <= all[i].size, "generation %" PRIu64 " step %d printed %d times at size %d",
             all[i].gen, all[i].step, count, all[i].size);
        size3 += all[i].size == 3 && count == 3;
        size2 += all[i].size == 2;
    }
    fprintf(stderr,
            "elastic: ringd-train: %d step lines, %d at size 2, %d in steps all 3 ranks printed, "
            "generations %" PRIu64 "..%" PRIu64 "\n",
            n, size2, size3, gmin, gmax);
    MUST(size2 > 0 && size3 >= 3 * 10 && gmax > gmin,
         "want steps at size 2, then at least 10 steps printed by all 3 ranks at a later "
         "generation: %d lines at size 2, %d in complete steps of 3, generations %" PRIu64
         "..%" PRIu64,
         size2, size3, gmin, gmax);
    remove_train_logs();
    th_ring_finish(&ring_);
}

/* ---- 5. a training process dies ---- */

Test(elastic, a_client_killed_mid_allreduce_fails_every_rank_naming_its_pid_and_three_go_on,
     .timeout = 120)
{
    int local[2] = {2, 2};
    start_job(2, local, 0);
    uint64_t gen0 = max_generation();
    th_loop *victim = &loops_[3]; /* the second client on n1 */
    char pid[32];
    snprintf(pid, sizeof(pid), "pid %d", (int)victim->pid);

    int64_t t = th_now_ms();
    th_loop_kill(victim);
    int64_t took = expect_one_change(alive_not_on, -1, t, pid, 3, gen0);
    fprintf(stderr, "elastic: kill -9 of a client to the first success without it: %lld ms\n",
            (long long)took);
    MUST(took < RECOVERY_MS, "the others took %lld ms to go on without the dead client",
         (long long)took);
    wait_progress(ALL_LOOPS, 5, 20000, "after the client died");
    for (int i = 0; i < 3; i++)
        MUST(loops_[i].size == 3 && loops_[i].failed == 1 &&
                 loops_[i].ev[th_loop_next_failure(&loops_[i], 0, t)].rc == RINGD_E_MEMBERSHIP,
             "client %d: size %d, %d failed calls; want 3 and one RINGD_E_MEMBERSHIP", i,
             loops_[i].size, loops_[i].failed);
    int o = th_loop_next_ok(&loops_[2], 0, t);
    MUST(o >= 0 && loops_[2].ev[o].local_size == 1 && loops_[2].ev[o].local_rank == 0,
         "n1's remaining client is not local rank 0 of 1 after the other died");
    expect_no_wrong_results();
    stop_loops();
    th_ring_finish(&ring_);
}

/* Kills the only client of node k in a job of 3 nodes of one client each: every other rank
 * gets one RINGD_E_MEMBERSHIP naming the dead pid, then goes on at size 2. Returns how long the
 * slowest took to succeed again. */
static int64_t kill_only_client_of(int k)
{
    int local[3] = {1, 1, 1};
    start_job(3, local, 0);
    uint64_t gen0 = max_generation();
    th_loop *victim = &loops_[k];
    char pid[32];
    snprintf(pid, sizeof(pid), "pid %d", (int)victim->pid);
    int64_t t = th_now_ms();
    th_loop_kill(victim);
    int64_t took = expect_one_change(alive_not_on, k, t, pid, 2, gen0);
    wait_progress(ALL_LOOPS, 5, 20000, "after the client died");
    expect_no_wrong_results();
    stop_loops();
    th_ring_finish(&ring_);
    return took;
}

/* A node's only client killed: the node has nothing left to run, but that is a loss, not a
 * graceful leave: every other rank gets one RINGD_E_MEMBERSHIP naming the dead pid. */
Test(elastic, the_only_client_of_a_node_killed_fails_every_other_rank_once_naming_its_pid,
     .timeout = 120)
{
    kill_only_client_of(2);
}

/* n0's only client dies: n0, the root of the control tree through which n1 and n2 hear each
 * other, leaves the ring and its job ends there. They go on after one failure naming the pid,
 * well within --peer-timeout (a Bye lost on the way would have them wait it out, were a link
 * closing before every Bye beyond it came not taken for a loss). */
Test(elastic, the_only_client_of_the_node_that_relays_the_others_killed_fails_them_once_briefly,
     .timeout = 120)
{
    int64_t took = kill_only_client_of(0);
    fprintf(stderr, "elastic: n0's client killed: the others went on in %lld ms\n",
            (long long)took);
    MUST(took < atoi(PEER_TIMEOUT) / 2, "the others took %lld ms to go on, want < %d ms",
         (long long)took, atoi(PEER_TIMEOUT) / 2);
}

/* Loops from the first-th on that still run. */
static int alive_from(int i, int first)
{
    return i >= first && loops_[i].pid > 0;
}

/* On one node (no Redis), three clients running allreduces large enough to take the daemon's
 * workers, one killed: the op in flight has often passed the point where a rank is waited for,
 * and still its answer must not hide the loss (the survivors would go on at size 2 with their
 * data split for 3). Each survivor gets one RINGD_E_MEMBERSHIP naming the dead pid, then goes on
 * at size 2; a replacement joins, and so on at 3. Five rounds, since the kill lands at a
 * different point of the op each time. */
Test(elastic,
     on_one_node_a_client_killed_mid_allreduce_fails_each_survivor_once_naming_it_then_a_join_once,
     .timeout = 120)
{
    memset(&ring_, 0, sizeof(ring_));
    ring_.n = 1;
    cr_assert_eq(th_daemon_start(&ring_.d[0], NULL), 0, "ringd did not start");
    loops_ = th_loop_alloc(MAX_LOOPS);
    cr_assert_not_null(loops_);
    t0_ = th_now_ms();
    loop_count_ = 1 << 20; /* 4 MiB per rank: on the workers, long enough to be hit mid-way */
    for (int round = 0; round < 5; round++) { /* 4 loops each */
        snprintf(job_, sizeof(job_), "alone.%d.%d", (int)getpid(), round);
        int first = nloops_;
        for (int l = 0; l < 3; l++)
            add_loop(0, 3, 3, 0, 0);
        wait_progress(ALL_LOOPS, 3, 30000, "the job's start");
        th_loop *victim = &loops_[first + round % 3];
        char pid[32];
        snprintf(pid, sizeof(pid), "pid %d", (int)victim->pid);
        uint64_t gen0 = 0; /* this round's job's: each job counts its own */
        for (int i = first; i < nloops_; i++)
            gen0 = loops_[i].generation > gen0 ? loops_[i].generation : gen0;
        int64_t t = th_now_ms();
        th_loop_kill(victim);
        int64_t took = expect_one_change(alive_from, first, t, pid, 2, gen0);
        MUST(took < RECOVERY_MS, "round %d: the survivors took %lld ms to go on", round,
             (long long)took);
        wait_progress(ALL_LOOPS, 5, 20000, "after the client died");
        for (int i = first; i < nloops_; i++)
            MUST(loops_[i].pid <= 0 || (loops_[i].failed == 1 && loops_[i].size == 2),
                 "round %d, client %d: %d failed calls (want 1), size %d (want 2)", round, i,
                 loops_[i].failed, loops_[i].size);
        /* A replacement joins while the survivors' ops run: they fail once more (the next call
         * after the op in flight, which ends), naming it, and the three go on. */
        t = th_now_ms();
        th_loop *l = add_loop(0, 3, 3, 0, 0);
        MUST(th_loop_wait_open(l, 30000), "round %d: the replacement did not open: %s", round,
             l->open_msg);
        snprintf(pid, sizeof(pid), "pid %d joined", (int)l->pid);
        for (int i = first; i < nloops_ - 1; i++) {
            if (loops_[i].pid <= 0)
                continue;
            MUST(TH_WAIT(loops_[i].size == 3 && loops_[i].last_ok_ms > t, 20000),
                 "round %d, client %d does not succeed at size 3", round, i);
            int f = th_loop_next_failure(&loops_[i], 0, t);
            MUST(f >= 0 && loops_[i].ev[f].rc == RINGD_E_MEMBERSHIP &&
                     names_change(&loops_[i].ev[f], pid) && loops_[i].failed == 2,
                 "round %d, client %d: %d failed calls; want one more, RINGD_E_MEMBERSHIP "
                 "naming %s",
                 round, i, loops_[i].failed, pid);
        }
        wait_progress(ALL_LOOPS, 5, 20000, "after the join");
        MUST(l->failed == 0 && l->size == 3, "round %d: the replacement: %d failed calls, size %d",
             round, l->failed, l->size);
        expect_no_wrong_results();
        stop_loops();
    }
    th_ring_finish(&ring_);
}

/* ---- 6. below min_size ---- */

#define OPEN_TIMEOUT_MS 2000

/* Calls of loop l that failed with RINGD_E_TIMEOUT since t, repeats included. */
static int timeouts_since(const th_loop *l, int64_t t)
{
    int n = 0;
    for (int k = th_loop_next_failure(l, 0, t); k >= 0; k = th_loop_next_failure(l, k + 1, t))
        if (l->ev[k].rc == RINGD_E_TIMEOUT)
            n += 1 + l->ev[k].repeats;
    return n;
}

Test(elastic, below_min_size_ops_time_out_after_the_open_timeout_and_succeed_once_the_node_is_back,
     .timeout = 120)
{
    start_ring(2);
    for (int k = 0; k < 2; k++)
        add_loop(k, 2, 1, 2, OPEN_TIMEOUT_MS);
    wait_progress(ALL_LOOPS, 3, 30000, "the job of 2");
    uint64_t gen0 = max_generation();

    int64_t t = th_now_ms();
    th_daemon_kill(&ring_.d[1]);
    th_loop_kill(&loops_[1]);
    th_loop *l0 = &loops_[0];
    /* the op in flight fails (membership); the calls after it wait, then time out (waited for
     * by the events themselves: a repeat is counted in its event after the failed count) */
    MUST(TH_WAIT(timeouts_since(l0, t) >= 2, 6 * OPEN_TIMEOUT_MS + RECOVERY_MS),
         "the client of n0 has %d failed calls, %d of them timed out; want 2 timeouts", l0->failed,
         timeouts_since(l0, t));
    int timeouts = 0;
    for (int k = th_loop_next_failure(l0, 0, t); k >= 0; k = th_loop_next_failure(l0, k + 1, t)) {
        const th_loop_event *e = &l0->ev[k];
        if (e->rc == RINGD_E_MEMBERSHIP && timeouts == 0 && e->repeats == 0)
            continue; /* the op that was in flight */
        MUST(e->rc == RINGD_E_TIMEOUT && strstr(e->msg, "min_size") != NULL,
             "below min_size a call failed with %s (\"%s\"), want RINGD_E_TIMEOUT naming min_size",
             ringd_strerror((ringd_result_t)e->rc), e->msg);
        /* each call waited the open timeout: the first, and those that repeated it on average
         * (10 ms apart) */
        int64_t waited = e->t1_ms - e->t0_ms;
        int64_t mean = e->repeats > 0 ? (e->last_t1_ms - e->t1_ms) / e->repeats - 10 : waited;
        MUST(waited >= OPEN_TIMEOUT_MS - 200 && waited <= OPEN_TIMEOUT_MS + 3000 &&
                 mean >= OPEN_TIMEOUT_MS - 200 && mean <= OPEN_TIMEOUT_MS + 3000,
             "calls below min_size failed after %lld ms (then %lld on average), want about %d",
             (long long)waited, (long long)mean, OPEN_TIMEOUT_MS);
        timeouts += 1 + e->repeats;
    }
    MUST(timeouts >= 2, "%d calls timed out below min_size, want 2", timeouts);

    /* the node and its training process come back */
    int64_t t_back = th_now_ms();
    MUST(th_daemon_restart(&ring_.d[1]) == 0, "n1 did not start again");
    add_loop(1, 2, 1, 2, 20000);
    MUST(TH_WAIT(l0->last_ok_ms > t_back && loops_[2].ok > 0, 30000),
         "no allreduce succeeded within 30 s of n1's return");
    wait_progress(ALL_LOOPS, 5, 20000, "after n1 came back");
    MUST(l0->size == 2 && loops_[2].size == 2 && l0->generation == loops_[2].generation &&
             l0->generation > gen0,
         "n0's client at size %d generation %" PRIu64 ", n1's at %d %" PRIu64, l0->size,
         l0->generation, loops_[2].size, loops_[2].generation);
    expect_no_wrong_results();
    stop_loops();
    th_ring_finish(&ring_);
}

/* ---- 7. Redis restarts ---- */

/* Every daemon sees redis (connected 1) or not (0). */
static int redis_seen(int connected)
{
    for (int k = 0; k < ring_.n; k++) {
        th_jobinfo info;
        if (th_job_info(ring_.d[k].sock, job_, &info) != 0 || info.redis_connected != connected)
            return 0;
    }
    return 1;
}

/* Keys in the (restarted) Redis: the daemons' registrations. */
static long redis_keys(void)
{
    char out[64];
    const char *dbsize[] = {"DBSIZE"};
    if (th_redis_cmd(&ring_.redis, out, sizeof(out), 1, dbsize) != 0 || out[0] != ':')
        return -1;
    return strtol(out + 1, NULL, 10);
}

static int all_succeeded_after(int64_t t)
{
    for (int i = 0; i < nloops_; i++)
        if (loops_[i].last_ok_ms <= t)
            return 0;
    return 1;
}

Test(elastic, the_ring_serves_ops_while_redis_is_down_and_one_ring_goes_on_after_it_restarts,
     .timeout = 120)
{
    int local[3] = {1, 1, 1};
    start_job(3, local, 0);
    uint64_t gen0 = th_ring_wait_up(&ring_, job_, 7, 3, 0, 5000);
    MUST(gen0 != 0, "no ring of 3");

    int64_t t_down = th_now_ms();
    th_redis_kill(&ring_.redis);
    /* several leases pass without Redis: the ring keeps serving */
    MUST(TH_WAIT(all_succeeded_after(t_down + 3 * LEASE_MS), 20000),
         "allreduces stopped while Redis was down");
    cr_expect(redis_seen(0), "a daemon says Redis is connected while it is down");
    wait_progress(ALL_LOOPS, 5, 20000, "while Redis is down");

    int64_t t_up = th_now_ms();
    MUST(th_redis_restart(&ring_.redis, NULL) == 0, "redis-server did not start again");
    MUST(TH_WAIT_EVERY(redis_seen(1), 10000, 100),
         "the daemons do not say Redis is connected again");
    MUST(TH_WAIT_EVERY(redis_keys() > 0, 10000, 100),
         "the daemons did not register again in the restarted Redis (it holds %ld keys)",
         redis_keys());
    MUST(TH_WAIT(all_succeeded_after(t_up + 3 * LEASE_MS), 20000),
         "allreduces stopped after Redis came back");
    uint64_t gen1 = th_ring_wait_up(&ring_, job_, 7, 3, gen0 - 1, 10000);
    MUST(gen1 >= gen0, "after the restart: no single ring of 3 at generation %" PRIu64 " or later",
         gen0);
    th_jobinfo info[3];
    for (int k = 0; k < 3; k++) {
        MUST(th_job_info(ring_.d[k].sock, job_, &info[k]) == 0, "no status from n%d", k);
        MUST(strcmp(info[k].members, "n0,n1,n2") == 0 && info[k].ring_generation >= gen0 &&
                 info[k].ring_generation == info[0].ring_generation,
             "n%d: ring [%s] at generation %" PRIu64 ", n0's at %" PRIu64 " (before: %" PRIu64 ")",
             k, info[k].members, info[k].ring_generation, info[0].ring_generation, gen0);
    }
    /* the restored registrations: the others never saw their peers vanish */
    for (int i = 0; i < nloops_; i++)
        MUST(loops_[i].failed == 0, "client %d had %d failed calls around the Redis restart", i,
             loops_[i].failed);
    expect_no_wrong_results();
    stop_loops();
    th_ring_finish(&ring_);
}

/* A job of one client on each of 3 nodes whose redis-server stops answering (SIGSTOP: its data
 * kept, its leases expiring meanwhile) for 3.5 leases, the clients going on all the while.
 * Returns the ring's generation before the outage; Redis is left stopped. */
static uint64_t redis_outage(void)
{
    int local[3] = {1, 1, 1};
    start_job(3, local, 1);
    uint64_t gen0 = th_ring_wait_up(&ring_, job_, 7, 3, 0, 5000);
    MUST(gen0 != 0, "no ring of 3");
    int64_t t_down = th_now_ms();
    MUST(kill(ring_.redis.pid, SIGSTOP) == 0, "cannot stop redis-server");
    MUST(TH_WAIT(all_succeeded_after(t_down + 3 * LEASE_MS + LEASE_MS / 2), 20000),
         "allreduces stopped while Redis did not answer");
    return gen0;
}

/* Redis unreachable (stopped, its data kept, its leases expiring meanwhile) for 3.5 leases: the
 * ring serves on, and once Redis answers again the membership is the same ring of 3 and every
 * client goes on without a failed call. */
Test(elastic, a_redis_outage_of_three_and_a_half_leases_changes_nothing_for_the_clients,
     .timeout = 120)
{
    uint64_t gen0 = redis_outage();
    int64_t t_up = th_now_ms();
    MUST(kill(ring_.redis.pid, SIGCONT) == 0, "cannot resume redis-server");
    MUST(TH_WAIT(all_succeeded_after(t_up + 3 * LEASE_MS), 20000),
         "allreduces stopped after Redis answered again");
    uint64_t gen1 = th_ring_wait_up(&ring_, job_, 7, 3, gen0 - 1, 10000);
    MUST(gen1 >= gen0, "after the outage: no single ring of 3 at generation %" PRIu64 " or later",
         gen0);
    for (int i = 0; i < nloops_; i++)
        MUST(loops_[i].failed == 0, "client %d had %d failed calls around the outage", i,
             loops_[i].failed);
    expect_no_wrong_results();
    stop_loops();
    th_ring_finish(&ring_);
}

/* Redis unreachable (stopped, its data kept) for longer than the lease: the ring serves on; a
 * node killed meanwhile is still found out, and the ring re-forms without it once Redis answers
 * again; a node started meanwhile joins then. */
Test(elastic, a_redis_outage_longer_than_the_lease_keeps_the_ring_and_changes_after_it_apply,
     .timeout = 180)
{
    uint64_t gen0 = redis_outage();
    /* a node dies and another starts while Redis is still silent */
    th_daemon_kill(&ring_.d[2]);
    th_loop_kill(&loops_[2]);
    MUST(th_ring_start_node(&ring_, 3, extra_) == 0, "n3 did not start");
    ring_.n = 4;
    add_loop(3, 3, 1, 1, 60000);
    th_sleep_ms(LEASE_MS);
    int64_t t_up = th_now_ms();
    MUST(kill(ring_.redis.pid, SIGCONT) == 0, "cannot resume redis-server");
    /* n0, n1 and n3 form one ring without n2, and every client of it goes on */
    uint64_t gen1 = th_ring_wait_up(&ring_, job_, 0xb, 3, gen0, 20000);
    MUST(gen1 > gen0, "no ring of n0, n1 and n3 within 20 s of Redis answering again");
    MUST(TH_WAIT(loops_[0].last_ok_ms > t_up && loops_[1].last_ok_ms > t_up &&
                     loops_[3].last_ok_ms > t_up && loops_[0].size == 3 && loops_[3].size == 3,
                 20000),
         "the clients of n0, n1 and n3 did not go on at 3 ranks after Redis answered again");
    th_jobinfo info;
    MUST(th_job_info(ring_.d[0].sock, job_, &info) == 0 && strstr(info.members, "n2") == NULL,
         "n0's ring still holds n2: [%s]", info.members);
    expect_no_wrong_results();
    stop_loops();
    th_ring_finish(&ring_);
}

/* ---- 8. the stall inspector ---- */

#define STALL_WARN_MS 300
#define STALL_ABORT_MS 1500

static const char *const stall_flags_[] = {"--stall-warn", "300", "--stall-abort", "1500", NULL};
static const char *const stall_ring_flags_[] = {
    "--peer-timeout", PEER_TIMEOUT, "--stall-warn", "300", "--stall-abort", "1500", NULL};

typedef struct {
    volatile int opened;
    volatile int go; /* the idle rank may submit "after" */
    struct {
        volatile int done;
        int64_t t0, t1;
        int rank, rc, after_rc;
        char msg[256], after_msg[256];
    } c[4];
} stall_shared;

static stall_shared *stall_;
static pid_t stall_kids_[4];

static void stall_teardown(void)
{
    for (int i = 0; i < 4; i++) {
        if (stall_kids_[i] > 0) {
            kill(stall_kids_[i], SIGKILL);
            waitpid(stall_kids_[i], NULL, 0);
        }
        stall_kids_[i] = 0;
    }
    if (stall_ != NULL)
        munmap(stall_, sizeof(*stall_));
    stall_ = NULL;
    teardown();
}

/* Client i of a job of world ranks, local of them on sock's daemon. The last rank never submits
 * "stall.x"; the others do, and must see it fail with RINGD_E_STALLED. Then all reduce "after". */
static int stall_client(int i, const char *sock, int world, int local)
{
    ringd_t *r = th_open_world(sock, job_, world, local, 1u << 20, 20000);
    if (r == NULL)
        return 10;
    __atomic_add_fetch(&stall_->opened, 1, __ATOMIC_SEQ_CST);
    float *x = ringd_alloc(r, 64);
    int me = ringd_rank(r);
    stall_->c[i].rank = me;
    if (me != world - 1) {
        stall_->c[i].t0 = th_now_ms();
        ringd_result_t rc = ringd_allreduce(r, "stall.x", x, x, 4, RINGD_F32, RINGD_SUM);
        stall_->c[i].t1 = th_now_ms();
        stall_->c[i].rc = (int)rc;
        snprintf(stall_->c[i].msg, sizeof(stall_->c[i].msg), "%s", ringd_errmsg(r));
        stall_->c[i].done = 1;
    } else if (!TH_WAIT(stall_->go, 30000)) {
        return 11;
    }
    x[0] = 1.0f;
    ringd_result_t rc = ringd_allreduce(r, "after", x, x, 1, RINGD_F32, RINGD_SUM);
    stall_->c[i].after_rc = (int)rc;
    if (rc != RINGD_OK)
        snprintf(stall_->c[i].after_msg, sizeof(stall_->c[i].after_msg), "%s", ringd_errmsg(r));
    else if (x[0] != (float)world)
        snprintf(stall_->c[i].after_msg, sizeof(stall_->c[i].after_msg),
                 "its result is %g, want %d", x[0], world);
    int ok = rc == RINGD_OK && x[0] == (float)world;
    ringd_close(r); /* unmaps x */
    return ok ? 0 : 12;
}

/* A line of a daemon's log that has both a and b. */
static int logged(const th_daemon *d, const char *a, const char *b)
{
    char *log = th_daemon_log(d);
    int found = 0;
    for (char *line = log; line != NULL && *line != '\0' && !found;) {
        char *end = strchr(line, '\n');
        if (end != NULL)
            *end = '\0';
        found = strstr(line, a) != NULL && strstr(line, b) != NULL;
        line = end != NULL ? end + 1 : NULL;
    }
    free(log);
    return found;
}

static int any_logged(const char *a, const char *b)
{
    for (int k = 0; k < ring_.n; k++)
        if (logged(&ring_.d[k], a, b))
            return 1;
    return 0;
}

static int stall_submitted(int nclients)
{
    int n = 0;
    for (int i = 0; i < nclients; i++)
        n += stall_->c[i].t0 != 0;
    return n;
}

/* nclients clients, client i on node node[i] of a job of world ranks; the last rank (on the last
 * node: rank order follows node names) never submits "stall.x". missing: how the warning and the
 * status name it ("rank 2"), where: its node ("node n1") or NULL. */
static void stall_case(int nclients, const int *node, const int *local, int world,
                       const char *missing, const char *where)
{
    stall_ = mmap(NULL, sizeof(*stall_), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(stall_, MAP_FAILED);
    memset(stall_, 0, sizeof(*stall_));
    snprintf(job_, sizeof(job_), "elastic-stall.%d", (int)getpid());
    t0_ = th_now_ms();
    fflush(NULL);
    for (int i = 0; i < nclients; i++) {
        stall_kids_[i] = fork();
        cr_assert_geq(stall_kids_[i], 0);
        if (stall_kids_[i] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            _exit(stall_client(i, ring_.d[node[i]].sock, world, local[node[i]]));
        }
    }
    MUST(TH_WAIT(stall_->opened == nclients, 30000), "only %d of %d clients opened the job",
         stall_->opened, nclients);
    int submitters = nclients - 1;
    int64_t t_sub = 0;
    MUST(TH_WAIT(stall_submitted(nclients) == submitters, 5000),
         "the submitting ranks did not submit");
    for (int i = 0; i < nclients; i++)
        t_sub = stall_->c[i].t0 > t_sub ? stall_->c[i].t0 : t_sub;

    /* the warning: the tensor and the missing rank (and node), after --stall-warn */
    MUST(TH_WAIT(any_logged("stall.x", missing) && (where == NULL || any_logged("stall.x", where)),
                 STALL_WARN_MS + 5000),
         "no log line names 'stall.x' and %s%s%s within %d ms", missing, where ? " and " : "",
         where ? where : "", STALL_WARN_MS + 5000);
    int64_t warned = th_now_ms() - t_sub;
    fprintf(stderr, "elastic: stall warning logged %lld ms after the last submit\n",
            (long long)warned);
    MUST(warned >= STALL_WARN_MS - 50,
         "the stall warning came %lld ms after the submit, before "
         "--stall-warn %d",
         (long long)warned, STALL_WARN_MS);
    /* the status shows it while it lasts */
    th_jobinfo info;
    MUST(th_job_info(ring_.d[0].sock, job_, &info) == 0 && info.nstalls >= 1 &&
             strcmp(info.stall_name, "stall.x") == 0 && strstr(info.stall_missing, missing) != NULL,
         "status: %d stalls, the first '%s' missing \"%s\"; want stall.x missing %s", info.nstalls,
         info.stall_name, info.stall_missing, missing);
    char *out;
    int rc = th_ringctl(ring_.d[0].sock, &out, 10000, "status", NULL);
    int shown = strstr(out, "stall.x") != NULL;
    if (rc != 0 || !shown)
        fprintf(stderr, "ringctl status:\n%s\n", out);
    free(out);
    MUST(rc == 0 && shown, "ringctl status does not show the stall of 'stall.x'");

    /* the abort: RINGD_E_STALLED on the ranks that submitted, after --stall-abort */
    for (int i = 0; i < nclients; i++) {
        if (stall_->c[i].t0 == 0)
            continue;
        MUST(TH_WAIT(stall_->c[i].done, STALL_ABORT_MS + 5000),
             "rank %d's 'stall.x' did not end within %d ms", stall_->c[i].rank,
             STALL_ABORT_MS + 5000);
        int64_t took = stall_->c[i].t1 - stall_->c[i].t0;
        MUST(stall_->c[i].rc == RINGD_E_STALLED && strstr(stall_->c[i].msg, "stall.x") != NULL &&
                 strstr(stall_->c[i].msg, missing) != NULL,
             "rank %d: 'stall.x' ended with %s (\"%s\"), want RINGD_E_STALLED naming it and %s",
             stall_->c[i].rank, ringd_strerror((ringd_result_t)stall_->c[i].rc), stall_->c[i].msg,
             missing);
        MUST(took >= STALL_ABORT_MS - 100 && took <= STALL_ABORT_MS + 3000,
             "rank %d: 'stall.x' failed after %lld ms, want about %d", stall_->c[i].rank,
             (long long)took, STALL_ABORT_MS);
    }
    /* the job goes on */
    stall_->go = 1;
    for (int i = 0; i < nclients; i++) {
        int ws = th_wait_pid(stall_kids_[i], 20000);
        stall_kids_[i] = ws == -1 ? stall_kids_[i] : 0;
        MUST(ws >= 0 && WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
             "client %d (rank %d) failed afterwards (%d): 'after' ended with %s: %s", i,
             stall_->c[i].rank, ws, ringd_strerror((ringd_result_t)stall_->c[i].after_rc),
             stall_->c[i].after_msg);
    }
    th_ring_finish(&ring_);
}

Test(elastic, a_tensor_one_rank_never_submits_is_warned_about_shown_and_failed_as_stalled,
     .fini = stall_teardown, .timeout = 60)
{
    cr_assert_eq(th_ring_start(&ring_, 2, stall_ring_flags_), 0,
                 "redis-server and 2 ringd did not "
                 "start (do they know --stall-warn?)");
    /* ranks 0 and 1 on n0 submit; rank 2, on n1, does not */
    static const int node[] = {0, 0, 1}, local[] = {2, 1};
    stall_case(3, node, local, 3, "rank 2", "n1");
}

Test(elastic, on_one_node_without_redis_a_stalled_tensor_is_warned_about_and_failed_too,
     .fini = stall_teardown, .timeout = 60)
{
    memset(&ring_, 0, sizeof(ring_));
    ring_.n = 1;
    cr_assert_eq(th_daemon_start(&ring_.d[0], stall_flags_), 0,
                 "ringd did not start (does it know --stall-warn?)");
    static const int node[] = {0, 0}, local[] = {2};
    stall_case(2, node, local, 2, "rank 1", NULL);
}
