/* Rendezvous against a real redis-server: views, leaves, evictions, lease expiry and how soon it
 * is seen, the started flag, reconnects, Redis losing its data, AUTH and untrusted records. */
#define _GNU_SOURCE
#include "rendezvous.h"
#include "harness.h"
#include "th_redis.h"

#include <criterion/criterion.h>
#include <event2/event.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define JOB "job-1"
#define NINST 3
#define NBASES 3
#define HISTORY 256

/* What one instance's on_view saw. */
typedef struct {
    int nviews;
    int wrong_job;
    rd_rdv_member members[16];
    size_t nmembers;
    uint64_t gen;
    int started;
    uint64_t gens[HISTORY];
    size_t sizes[HISTORY];
    int starts[HISTORY];
} seen_t;

static th_redis srv;
static struct event_base *bases[NBASES];
static int pumped[NBASES] = {1, 1, 1}; /* which bases pump() runs */
static rd_rdv *inst[NINST];
static seen_t seen[NINST];
static pid_t child;
static int saved_stderr = -1;

/* Runs the pumped event bases for about 10 ms each; returns 0 once end has passed. */
static int pump(int64_t end)
{
    if (th_now_ms() >= end)
        return 0;
    for (int i = 0; i < NBASES; i++) {
        if (bases[i] == NULL || !pumped[i])
            continue;
        struct timeval tv = {0, 10 * 1000};
        event_base_loopexit(bases[i], &tv);
        event_base_dispatch(bases[i]);
    }
    return 1;
}

/* Runs the pumped bases for ms, for checks that something does not happen. */
static void pump_for(int ms)
{
    for (int64_t end = th_now_ms() + ms; pump(end);)
        ;
}

/* Records a delivered view into the seen_t at arg. */
static void on_view(void *arg, const char *job, const rd_rdv_view *v)
{
    seen_t *s = arg;
    if (strcmp(job, JOB) != 0)
        s->wrong_job = 1;
    if (s->nviews < HISTORY) {
        s->gens[s->nviews] = v->generation;
        s->sizes[s->nviews] = v->nmembers;
        s->starts[s->nviews] = v->started;
    }
    s->nviews++;
    s->gen = v->generation;
    s->started = v->started;
    s->nmembers = v->nmembers < 16 ? v->nmembers : 16;
    memcpy(s->members, v->members, s->nmembers * sizeof(*v->members));
}

/* Instance i's latest view's member called node, or NULL. */
static const rd_rdv_member *has(int i, const char *node)
{
    for (size_t k = 0; k < seen[i].nmembers; k++)
        if (strcmp(seen[i].members[k].node, node) == 0)
            return &seen[i].members[k];
    return NULL;
}

/* A member record with world size 4. */
static rd_rdv_member member(const char *node, const char *addr, uint32_t local, uint64_t inc)
{
    rd_rdv_member m;
    memset(&m, 0, sizeof(m));
    snprintf(m.node, sizeof(m.node), "%s", node);
    snprintf(m.addr, sizeof(m.addr), "%s", addr);
    m.local_size = local;
    m.world_size = 4;
    m.incarnation = inc;
    return m;
}

/* Instance i on base b against srv, with password (or NULL) and a URL suffix ("" or "/DB"). */
static rd_rdv *open_inst(int i, int b, const char *password, const char *suffix, int64_t lease)
{
    char url[96], err[256] = "";
    snprintf(url, sizeof(url), "%s%s", srv.url, suffix);
    rd_rdv_options o = {url, password, lease, on_view, &seen[i]};
    inst[i] = rd_rdv_new(bases[b], &o, err, sizeof(err));
    cr_assert_not_null(inst[i], "rd_rdv_new: %s", err);
    return inst[i];
}

/* Instance 0 on base 0 (URL suffix, lease), joined as node-a alone, once its first view came. */
static rd_rdv *node_a_joined(const char *suffix, int64_t lease)
{
    rd_rdv *a = open_inst(0, 0, NULL, suffix, lease);
    rd_rdv_member ma = member("node-a", "10.0.0.1:7070", 1, 1);
    cr_assert_eq(rd_rdv_join(a, JOB, &ma), 0);
    int64_t end = th_now_ms() + 5000;
    while (seen[0].nviews == 0 && pump(end))
        ;
    cr_assert_eq(seen[0].nviews, 1, "node-a alone had no view within 5 s");
    return a;
}

/* Asserts that instance i was delivered strictly increasing generations. */
static void assert_increasing(int i)
{
    for (int k = 1; k < seen[i].nviews && k < HISTORY; k++)
        cr_assert_gt(seen[i].gens[k], seen[i].gens[k - 1],
                     "instance %d: generation %" PRIu64 " delivered after %" PRIu64, i,
                     seen[i].gens[k], seen[i].gens[k - 1]);
}

/* A raw command's reply as text (see th_redis_cmd), "" on an I/O error. */
static const char *raw(char *out, size_t len, int argc, const char *const *argv)
{
    if (th_redis_cmd(&srv, out, len, argc, argv) != 0)
        out[0] = '\0';
    return out;
}

/* The job's generation counter in Redis, 0 when absent. */
static uint64_t redis_gen(void)
{
    char out[64];
    const char *get[] = {"GET", "ringd:{" JOB "}:gen"};
    raw(out, sizeof(out), 2, get);
    return strcmp(out, "(nil)") == 0 ? 0 : strtoull(out, NULL, 10);
}

/* A fresh redis-server and the event bases per test. */
static void setup(void)
{
    cr_assert_eq(th_redis_start(&srv, NULL), 0, "redis-server did not start");
    for (int i = 0; i < NBASES; i++) {
        bases[i] = event_base_new();
        cr_assert_not_null(bases[i]);
        pumped[i] = 1;
    }
}

/* Runs after setup (the suite's init): the same server, now with a password. */
static void setup_auth(void)
{
    cr_assert_eq(th_redis_restart(&srv, "s3cret pass"), 0, "redis-server did not restart");
}

/* Cleans up whatever a test (failed or not) left: child, stderr, instances, bases, server. */
static void teardown(void)
{
    if (child > 0) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        child = 0;
    }
    if (saved_stderr >= 0) {
        dup2(saved_stderr, 2);
        close(saved_stderr);
        saved_stderr = -1;
    }
    for (int i = 0; i < NINST; i++) {
        rd_rdv_free(inst[i]);
        inst[i] = NULL;
    }
    for (int i = 0; i < NBASES; i++) {
        if (bases[i] != NULL) {
            event_base_loop(bases[i], EVLOOP_NONBLOCK); /* cancelled lookups report back */
            event_base_free(bases[i]);
        }
        bases[i] = NULL;
    }
    th_redis_stop(&srv);
}

