/* libringd's ABI conveniences: ringd_options_init gives what RINGD_OPTIONS_INIT gives, ringd_open
 * takes an older header's smaller options and refuses a struct_size no header had, the _async
 * form of a collective gives what its sync form gives, and ringd_version agrees with the header.
 * Calls that need no daemon run in the test process; collectives go through a real ringd with
 * forked clients. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "ctlq.h"
#include "devices.h"
#include "harness.h"
#include "ringd.h"

/* No daemon listens here: an open that gets past the options fails with RINGD_E_CONNECT. */
#define NO_SOCKET "/nonexistent/ringd-test-api.sock"

/* ringd_options_t as ringd.h 0.1 had it (before min_size), as an old program passes it. */
typedef struct {
    size_t struct_size;
    const char *socket_path, *job;
    int world_size, local_size, open_timeout_ms, op_timeout_ms;
    size_t arena_size;
    int poll_us;
} options_v0_1;

#define NPROCS 2

static th_daemon daemon_;
static char job_[64];

static void start(void)
{
    cr_assert_eq(th_daemon_start(&daemon_, NULL), 0, "ringd did not start");
    snprintf(job_, sizeof(job_), "api.%d", (int)getpid());
}

static void stop(void)
{
    th_daemon_teardown(&daemon_);
}

TestSuite(api, .timeout = 120);

Test(api, options_init_gives_the_values_of_the_init_macro)
{
    ringd_options_t m = RINGD_OPTIONS_INIT, f;
    memset(&f, 0xa5, sizeof(f)); /* no field may keep what was there */
    ringd_options_init(&f, sizeof(f));
    cr_assert_eq(f.struct_size, sizeof(ringd_options_t));
    cr_assert_eq(f.struct_size, m.struct_size);
    cr_assert_eq(f.socket_path, m.socket_path);
    cr_assert_eq(f.job, m.job);
    cr_assert_eq(f.world_size, m.world_size);
    cr_assert_eq(f.local_size, m.local_size);
    cr_assert_eq(f.open_timeout_ms, m.open_timeout_ms);
    cr_assert_eq(f.op_timeout_ms, m.op_timeout_ms);
    cr_assert_eq(f.arena_size, m.arena_size);
    cr_assert_eq(f.poll_us, m.poll_us);
    cr_assert_eq(f.reserved, m.reserved);
    cr_assert_eq(f.min_size, m.min_size);
    cr_assert_eq(f.ask_local_rank, m.ask_local_rank);
    cr_assert_eq(f.local_rank, m.local_rank);
    cr_assert_eq(f.ask_device, m.ask_device);
    cr_assert_eq(f.device, m.device);
    cr_assert_eq(f.device_arena_size, m.device_arena_size);
    cr_assert_eq(f.cuda_stream, m.cuda_stream);
    ringd_options_init(NULL, sizeof(ringd_options_t));
    ringd_options_init(&f, 3); /* too small for struct_size: untouched */
    cr_assert_eq(f.struct_size, sizeof(ringd_options_t));
}

/* A caller with an older, smaller struct (or a binding's own copy) is written only as far as
 * its size, which struct_size then says. */
Test(api, options_init_writes_no_further_than_the_caller_s_struct)
{
    unsigned char buf[sizeof(ringd_options_t) + 16];
    memset(buf, 0xa5, sizeof(buf));
    ringd_options_init((ringd_options_t *)(void *)buf, sizeof(options_v0_1));
    options_v0_1 old;
    memcpy(&old, buf, sizeof(old));
    cr_assert_eq(old.struct_size, sizeof(options_v0_1));
    cr_assert_null(old.socket_path);
    cr_assert_eq(old.world_size, 0);
    for (size_t i = sizeof(options_v0_1); i < sizeof(buf); i++)
        cr_assert_eq(buf[i], 0xa5, "byte %zu past the caller's struct was written", i);
}

/* Opens with o and closes; returns the result, its message in msg. */
/* Options for a job of size ranks, all on this node, at a socket where no daemon answers. */
static ringd_options_t options_nowhere(int size)
{
    ringd_options_t o;
    ringd_options_init(&o, sizeof(o));
    o.socket_path = NO_SOCKET;
    o.world_size = o.local_size = size;
    return o;
}

static ringd_result_t open_result(const ringd_options_t *o, char *msg, size_t len)
{
    ringd_t *r = NULL;
    ringd_result_t rc = ringd_open(o, &r);
    cr_assert_not_null(r);
    snprintf(msg, len, "%s", ringd_errmsg(r));
    ringd_close(r);
    return rc;
}

