/* ringctl and ringd-bench against a real ringd: status text and JSON with clients attached, exit
 * codes scripts rely on (status and drain), and a short bench sweep whose results are checked. */
#include <criterion/criterion.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "ringd.h"
#include "th_ring.h"

static th_daemon daemon_;
static th_ring ring_; /* for the tests that need two nodes */

static void start(void)
{
    cr_assert_eq(th_daemon_start(&daemon_, NULL), 0, "ringd did not start");
}

static void stop(void)
{
    th_ring_teardown(&ring_);
    th_daemon_teardown(&daemon_);
}

/* Runs a shell command line; returns its exit status and its stdout in out (malloc'd). */
static int run(const char *cmd, char **out)
{
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while ((n = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += n;
        if (cap - len < 1024)
            buf = realloc(buf, cap *= 2);
    }
    buf[len] = '\0';
    int ws = pclose(p);
    *out = buf;
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

TestSuite(ringctl, .init = start, .fini = stop, .timeout = 120);

Test(ringctl, status_lists_jobs_and_clients_as_text_and_json)
{
    ringd_options_t o = RINGD_OPTIONS_INIT;
    ringd_t *r = NULL;
    o.socket_path = daemon_.sock;
    o.job = "status-job";
    o.arena_size = 1 << 20;
    cr_assert_eq(ringd_open(&o, &r), RINGD_OK, "%s", ringd_errmsg(r));
    float *x = ringd_alloc(r, 64);
    cr_assert_eq(ringd_allreduce(r, "x", x, x, 16, RINGD_F32, RINGD_SUM), RINGD_OK);

    char cmd[1024], *out;
    snprintf(cmd, sizeof(cmd), "%s --socket %s status", getenv("RINGCTL_BIN"), daemon_.sock);
    cr_assert_eq(run(cmd, &out), 0);
    cr_expect(strstr(out, "ringd 0.") != NULL, "%s", out);
    cr_expect(strstr(out, "status-job") != NULL, "%s", out);
    char pid[32];
    snprintf(pid, sizeof(pid), " %d ", (int)getpid());
    cr_expect(strstr(out, pid) != NULL, "client pid missing: %s", out);
    cr_expect(strstr(out, "draining") == NULL, "a daemon not draining says so: %s", out);
    cr_expect(strstr(out, "\ngpus: ") != NULL, "the GPUs (or why none) missing: %s", out);
    free(out);

    snprintf(cmd, sizeof(cmd),
             "%s --socket %s status --json | python3 -c 'import json,sys; d=json.load(sys.stdin); "
             "c=d[\"clients\"][0]; j=d[\"jobs\"][0]; "
             "print(c[\"pid\"], c[\"local_rank\"], c[\"ops_completed\"], j[\"name\"], "
             "j[\"generation\"], d[\"ops\"][\"completed\"], d[\"draining\"], "
             "\"min_size\" in j, j[\"stalls\"], "
             "(len(d[\"gpus\"]) > 0 or d[\"gpus_why\"] != \"\"), \"device\" in c)'",
             getenv("RINGCTL_BIN"), daemon_.sock);
    cr_assert_eq(run(cmd, &out), 0, "ringctl --json did not print valid JSON");
    char want[128];
    snprintf(want, sizeof(want), "%d 0 1 status-job 1 1 False True [] True True\n", (int)getpid());
    cr_expect_str_eq(out, want);
    free(out);
    ringd_close(r);
    th_daemon_finish(&daemon_);
}

Test(ringctl, exit_codes_tell_scripts_what_happened)
{
    char cmd[512], *out;
    snprintf(cmd, sizeof(cmd), "%s --socket %s/nowhere.sock status 2>/dev/null",
             getenv("RINGCTL_BIN"), daemon_.dir);
    cr_expect_eq(run(cmd, &out), 1, "an unreachable daemon must exit 1");
    free(out);
    snprintf(cmd, sizeof(cmd), "%s --socket %s frobnicate 2>/dev/null", getenv("RINGCTL_BIN"),
             daemon_.sock);
    cr_expect_eq(run(cmd, &out), 2, "an unknown command must exit 2");
    free(out);
    th_daemon_finish(&daemon_);
}

/* Usage errors are found before ringctl connects: the live daemon never sees a DrainRequest. */
Test(ringctl, drain_usage_errors_exit_2)
{
    static const char *const args[] = {
        "--timeout abc", "--timeout -1", "--timeout 12x",    "--timeout=",
        "--timeout",     "--frobnicate", "--json --verbose",
    };
    for (size_t i = 0; i < sizeof(args) / sizeof(args[0]); i++) {
        char cmd[512], *out;
        snprintf(cmd, sizeof(cmd), "%s --socket %s drain %s 2>&1", getenv("RINGCTL_BIN"),
                 daemon_.sock, args[i]);
        cr_expect_eq(run(cmd, &out), 2, "drain %s must exit 2:\n%s", args[i], out);
        cr_expect(strstr(out, "usage") != NULL || strstr(out, "--timeout") != NULL,
                  "drain %s does not say what is wrong:\n%s", args[i], out);
        free(out);
    }
    th_daemon_finish(&daemon_);
}

Test(ringctl, drain_of_an_unreachable_daemon_exits_1)
{
    char cmd[512], *out;
    snprintf(cmd, sizeof(cmd), "%s --socket %s/nowhere.sock drain --timeout 100 --json 2>&1",
             getenv("RINGCTL_BIN"), daemon_.dir);
    cr_expect_eq(run(cmd, &out), 1, "an unreachable daemon must exit 1:\n%s", out);
    cr_expect(strstr(out, "nowhere.sock") != NULL, "the message names the socket:\n%s", out);
    free(out);
    th_daemon_finish(&daemon_);
}

/* A stand-in daemon that answers StatusRequests with its drain timeout and one DrainRequest with
 * a canned DrainReply (or never), so ringctl's side of drain is checked whatever the real daemon
 * does. */
typedef struct {
    int listen_fd;
    uint32_t status; /* of the reply */
    const char *message;
    uint32_t drain_timeout_ms; /* StatusReply.drain_timeout_ms */
    int mute;                  /* the DrainRequest gets no answer */
    int status_asked;          /* StatusRequests that came */
    int asked;                 /* set once a DrainRequest came */
    uint32_t timeout_ms;       /* the one it asked for */
} fake_drain;

static void *fake_drain_serve(void *arg)
{
    fake_drain *f = arg;
    struct pollfd p = {.fd = f->listen_fd, .events = POLLIN};
    if (poll(&p, 1, 10000) != 1)
        return NULL;
    int fd = accept(f->listen_fd, NULL, NULL);
    if (fd < 0)
        return NULL;
    rd_msg *m = th_recv(fd, 10000, NULL);
    if (m != NULL && m->body_case == RINGD__MSG__BODY_STATUS_REQUEST) {
        f->status_asked++;
        Ringd__StatusReply sr = RINGD__STATUS_REPLY__INIT;
        rd_msg r = RINGD__MSG__INIT;
        sr.drain_timeout_ms = f->drain_timeout_ms;
        r.body_case = RINGD__MSG__BODY_STATUS_REPLY;
        r.status_reply = &sr;
        th_send(fd, &r);
        rd_frame_free(m);
        close(fd);
        return fake_drain_serve(f); /* the DrainRequest comes on a connection of its own */
    }
    if (m != NULL && m->body_case == RINGD__MSG__BODY_DRAIN_REQUEST && f->mute) {
        f->asked = 1;
        f->timeout_ms = m->drain_request->timeout_ms;
        th_wait_eof(fd, 10000); /* until ringctl gives up */
    } else if (m != NULL && m->body_case == RINGD__MSG__BODY_DRAIN_REQUEST) {
        f->asked = 1;
        f->timeout_ms = m->drain_request->timeout_ms;
        Ringd__DrainReply d = RINGD__DRAIN_REPLY__INIT;
        rd_msg r = RINGD__MSG__INIT;
        d.status = f->status;
        d.message = (char *)f->message;
        d.jobs = 1;
        d.ops_finished = 4;
        d.ops_failed = f->status == RINGD_OK ? 0 : 2;
        d.elapsed_ms = 312;
        r.body_case = RINGD__MSG__BODY_DRAIN_REPLY;
        r.drain_reply = &d;
        th_send(fd, &r);
    }
    if (m != NULL)
        rd_frame_free(m);
    close(fd);
    return NULL;
}

/* Runs `ringctl --socket <fake> <opts> drain <args>` against a fake daemon answering as f says;
 * returns ringctl's exit status and its stdout in out. */
static int drain_against_fake(fake_drain *f, const char *opts, const char *args, char **out)
{
    char path[256], cmd[512];
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(path, sizeof(path), "%s/fake.sock", daemon_.dir);
    unlink(path);
    cr_assert_lt(strlen(path), sizeof(sun.sun_path));
    memcpy(sun.sun_path, path, strlen(path) + 1);
    f->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(f->listen_fd, 0);
    cr_assert_eq(bind(f->listen_fd, (struct sockaddr *)&sun, sizeof(sun)), 0);
    cr_assert_eq(listen(f->listen_fd, 1), 0);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, fake_drain_serve, f), 0);
    snprintf(cmd, sizeof(cmd), "%s --socket %s %s drain %s", getenv("RINGCTL_BIN"), path, opts,
             args);
    int rc = run(cmd, out);
    pthread_join(t, NULL);
    close(f->listen_fd);
    unlink(path);
    return rc;
}