/* Joins b (node-b) then a (node-a) and waits until both see both at the same generation. */
static void join_both(rd_rdv *a, rd_rdv *b)
{
    rd_rdv_member mb = member("node-b", "10.0.0.2:7070", 2, 42);
    rd_rdv_member ma = member("node-a", "10.0.0.1:7070", 2, 0xfedcba9876543210ULL);
    /* b first, so that Redis holds the records out of order. */
    cr_assert_eq(rd_rdv_join(b, JOB, &mb), 0);
    int64_t end = th_now_ms() + 5000;
    while (seen[1].nviews == 0 && pump(end))
        ;
    cr_assert_eq(rd_rdv_join(a, JOB, &ma), 0);
    while (!(seen[0].nmembers == 2 && seen[1].nmembers == 2 && seen[0].gen == seen[1].gen) &&
           pump(end))
        ;
    cr_assert(seen[0].nmembers == 2 && seen[1].nmembers == 2, "views: %zu and %zu members",
              seen[0].nmembers, seen[1].nmembers);
    cr_assert_eq(seen[0].gen, seen[1].gen, "generations %" PRIu64 " and %" PRIu64, seen[0].gen,
                 seen[1].gen);
}

TestSuite(rendezvous, .init = setup, .fini = teardown, .timeout = 30);

Test(rendezvous, two_members_of_a_job_see_the_same_sorted_views_and_records, .timeout = 30)
{
    rd_rdv *a = open_inst(0, 0, NULL, "", 30000);
    rd_rdv *b = open_inst(1, 0, NULL, "", 30000);
    join_both(a, b);
    cr_assert_eq(seen[0].gen, 2);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(seen[i].wrong_job, 0);
        cr_assert_str_eq(seen[i].members[0].node, "node-a", "not sorted by node name");
        cr_assert_str_eq(seen[i].members[1].node, "node-b");
        cr_assert_str_eq(seen[i].members[0].addr, "10.0.0.1:7070");
        cr_assert_eq(seen[i].members[0].incarnation, 0xfedcba9876543210ULL);
        cr_assert_eq(seen[i].members[0].local_size, 2);
        cr_assert_eq(seen[i].members[0].world_size, 4);
        cr_assert_str_eq(seen[i].members[1].addr, "10.0.0.2:7070");
        cr_assert_eq(seen[i].members[1].incarnation, 42);
        /* Each delivery carries a new generation. */
        for (int k = 1; k < seen[i].nviews && k < HISTORY; k++)
            cr_assert_neq(seen[i].gens[k], seen[i].gens[k - 1], "generation delivered twice");
    }
    cr_assert(rd_rdv_connected(a));
}

Test(rendezvous, a_leave_bumps_the_generation_and_the_other_sees_the_member_gone, .timeout = 30)
{
    rd_rdv *a = open_inst(0, 0, NULL, "", 30000);
    rd_rdv *b = open_inst(1, 0, NULL, "", 30000);
    join_both(a, b);
    uint64_t before = seen[0].gen;
    rd_rdv_leave(b, JOB);
    int64_t end = th_now_ms() + 5000;
    while (!(seen[0].nmembers == 1) && pump(end))
        ;
    cr_assert_eq(seen[0].nmembers, 1);
    cr_assert_str_eq(seen[0].members[0].node, "node-a");
    cr_assert_eq(seen[0].gen, before + 1);
    char out[64];
    const char *hlen[] = {"HLEN", "ringd:{" JOB "}:members"};
    cr_assert_eq(th_redis_cmd(&srv, out, sizeof(out), 2, hlen), 0);
    cr_assert_str_eq(out, ":1");
    const char *lease[] = {"EXISTS", "ringd:{" JOB "}:lease:node-b"};
    cr_assert_eq(th_redis_cmd(&srv, out, sizeof(out), 2, lease), 0);
    cr_assert_str_eq(out, ":0");
    /* b stopped watching: no more views for it. */
    int nb = seen[1].nviews;
    pump_for(200);
    cr_assert_eq(seen[1].nviews, nb);
}

/* The crashing member: joins from its own process and event base, says so on fd, then waits to
 * be killed. */
static void crash_child(int fd, const char *url)
{
    struct event_base *base = event_base_new();
    seen_t s;
    memset(&s, 0, sizeof(s));
    rd_rdv_options o = {url, NULL, 300, on_view, &s};
    char err[256];
    rd_rdv *r = base != NULL ? rd_rdv_new(base, &o, err, sizeof(err)) : NULL;
    rd_rdv_member m = member("node-c", "10.0.0.3:7070", 1, 7);
    if (r == NULL || rd_rdv_join(r, JOB, &m) != 0)
        _exit(1);
    int told = 0;
    for (;;) {
        struct timeval tv = {0, 10 * 1000};
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
        if (!told && s.nviews > 0) {
            told = write(fd, "j", 1) == 1;
        }
    }
}

Test(rendezvous, a_member_that_crashes_disappears_when_its_lease_expires, .timeout = 30)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t parent = getpid();
    child = fork();
    cr_assert(child >= 0);
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        close(p[0]);
        crash_child(p[1], srv.url);
    }
    close(p[1]);
    struct pollfd pfd = {p[0], POLLIN, 0};
    char c;
    cr_assert_eq(poll(&pfd, 1, 5000), 1, "the child did not join");
    cr_assert_eq(read(p[0], &c, 1), 1);
    close(p[0]);

    rd_rdv *a = open_inst(0, 0, NULL, "", 300);
    rd_rdv_member ma = member("node-a", "10.0.0.1:7070", 1, 1);
    cr_assert_eq(rd_rdv_join(a, JOB, &ma), 0);
    int64_t end = th_now_ms() + 5000;
    while (!(seen[0].nmembers == 2) && pump(end))
        ;
    cr_assert_eq(seen[0].nmembers, 2);
    cr_assert_not_null(has(0, "node-c"));
    /* Alive and refreshing, the child stays for several lease periods. */
    pump_for(900);
    cr_assert_not_null(has(0, "node-c"), "a live member's lease expired");

    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    child = 0;
    int64_t t0 = th_now_ms();
    end = t0 + 5000;
    while (has(0, "node-c") != NULL && pump(end))
        ;
    int64_t took = th_now_ms() - t0;
    cr_assert_null(has(0, "node-c"), "the crashed member is still there");
    cr_assert_not_null(has(0, "node-a"));
    /* Its last refresh was before the kill: the survivor sweeps a few ms after that lease can
     * expire, so lease 300 ms plus slack for slow (sanitizer) builds. */
    cr_assert_leq(took, 300 + 300, "removal took %" PRId64 " ms", took);
}