Test(api, options_with_a_struct_size_no_header_had_are_refused)
{
    const size_t bad[] = {0,
                          1,
                          sizeof(size_t),
                          sizeof(options_v0_1) - 1,
                          sizeof(ringd_options_t) + 1,
                          sizeof(ringd_options_t) + 4096,
                          (size_t)-1};
    char msg[1024];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ringd_options_t o;
        ringd_options_init(&o, sizeof(o));
        o.socket_path = NO_SOCKET;
        o.struct_size = bad[i];
        ringd_result_t rc = open_result(&o, msg, sizeof(msg));
        char want[64];
        snprintf(want, sizeof(want), "ringd_options_t.struct_size is %zu", bad[i]);
        cr_expect_eq(rc, RINGD_E_INVALID, "struct_size %zu: %s (%s)", bad[i], ringd_strerror(rc),
                     msg);
        cr_expect(strstr(msg, want) != NULL && strstr(msg, "ringd_options_init()") != NULL,
                  "struct_size %zu: the message '%s' does not say what is wrong and what to do",
                  bad[i], msg);
    }
}

Test(api, options_of_an_older_smaller_header_are_taken)
{
    char msg[1024];
    /* Its struct as 0.1 had it: every field it has is read (the socket path), and the open gets
     * as far as connecting. */
    options_v0_1 old = {sizeof(options_v0_1), NO_SOCKET, "old", 1, 1, 1000, 0, 0, 0};
    cr_assert_eq(open_result((const ringd_options_t *)(const void *)&old, msg, sizeof(msg)),
                 RINGD_E_CONNECT, "%s", msg);
    cr_assert(strstr(msg, NO_SOCKET) != NULL, "the socket path was not read: %s", msg);
    /* What lies beyond an older struct_size is the caller's memory, not options: a min_size
     * there that ringd_open would refuse is never read. */
    ringd_options_t o = options_nowhere(1);
    o.min_size = 99;
    cr_assert_eq(open_result(&o, msg, sizeof(msg)), RINGD_E_INVALID, "%s", msg);
    cr_assert(strstr(msg, "min_size 99") != NULL, "%s", msg);
    o.struct_size = sizeof(options_v0_1);
    cr_assert_eq(open_result(&o, msg, sizeof(msg)), RINGD_E_CONNECT, "%s", msg);
}

Test(api, a_job_name_of_ringd_s_own_is_refused_before_connecting)
{
    char msg[1024];
    ringd_options_t o = options_nowhere(1);
    o.job = "~self-probe";
    cr_assert_eq(open_result(&o, msg, sizeof(msg)), RINGD_E_INVALID, "%s", msg);
    cr_assert(strstr(msg, "not starting with '~'") != NULL, "%s", msg);
    o.job = "self~probe";
    cr_assert_eq(open_result(&o, msg, sizeof(msg)), RINGD_E_CONNECT, "%s", msg);
}

/* A header's struct that ended at min_size (64 bytes) has ask_local_rank's place in its padding:
 * whatever lies there is not read as a request; the same bytes with this header's struct_size
 * are. */
Test(api, an_older_header_s_padding_never_asks_for_a_local_rank)
{
    char msg[1024];
    ringd_options_t o = options_nowhere(2);
    o.ask_local_rank = 1;
    o.local_rank = 5;
    cr_assert_eq(open_result(&o, msg, sizeof(msg)), RINGD_E_INVALID, "%s", msg);
    cr_assert(strstr(msg, "local_rank 5") != NULL, "%s", msg);
    o.struct_size = offsetof(ringd_options_t, min_size) + sizeof(int) + sizeof(int);
    cr_assert_eq(o.struct_size, 64);
    cr_assert_eq(open_result(&o, msg, sizeof(msg)), RINGD_E_CONNECT, "%s", msg);
}

/* The calls that submit, wait, allocate or change a session, given none: RINGD_E_INVALID (or
 * NULL, or nothing), never a crash. */