Test(ringctl, drain_prints_the_outcome_and_exits_0_when_clean_and_3_when_not)
{
    char *out;
    fake_drain clean = {.status = RINGD_OK, .message = ""};
    cr_expect_eq(drain_against_fake(&clean, "", "--timeout 1500", &out), 0, "%s", out);
    cr_expect(clean.asked && clean.timeout_ms == 1500, "asked %d, timeout_ms %u", clean.asked,
              clean.timeout_ms);
    cr_expect_eq(clean.status_asked, 0, "a drain with a timeout of its own asked for status");
    cr_expect_str_eq(out, "drained: left 1 job(s) in 312 ms; 4 ops finished, 0 failed\n");
    free(out);

    fake_drain cut = {.status = RINGD_E_TIMEOUT,
                      .message = "2 ops cut at the drain timeout",
                      .drain_timeout_ms = 1000};
    cr_expect_eq(drain_against_fake(&cut, "", "--json 2>/dev/null", &out), 3,
                 "a drain that was not clean must exit 3: %s", out);
    cr_expect(cut.asked && cut.timeout_ms == 0, "asked %d, timeout_ms %u", cut.asked,
              cut.timeout_ms);
    char json[256], cmd[512];
    snprintf(json, sizeof(json), "%s/drain.json", daemon_.dir);
    FILE *fp = fopen(json, "w");
    cr_assert_not_null(fp);
    fputs(out, fp);
    fclose(fp);
    free(out);
    snprintf(cmd, sizeof(cmd),
             "python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d[\"clean\"], "
             "d[\"status\"], d[\"jobs\"], d[\"ops_failed\"], d[\"message\"])' %s",
             json);
    cr_assert_eq(run(cmd, &out), 0, "ringctl drain --json did not print valid JSON");
    cr_expect_str_eq(out, "False 4 1 2 2 ops cut at the drain timeout\n");
    free(out);
    th_daemon_finish(&daemon_);
}