Test(rendezvous, a_watcher_that_loses_its_connection_sees_changes_made_meanwhile, .timeout = 30)
{
    rd_rdv *a = open_inst(0, 0, NULL, "", 30000);
    rd_rdv *b = open_inst(1, 1, NULL, "", 30000);
    join_both(a, b);
    uint64_t before = seen[0].gen;
    int na = seen[0].nviews;

    /* Every client but this raw one loses its connection; a is not running meanwhile. */
    pumped[0] = 0;
    const char *kill_all[] = {"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"};
    char out[64];
    cr_assert_eq(th_redis_cmd(&srv, out, sizeof(out), 6, kill_all), 0);
    cr_assert_str_neq(out, ":0", "no client killed: %s", out);
    int64_t end = th_now_ms() + 5000;
    while (!rd_rdv_connected(b) && pump(end))
        ;
    pump_for(50);
    while (!rd_rdv_connected(b) && pump(end))
        ;
    cr_assert(rd_rdv_connected(b));
    rd_rdv_leave(b, JOB);
    const char *hexists[] = {"HEXISTS", "ringd:{" JOB "}:members", "node-b"};
    while (!(th_redis_cmd(&srv, out, sizeof(out), 3, hexists) == 0 && strcmp(out, ":0") == 0) &&
           pump(end))
        ;
    cr_assert_str_eq(out, ":0", "b's leave never reached Redis");
    cr_assert_eq(seen[0].nviews, na, "a saw something while not running");

    /* Now a runs again: it must reconnect and notice the leave. */
    pumped[0] = 1;
    pumped[1] = 0;
    end = th_now_ms() + 5000;
    while (has(0, "node-b") != NULL && pump(end))
        ;
    cr_assert_null(has(0, "node-b"), "a never saw the leave made while it was disconnected");
    cr_assert_eq(seen[0].gen, before + 1);
    cr_assert(rd_rdv_connected(a));
}

Test(rendezvous, a_watcher_whose_stream_connection_alone_drops_catches_up_on_reconnect,
     .timeout = 30)
{
    rd_rdv *a = open_inst(0, 0, NULL, "", 30000);
    rd_rdv *b = open_inst(1, 1, NULL, "", 30000);
    join_both(a, b);
    uint64_t before = seen[0].gen;

    /* Kill only the XREAD connections (a's and b's); the command connections stay. */
    static char list[8192];
    const char *client_list[] = {"CLIENT", "LIST"};
    cr_assert_eq(th_redis_cmd(&srv, list, sizeof(list), 2, client_list), 0);
    int killed = 0;
    for (char *line = strtok(list, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        char *id = strstr(line, "id=");
        if (strstr(line, "cmd=xread") == NULL || id == NULL)
            continue;
        char num[32];
        snprintf(num, sizeof(num), "%ld", strtol(id + 3, NULL, 10));
        cr_assert_eq(th_redis_do(&srv, "CLIENT", "KILL", "ID", num, NULL), 0);
        killed++;
    }
    cr_assert_eq(killed, 2, "XREAD clients: %d", killed);

    /* b leaves while a is not running. */
    pumped[0] = 0;
    rd_rdv_leave(b, JOB);
    char out[64];
    int64_t end = th_now_ms() + 5000;
    const char *hexists[] = {"HEXISTS", "ringd:{" JOB "}:members", "node-b"};
    while (!(th_redis_cmd(&srv, out, sizeof(out), 3, hexists) == 0 && strcmp(out, ":0") == 0) &&
           pump(end))
        ;
    cr_assert_str_eq(out, ":0", "b's leave never reached Redis");

    /* Well within the 10 s refresh period: the watch reconnect alone must bring the change. */
    pumped[0] = 1;
    pumped[1] = 0;
    end = th_now_ms() + 3000;
    while (has(0, "node-b") != NULL && pump(end))
        ;
    cr_assert_null(has(0, "node-b"), "a never saw the leave after its stream connection dropped");
    cr_assert_eq(seen[0].gen, before + 1);
}

Test(rendezvous, a_redis_restart_that_loses_all_data_keeps_the_members_and_the_generation,
     .timeout = 30)
{
    rd_rdv *a = open_inst(0, 0, NULL, "", 30000);
    rd_rdv *b = open_inst(1, 1, NULL, "", 30000);
    join_both(a, b);
    /* Push the generation up so that a restart from scratch would visibly lower it. */
    rd_rdv_member ma = member("node-a", "10.0.0.1:7070", 2, 0xfedcba9876543210ULL);
    for (int k = 0; k < 3; k++)
        cr_assert_eq(rd_rdv_join(a, JOB, &ma), 0);
    int64_t end = th_now_ms() + 5000;
    while (!(seen[0].gen == 5 && seen[1].gen == 5) && pump(end))
        ;
    cr_assert(seen[0].gen == 5 && seen[1].gen == 5, "gens %" PRIu64 " %" PRIu64, seen[0].gen,
              seen[1].gen);
    cr_assert(seen[0].started && seen[1].started);
    int na = seen[0].nviews, nb = seen[1].nviews;

    cr_assert_eq(th_redis_restart(&srv, NULL), 0, "redis-server did not restart");
    char out[64];
    const char *hlen[] = {"HLEN", "ringd:{" JOB "}:members"};
    end = th_now_ms() + 8000;
    while (!(rd_rdv_connected(a) && rd_rdv_connected(b) &&
             strcmp(raw(out, sizeof(out), 2, hlen), ":2") == 0 && redis_gen() == 5) &&
           pump(end))
        ;
    cr_assert_str_eq(out, ":2", "the members were not restored");
    cr_assert_eq(redis_gen(), 5, "restored at generation %" PRIu64, redis_gen());
    pump_for(300);
    /* The same members at the same generation: nothing new to deliver, the rings keep going. */
    cr_assert_eq(seen[0].nviews, na, "a was delivered a view after the restart");
    cr_assert_eq(seen[1].nviews, nb, "b was delivered a view after the restart");
    cr_assert_eq(redis_gen(), 5);
    const char *started[] = {"GET", "ringd:{" JOB "}:started"};
    /* kept: the newest join time of the members it started with (0 here) */
    cr_assert_str_eq(raw(out, sizeof(out), 2, started), "0");
    const char *ttl_a[] = {"PTTL", "ringd:{" JOB "}:lease:node-a"};
    const char *ttl_b[] = {"PTTL", "ringd:{" JOB "}:lease:node-b"};
    cr_assert(atoi(raw(out, sizeof(out), 2, ttl_a) + 1) > 0, "node-a's lease: %s", out);
    cr_assert(atoi(raw(out, sizeof(out), 2, ttl_b) + 1) > 0, "node-b's lease: %s", out);

    /* Watching still works after the restart: b's next change reaches a. */
    rd_rdv_member mb = member("node-b", "10.0.0.22:7070", 2, 42);
    cr_assert_eq(rd_rdv_join(b, JOB, &mb), 0);
    end = th_now_ms() + 5000;
    while (!(seen[0].gen == 6 && seen[1].gen == 6) && pump(end))
        ;
    cr_assert_eq(seen[0].gen, 6);
    cr_assert_str_eq(has(0, "node-b")->addr, "10.0.0.22:7070");
    cr_assert_not_null(has(0, "node-a"));
    assert_increasing(0);
    assert_increasing(1);
}

Test(rendezvous, a_member_that_died_while_redis_was_down_is_swept_after_the_restore, .timeout = 30)
{
    rd_rdv *a = open_inst(0, 0, NULL, "", 600);
    rd_rdv *b = open_inst(1, 1, NULL, "", 600);
    join_both(a, b);
    uint64_t before = seen[0].gen;
    int na = seen[0].nviews;

    /* b dies while Redis is down (its leave on exit fails), and Redis comes back empty. */
    cr_assert_eq(th_redis_kill(&srv), 0);
    rd_rdv_free(b);
    inst[1] = NULL;
    cr_assert_eq(th_redis_restart(&srv, NULL), 0, "redis-server did not restart");

    /* a restores both at the same generation (nothing delivered), then b's restored lease
     * expires and a sees it gone at the next generation. */
    char out[64];
    const char *hlen[] = {"HLEN", "ringd:{" JOB "}:members"};
    int restored = 0;
    int64_t end = th_now_ms() + 8000;
    while (has(0, "node-b") != NULL && pump(end))
        restored |= strcmp(raw(out, sizeof(out), 2, hlen), ":2") == 0 && redis_gen() == before;
    cr_assert(restored, "Redis never held both members at generation %" PRIu64, before);
    cr_assert_null(has(0, "node-b"), "the dead member was never swept");
    cr_assert_eq(seen[0].nviews, na + 1, "views delivered: %d, expected %d", seen[0].nviews,
                 na + 1);
    cr_assert_eq(seen[0].gen, before + 1);
    cr_assert_eq(seen[0].nmembers, 1);
    assert_increasing(0);
}

Test(rendezvous, a_node_joining_after_redis_lost_its_data_sends_no_generation_back, .timeout = 30)
{
    rd_rdv *a = open_inst(0, 0, NULL, "", 30000);
    rd_rdv *b = open_inst(1, 1, NULL, "", 30000);
    join_both(a, b);
    uint64_t before = seen[0].gen;

    /* a and b are not running while Redis restarts empty and a new node c joins first. */
    pumped[0] = pumped[1] = 0;
    cr_assert_eq(th_redis_restart(&srv, NULL), 0, "redis-server did not restart");
    rd_rdv *c = open_inst(2, 2, NULL, "", 30000);
    rd_rdv_member mc = member("node-c", "10.0.0.3:7070", 1, 3);
    cr_assert_eq(rd_rdv_join(c, JOB, &mc), 0);
    int64_t end = th_now_ms() + 5000;
    while (seen[2].nviews == 0 && pump(end))
        ;
    cr_assert_eq(seen[2].gen, 1);

    /* a and b join again above the generation they knew; everyone agrees in the end. */
    pumped[0] = pumped[1] = 1;
    end = th_now_ms() + 8000;
    while (!(seen[0].nmembers == 3 && seen[1].nmembers == 3 && seen[2].nmembers == 3 &&
             seen[0].gen == seen[1].gen && seen[1].gen == seen[2].gen) &&
           pump(end))
        ;
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(seen[i].nmembers, 3, "instance %d: %zu members", i, seen[i].nmembers);
        cr_assert_eq(seen[i].gen, seen[0].gen);
        assert_increasing(i);
    }
    /* Above what a and b had delivered before the restart. */
    cr_assert_gt(seen[0].gen, before);
}