Test(api, calls_given_no_session_return_invalid)
{
    float x[2] = {1, 2};
    size_t counts[1] = {2};
    int last = 0;
    ringd_request_t *q = (ringd_request_t *)&last;
    ringd_t *ps = (ringd_t *)&last;
    cr_expect_eq(ringd_allreduce(NULL, "a", x, x, 2, RINGD_F32, RINGD_SUM), RINGD_E_INVALID);
    cr_expect_eq(ringd_allreduce_async(NULL, "a", x, x, 2, RINGD_F32, RINGD_SUM, &q),
                 RINGD_E_INVALID);
    cr_expect_null(q);
    cr_expect_eq(ringd_allreduce_scaled(NULL, "a", x, x, 2, RINGD_F32, RINGD_SUM, 1.0, 1.0),
                 RINGD_E_INVALID);
    cr_expect_eq(ringd_broadcast(NULL, "b", x, 2, RINGD_F32, 0), RINGD_E_INVALID);
    cr_expect_eq(ringd_allgather(NULL, "c", x, x, 1, RINGD_F32), RINGD_E_INVALID);
    cr_expect_eq(ringd_reducescatter(NULL, "d", x, x, 1, RINGD_F32, RINGD_SUM), RINGD_E_INVALID);
    cr_expect_eq(ringd_reducescatterv(NULL, "e", x, x, counts, RINGD_F32, RINGD_SUM, 1.0, 1.0),
                 RINGD_E_INVALID);
    cr_expect_eq(ringd_allgatherv(NULL, "f", x, 2, x, counts, RINGD_F32), RINGD_E_INVALID);
    cr_expect_eq(ringd_alltoall(NULL, "g", x, x, 2, RINGD_F32), RINGD_E_INVALID);
    cr_expect_eq(ringd_alltoallv(NULL, "h", x, counts, x, counts, RINGD_F32), RINGD_E_INVALID);
    cr_expect_eq(ringd_barrier(NULL, "i"), RINGD_E_INVALID);
    cr_expect_eq(ringd_join(NULL, &last), RINGD_E_INVALID);
    cr_expect_eq(ringd_group_start(NULL), RINGD_E_INVALID);
    cr_expect_eq(ringd_group_end(NULL), RINGD_E_INVALID);
    cr_expect_eq(ringd_refuse(NULL, "j", RINGD_E_INVALID, "no"), RINGD_E_INVALID);
    cr_expect_eq(ringd_process_set_create(NULL, &last, 1, &ps), RINGD_E_INVALID);
    cr_expect_null(ps);
    cr_expect_eq(ringd_timeline_start(NULL, "/tmp/x.json"), RINGD_E_INVALID);
    cr_expect_eq(ringd_timeline_stop(NULL), RINGD_E_INVALID);
    cr_expect_null(ringd_alloc(NULL, 8));
    cr_expect_null(ringd_alloc_device(NULL, 8));
    cr_expect_eq(ringd_wait(NULL), RINGD_E_INVALID);
    cr_expect_eq(ringd_test(NULL, &last), RINGD_E_INVALID);
    ringd_free(NULL, x);
    ringd_next_shape(NULL, 1);
    ringd_close(NULL);
}

Test(api, version_names_the_header_s_major_and_minor)
{
    const char *v = ringd_version();
    int major = -1, minor = -1, patch = -1, end = 0;
    cr_assert_not_null(v);
    cr_assert_eq(sscanf(v, "%d.%d.%d%n", &major, &minor, &patch, &end), 3,
                 "ringd_version() is '%s', not MAJOR.MINOR.PATCH", v);
    cr_assert_eq(v[end], '\0', "ringd_version() '%s' has more after MAJOR.MINOR.PATCH", v);
    cr_assert(major == RINGD_VERSION_MAJOR && minor == RINGD_VERSION_MINOR,
              "ringd_version() is %s; ringd.h says %d.%d", v, RINGD_VERSION_MAJOR,
              RINGD_VERSION_MINOR);
}

/* Rank me's element i, exact in every floating dtype, as is every scaled sum of them. */
static double element(int me, size_t i)
{
    return (double)((me + 1) * (int)(i % 7 + 1));
}

static void fill(void *buf, ringd_dtype_t dt, size_t count, int me)
{
    for (size_t i = 0; i < count; i++)
        rd_dtype_store((rd_dtype)dt, buf, i, element(me, i));
}

/* Every floating dtype, sum and avg, in the arena and outside it: ringd_allreduce_scaled_async
 * submitted first, the sync ringd_allreduce_scaled of the same input run while it is
 * outstanding, and the two results equal bit for bit. */
static int scaled_async_vs_sync(int idx, void *arg)
{
    (void)idx;
    (void)arg;
    ringd_t *r = th_open(daemon_.sock, job_, NPROCS, 16u << 20, 20000);
    if (r == NULL)
        return 10;
    int me = ringd_rank(r), n = ringd_size(r);
    const ringd_dtype_t dts[] = {RINGD_F32, RINGD_F64, RINGD_F16, RINGD_BF16};
    const size_t counts[] = {5, 100003};
    size_t most = counts[1] * 8;
    void *arena[2] = {ringd_alloc(r, most), ringd_alloc(r, most)};
    void *heap[2] = {malloc(most), malloc(most)};
    if (arena[0] == NULL || arena[1] == NULL || heap[0] == NULL || heap[1] == NULL)
        return 11;
    for (int where = 0; where < 2; where++) {
        void **b = where == 0 ? arena : heap;
        for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); d++) {
            for (int op = RINGD_SUM; op <= RINGD_AVG; op++) {
                for (size_t c = 0; c < 2; c++) {
                    size_t count = counts[c], bytes = count * ringd_dtype_size(dts[d]);
                    char name[64];
                    ringd_request_t *req = NULL;
                    fill(b[0], dts[d], count, me);
                    fill(b[1], dts[d], count, me);
                    snprintf(name, sizeof(name), "async.%d.%zu.%d.%zu", where, d, op, count);
                    TH_CHECK_OK(r, ringd_allreduce_scaled_async(r, name, b[0], b[0], count, dts[d],
                                                                (ringd_redop_t)op, 0.5, 3.0, &req));
                    snprintf(name, sizeof(name), "sync.%d.%zu.%d.%zu", where, d, op, count);
                    TH_CHECK_OK(r, ringd_allreduce_scaled(r, name, b[1], b[1], count, dts[d],
                                                          (ringd_redop_t)op, 0.5, 3.0));
                    TH_CHECK_OK(r, ringd_wait(req));
                    if (memcmp(b[0], b[1], bytes) != 0) {
                        fprintf(stderr, "rank %d: %s: the async result differs from the sync one\n",
                                me, name);
                        return 40;
                    }
                    /* ...and both are the scaled reduction, not two equal wrong answers. */
                    if (dts[d] == RINGD_F64) {
                        for (size_t i = 0; i < count; i++) {
                            double want = 0;
                            for (int k = 0; k < n; k++)
                                want += 0.5 * element(k, i);
                            want = (op == RINGD_AVG ? want / n : want) * 3.0;
                            if (((double *)b[0])[i] != want) {
                                fprintf(stderr, "rank %d: %s element %zu is %g, want %g\n", me,
                                        name, i, ((double *)b[0])[i], want);
                                return 41;
                            }
                        }
                    }
                }
            }
        }
    }
    /* The async form without a request to return is a bad call, not a sync one. */
    if (ringd_allreduce_scaled_async(r, "no.req", arena[0], arena[0], 1, RINGD_F32, RINGD_SUM, 1.0,
                                     1.0, NULL) != RINGD_E_INVALID)
        return 42;
    free(heap[0]);
    free(heap[1]);
    ringd_close(r);
    return 0;
}