/* Without a timeout of its own, drain waits as long as the daemon says its drain may take (its
 * --drain-timeout, from a StatusReply) plus --timeout: here 1500 + 300 ms, after which ringctl
 * gives up on a daemon that never answers. */
Test(ringctl, drain_waits_as_long_as_the_daemon_says_its_drain_may_take)
{
    char *out;
    fake_drain mute = {.drain_timeout_ms = 1500, .mute = 1};
    int64_t t0 = th_now_ms();
    int rc = drain_against_fake(&mute, "--timeout 300", "2>&1", &out);
    int64_t took = th_now_ms() - t0;
    cr_expect_eq(rc, 1, "a daemon that never answers must exit 1: %s", out);
    cr_expect_eq(mute.status_asked, 1, "ringctl asked for status %d times", mute.status_asked);
    cr_expect(mute.asked && mute.timeout_ms == 0, "asked %d, timeout_ms %u", mute.asked,
              mute.timeout_ms);
    cr_expect(strstr(out, "no reply from ringd within 1800 ms") != NULL, "%s", out);
    cr_expect(took >= 1800 && took < 10000, "ringctl gave up after %lld ms", (long long)took);
    free(out);
    th_daemon_finish(&daemon_);
}

/* One rank of a job spanning the two ring nodes, opened in a thread so that both can join. */
typedef struct {
    const char *sock;
    ringd_t *s;
    ringd_result_t rc;
    pthread_t t;
} opener;

static void *open_rank(void *arg)
{
    opener *o = arg;
    ringd_options_t opt = RINGD_OPTIONS_INIT;
    opt.socket_path = o->sock;
    opt.job = "drain-job";
    opt.world_size = 2;
    opt.local_size = 1;
    opt.arena_size = 1 << 20;
    opt.open_timeout_ms = 15000;
    opt.op_timeout_ms = 60000;
    o->rc = ringd_open(&opt, &o->s);
    return NULL;
}

/* Starts redis and ring nodes n0 (with extra0) and n1, a job with one rank on each, and an
 * allreduce rank 0 submits and rank 1 never does: n0 has announced it to the ring, so a drain of
 * n0 stays busy with it until the drain's timeout cuts it. *q is rank 0's request. */