Test(rendezvous, auth_with_the_right_password_works, .init = setup_auth, .timeout = 30)
{
    rd_rdv *a = open_inst(0, 0, "s3cret pass", "", 30000);
    rd_rdv_member ma = member("node-a", "10.0.0.1:7070", 1, 1);
    cr_assert_eq(rd_rdv_join(a, JOB, &ma), 0);
    int64_t end = th_now_ms() + 5000;
    while (seen[0].nviews == 0 && pump(end))
        ;
    cr_assert_eq(seen[0].nmembers, 1);
    cr_assert_str_eq(seen[0].members[0].node, "node-a");
    cr_assert(rd_rdv_connected(a));
}

/* Reads the captured stderr so far (at most len - 1 bytes). */
static void read_capture(const char *path, char *buf, size_t len)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = '\0';
    fclose(f);
}

/* Occurrences of needle in hay. */
static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

Test(rendezvous, a_wrong_password_is_logged_once_and_gives_no_view, .init = setup_auth,
     .timeout = 30)
{
    char path[] = "/tmp/ringd-rdv-log.XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    unlink(path);
    char proc[64];
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
    saved_stderr = dup(2);
    dup2(fd, 2);

    rd_rdv *a = open_inst(0, 0, "wrong", "", 30000);
    rd_rdv_member ma = member("node-a", "10.0.0.1:7070", 1, 1);
    cr_assert_eq(rd_rdv_join(a, JOB, &ma), 0);
    static char log[65536];
    int64_t end = th_now_ms() + 5000;
    while (read_capture(proc, log, sizeof(log)), strstr(log, "handshake") == NULL && pump(end))
        ;
    /* Several reconnect attempts (100, 200, 400 ms...) fail the same way meanwhile. */
    pump_for(1000);
    read_capture(proc, log, sizeof(log));
    dup2(saved_stderr, 2);
    close(saved_stderr);
    saved_stderr = -1;
    close(fd);
    cr_assert_neq(strstr(log, "handshake"), NULL, "nothing logged:\n%s", log);
    cr_assert(strstr(log, "WRONGPASS") != NULL || strstr(log, "invalid password") != NULL,
              "the log does not say why:\n%s", log);
    /* Once per connection (the command one and the job's watch), not once per attempt. */
    cr_assert_eq(count(log, "command connection to 127.0.0.1"), 1, "logged more than once:\n%s",
                 log);
    cr_assert_eq(seen[0].nviews, 0);
    cr_assert_eq(rd_rdv_connected(a), 0);
}

Test(rendezvous, malformed_member_records_are_ignored, .timeout = 30)
{
    rd_rdv *a = open_inst(0, 0, NULL, "", 30000);
    rd_rdv *b = open_inst(1, 0, NULL, "", 30000);
    rd_rdv_member ma = member("node-a", "10.0.0.1:7070", 1, 1);
    cr_assert_eq(rd_rdv_join(a, JOB, &ma), 0);
    int64_t end = th_now_ms() + 5000;
    while (seen[0].nviews == 0 && pump(end))
        ;
    cr_assert_eq(seen[0].nmembers, 1);

    static char longrec[700], longname[300];
    memset(longrec, 'x', sizeof(longrec) - 1);
    memcpy(longrec, "1 1 1 1 ", 8);
    memset(longname, 'n', sizeof(longname) - 1);
    const char *bad[][2] = {
        {"bad-1", "garbage"},
        {"bad-2", "1 12 3"},
        {"bad-3", "1 99999999999999999999999 1 1 h:1"},
        {"bad-4", "1 1 4294967296 1 h:1"},
        {"bad-5", "1 1 1 1 h 1"},
        {"bad-6", "2 1 1 1 h:1"},
        {"bad-7", longrec},
        {"bad-8", "1 -1 1 1 h:1"},
        {"bad-9", "1 1 1 1 "},
        {"bad-10", "1 1 1 1 h:\x01"},
        {"bad-11", "1  1 1 1 h:1"},
        {"bad\x01name", "1 1 1 1 h:1"},
        {longname, "1 1 1 1 h:1"},
        {"", "1 1 1 1 h:1"},
        {"bad-12", "2 1 1 1 h:1"},
        {"bad-13", "2 1 1 1 4294967296 h:1"},
        {"bad-14", "2 1 1 1 x h:1"},
        {"bad-15", "3 1 1 1 1 h:1"},
        {"bad-16", "22 1 1 1 1 h:1"},
        {"node-y", "2 5 1 4 4294967295 h:2"},                      /* valid */
        {"node-z", "1 18446744073709551615 4294967295 0 [::1]:9"}, /* valid, version 1 */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char lease[600];
        snprintf(lease, sizeof(lease), "ringd:{" JOB "}:lease:%s", bad[i][0]);
        cr_assert_eq(
            th_redis_do(&srv, "HSET", "ringd:{" JOB "}:members", bad[i][0], bad[i][1], NULL), 0);
        cr_assert_eq(th_redis_do(&srv, "SET", lease, "1", "PX", "60000", NULL), 0);
    }
    /* b's join is an event: a reads the view with all of the above in it. */
    rd_rdv_member mb = member("node-b", "10.0.0.2:7070", 1, 2);
    cr_assert_eq(rd_rdv_join(b, JOB, &mb), 0);
    end = th_now_ms() + 5000;
    while (!(has(0, "node-b") && has(1, "node-b")) && pump(end))
        ;
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(seen[i].nmembers, 4, "instance %d: %zu members", i, seen[i].nmembers);
        cr_assert_str_eq(seen[i].members[0].node, "node-a");
        cr_assert_str_eq(seen[i].members[1].node, "node-b");
        cr_assert_str_eq(seen[i].members[2].node, "node-y");
        cr_assert_eq(seen[i].members[2].incarnation, 5);
        cr_assert_eq(seen[i].members[2].min_size, UINT32_MAX);
        cr_assert_str_eq(seen[i].members[2].addr, "h:2");
        cr_assert_str_eq(seen[i].members[3].node, "node-z");
        cr_assert_eq(seen[i].members[3].incarnation, UINT64_MAX);
        cr_assert_eq(seen[i].members[3].local_size, UINT32_MAX);
        cr_assert_eq(seen[i].members[3].world_size, 0);
        cr_assert_eq(seen[i].members[3].min_size, 0);
        cr_assert_str_eq(seen[i].members[3].addr, "[::1]:9");
    }
    /* Still alive and refreshing. */
    cr_assert(rd_rdv_connected(a) && rd_rdv_connected(b));
}