Test(api, allreduce_scaled_async_gives_what_the_sync_form_gives, .init = start, .fini = stop)
{
    cr_assert_eq(th_run(NPROCS, scaled_async_vs_sync, NULL, 100000), 0);
    th_daemon_finish(&daemon_);
}

/* One client: ringd_timeline_start's refusals, and a timeline started and stopped mid-session
 * holding the collectives in between and none after. */
static int timeline_client(int idx, void *arg)
{
    (void)idx;
    const char *dir = arg;
    char path[512], bad[600];
    snprintf(path, sizeof(path), "%s/tl.json", dir);
    snprintf(bad, sizeof(bad), "%s/no/such/dir/tl.json", dir);
    ringd_t *r = th_open(daemon_.sock, job_, 1, 1u << 20, 20000);
    if (r == NULL)
        return 10;
    float x[4] = {1, 2, 3, 4};
    if (ringd_timeline_start(r, NULL) != RINGD_E_INVALID ||
        ringd_timeline_start(NULL, path) != RINGD_E_INVALID)
        return 11;
    if (ringd_timeline_start(r, bad) != RINGD_E_SYSTEM || strstr(ringd_errmsg(r), bad) == NULL)
        return 12;
    if (ringd_timeline_stop(r) != RINGD_OK) /* none runs: nothing to stop */
        return 13;
    TH_CHECK_OK(r, ringd_group_start(r)); /* a group's Submits are held to its end */
    if (ringd_timeline_start(r, path) != RINGD_E_INVALID ||
        strstr(ringd_errmsg(r), "inside a group") == NULL)
        return 17;
    TH_CHECK_OK(r, ringd_group_end(r));
    TH_CHECK_OK(r, ringd_timeline_start(r, path));
    if (ringd_timeline_start(r, path) != RINGD_E_INVALID ||
        strstr(ringd_errmsg(r), "being written already") == NULL)
        return 14;
    TH_CHECK_OK(r, ringd_allreduce(r, "traced", x, x, 4, RINGD_F32, RINGD_SUM));
    TH_CHECK_OK(r, ringd_timeline_stop(r));
    TH_CHECK_OK(r, ringd_allreduce(r, "untraced", x, x, 4, RINGD_F32, RINGD_SUM));
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 15;
    char text[65536];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    if (strstr(text, "\"traced\"") == NULL || strstr(text, "untraced") != NULL || text[0] != '[' ||
        strrchr(text, ']') == NULL) {
        fprintf(stderr, "timeline: %s\n", text);
        return 16;
    }
    ringd_close(r);
    return 0;
}

Test(api, a_timeline_starts_and_stops_in_a_running_session, .init = start, .fini = stop)
{
    char dir[] = "/tmp/ringd-tl.XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    int rc = th_run(1, timeline_client, dir, 30000);
    char path[64];
    snprintf(path, sizeof(path), "%s/tl.json", dir);
    unlink(path);
    rmdir(dir);
    cr_assert_eq(rc, 0);
    th_daemon_finish(&daemon_);
}

/* A child forked by client 0 while its allreduce is pending, run once that allreduce has
 * finished (its completion waits in the parent's queue, in the control area at the arena's
 * start): every call on the parent's session is refused saying why, without taking the
 * completion or arena space. Its exit status: 0, or the step that failed. */