static void start_busy_drain(const char *const *extra0, opener o[2], ringd_request_t **q)
{
    cr_assert_eq(th_ring_init(&ring_, 1), 0);
    cr_assert_eq(th_ring_start_node(&ring_, 0, extra0), 0);
    cr_assert_eq(th_ring_start_node(&ring_, 1, NULL), 0);
    for (int i = 0; i < 2; i++) {
        o[i] = (opener){.sock = ring_.d[i].sock};
        cr_assert_eq(pthread_create(&o[i].t, NULL, open_rank, &o[i]), 0);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(o[i].t, NULL);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(o[i].rc, RINGD_OK, "open on n%d: %s", i, ringd_errmsg(o[i].s));
    float *x = ringd_alloc(o[0].s, 64 * sizeof(float));
    cr_assert_not_null(x);
    cr_assert_eq(ringd_allreduce_async(o[0].s, "x", x, x, 64, RINGD_F32, RINGD_SUM, q), RINGD_OK,
                 "%s", ringd_errmsg(o[0].s));
    cr_assert(TH_WAIT_EVERY(th_job_in_flight(ring_.d[0].sock, "drain-job") == 1, 5000, 50),
              "n0 never showed the op in flight");
}

/* The op cut by the drain failed; the sessions close and every daemon shuts down cleanly. */
static void finish_busy_drain(opener o[2], ringd_request_t *q)
{
    cr_expect_neq(ringd_wait(q), RINGD_OK, "the op cut by the drain succeeded");
    for (int i = 0; i < 2; i++)
        ringd_close(o[i].s);
    th_ring_finish(&ring_);
    th_daemon_finish(&daemon_);
}

/* A drain whose timeout cuts an op under way is not clean: exit 3, the message says so. */
Test(ringctl, a_drain_that_cuts_an_op_at_its_timeout_exits_3)
{
    opener o[2];
    ringd_request_t *q;
    start_busy_drain(NULL, o, &q);
    char *out;
    int rc = th_ringctl(ring_.d[0].sock, &out, 20000, "drain", "--timeout", "1000", NULL);
    cr_expect_eq(rc, 3, "ringctl drain exited %d (want 3: the op cut at 1 s):\n%s", rc, out);
    cr_expect(strstr(out, "ops were still under way after 1000 ms") != NULL, "%s", out);
    free(out);
    finish_busy_drain(o, q);
}

/* A real daemon whose --drain-timeout (25 s) is longer than the 20 s ringctl used to assume, kept
 * draining by an op: ringctl drain, given no timeout, waits for the daemon's own answer (the op
 * cut at 25 s: exit 3) instead of giving up at 20 s plus --timeout. */
Test(ringctl, drain_without_a_timeout_waits_out_a_long_daemon_drain_timeout)
{
    const char *const slow[] = {"--drain-timeout", "25000", NULL};
    opener o[2];
    ringd_request_t *q;
    start_busy_drain(slow, o, &q);
    char *out;
    int64_t t0 = th_now_ms();
    int rc = th_ringctl(ring_.d[0].sock, &out, 40000, "--timeout", "2000", "drain", NULL);
    int64_t took = th_now_ms() - t0;
    cr_expect_eq(rc, 3, "ringctl drain exited %d after %lld ms (want 3: the op cut at 25 s):\n%s",
                 rc, (long long)took, out);
    cr_expect(strstr(out, "ops were still under way after 25000 ms") != NULL, "%s", out);
    free(out);
    finish_busy_drain(o, q);
}

Test(ringctl, ringd_bench_sweeps_and_checks_its_results)
{
    const char *ops[] = {"--op allreduce --dtype f32 --redop sum",
                         "--op allreduce --dtype bf16 --redop avg",
                         "--op allreduce --dtype i64 --redop max",
                         "--op broadcast --dtype f16 --root 1", "--op allgather --dtype u8"};
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        char cmd[512], *out;
        snprintf(cmd, sizeof(cmd), "%s --socket %s --procs 3 -b 4 -e 1M -f 16 -n 3 -w 1 %s",
                 getenv("RINGD_BENCH_BIN"), daemon_.sock, ops[i]);
        cr_expect_eq(run(cmd, &out), 0, "%s:\n%s", ops[i], out);
        cr_expect(strstr(out, "#wrong") != NULL, "%s", out);
        /* 4 B .. 1 MiB by 16: 5 rows (4 B to 256 KiB), each ending in a #wrong of 0 */
        int rows = 0;
        for (char *line = strtok(out, "\n"); line != NULL; line = strtok(NULL, "\n"))
            if (line[0] != '#')
                rows += strlen(line) > 2 && strcmp(line + strlen(line) - 2, " 0") == 0;
        cr_expect_eq(rows, 5, "%s: %d good rows", ops[i], rows);
        free(out);
    }
    th_daemon_finish(&daemon_);
}