Test(rendezvous, bad_urls_and_options_are_rejected_with_a_reason, .timeout = 30)
{
    static const char *const bad[] = {
        "",
        "http://127.0.0.1:6379",
        "redis://",
        "redis://host",
        "redis://host:",
        "redis://host:0",
        "redis://host:65536",
        "redis://host:12x",
        "redis://host:1/abc",
        "redis://host:1/2/3",
        "redis://user:pw@host:1",
        "redis://[::1:1",
        "redis://:6379",
    };
    char err[256];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        rd_rdv_options o = {bad[i], NULL, 1000, on_view, &seen[0]};
        err[0] = '\0';
        rd_rdv *r = rd_rdv_new(bases[0], &o, err, sizeof(err));
        cr_expect_null(r, "accepted %s", bad[i]);
        rd_rdv_free(r);
        cr_expect_neq(strstr(err, "redis URL"), NULL, "%s: err '%s'", bad[i], err);
    }
    rd_rdv_options nourl = {NULL, NULL, 1000, on_view, &seen[0]};
    cr_expect_null(rd_rdv_new(bases[0], &nourl, err, sizeof(err)));
    rd_rdv_options nolease = {srv.url, NULL, 0, on_view, &seen[0]};
    cr_expect_null(rd_rdv_new(bases[0], &nolease, err, sizeof(err)));
    cr_expect_neq(strstr(err, "lease"), NULL, "err '%s'", err);

    static const char *const good[] = {"redis://127.0.0.1:6379", "redis://localhost:1/2",
                                       "redis://[::1]:6379/", "redis://h:65535/15"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        rd_rdv_options o = {good[i], NULL, 1000, on_view, &seen[0]};
        rd_rdv *r = rd_rdv_new(bases[0], &o, err, sizeof(err));
        cr_expect_not_null(r, "rejected %s: %s", good[i], err);
        rd_rdv_free(r);
    }
    rd_rdv_free(NULL);
}

/* The URL's pieces, without a Redis or an event loop (rd_rdv_url_parse is pure). */
Test(rendezvous_parse, a_url_gives_its_host_port_and_database)
{
    static const struct {
        const char *url, *host;
        int port, db;
    } good[] = {
        {"redis://127.0.0.1:6379", "127.0.0.1", 6379, 0},
        {"redis://localhost:1/2", "localhost", 1, 2},
        {"redis://[::1]:6379/", "::1", 6379, 0},
        {"redis://h:65535/15", "h", 65535, 15},
    };
    char host[16], err[256];
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        int port = -1, db = -1;
        cr_assert_eq(
            rd_rdv_url_parse(good[i].url, host, sizeof(host), &port, &db, err, sizeof(err)),
            RINGD_OK, "%s: %s", good[i].url, err);
        cr_expect_str_eq(host, good[i].host, "%s", good[i].url);
        cr_expect_eq(port, good[i].port, "%s", good[i].url);
        cr_expect_eq(db, good[i].db, "%s", good[i].url);
    }
    int port, db;
    cr_expect_eq(rd_rdv_url_parse("redis://a-host-name-too-long:1", host, sizeof(host), &port, &db,
                                  err, sizeof(err)),
                 RINGD_E_INVALID);
    cr_expect_neq(strstr(err, "bad host"), NULL, "err '%s'", err);
}

Test(rendezvous, freeing_leaves_every_joined_job_at_once, .timeout = 30)
{
    rd_rdv *a = open_inst(0, 0, NULL, "", 30000);
    rd_rdv *b = open_inst(1, 0, NULL, "", 30000);
    join_both(a, b);
    int64_t t0 = th_now_ms();
    rd_rdv_free(b);
    inst[1] = NULL;
    cr_assert_leq(th_now_ms() - t0, 1500, "rd_rdv_free took %" PRId64 " ms", th_now_ms() - t0);
    /* Far sooner than the 30 s lease. */
    int64_t end = th_now_ms() + 3000;
    while (has(0, "node-b") != NULL && pump(end))
        ;
    cr_assert_null(has(0, "node-b"), "b is still a member after rd_rdv_free");
    cr_assert_eq(seen[0].nmembers, 1);
}

Test(rendezvous, a_join_made_while_redis_is_down_registers_once_it_comes_up, .timeout = 30)
{
    cr_assert_eq(th_redis_kill(&srv), 0);
    rd_rdv *a = open_inst(0, 0, NULL, "", 1000);
    rd_rdv_member ma = member("node-a", "10.0.0.1:7070", 1, 1);
    cr_assert_eq(rd_rdv_join(a, JOB, &ma), 0);
    pump_for(300);
    cr_assert_eq(rd_rdv_connected(a), 0);
    cr_assert_eq(seen[0].nviews, 0);
    cr_assert_eq(th_redis_restart(&srv, NULL), 0);
    int64_t end = th_now_ms() + 5000;
    while (seen[0].nviews == 0 && pump(end))
        ;
    cr_assert_eq(seen[0].nmembers, 1);
    cr_assert_eq(seen[0].gen, 1);
    cr_assert(rd_rdv_connected(a));
}