static int forked_child_calls(ringd_t *r, ringd_request_t *q, const rd_ctrl *ctrl)
{
    float x[4] = {1, 2, 3, 4};
    int done = 0;
    for (int ms = 0; atomic_load(&ctrl->cq.head) == atomic_load(&ctrl->cq.tail); ms++) {
        if (ms == 30000)
            return 30;
        usleep(1000);
    }
    if (ringd_wait(q) != RINGD_E_INVALID || strstr(ringd_errmsg(r), "forked from") == NULL)
        return 31;
    if (ringd_test(q, &done) != RINGD_E_INVALID || done)
        return 32;
    if (ringd_allreduce(r, "child", x, x, 4, RINGD_F32, RINGD_SUM) != RINGD_E_INVALID ||
        strstr(ringd_errmsg(r), "open a session of its own") == NULL)
        return 33;
    if (ringd_alloc(r, 64) != NULL || ringd_group_start(r) != RINGD_E_INVALID ||
        ringd_timeline_start(r, "/tmp/ringd-forked-child.json") != RINGD_E_INVALID)
        return 34;
    if (atomic_load(&ctrl->cq.head) == atomic_load(&ctrl->cq.tail))
        return 35;  /* the parent's completion was taken */
    ringd_close(r); /* tells the daemon nothing: the session is the parent's */
    return 0;
}

/* Reaps child within 30 s (killing it after); returns its exit status, or -1. */
static int reaped(pid_t child)
{
    int status = 0;
    for (int ms = 0; ms < 30000; ms += 10) {
        pid_t got = waitpid(child, &status, WNOHANG);
        if (got == child)
            return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        if (got < 0)
            return -1;
        usleep(10000);
    }
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
    return -1;
}

/* Two clients; client 0 forks while its allreduce waits for client 1's. */
static int fork_client(int idx, void *arg)
{
    (void)arg;
    ringd_t *r = th_open(daemon_.sock, job_, NPROCS, 1u << 20, 20000);
    if (r == NULL)
        return 10;
    float *x = ringd_alloc(r, 4 * sizeof(float));
    ringd_tensor_t where;
    if (x == NULL || ringd_tensor_locate(r, x, 4 * sizeof(float), &where) != RINGD_OK)
        return 11;
    for (int i = 0; i < 4; i++)
        x[i] = (float)(idx + 1) * (float)(i + 1);
    if (idx == 1) {
        TH_CHECK_OK(r, ringd_allreduce(r, "pending", x, x, 4, RINGD_F32, RINGD_SUM));
    } else {
        ringd_request_t *q;
        TH_CHECK_OK(r, ringd_allreduce_async(r, "pending", x, x, 4, RINGD_F32, RINGD_SUM, &q));
        const rd_ctrl *ctrl = (const rd_ctrl *)((uint8_t *)x - where.offset);
        pid_t child = fork();
        if (child < 0)
            return 13;
        if (child == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            _exit(forked_child_calls(r, q, ctrl));
        }
        int status = reaped(child);
        if (status != 0) {
            fprintf(stderr, "forked child: exit status %d\n", status);
            return 14;
        }
        TH_CHECK_OK(r, ringd_wait(q)); /* the parent's completion, untouched by the child */
    }
    for (int i = 0; i < 4; i++)
        if (x[i] != 3.0f * (float)(i + 1))
            return 16;
    TH_CHECK_OK(r, ringd_allreduce(r, "after", x, x, 4, RINGD_F32, RINGD_SUM));
    th_close_together(r, NPROCS);
    return 0;
}

Test(api, a_forked_child_is_refused_the_parent_s_session_which_goes_on, .init = start, .fini = stop)
{
    cr_assert_eq(th_run(NPROCS, fork_client, NULL, 60000), 0);
    th_daemon_finish(&daemon_);
}

/* One client: where its buffers are, as ringd_tensor_locate says. */
static int locate_client(int idx, void *arg)
{
    (void)idx;
    (void)arg;
    ringd_t *r = th_open(daemon_.sock, job_, 1, 1u << 20, 20000);
    if (r == NULL)
        return 10;
    ringd_tensor_t t;
    uint8_t *a = ringd_alloc(r, 4096), *b = ringd_alloc(r, 64);
    if (a == NULL || b == NULL)
        return 11;
    if (ringd_tensor_locate(r, a, 4096, &t) != RINGD_OK || t.kind != RINGD_MEM_ARENA ||
        t.device != 0 || t.handle != 0)
        return 12;
    uint64_t off_a = t.offset;
    if (ringd_tensor_locate(r, b, 64, &t) != RINGD_OK || t.offset == off_a ||
        t.offset != off_a + (uint64_t)(b - a))
        return 13; /* offsets are the buffers' distance into the one mapping */
    if (ringd_tensor_locate(r, a + 100, 8, &t) != RINGD_OK || t.offset != off_a + 100)
        return 14;
    double heap[8];
    if (ringd_tensor_locate(r, heap, sizeof(heap), &t) != RINGD_E_INVALID ||
        strstr(ringd_errmsg(r), "outside the arena") == NULL)
        return 15;
    if (ringd_tensor_locate(r, a, (size_t)1 << 40, &t) != RINGD_E_INVALID ||
        strstr(ringd_errmsg(r), "straddle") == NULL)
        return 16;
    if (ringd_tensor_locate(r, NULL, 8, &t) != RINGD_E_INVALID)
        return 17;
    /* What it describes is what the daemon takes: a collective on it runs. */
    float *x = (float *)a;
    for (int i = 0; i < 16; i++)
        x[i] = (float)i;
    if (ringd_allreduce(r, "located", x, x, 16, RINGD_F32, RINGD_SUM) != RINGD_OK || x[3] != 3.0f)
        return 18;
    ringd_close(r);
    return 0;
}