Test(rendezvous, joining_again_replaces_the_record_and_bumps_the_generation, .timeout = 30)
{
    rd_rdv *a = open_inst(0, 0, NULL, "", 30000);
    rd_rdv *b = open_inst(1, 0, NULL, "", 30000);
    join_both(a, b);
    uint64_t before = seen[1].gen;
    rd_rdv_member ma = member("node-a", "10.9.9.9:1", 3, 0xfedcba9876543210ULL);
    cr_assert_eq(rd_rdv_join(a, JOB, &ma), 0);
    int64_t end = th_now_ms() + 5000;
    while (!(seen[1].gen == before + 1 && seen[0].gen == before + 1) && pump(end))
        ;
    for (int i = 0; i < 2; i++) {
        const rd_rdv_member *m = has(i, "node-a");
        cr_assert_eq(seen[i].gen, before + 1);
        cr_assert_not_null(m);
        cr_assert_eq(seen[i].nmembers, 2);
        cr_assert_str_eq(m->addr, "10.9.9.9:1");
        cr_assert_eq(m->local_size, 3);
    }
}

Test(rendezvous, a_database_number_in_the_url_selects_that_database, .timeout = 30)
{
    node_a_joined("/5", 30000);
    cr_assert_eq(seen[0].nmembers, 1);
    char out[64];
    const char *in5[] = {"EVAL", "redis.call('SELECT', '5') return redis.call('HLEN', KEYS[1])",
                         "1", "ringd:{" JOB "}:members"};
    cr_assert_eq(th_redis_cmd(&srv, out, sizeof(out), 4, in5), 0);
    cr_assert_str_eq(out, ":1");
    const char *in0[] = {"HLEN", "ringd:{" JOB "}:members"};
    cr_assert_eq(th_redis_cmd(&srv, out, sizeof(out), 2, in0), 0);
    cr_assert_str_eq(out, ":0");
}

Test(rendezvous, a_lease_refreshed_in_time_keeps_the_member, .timeout = 30)
{
    node_a_joined("", 300);
    cr_assert_eq(seen[0].gen, 1);
    pump_for(1500);
    /* Five lease periods later: the same single generation, no expire-and-rejoin churn. */
    cr_assert_eq(seen[0].gen, 1, "generation moved to %" PRIu64, seen[0].gen);
    cr_assert_eq(seen[0].nviews, 1);
    char out[64];
    const char *pttl[] = {"PTTL", "ringd:{" JOB "}:lease:node-a"};
    cr_assert_eq(th_redis_cmd(&srv, out, sizeof(out), 2, pttl), 0);
    cr_assert(out[0] == ':' && atoi(out + 1) > 0 && atoi(out + 1) <= 300, "PTTL %s", out);
}

/* Calls Redis ran over the last stretch, from INFO commandstats: scripts (EVAL and EVALSHA) into
 * *scripts, the commands they and others ran (every other command but INFO and CONFIG) into
 * *inner, and HGETALLs into *reads. */
static void command_counts(long *scripts, long *inner, long *reads)
{
    char out[16384];
    const char *info[] = {"INFO", "commandstats"};
    cr_assert_eq(th_redis_cmd(&srv, out, sizeof(out), 2, info), 0);
    *scripts = *inner = *reads = 0;
    for (const char *p = strstr(out, "cmdstat_"); p != NULL; p = strstr(p + 1, "cmdstat_")) {
        char name[64];
        long calls;
        if (sscanf(p, "cmdstat_%63[^:]:calls=%ld", name, &calls) != 2)
            continue;
        if (strcmp(name, "eval") == 0 || strcmp(name, "evalsha") == 0)
            *scripts += calls;
        else if (strncmp(name, "info", 4) != 0 && strncmp(name, "config", 6) != 0)
            *inner += calls;
        if (strcmp(name, "hgetall") == 0)
            *reads += calls;
    }
}

/* Commands per refresh of instance 0 over 1.5 s of refreshes (lease 300 ms). */
static double per_refresh(long *reads)
{
    const char *reset[] = {"CONFIG", "RESETSTAT"};
    char out[64];
    cr_assert_eq(th_redis_cmd(&srv, out, sizeof(out), 2, reset), 0);
    pump_for(1500);
    long scripts, inner;
    command_counts(&scripts, &inner, reads);
    cr_assert_geq(scripts, 8, "%ld scripts in 1.5 s with a lease of 300 ms", scripts);
    return (double)inner / (double)scripts;
}

/* A refresh does the same work in a job of 1 member and of 501: lease deadlines in a sorted set
 * find the expired ones, and the membership is read only when it changed. */
Test(rendezvous, a_refresh_costs_the_same_whatever_the_job_s_size, .timeout = 60)
{
    node_a_joined("", 300);
    long reads;
    double alone = per_refresh(&reads);
    cr_assert_eq(reads, 0, "the membership was read %ld times with nothing changed", reads);
    /* 500 more members, each with a lease of a minute: one change, seen once. Written by one
     * script, at once: 1000 commands of their own, unpumped meanwhile, outlast node-a's lease of
     * 300 ms (its re-join then reads the membership), and a refresh between a record and its
     * lease would rightly sweep that member. */
    const char *add[] = {
        "EVAL",
        "for i = 0, 499 do\n"
        "  local n = string.format('node-x%03d', i)\n"
        "  redis.call('HSET', KEYS[1], n, string.format('3 %d 1 4 0 %d 10.1.%d.%d:7070', 100 + i,"
        " 10 + i, math.floor(i / 200), i % 200))\n"
        "  redis.call('SET', KEYS[2] .. n, '1', 'PX', '60000')\n"
        "end\n",
        "2", "ringd:{" JOB "}:members", "ringd:{" JOB "}:lease:"};
    char added[64];
    cr_assert_eq(th_redis_cmd(&srv, added, sizeof(added), 5, add), 0);
    cr_assert_str_eq(added, "(nil)");
    const char *hlen[] = {"HLEN", "ringd:{" JOB "}:members"};
    cr_assert_str_eq(raw(added, sizeof(added), 2, hlen), ":501");
    rd_rdv_member mb = member("node-b", "10.0.0.2:7070", 1, 2);
    rd_rdv *b = open_inst(1, 0, NULL, "", 30000);
    cr_assert_eq(rd_rdv_join(b, JOB, &mb), 0);
    int64_t end = th_now_ms() + 5000;
    while (seen[0].nviews < 2 && pump(end))
        ;
    cr_assert_geq(seen[0].nviews, 2, "node-a never saw node-b's join");
    double big = per_refresh(&reads);
    cr_assert_eq(reads, 0, "the membership was read %ld times with nothing changed", reads);
    fprintf(stderr, "rendezvous: %.1f commands per refresh with 1 member, %.1f with 502\n", alone,
            big);
    cr_assert(big <= alone + 1.0, "%.1f commands per refresh with 502 members, %.1f with 1", big,
              alone);
    /* A member written by hand, with no deadline (an older ringd's, say), is tracked from the
     * next refresh on: its lease ends, and it is swept. */
    cr_assert_eq(th_redis_do(&srv, "HSET", "ringd:{" JOB "}:members", "node-late",
                             "3 99 1 4 0 99 10.2.0.1:7070", NULL),
                 0);
    cr_assert_eq(
        th_redis_do(&srv, "SET", "ringd:{" JOB "}:lease:node-late", "99", "PX", "400", NULL), 0);
    end = th_now_ms() + 5000;
    uint64_t before = seen[0].gen;
    while (seen[0].gen == before && pump(end))
        ;
    const char *hexists[] = {"HEXISTS", "ringd:{" JOB "}:members", "node-late"};
    char out[64];
    cr_assert_str_eq(raw(out, sizeof(out), 3, hexists), ":0");
    cr_assert(seen[0].gen > before, "no view after node-late's lease ended");
    (void)b;
}