Test(api, tensor_locate_describes_arena_buffers_and_refuses_others, .init = start, .fini = stop)
{
    cr_assert_eq(th_run(1, locate_client, NULL, 60000), 0);
    th_daemon_finish(&daemon_);
}

/* ---- local ranks asked for (a launcher's LOCAL_RANK) ---- */

#define LR_PROCS 3

/* Process i of a 3-rank job asks for local rank 2 - i through the options when i is even,
 * through RINGD_LOCAL_RANK when i is 1... except that process 1 asks for nothing when arg is
 * non-NULL: it then gets whatever rank the others left. Exits 0 when it got what it asked for
 * (or, asking nothing, rank 1: the only one left). */
static int open_asking(int i, void *arg)
{
    ringd_options_t o;
    ringd_options_init(&o, sizeof(o));
    o.socket_path = daemon_.sock;
    o.job = job_;
    o.local_size = o.world_size = LR_PROCS;
    o.open_timeout_ms = 20000;
    int want = LR_PROCS - 1 - i;
    if (i != 1) {
        o.ask_local_rank = 1;
        o.local_rank = want;
    } else if (arg == NULL)
        setenv("RINGD_LOCAL_RANK", "1", 1);
    ringd_t *r = NULL;
    ringd_result_t rc = ringd_open(&o, &r);
    if (rc != RINGD_OK) {
        fprintf(stderr, "process %d: %s: %s\n", i, ringd_strerror(rc), ringd_errmsg(r));
        ringd_close(r);
        return 10;
    }
    int got = ringd_local_rank(r);
    int rank = ringd_rank(r);
    ringd_close(r);
    if (got != want || rank != want) {
        fprintf(stderr, "process %d asked for local rank %d, got local rank %d rank %d\n", i, want,
                got, rank);
        return 11;
    }
    return 0;
}

Test(api, each_process_gets_the_local_rank_it_asks_for, .init = start, .fini = stop)
{
    cr_assert_eq(th_run(LR_PROCS, open_asking, NULL, 30000), 0);
    th_daemon_finish(&daemon_);
}

Test(api, a_process_asking_for_no_local_rank_takes_the_one_left, .init = start, .fini = stop)
{
    static int nothing = 1;
    cr_assert_eq(th_run(LR_PROCS, open_asking, &nothing, 30000), 0);
    th_daemon_finish(&daemon_);
}

/* Opens with local rank lr of a 2-rank job; the result, its message in msg. The session stays
 * open (in *out) when it succeeds. */
static ringd_result_t open_rank(int lr, ringd_t **out, char *msg, size_t len)
{
    ringd_options_t o;
    ringd_options_init(&o, sizeof(o));
    o.socket_path = daemon_.sock;
    o.job = job_;
    o.local_size = o.world_size = 2;
    o.open_timeout_ms = 400;
    o.ask_local_rank = 1;
    o.local_rank = lr;
    ringd_result_t rc = ringd_open(&o, out);
    snprintf(msg, len, "%s", ringd_errmsg(*out));
    return rc;
}

/* A second process asking for a taken local rank is refused at once, told which process holds
 * it; a rank not below local_size is refused before anything is sent. */
static int ask_taken(int i, void *arg)
{
    (void)arg;
    char msg[1024];
    ringd_t *r = NULL;
    if (i == 0) { /* holds rank 0 until the job's open times out */
        ringd_result_t rc = open_rank(0, &r, msg, sizeof(msg));
        ringd_close(r);
        return rc == RINGD_E_TIMEOUT ? 0 : 10;
    }
    th_sleep_ms(100);
    ringd_result_t rc = open_rank(0, &r, msg, sizeof(msg));
    ringd_close(r);
    if (rc != RINGD_E_REFUSED || strstr(msg, "local rank 0") == NULL ||
        strstr(msg, "taken by pid") == NULL) {
        fprintf(stderr, "asking for a taken rank: %s: %s\n", ringd_strerror(rc), msg);
        return 11;
    }
    rc = open_rank(2, &r, msg, sizeof(msg));
    ringd_close(r);
    if (rc != RINGD_E_INVALID || strstr(msg, "local_rank 2") == NULL) {
        fprintf(stderr, "asking for rank 2 of 2: %s: %s\n", ringd_strerror(rc), msg);
        return 12;
    }
    return 0;
}

Test(api, a_local_rank_asked_for_twice_is_refused_naming_its_holder, .init = start, .fini = stop)
{
    cr_assert_eq(th_run(2, ask_taken, NULL, 30000), 0);
    th_daemon_finish(&daemon_);
}

/* Opens a one-rank job of its own on the test daemon, asking for device dev (-1: asking for
 * none), its message into msg. */
static ringd_result_t open_device(int dev, const char *tag, ringd_t **out, char *msg, size_t len)
{
    ringd_options_t o;
    char job[96];
    ringd_options_init(&o, sizeof(o));
    snprintf(job, sizeof(job), "%s.%s", job_, tag);
    o.socket_path = daemon_.sock;
    o.job = job;
    o.local_size = o.world_size = 1;
    o.open_timeout_ms = 5000;
    o.ask_device = dev >= 0;
    o.device = dev;
    ringd_result_t rc = ringd_open(&o, out);
    snprintf(msg, len, "%s", ringd_errmsg(*out));
    return rc;
}

/* The daemon (--devices all) gives a client that asks for nothing its local rank's share of the
 * devices the driver has (none here without one: -1); a device it does not serve is refused
 * saying so; RINGD_DEVICE asks too, and a malformed one is refused before anything is sent. */
static int devices_given(int i, void *arg)
{
    (void)i;
    (void)arg;
    char msg[1024], err[256];
    rd_devices all;
    ringd_t *r = NULL;
    if (rd_devices_open(&all, "all", err, sizeof(err)) != 0)
        return 10;
    ringd_result_t rc = open_device(-1, "any", &r, msg, sizeof(msg));
    int want = all.n > 0 ? all.dev[0].index : -1;
    if (rc != RINGD_OK || ringd_device(r) != want) {
        fprintf(stderr, "asking for no device: %s (%s): device %d, want %d\n", ringd_strerror(rc),
                msg, r ? ringd_device(r) : -9, want);
        return 11;
    }
    const char *uuid = ringd_device_uuid(r);
    if (want < 0 ? uuid[0] != '\0' : strcmp(uuid, all.dev[0].uuid) != 0 || strlen(uuid) != 40) {
        fprintf(stderr, "device %d has UUID '%s'\n", want, uuid);
        return 17;
    }
    ringd_close(r);
    rc = open_device(63, "63", &r, msg, sizeof(msg));
    ringd_close(r);
    if (rc != RINGD_E_INVALID || strstr(msg, "asked for CUDA device 63") == NULL ||
        (all.n == 0 && strstr(msg, "serves no GPU") == NULL)) {
        fprintf(stderr, "asking for device 63: %s: %s\n", ringd_strerror(rc), msg);
        return 12;
    }
    setenv("RINGD_DEVICE", "62", 1);
    rc = open_device(-1, "env", &r, msg, sizeof(msg));
    ringd_close(r);
    if (rc != RINGD_E_INVALID || strstr(msg, "asked for CUDA device 62") == NULL) {
        fprintf(stderr, "RINGD_DEVICE=62: %s: %s\n", ringd_strerror(rc), msg);
        return 13;
    }
    setenv("RINGD_DEVICE", "gpu0", 1);
    rc = open_device(-1, "env.bad", &r, msg, sizeof(msg));
    ringd_close(r);
    unsetenv("RINGD_DEVICE");
    if (rc != RINGD_E_INVALID || strstr(msg, "RINGD_DEVICE") == NULL) {
        fprintf(stderr, "RINGD_DEVICE=gpu0: %s: %s\n", ringd_strerror(rc), msg);
        return 14;
    }
    rc = open_device(-1, "unset", &r, msg, sizeof(msg)); /* asks for nothing again */
    ringd_close(r);
    if (rc != RINGD_OK)
        return 15;
    {
        ringd_options_t o;
        ringd_options_init(&o, sizeof(o));
        o.socket_path = NO_SOCKET;
        o.ask_device = 1;
        o.device = -1;
        rc = ringd_open(&o, &r);
        snprintf(msg, sizeof(msg), "%s", ringd_errmsg(r));
        ringd_close(r);
        if (rc != RINGD_E_INVALID || strstr(msg, "device -1") == NULL) {
            fprintf(stderr, "device -1: %s: %s\n", ringd_strerror(rc), msg);
            return 16;
        }
    }
    return 0;
}

/* Without a GPU the daemon serves none (here: no driver): a session asking for a device arena is
 * refused saying so, by the option and by RINGD_DEVICE_ARENA; a malformed RINGD_DEVICE_ARENA is
 * refused before anything is sent; a session without one gets no device memory and says why.
 * With a GPU, each gets a device arena of at least what it asked for. */