Test(rendezvous, min_size_round_trips_through_the_record, .timeout = 30)
{
    rd_rdv *a = open_inst(0, 0, NULL, "", 30000);
    rd_rdv *b = open_inst(1, 0, NULL, "", 30000);
    rd_rdv_member ma = member("node-a", "10.0.0.1:7070", 2, 11);
    rd_rdv_member mb = member("node-b", "10.0.0.2:7070", 1, 12);
    ma.min_size = 3;
    mb.min_size = UINT32_MAX;
    cr_assert_eq(rd_rdv_join(a, JOB, &ma), 0);
    cr_assert_eq(rd_rdv_join(b, JOB, &mb), 0);
    int64_t end = th_now_ms() + 5000;
    while (!(seen[0].nmembers == 2 && seen[1].nmembers == 2) && pump(end))
        ;
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(seen[i].nmembers, 2);
        cr_assert_eq(has(i, "node-a")->min_size, 3);
        cr_assert_eq(has(i, "node-b")->min_size, UINT32_MAX);
        cr_assert_eq(has(i, "node-a")->world_size, 4);
        cr_assert_eq(has(i, "node-a")->local_size, 2);
    }
    char out[128];
    const char *hget[] = {"HGET", "ringd:{" JOB "}:members", "node-a"};
    cr_assert_str_eq(raw(out, sizeof(out), 3, hget), "3 11 2 4 3 0 10.0.0.1:7070");
}

Test(rendezvous, started_is_set_when_the_local_sizes_reach_the_world_size_and_outlives_a_leave,
     .timeout = 30)
{
    rd_rdv *a = open_inst(0, 0, NULL, "", 30000);
    rd_rdv *b = open_inst(1, 0, NULL, "", 30000);
    char out[64];
    const char *started[] = {"EXISTS", "ringd:{" JOB "}:started"};
    rd_rdv_member mb = member("node-b", "10.0.0.2:7070", 2, 2);
    rd_rdv_member ma = member("node-a", "10.0.0.1:7070", 1, 1);
    cr_assert_eq(rd_rdv_join(b, JOB, &mb), 0);
    int64_t end = th_now_ms() + 5000;
    while (seen[1].gen != 1 && pump(end))
        ;
    cr_assert_eq(seen[1].gen, 1);
    cr_assert_eq(seen[1].started, 0, "2 of 4 ranks: started");

    /* 3 of 4. */
    cr_assert_eq(rd_rdv_join(a, JOB, &ma), 0);
    while (!(seen[0].gen == 2 && seen[1].gen == 2) && pump(end))
        ;
    cr_assert(seen[0].gen == 2 && seen[1].gen == 2);
    cr_assert(seen[0].started == 0 && seen[1].started == 0, "3 of 4 ranks: started");
    cr_assert_str_eq(raw(out, sizeof(out), 2, started), ":0");

    /* 4 of 4: started, in the same generation for both. */
    ma.local_size = 2;
    cr_assert_eq(rd_rdv_join(a, JOB, &ma), 0);
    while (!(seen[0].gen == 3 && seen[1].gen == 3) && pump(end))
        ;
    cr_assert(seen[0].gen == 3 && seen[1].gen == 3);
    cr_assert(seen[0].started == 1 && seen[1].started == 1, "4 of 4 ranks: not started");
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < seen[i].nviews && k < HISTORY; k++)
            cr_assert_eq(seen[i].starts[k], seen[i].gens[k] >= 3, "instance %d generation %" PRIu64,
                         i, seen[i].gens[k]);

    /* b leaves: 2 ranks, still started. */
    rd_rdv_leave(b, JOB);
    while (seen[0].gen != 4 && pump(end))
        ;
    cr_assert_eq(seen[0].gen, 4);
    cr_assert_eq(seen[0].nmembers, 1);
    cr_assert_eq(seen[0].started, 1, "started lost when a member left");
    cr_assert_str_eq(raw(out, sizeof(out), 2, started), ":1");

    /* The last member leaves: the job starts over. */
    rd_rdv_leave(a, JOB);
    while (strcmp(raw(out, sizeof(out), 2, started), ":0") != 0 && pump(end))
        ;
    cr_assert_str_eq(out, ":0", "started outlived the last member");
    cr_assert_eq(rd_rdv_join(a, JOB, &ma), 0);
    while (seen[0].gen != 6 && pump(end))
        ;
    cr_assert_eq(seen[0].gen, 6);
    cr_assert_eq(seen[0].started, 0, "2 of 4 ranks of a new start: started");
}

Test(rendezvous, members_that_disagree_on_the_world_size_do_not_start, .timeout = 30)
{
    rd_rdv *a = open_inst(0, 0, NULL, "", 30000);
    rd_rdv *b = open_inst(1, 0, NULL, "", 30000);
    rd_rdv_member mb = member("node-b", "10.0.0.2:7070", 2, 2);
    rd_rdv_member ma = member("node-a", "10.0.0.1:7070", 2, 1);
    ma.world_size = 3;
    cr_assert_eq(rd_rdv_join(b, JOB, &mb), 0);
    cr_assert_eq(rd_rdv_join(a, JOB, &ma), 0);
    int64_t end = th_now_ms() + 5000;
    while (!(seen[0].nmembers == 2 && seen[1].nmembers == 2 && seen[0].gen == seen[1].gen) &&
           pump(end))
        ;
    cr_assert_eq(seen[0].nmembers, 2);
    cr_assert(seen[0].started == 0 && seen[1].started == 0);
}