static int device_arena_asked(int i, void *arg)
{
    (void)i;
    (void)arg;
    char msg[1024], err[256], job[96];
    rd_devices all;
    ringd_t *r = NULL;
    if (rd_devices_open(&all, "all", err, sizeof(err)) != 0)
        return 10;
    for (int how = 0; how < 2; how++) {
        ringd_options_t o;
        ringd_options_init(&o, sizeof(o));
        snprintf(job, sizeof(job), "%s.arena%d", job_, how);
        o.socket_path = daemon_.sock;
        o.job = job;
        o.open_timeout_ms = 5000;
        if (how == 0)
            o.device_arena_size = 4 << 20;
        else
            setenv("RINGD_DEVICE_ARENA", "4MiB", 1);
        ringd_result_t rc = ringd_open(&o, &r);
        unsetenv("RINGD_DEVICE_ARENA");
        snprintf(msg, sizeof(msg), "%s", ringd_errmsg(r));
        if (all.n == 0 &&
            (rc != RINGD_E_INVALID || strstr(msg, "device arena of 4194304") == NULL ||
             /* the daemon's refusal, or a libringd built without CUDA refusing first */
             (strstr(msg, "serves no GPU") == NULL && strstr(msg, "built without CUDA") == NULL))) {
            fprintf(stderr, "device arena without a GPU (%d): %s: %s\n", how, ringd_strerror(rc),
                    msg);
            return 11;
        }
        if (all.n > 0) {
            void *p = rc == RINGD_OK ? ringd_alloc_device(r, 4 << 20) : NULL;
            if (p == NULL) {
                fprintf(stderr, "device arena on a GPU (%d): %s: %s\n", how, ringd_strerror(rc),
                        ringd_errmsg(r));
                return 12;
            }
            ringd_free(r, p);
        }
        ringd_close(r);
    }
    static const char *const malformed[] = {"12Q", " -1", "-1", "", "K", "99999999999999999999"};
    for (size_t k = 0; k < sizeof(malformed) / sizeof(malformed[0]); k++) {
        setenv("RINGD_DEVICE_ARENA", malformed[k], 1);
        ringd_options_t o;
        ringd_options_init(&o, sizeof(o));
        o.socket_path = NO_SOCKET; /* refused before connecting; "" is unset: no arena */
        ringd_result_t rc = ringd_open(&o, &r);
        unsetenv("RINGD_DEVICE_ARENA");
        snprintf(msg, sizeof(msg), "%s", ringd_errmsg(r));
        ringd_close(r);
        ringd_result_t want = malformed[k][0] == '\0' ? RINGD_E_CONNECT : RINGD_E_INVALID;
        if (rc != want || (want == RINGD_E_INVALID && strstr(msg, "RINGD_DEVICE_ARENA") == NULL)) {
            fprintf(stderr, "RINGD_DEVICE_ARENA='%s': %s: %s\n", malformed[k], ringd_strerror(rc),
                    msg);
            return 13;
        }
    }
    { /* more than --device-arena-max (8G by default): refused whether or not there is a GPU */
        ringd_options_t o;
        ringd_options_init(&o, sizeof(o));
        snprintf(job, sizeof(job), "%s.huge", job_);
        o.socket_path = daemon_.sock;
        o.job = job;
        o.open_timeout_ms = 5000;
        o.device_arena_size = (size_t)9 << 30;
        ringd_result_t rc = ringd_open(&o, &r);
        snprintf(msg, sizeof(msg), "%s", ringd_errmsg(r));
        ringd_close(r);
        if (rc != RINGD_E_INVALID || (strstr(msg, "--device-arena-max") == NULL &&
                                      strstr(msg, "built without CUDA") == NULL)) {
            fprintf(stderr, "a 9 GiB device arena: %s: %s\n", ringd_strerror(rc), msg);
            return 16;
        }
    }
    ringd_result_t rc;
    rc = open_device(-1, "noarena", &r, msg, sizeof(msg));
    if (rc != RINGD_OK)
        return 14;
    if (ringd_alloc_device(r, 64) != NULL || strstr(ringd_errmsg(r), "no device arena") == NULL) {
        fprintf(stderr, "ringd_alloc_device without an arena: %s\n", ringd_errmsg(r));
        return 15;
    }
    ringd_close(r);
    return 0;
}

Test(api, a_device_arena_is_given_on_a_gpu_and_refused_saying_why_without_one, .init = start,
     .fini = stop)
{
    cr_assert_eq(th_run(1, device_arena_asked, NULL, 30000), 0);
    th_daemon_finish(&daemon_);
}

Test(api, the_daemon_gives_a_device_or_none_and_refuses_one_it_does_not_serve, .init = start,
     .fini = stop)
{
    cr_assert_eq(th_run(1, devices_given, NULL, 30000), 0);
    th_daemon_finish(&daemon_);
}