Test(rendezvous, eviction_removes_only_the_incarnation_named, .timeout = 30)
{
    rd_rdv *a = open_inst(0, 0, NULL, "", 30000);
    rd_rdv *b = open_inst(1, 0, NULL, "", 30000);
    /* c never joins the job: anyone may evict. */
    rd_rdv *c = open_inst(2, 0, NULL, "", 30000);
    join_both(a, b);
    uint64_t before = seen[0].gen;
    int na = seen[0].nviews;
    char out[256];
    const char *hexists[] = {"HEXISTS", "ringd:{" JOB "}:members", "node-b"};

    /* A restarted node-b (another incarnation) is not evicted, nor a node that is not there. */
    cr_assert_eq(rd_rdv_evict(a, JOB, "node-b", 43, "stale"), 0);
    cr_assert_eq(rd_rdv_evict(a, JOB, "node-q", 42, "absent"), 0);
    pump_for(300);
    cr_assert_str_eq(raw(out, sizeof(out), 3, hexists), ":1");
    cr_assert_eq(redis_gen(), before);
    cr_assert_eq(seen[0].nviews, na);

    cr_assert_eq(rd_rdv_evict(c, JOB, "node-b", 42, "links broke; listener refused"), 0);
    int64_t end = th_now_ms() + 5000;
    while (!(has(0, "node-b") == NULL && has(1, "node-b") == NULL) && pump(end))
        ;
    for (int i = 0; i < 2; i++) {
        cr_assert_null(has(i, "node-b"), "instance %d still sees node-b", i);
        cr_assert_eq(seen[i].gen, before + 1);
    }
    cr_assert_str_eq(raw(out, sizeof(out), 3, hexists), ":0");
    const char *lease[] = {"EXISTS", "ringd:{" JOB "}:lease:node-b"};
    cr_assert_str_eq(raw(out, sizeof(out), 2, lease), ":0");
    const char *event[] = {"EVAL",
                           "return table.concat(redis.call('XREVRANGE', KEYS[1], '+', '-', "
                           "'COUNT', 1)[1][2], ' ')",
                           "1", "ringd:{" JOB "}:events"};
    char want[160];
    snprintf(want, sizeof(want),
             "gen %" PRIu64 " type evict node node-b reason links broke; listener refused",
             before + 1);
    cr_assert_str_eq(raw(out, sizeof(out), 4, event), want);

    /* Invalid names are refused at once. */
    cr_assert_eq(rd_rdv_evict(a, JOB, "", 1, "x"), RINGD_E_INVALID);
    cr_assert_eq(rd_rdv_evict(a, "bad\x01job", "node-b", 1, "x"), RINGD_E_INVALID);
}

/* A member record and lease written straight into Redis, for a member that never refreshes;
 * returns when its lease expires, in th_now_ms time (an upper bound within a few ms). */
static int64_t plant_member(const char *node, int lease_ms)
{
    char key[128], px[24], out[64];
    snprintf(key, sizeof(key), "ringd:{" JOB "}:lease:%s", node);
    snprintf(px, sizeof(px), "%d", lease_ms);
    cr_assert_eq(
        th_redis_do(&srv, "HSET", "ringd:{" JOB "}:members", node, "2 9 1 4 1 10.0.0.9:1", NULL),
        0);
    cr_assert_eq(th_redis_do(&srv, "SET", key, "9", "PX", px, NULL), 0);
    const char *pttl[] = {"PTTL", key};
    raw(out, sizeof(out), 2, pttl);
    cr_assert(out[0] == ':' && atoi(out + 1) > 0, "PTTL %s", out);
    return th_now_ms() + atoi(out + 1);
}

Test(rendezvous, a_silent_member_is_swept_within_milliseconds_of_its_lease_expiring, .timeout = 30)
{
    /* Lease 3 s: refreshes every 1 s. The silent member's lease ends 1.5 s after it is written,
     * between the survivor's refreshes (about 1 s and 2 s after its join): sweeping only at
     * refreshes would see it gone about 500 ms late. */
    rd_rdv *a = open_inst(0, 0, NULL, "", 3000);
    pumped[1] = pumped[2] = 0; /* finer pumping of a's base */
    int64_t expires = plant_member("node-s", 1500);
    rd_rdv_member ma = member("node-a", "10.0.0.1:7070", 1, 1);
    cr_assert_eq(rd_rdv_join(a, JOB, &ma), 0);
    int64_t end = th_now_ms() + 5000;
    while (seen[0].nviews == 0 && pump(end))
        ;
    cr_assert_not_null(has(0, "node-s"));
    while (has(0, "node-s") != NULL && pump(end))
        ;
    int64_t gone = th_now_ms();
    cr_assert_null(has(0, "node-s"), "the silent member was never swept");
    cr_assert_geq(gone, expires - 10, "swept %" PRId64 " ms before its lease expired",
                  expires - gone);
    /* A few ms in fact; 100 ms of slack for slow (sanitizer) builds. */
    cr_assert_leq(gone - expires, 100, "swept %" PRId64 " ms after its lease expired",
                  gone - expires);
    cr_assert_not_null(has(0, "node-a"));
    cr_assert_eq(seen[0].gen, 2);
}

Test(rendezvous, sweep_soon_sweeps_at_once, .timeout = 30)
{
    rd_rdv *a = node_a_joined("", 30000);
    cr_assert_eq(seen[0].gen, 1);
    /* A record whose lease is already gone; no event tells anyone. */
    cr_assert_eq(th_redis_do(&srv, "HSET", "ringd:{" JOB "}:members", "node-s",
                             "2 9 1 4 1 10.0.0.9:1", NULL),
                 0);
    pump_for(200);
    cr_assert_eq(redis_gen(), 1);
    rd_rdv_sweep_soon(a, JOB);
    rd_rdv_sweep_soon(a, JOB); /* while the first is in flight */
    rd_rdv_sweep_soon(a, "no-such-job");
    /* Far sooner than the 10 s refresh period. */
    int64_t end = th_now_ms() + 1000;
    while (redis_gen() != 2 && pump(end))
        ;
    cr_assert_eq(redis_gen(), 2);
    char out[64];
    const char *hexists[] = {"HEXISTS", "ringd:{" JOB "}:members", "node-s"};
    cr_assert_str_eq(raw(out, sizeof(out), 3, hexists), ":0");
    while (seen[0].gen != 2 && pump(end))
        ;
    cr_assert_eq(seen[0].gen, 2);
}

/* A Redis given by host name is looked up through evdns (from /etc/hosts here), and a name no
 * resolver knows is complained about and retried, never blocking the loop or the others. */
Test(rendezvous, a_redis_host_name_is_resolved_without_blocking_the_loop, .timeout = 30)
{
    char url[96], err[256] = "";
    snprintf(url, sizeof(url), "redis://localhost:%d", srv.port);
    rd_rdv_options o = {url, NULL, 30000, on_view, &seen[0]};
    inst[0] = rd_rdv_new(bases[0], &o, err, sizeof(err));
    cr_assert_not_null(inst[0], "rd_rdv_new: %s", err);
    snprintf(url, sizeof(url), "redis://no-such-host.invalid:%d", srv.port);
    rd_rdv_options bad = {url, NULL, 30000, on_view, &seen[1]};
    inst[1] = rd_rdv_new(bases[0], &bad, err, sizeof(err));
    cr_assert_not_null(inst[1], "an unknown name is not an error at start: %s", err);
    rd_rdv_member m = member("node-a", "10.0.0.1:7070", 4, 7);
    cr_assert_eq(rd_rdv_join(inst[0], JOB, &m), 0);
    int64_t end = th_now_ms() + 10000;
    while (!(seen[0].nmembers == 1 && rd_rdv_connected(inst[0])) && pump(end))
        ;
    cr_assert(rd_rdv_connected(inst[0]), "connected to localhost");
    cr_assert_eq(seen[0].nmembers, 1);
    cr_assert_not(rd_rdv_connected(inst[1]));
    rd_rdv_free(inst[1]); /* a lookup or retry under way is cancelled */
    inst[1] = NULL;
}
