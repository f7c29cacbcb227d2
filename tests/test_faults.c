/* Bad input and failures against a real ringd: garbage, truncated, over-size and unknown frames,
 * buffers outside the arena, mismatched submissions, too many clients, a client killed mid-op,
 * a second daemon on a live socket, a stale socket. The daemon must answer with a clear error,
 * keep serving everyone else, and shut down cleanly (no leaks under the sanitizers). */
#include <criterion/criterion.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "ctlq.h"
#include "ringd.h"

static th_daemon daemon_;
static char job_[64];

static void start(void)
{
    const char *const extra[] = {
        "--max-frame", "64K", "--arena-size", "1M", "--max-pending", "16", "--handshake-ms",
        "500",         NULL};
    cr_assert_eq(th_daemon_start(&daemon_, extra), 0, "ringd did not start");
    snprintf(job_, sizeof(job_), "faults.%d", (int)getpid());
}

static void stop(void)
{
    th_daemon_teardown(&daemon_);
}

/* Reads the Error the daemon sends before closing, and checks it mentions what. */
static void expect_error(int fd, ringd_result_t status, const char *what)
{
    rd_msg *m = th_recv(fd, 5000, NULL);
    cr_assert_not_null(m, "no reply before the daemon closed the connection");
    cr_assert_eq(m->body_case, RINGD__MSG__BODY_ERROR, "expected Error, got type %d",
                 (int)m->body_case);
    cr_expect_eq(m->error->status, (uint32_t)status, "status %u, message: %s", m->error->status,
                 m->error->message);
    cr_expect(strstr(m->error->message, what) != NULL, "'%s' not in '%s'", what, m->error->message);
    rd_frame_free(m);
    cr_expect(th_wait_eof(fd, 5000), "the daemon kept the connection open");
}

static void expect_still_serving(void)
{
    cr_assert(th_daemon_alive(&daemon_), "ringd died");
    cr_assert(th_status_ok(daemon_.sock), "ringd no longer answers status");
}

/* 1 when the daemon's log so far contains needle. */
static int daemon_logged(const char *needle)
{
    char *log = th_daemon_log(&daemon_);
    int seen = log != NULL && strstr(log, needle) != NULL;
    free(log);
    return seen;
}

/* A fresh connection sends bytes (or a message) and must get a PROTOCOL Error naming what. */
static void refused_bytes(const void *buf, size_t len, const char *what)
{
    int fd = th_connect(daemon_.sock);
    cr_assert_geq(fd, 0);
    cr_assert_eq(th_write(fd, buf, len), 0);
    expect_error(fd, RINGD_E_PROTOCOL, what);
    close(fd);
}

static void refused_msg(const rd_msg *m, const char *what)
{
    uint8_t buf[256];
    cr_assert_leq(rd_frame_size(m), sizeof(buf));
    refused_bytes(buf, rd_frame_pack(m, buf), what);
}

/* Sends Hello for job_ with local_size n; returns the fd after Welcome when n == 1. */
static int hello(int local_size, int world_size)
{
    int fd = th_connect(daemon_.sock);
    cr_assert_geq(fd, 0);
    Ringd__Hello h = RINGD__HELLO__INIT;
    rd_msg m = RINGD__MSG__INIT;
    h.protocol = RD_PROTOCOL_VERSION;
    h.job = job_;
    h.local_size = (uint32_t)local_size;
    h.world_size = (uint32_t)world_size;
    m.body_case = RINGD__MSG__BODY_HELLO;
    m.hello = &h;
    cr_assert_eq(th_send(fd, &m), 0);
    return fd;
}

/* A raw client past Welcome: its socket, its mapped arena and the control queues in it. */
typedef struct {
    int fd;
    uint8_t *arena;
    uint64_t size, data_offset;
    rd_ctlq sq, cq;
} raw;

/* Reads Welcome on fd (after hello), maps the arena and attaches the rings. */
static void raw_join(raw *x, int fd)
{
    int afd = -1;
    rd_msg *m = th_recv(fd, 5000, &afd);
    cr_assert_not_null(m);
    cr_assert_eq(m->body_case, RINGD__MSG__BODY_WELCOME);
    cr_assert_geq(afd, 0, "no arena fd with Welcome");
    x->fd = fd;
    x->size = m->welcome->arena_size;
    x->data_offset = m->welcome->data_offset;
    cr_assert_geq(x->data_offset, sizeof(rd_ctrl));
    x->arena = mmap(NULL, x->size, PROT_READ | PROT_WRITE, MAP_SHARED, afd, 0);
    cr_assert_neq(x->arena, MAP_FAILED);
    close(afd);
    rd_frame_free(m);
    cr_assert(rd_ctrl_valid(x->arena));
    rd_ctlq_attach_producer(&x->sq, &((rd_ctrl *)x->arena)->sq);
    rd_ctlq_attach_consumer(&x->cq, &((rd_ctrl *)x->arena)->cq);
}

/* The next message from the daemon, from the completion queue or the socket (5 s at most). */
static rd_msg *raw_next(raw *x)
{
    char err[256];
    for (int i = 0; i < 5000; i++) {
        rd_msg *m = NULL;
        rd_ctlq_status st = rd_ctlq_get(&x->cq, 1 << 20, &m, err, sizeof(err));
        cr_assert_neq(st, RD_CTLQ_BROKEN, "%s", err);
        if (st == RD_CTLQ_OK)
            return m;
        m = th_recv(x->fd, 1, NULL);
        if (m != NULL && m->body_case != RINGD__MSG__BODY_POKE)
            return m;
        rd_frame_free(m);
    }
    return NULL;
}

static void raw_leave(raw *x)
{
    munmap(x->arena, x->size);
    close(x->fd);
}

/* Sends s on the socket and returns its Complete (owned by the caller). */
static Ringd__Complete *submit_raw(raw *x, Ringd__Submit *s)
{
    rd_msg m = RINGD__MSG__INIT;
    m.body_case = RINGD__MSG__BODY_SUBMIT;
    m.submit = s;
    cr_assert_eq(th_send(x->fd, &m), 0);
    rd_msg *r = raw_next(x);
    cr_assert_not_null(r, "no Complete");
    cr_assert_eq(r->body_case, RINGD__MSG__BODY_COMPLETE);
    Ringd__Complete *c = r->complete;
    r->complete = NULL;
    r->body_case = RINGD__MSG__BODY__NOT_SET;
    rd_frame_free(r);
    return c;
}

TestSuite(faults, .init = start, .fini = stop, .timeout = 60);

Test(faults, garbage_bytes_get_an_error_and_the_daemon_stays_up)
{
    const char junk[] = "\x10\x00\x00\x00GET / HTTP/1.1\r\n\r\n";
    refused_bytes(junk, sizeof(junk) - 1, "frame");
    expect_still_serving();
    th_daemon_finish(&daemon_);
}

Test(faults, random_garbage_never_takes_the_daemon_down)
{
    srand(42);
    for (int round = 0; round < 50; round++) {
        int fd = th_connect(daemon_.sock);
        cr_assert_geq(fd, 0);
        uint8_t buf[512];
        size_t len = 1 + (size_t)(rand() % (int)sizeof(buf));
        for (size_t i = 0; i < len; i++)
            buf[i] = (uint8_t)rand();
        buf[2] = buf[3] = 0; /* mostly plausible lengths, so the decoder sees the bytes */
        th_write(fd, buf, len);
        close(fd);
    }
    expect_still_serving();
    th_daemon_finish(&daemon_);
}

Test(faults, a_frame_over_the_size_limit_is_refused_before_it_is_read)
{
    uint8_t hdr[4] = {0x00, 0x00, 0x10, 0x00}; /* 1 MiB > --max-frame 64K */
    refused_bytes(hdr, sizeof(hdr), "exceeds --max-frame");
    expect_still_serving();
    th_daemon_finish(&daemon_);
}

Test(faults, a_truncated_frame_then_hang_up_is_logged_and_harmless)
{
    int fd = th_connect(daemon_.sock);
    uint8_t part[6] = {100, 0, 0, 0, 0x0a, 0x02};
    cr_assert_eq(th_write(fd, part, sizeof(part)), 0);
    close(fd);
    expect_still_serving();
    cr_assert(TH_WAIT_EVERY(daemon_logged("hung up inside a frame"), 2000, 10),
              "the daemon did not log the truncated frame");
    th_daemon_finish(&daemon_);
}

/* A client that asks and never reads: the daemon keeps at most 64 MiB of replies for it, then
 * closes it (once, without an Error: the socket may hold part of a frame), and serves the
 * others. */
Test(faults, a_client_that_never_reads_its_replies_is_closed_and_the_daemon_goes_on, .timeout = 120)
{
    signal(SIGPIPE, SIG_IGN);
    int fd = th_connect(daemon_.sock);
    cr_assert_geq(fd, 0);
    Ringd__StatusRequest sr = RINGD__STATUS_REQUEST__INIT;
    rd_msg m = RINGD__MSG__INIT;
    m.body_case = RINGD__MSG__BODY_STATUS_REQUEST;
    m.status_request = &sr;
    uint8_t one[64];
    size_t n = rd_frame_pack(&m, one), batch = 4096;
    uint8_t *buf = malloc(n * batch);
    cr_assert_not_null(buf);
    for (size_t i = 0; i < batch; i++)
        memcpy(buf + i * n, one, n);
    int64_t t0 = th_now_ms();
    int closed = 0;
    while (!closed && th_now_ms() - t0 < 90000) {
        closed = write(fd, buf, n * batch) < 0;
        if (!closed && daemon_logged("bytes of replies unread"))
            closed = 1;
    }
    free(buf);
    close(fd);
    cr_assert(closed, "the daemon kept a client that reads nothing for 90 s");
    cr_assert(TH_WAIT(daemon_logged("bytes of replies unread"), 10000),
              "the daemon did not say why it closed the client");
    expect_still_serving();
    th_daemon_finish(&daemon_);
}

Test(faults, a_message_of_no_known_type_is_refused)
{
    uint8_t empty[4] = {0, 0, 0, 0};
    refused_bytes(empty, sizeof(empty), "no known message type");
    uint8_t unknown[7] = {3, 0, 0, 0, 0x98, 0x06, 0x01}; /* field 99, varint 1 */
    refused_bytes(unknown, sizeof(unknown), "no known message type");

    Ringd__Complete c = RINGD__COMPLETE__INIT;
    rd_msg m = RINGD__MSG__INIT;
    m.body_case = RINGD__MSG__BODY_COMPLETE;
    m.complete = &c;
    refused_msg(&m, "not one a client sends");
    expect_still_serving();
    th_daemon_finish(&daemon_);
}

Test(faults, submit_or_trace_before_hello_is_a_protocol_error)
{
    Ringd__Submit s = RINGD__SUBMIT__INIT;
    rd_msg m = RINGD__MSG__INIT;
    s.name = "x";
    s.count = 1;
    m.body_case = RINGD__MSG__BODY_SUBMIT;
    m.submit = &s;
    refused_msg(&m, "before the session joined");
    Ringd__Trace t = RINGD__TRACE__INIT;
    t.on = 1;
    m.body_case = RINGD__MSG__BODY_TRACE;
    m.trace = &t;
    refused_msg(&m, "Trace before the session joined");
    expect_still_serving();
    th_daemon_finish(&daemon_);
}

/* Offsets and counts a client controls: each bad one gets INVALID naming the problem, and the
 * session goes on working. */
Test(faults, buffers_outside_the_arena_are_refused_and_the_session_continues)
{
    raw x;
    raw_join(&x, hello(1, 1));
    uint64_t size = x.size, d = x.data_offset;
    struct {
        uint64_t count, in, out;
        int op;
        const char *what;
    } bad[] = {
        {1, size, d, RINGD__OP_TYPE__OP_ALLREDUCE, "outside the arena"},
        {1, d, size - 2, RINGD__OP_TYPE__OP_ALLREDUCE, "outside the arena"},
        {2, UINT64_MAX - 3, d, RINGD__OP_TYPE__OP_ALLREDUCE, "outside the arena"},
        {4, 0, d, RINGD__OP_TYPE__OP_ALLREDUCE, "outside the arena's data area"},
        {4, d, 64, RINGD__OP_TYPE__OP_ALLREDUCE, "outside the arena's data area"},
        {UINT64_MAX / 2, d, d, RINGD__OP_TYPE__OP_ALLREDUCE, "does not fit"},
        {(size - d) / 4 + 1, d, d, RINGD__OP_TYPE__OP_REDUCESCATTER, "outside the arena"},
        {(size - d) / 4, d, d + 4, RINGD__OP_TYPE__OP_ALLGATHER, "outside the arena"},
        {64, d, d + 100, RINGD__OP_TYPE__OP_ALLREDUCE, "overlap"},
        {4, d, d, 17, "unknown op"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        Ringd__Submit s = RINGD__SUBMIT__INIT;
        s.request_id = 100 + i;
        s.op = (Ringd__OpType)bad[i].op;
        s.name = "bad";
        s.dtype = RINGD__DATA_TYPE__DT_F32;
        s.count = bad[i].count;
        s.in_offset = bad[i].in;
        s.out_offset = bad[i].out;
        s.prescale = s.postscale = 1.0;
        Ringd__Complete *c = submit_raw(&x, &s);
        cr_expect_eq(c->request_id, 100 + i);
        cr_expect_eq(c->status, (uint32_t)RINGD_E_INVALID, "case %zu: status %u (%s)", i, c->status,
                     c->message);
        cr_expect(strstr(c->message, bad[i].what) != NULL, "case %zu: '%s' not in '%s'", i,
                  bad[i].what, c->message);
        ringd__complete__free_unpacked(c, NULL);
    }
    Ringd__Submit ok = RINGD__SUBMIT__INIT;
    ok.request_id = 7;
    ok.name = "good";
    ok.count = 16;
    ok.in_offset = ok.out_offset = d;
    ok.prescale = ok.postscale = 1.0;
    Ringd__Complete *c = submit_raw(&x, &ok);
    cr_expect_eq(c->status, (uint32_t)RINGD_OK, "%s", c->message);
    ringd__complete__free_unpacked(c, NULL);
    raw_leave(&x);
    expect_still_serving();
    th_daemon_finish(&daemon_);
}

Test(faults, tensor_descriptors_the_daemon_cannot_reach_are_refused_naming_why)
{
    raw x;
    raw_join(&x, hello(1, 1));
    uint64_t d = x.data_offset;
    struct {
        int kind;
        uint32_t device;
        uint64_t handle, offset;
        const char *what;
    } bad[] = {
        {RINGD__MEMORY_KIND__MEM_DEVICE, 0, 7, 0, "device memory"},
        {5, 0, 0, d, "unknown memory"},
        {RINGD__MEMORY_KIND__MEM_ARENA, 0, 0, d + 64, "does not describe arena offset"},
        {RINGD__MEMORY_KIND__MEM_ARENA, 1, 0, d, "does not describe arena offset"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        for (int side = 0; side < 2; side++) {
            Ringd__TensorRef ok = RINGD__TENSOR_REF__INIT, t = RINGD__TENSOR_REF__INIT;
            ok.offset = d;
            t.kind = (Ringd__MemoryKind)bad[i].kind;
            t.device = bad[i].device;
            t.handle = bad[i].handle;
            t.offset = bad[i].offset;
            Ringd__Submit s = RINGD__SUBMIT__INIT;
            s.request_id = 200 + i * 2 + (uint64_t)side;
            s.name = "t";
            s.count = 16;
            s.in_offset = s.out_offset = d;
            s.prescale = s.postscale = 1.0;
            s.input = side == 0 ? &t : &ok;
            s.output = side == 0 ? &ok : &t;
            Ringd__Complete *c = submit_raw(&x, &s);
            cr_expect_eq(c->status, (uint32_t)RINGD_E_INVALID, "case %zu/%d: %u (%s)", i, side,
                         c->status, c->message);
            cr_expect(strstr(c->message, bad[i].what) != NULL, "case %zu/%d: '%s' not in '%s'", i,
                      side, bad[i].what, c->message);
            cr_expect(strstr(c->message, side == 0 ? "input" : "output") != NULL, "%s", c->message);
            ringd__complete__free_unpacked(c, NULL);
        }
    }
    /* Descriptors of the arena that agree with the offsets run the op. */
    Ringd__TensorRef in = RINGD__TENSOR_REF__INIT, out = RINGD__TENSOR_REF__INIT;
    in.offset = out.offset = d;
    Ringd__Submit s = RINGD__SUBMIT__INIT;
    s.request_id = 9;
    s.name = "u";
    s.count = 16;
    s.in_offset = s.out_offset = d;
    s.prescale = s.postscale = 1.0;
    s.input = &in;
    s.output = &out;
    Ringd__Complete *c = submit_raw(&x, &s);
    cr_expect_eq(c->status, (uint32_t)RINGD_OK, "%s", c->message);
    ringd__complete__free_unpacked(c, NULL);
    raw_leave(&x);
    expect_still_serving();
    th_daemon_finish(&daemon_);
}

/* Three clients; two submit "w" with different parameters. All three get MISMATCH naming both
 * sides, the third when it arrives later. */
typedef struct {
    ringd_dtype_t dtype;
    size_t count;
    int root;
    int op; /* 0 allreduce, 1 broadcast */
    const char *field;
} mismatch_case;

/* Shared with the forked clients: how many ranks have seen the mismatch. */
typedef struct {
    _Atomic int seen;
} mismatch_told;
static mismatch_told *told;

static int mismatch_client(int i, void *arg)
{
    const mismatch_case *mc = arg;
    ringd_t *r = th_open(daemon_.sock, job_, 3, 0, 10000);
    if (r == NULL)
        return 10;
    int me = ringd_rank(r);
    float *buf = ringd_alloc(r, 4096);
    ringd_dtype_t dt = me == 1 ? mc->dtype : RINGD_F32;
    size_t count = me == 1 ? mc->count : 8;
    int root = me == 1 ? mc->root : 0;
    int op = me == 1 ? mc->op : 0;
    if (me == 2) /* arrives after the mismatch was found */
        for (int k = 0; k < 10000 && atomic_load(&told->seen) < 2; k++)
            usleep(1000);
    ringd_result_t rc = op == 0 ? ringd_allreduce(r, "w", buf, buf, count, dt, RINGD_SUM)
                                : ringd_broadcast(r, "w", buf, count, dt, root);
    const char *msg = ringd_errmsg(r);
    int ok = rc == RINGD_E_MISMATCH && strstr(msg, "tensor 'w'") && strstr(msg, mc->field) &&
             strstr(msg, "local rank 1 submitted");
    if (me < 2)
        atomic_fetch_add(&told->seen, 1);
    if (!ok)
        fprintf(stderr, "rank %d: rc %d msg '%s'\n", me, rc, msg);
    /* The job goes on: the same name again, now consistent, works. */
    if (ok && ringd_allreduce(r, "w", buf, buf, 8, RINGD_F32, RINGD_SUM) != RINGD_OK) {
        fprintf(stderr, "rank %d: after mismatch: %s\n", me, ringd_errmsg(r));
        ok = 0;
    }
    (void)i;
    ringd_close(r);
    return ok ? 0 : 1;
}

static mismatch_case mismatches[] = {
    {RINGD_F64, 8, 0, 0, "dtype"},
    {RINGD_F32, 9, 0, 0, "count"},
    {RINGD_F32, 8, 0, 1, "op"},
};

Test(faults, mismatched_submissions_fail_on_every_rank_naming_the_difference)
{
    told = mmap(NULL, sizeof(*told), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(told, MAP_FAILED);
    for (size_t k = 0; k < sizeof(mismatches) / sizeof(mismatches[0]); k++) {
        atomic_store(&told->seen, 0);
        snprintf(job_, sizeof(job_), "mismatch.%d.%zu", (int)getpid(), k);
        cr_expect_eq(th_run(3, mismatch_client, &mismatches[k], 30000), 0, "case %s",
                     mismatches[k].field);
    }
    expect_still_serving();
    th_daemon_finish(&daemon_);
}

static int root_mismatch_client(int i, void *arg)
{
    (void)arg;
    ringd_t *r = th_open(daemon_.sock, job_, 2, 0, 0);
    if (r == NULL)
        return 10;
    int buf[4] = {0};
    ringd_result_t rc = ringd_broadcast(r, "p", buf, 4, RINGD_I32, ringd_rank(r));
    int ok = rc == RINGD_E_MISMATCH && strstr(ringd_errmsg(r), "root") != NULL;
    (void)i;
    ringd_close(r);
    return ok ? 0 : 1;
}

Test(faults, broadcast_roots_that_disagree_are_a_mismatch)
{
    cr_expect_eq(th_run(2, root_mismatch_client, NULL, 30000), 0);
    th_daemon_finish(&daemon_);
}

Test(faults, a_client_beyond_local_size_is_refused)
{
    int a = hello(2, 2), b = hello(2, 2);
    rd_msg *w = th_recv(a, 5000, NULL);
    cr_assert_not_null(w);
    cr_assert_eq(w->body_case, RINGD__MSG__BODY_WELCOME);
    rd_frame_free(w);
    int c = hello(2, 2);
    expect_error(c, RINGD_E_REFUSED, "already has its 2 local clients");
    close(c);
    int d = hello(3, 3);
    expect_error(d, RINGD_E_REFUSED, "runs with world_size 2 local_size 2");
    close(d);
    close(a);
    close(b);
    expect_still_serving();
    th_daemon_finish(&daemon_);
}

Test(faults, a_world_larger_than_the_node_needs_redis)
{
    int fd = hello(2, 4);
    expect_error(fd, RINGD_E_REFUSED, "without --redis");
    close(fd);
    th_daemon_finish(&daemon_);
}

Test(faults, the_same_name_twice_in_flight_from_one_client_is_refused)
{
    int fa = hello(2, 2), fb = hello(2, 2);
    raw a, b;
    raw_join(&a, fa);
    raw_join(&b, fb);
    Ringd__Submit s = RINGD__SUBMIT__INIT;
    rd_msg m = RINGD__MSG__INIT;
    s.request_id = 1;
    s.name = "dup";
    s.count = 4;
    s.in_offset = s.out_offset = a.data_offset;
    s.prescale = s.postscale = 1.0;
    m.body_case = RINGD__MSG__BODY_SUBMIT;
    m.submit = &s;
    cr_assert_eq(th_send(a.fd, &m), 0);
    s.request_id = 2;
    Ringd__Complete *c = submit_raw(&a, &s);
    cr_expect_eq(c->request_id, 2);
    cr_expect_eq(c->status, (uint32_t)RINGD_E_INVALID);
    cr_expect(strstr(c->message, "already submitted") != NULL, "%s", c->message);
    ringd__complete__free_unpacked(c, NULL);
    s.request_id = 3;
    c = submit_raw(&b, &s); /* completes the first "dup" for both */
    cr_expect_eq(c->status, (uint32_t)RINGD_OK, "%s", c->message);
    ringd__complete__free_unpacked(c, NULL);
    rd_msg *first = raw_next(&a);
    cr_assert_not_null(first);
    cr_assert_eq(first->body_case, RINGD__MSG__BODY_COMPLETE);
    cr_expect_eq(first->complete->request_id, 1);
    cr_expect_eq(first->complete->status, (uint32_t)RINGD_OK);
    rd_frame_free(first);
    /* b's second "dup" is the op a refused: it fails at once, naming a's refusal, instead of
     * waiting for a rank that will never submit it. */
    s.request_id = 4;
    c = submit_raw(&b, &s);
    cr_expect_eq(c->request_id, 4);
    cr_expect_eq(c->status, (uint32_t)RINGD_E_INVALID, "%s", c->message);
    cr_expect(strstr(c->message, "rank 0") != NULL &&
                  strstr(c->message, "already submitted") != NULL,
              "%s", c->message);
    ringd__complete__free_unpacked(c, NULL);
    raw_leave(&a);
    raw_leave(&b);
    th_daemon_finish(&daemon_);
}

/* Client 2 is killed while clients 0 and 1 wait in an allreduce it never joins: they get
 * RINGD_E_MEMBERSHIP naming it within a bounded time, already carrying the job's new size, and
 * go on as a job of two; the daemon reclaims its arena. */
static int killed_client(int i, void *arg)
{
    int *pids = arg; /* shared: the victim writes its pid */
    ringd_t *r = th_open(daemon_.sock, job_, 3, 0, 10000);
    if (r == NULL)
        return 10;
    float *buf = ringd_alloc(r, 1 << 16);
    if (i == 2) {
        pids[0] = getpid();
        for (;;)
            pause(); /* killed by the test */
    }
    ringd_result_t rc = ringd_allreduce(r, "never", buf, buf, 1 << 14, RINGD_F32, RINGD_SUM);
    const char *msg = ringd_errmsg(r);
    int ok = rc == RINGD_E_MEMBERSHIP && strstr(msg, "left job") != NULL;
    if (!ok)
        fprintf(stderr, "client %d: rc %d '%s'\n", i, rc, msg);
    /* The job goes on without it: two ranks, numbered 0 and 1, at a newer generation. */
    uint64_t gen = ringd_generation(r);
    for (int k = 0; k < 4; k++)
        buf[k] = (float)(ringd_rank(r) + 1);
    rc = ringd_allreduce(r, "after", buf, buf, 4, RINGD_F32, RINGD_SUM);
    if (rc != RINGD_OK || ringd_size(r) != 2 || ringd_rank(r) > 1 || buf[0] != 3.0f ||
        buf[3] != 3.0f || ringd_generation(r) != gen) {
        fprintf(stderr, "client %d after: rc %d '%s' size %d rank %d sum %g gen %llu\n", i, rc,
                ringd_errmsg(r), ringd_size(r), ringd_rank(r), (double)buf[0],
                (unsigned long long)ringd_generation(r));
        ok = 0;
    }
    ringd_close(r);
    return ok ? 0 : 1;
}

static int run_killer(int i, void *arg)
{
    int *pids = arg;
    (void)i;
    /* Strike once clients 0 and 1 both wait in "never", as the daemon sees it. */
    int waiting = 0;
    for (int k = 0; k < 10000 && (pids[0] == 0 || waiting < 2); k++) {
        waiting = th_job_in_flight(daemon_.sock, job_);
        usleep(1000);
    }
    if (pids[0] == 0 || waiting < 2)
        return 1;
    kill(pids[0], SIGKILL);
    return 0;
}

static int killed_or_killer(int i, void *arg)
{
    return i == 3 ? run_killer(i, arg) : killed_client(i, arg);
}

Test(faults, a_client_killed_mid_op_fails_the_others_promptly)
{
    int *pids = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(pids, MAP_FAILED);
    pids[0] = 0;
    int failed = th_run(4, killed_or_killer, pids, 20000);
    /* index 3 (the victim, i == 2) dies by SIGKILL: th_run reports it; the others must pass */
    cr_expect_eq(failed, 3, "clients 0, 1 and the killer must pass and only the victim die");
    munmap(pids, 4096);
    expect_still_serving();
    th_daemon_finish(&daemon_);
}

Test(faults, a_second_daemon_on_a_live_socket_is_refused)
{
    char log[256];
    snprintf(log, sizeof(log), "%s/second.log", daemon_.dir);
    int rc = th_daemon_run_again(&daemon_, log, 10000);
    cr_expect_eq(rc, 1, "second daemon exit status %d", rc);
    th_daemon probe = daemon_;
    snprintf(probe.log, sizeof(probe.log), "%s/second.log", daemon_.dir);
    char *text = th_daemon_log(&probe);
    cr_expect(text != NULL && strstr(text, "already serving") != NULL, "log: %s",
              text ? text : "(none)");
    free(text);
    expect_still_serving();
    th_daemon_finish(&daemon_);
}

Test(faults, a_stale_socket_of_a_dead_daemon_is_replaced)
{
    th_daemon old = daemon_;
    kill(old.pid, SIGKILL);
    waitpid(old.pid, NULL, 0);
    cr_assert_eq(access(old.sock, F_OK), 0, "the dead daemon's socket file should remain");
    /* A new daemon on the same socket; stop() shuts it down and checks its exit. */
    pid_t pid = fork();
    if (pid == 0) {
        execl(getenv("RINGD_BIN"), "ringd", "--socket", old.sock, (char *)NULL);
        _exit(127);
    }
    daemon_.pid = pid;
    int up = 0;
    for (int i = 0; i < 500 && !up; i++) {
        up = th_status_ok(old.sock);
        if (!up)
            usleep(10000);
    }
    cr_expect(up, "the new daemon did not take over the stale socket");
    th_daemon_finish(&daemon_);
}

/* A client owns the shared bytes of its rings: whatever it writes there, the daemon must refuse
 * it on that session alone. */
static void corrupt_ring(void (*scribble)(raw *x), const char *what)
{
    raw x;
    raw_join(&x, hello(1, 1));
    scribble(&x);
    Ringd__Poke p = RINGD__POKE__INIT;
    rd_msg m = RINGD__MSG__INIT;
    m.body_case = RINGD__MSG__BODY_POKE;
    m.poke = &p;
    cr_assert_eq(th_send(x.fd, &m), 0);
    expect_error(x.fd, RINGD_E_PROTOCOL, what);
    raw_leave(&x);
    expect_still_serving();
}

static void head_far_ahead(raw *x)
{
    atomic_store(&x->sq.shm->head, x->sq.pos + (1ull << 40));
}

static void frame_longer_than_its_bytes(raw *x)
{
    uint8_t hdr[4] = {0xff, 0xff, 0x00, 0x00};
    memcpy(x->sq.shm->data, hdr, 4);
    atomic_store(&x->sq.shm->head, x->sq.pos + 4);
}

static void garbage_frame(raw *x)
{
    uint8_t junk[12] = {8, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    memcpy(x->sq.shm->data, junk, sizeof(junk));
    atomic_store(&x->sq.shm->head, x->sq.pos + sizeof(junk));
}

Test(faults, a_corrupt_submission_ring_closes_only_that_session)
{
    corrupt_ring(head_far_ahead, "more than its");
    corrupt_ring(frame_longer_than_its_bytes, "available");
    corrupt_ring(garbage_frame, "frame");
    th_daemon_finish(&daemon_);
}

Test(faults, a_client_with_too_many_outstanding_collectives_is_refused)
{
    int fd1 = hello(2, 2), fd2 = hello(2, 2);
    raw x, y; /* y never submits: every op of x stays pending */
    raw_join(&x, fd1);
    raw_join(&y, fd2);
    for (int i = 0; i < 17; i++) {
        Ringd__Submit s = RINGD__SUBMIT__INIT;
        rd_msg m = RINGD__MSG__INIT;
        char name[16];
        snprintf(name, sizeof(name), "p%d", i);
        s.request_id = (uint64_t)i;
        s.op = RINGD__OP_TYPE__OP_BARRIER;
        s.name = name;
        m.body_case = RINGD__MSG__BODY_SUBMIT;
        m.submit = &s;
        cr_assert_eq(th_send(x.fd, &m), 0);
    }
    rd_msg *r = raw_next(&x);
    cr_assert_not_null(r);
    cr_assert_eq(r->body_case, RINGD__MSG__BODY_COMPLETE);
    cr_expect_eq(r->complete->request_id, 16);
    cr_expect_eq(r->complete->status, (uint32_t)RINGD_E_INVALID);
    cr_expect(strstr(r->complete->message, "--max-pending") != NULL, "%s", r->complete->message);
    rd_frame_free(r);
    raw_leave(&x);
    raw_leave(&y);
    expect_still_serving();
    th_daemon_finish(&daemon_);
}

Test(faults, a_connection_that_never_says_hello_is_closed)
{
    int fd = th_connect(daemon_.sock);
    cr_assert_geq(fd, 0);
    expect_error(fd, RINGD_E_TIMEOUT, "sent no Hello");
    close(fd);
    expect_still_serving();
    th_daemon_finish(&daemon_);
}

/* A Poke is not a handshake: a connection that only pokes is closed when --handshake-ms runs out,
 * so no connection holds a client slot for nothing. */
Test(faults, a_connection_that_only_pokes_is_still_closed_by_the_handshake_timer)
{
    int fd = th_connect(daemon_.sock);
    cr_assert_geq(fd, 0);
    Ringd__Poke p = RINGD__POKE__INIT;
    rd_msg m = RINGD__MSG__INIT;
    m.body_case = RINGD__MSG__BODY_POKE;
    m.poke = &p;
    cr_assert_eq(th_send(fd, &m), 0);
    expect_error(fd, RINGD_E_TIMEOUT, "sent no Hello");
    close(fd);
    expect_still_serving();
    th_daemon_finish(&daemon_);
}

/* The handshake ends with the first message the daemon accepts, a StatusRequest as well as a
 * Hello: a status connection kept open (a monitor polling over one connection) outlives
 * --handshake-ms (500 here) and keeps being answered. */
Test(faults, a_status_connection_kept_open_is_not_closed_by_the_handshake_timer)
{
    int fd = th_connect(daemon_.sock);
    cr_assert_geq(fd, 0);
    Ringd__StatusRequest q = RINGD__STATUS_REQUEST__INIT;
    rd_msg m = RINGD__MSG__INIT;
    m.body_case = RINGD__MSG__BODY_STATUS_REQUEST;
    m.status_request = &q;
    for (int i = 1; i <= 2; i++) {
        cr_assert_eq(th_send(fd, &m), 0, "status request %d could not be sent", i);
        rd_msg *r = th_recv(fd, 5000, NULL);
        cr_assert_not_null(r, "no answer to status request %d", i);
        cr_assert_eq(r->body_case, RINGD__MSG__BODY_STATUS_REPLY,
                     "status request %d was answered with type %d (%s)", i, (int)r->body_case,
                     r->body_case == RINGD__MSG__BODY_ERROR ? r->error->message : "");
        rd_frame_free(r);
        if (i == 2)
            break;
        /* three handshake timeouts: the connection must stay silent and open */
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 1500) != 0) {
            rd_msg *e = th_recv(fd, 1000, NULL);
            char why[512];
            snprintf(why, sizeof(why), "%s",
                     e != NULL && e->body_case == RINGD__MSG__BODY_ERROR ? e->error->message
                                                                         : "(no Error)");
            rd_frame_free(e);
            cr_assert_fail("the daemon ended the idle status connection: %s", why);
        }
    }
    close(fd);
    expect_still_serving();
    th_daemon_finish(&daemon_);
}

/* Runs in a child as uid nobody: connecting is refused by the socket's mode; once the test opens
 * the mode, joining a job another user started is refused by the daemon. */
static int other_user(int i, void *arg)
{
    const char *step = arg;
    (void)i;
    if (setgid(65534) != 0 || setuid(65534) != 0)
        return 3;
    int fd = th_connect(daemon_.sock);
    if (strcmp(step, "connect") == 0)
        return fd < 0 ? 0 : 1;
    if (fd < 0)
        return 2;
    Ringd__Hello h = RINGD__HELLO__INIT;
    rd_msg m = RINGD__MSG__INIT;
    h.protocol = RD_PROTOCOL_VERSION;
    h.job = job_;
    h.local_size = h.world_size = 2;
    m.body_case = RINGD__MSG__BODY_HELLO;
    m.hello = &h;
    th_send(fd, &m);
    rd_msg *r = th_recv(fd, 5000, NULL);
    int ok = r != NULL && r->body_case == RINGD__MSG__BODY_ERROR &&
             r->error->status == RINGD_E_REFUSED && strstr(r->error->message, "belongs to uid 0");
    if (!ok)
        fprintf(stderr, "other user: %s\n",
                r && r->body_case == RINGD__MSG__BODY_ERROR ? r->error->message : "no Error");
    rd_frame_free(r);
    return ok ? 0 : 1;
}

Test(faults, other_users_cannot_connect_or_join_a_job_they_do_not_own)
{
    if (getuid() != 0)
        cr_skip_test("needs root to run a client as another user");
    cr_expect_eq(th_run(1, other_user, "connect", 10000), 0, "the socket must be 0660");
    int fd = hello(2, 2); /* a job of uid 0, waiting for its second rank */
    cr_assert_eq(chmod(daemon_.sock, 0666), 0);
    cr_assert_eq(chmod(daemon_.dir, 0755), 0);
    cr_expect_eq(th_run(1, other_user, "join", 10000), 0);
    close(fd);
    expect_still_serving();
    th_daemon_finish(&daemon_);
}

/* A synchronous allreduce on a heap buffer times out; the caller frees the buffer. The late
 * result must not land in freed memory (AddressSanitizer watches) and the session goes on. */
static int timeout_then_free(int i, void *arg)
{
    volatile int *flag = arg;
    ringd_t *r = th_open(daemon_.sock, job_, 2, 0, i == 0 ? 100 : 10000);
    if (r == NULL)
        return 10;
    float *heap = calloc(4096, sizeof(float));
    int ok = 1;
    if (i == 0) { /* the impatient one, whatever rank it got */
        ok &= ringd_allreduce(r, "late", heap, heap, 4096, RINGD_F32, RINGD_SUM) == RINGD_E_TIMEOUT;
        free(heap);
        heap = NULL;
        *flag = 1;
    } else {
        for (int k = 0; k < 10000 && *flag == 0; k++)
            usleep(1000); /* bounded wait for rank 0 to give up */
        ok &= ringd_allreduce(r, "late", heap, heap, 4096, RINGD_F32, RINGD_SUM) == RINGD_OK;
    }
    ok &= ringd_barrier(r, "after") == RINGD_OK;
    free(heap);
    ringd_close(r);
    return ok ? 0 : 1;
}

Test(faults, a_timed_out_call_never_writes_into_the_callers_freed_buffer)
{
    volatile int *flag =
        mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq((void *)flag, MAP_FAILED);
    cr_expect_eq(th_run(2, timeout_then_free, (void *)flag, 20000), 0);
    munmap((void *)flag, 4096);
    th_daemon_finish(&daemon_);
}

/* A client submits a large allreduce and exits at once, so the op may already be running on the
 * daemon's worker threads over its arena. The others get the result or RINGD_E_MEMBERSHIP; the
 * daemon neither touches freed memory nor leaks (the sanitizers watch it). */
static int leave_mid_op(int i, void *arg)
{
    (void)arg;
    ringd_t *r = th_open(daemon_.sock, job_, 3, 0, 10000);
    if (r == NULL)
        return 10;
    size_t count = 200000; /* 3 x 800 KB: past --inline-bytes, so on the workers */
    float *buf = ringd_alloc(r, count * sizeof(float));
    for (size_t k = 0; k < count; k++)
        buf[k] = 1.0f;
    ringd_request_t *q;
    if (ringd_allreduce_async(r, "big", buf, buf, count, RINGD_F32, RINGD_SUM, &q) != RINGD_OK)
        return 11;
    if (i == 2)
        _exit(0); /* no wait, no close: the daemon sees the hang-up */
    ringd_result_t rc = ringd_wait(q);
    int ok = rc == RINGD_OK ? buf[0] == 3.0f && buf[count - 1] == 3.0f : rc == RINGD_E_MEMBERSHIP;
    if (!ok)
        fprintf(stderr, "client %d: rc %d: %s\n", i, rc, ringd_errmsg(r));
    ringd_close(r);
    return ok ? 0 : 1;
}

Test(faults, a_client_leaving_while_its_op_runs_on_the_workers_is_harmless)
{
    for (int round = 0; round < 5; round++) {
        snprintf(job_, sizeof(job_), "leave.%d.%d", (int)getpid(), round);
        cr_expect_eq(th_run(3, leave_mid_op, NULL, 20000), 0, "round %d", round);
    }
    expect_still_serving();
    th_daemon_finish(&daemon_);
}

/* ---- per-user access: another user sees root's job without its tensor names or pids and
 * cannot record it; a member of --admin-group sees and records everything ---- */

#define VIEW_UID_OTHER 61001
#define VIEW_UID_ADMIN 61002
#define VIEW_ADMIN_GID 61010

/* Sends TimelineRequest{job_, seconds} on fd. Returns 0, or -1 (fd < 0, or the send failed). */
static int ask_timeline(int fd, uint32_t seconds)
{
    Ringd__TimelineRequest q = RINGD__TIMELINE_REQUEST__INIT;
    rd_msg m = RINGD__MSG__INIT;
    q.job = job_;
    q.seconds = seconds;
    m.body_case = RINGD__MSG__BODY_TIMELINE_REQUEST;
    m.timeline_request = &q;
    return fd >= 0 && th_send(fd, &m) == 0 ? 0 : -1;
}

/* Opens daemon_'s socket to every user, runs fn(i, an int shared by all, 0 at first) in n
 * processes that must all pass, and ends the daemon, which must still serve. */
static void run_with_other_users(int n, int (*fn)(int i, void *arg))
{
    cr_assert_eq(chmod(daemon_.sock, 0666), 0);
    cr_assert_eq(chmod(daemon_.dir, 0755), 0);
    char run[300];
    snprintf(run, sizeof(run), "%s/run", daemon_.dir);
    cr_assert_eq(chmod(run, 0755), 0);
    int *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(shared, MAP_FAILED);
    *shared = 0;
    cr_expect_eq(th_run(n, fn, shared, 30000), 0);
    munmap(shared, 4096);
    expect_still_serving();
    th_daemon_finish(&daemon_);
}

/* Clients 0 and 1 (root) hold a job with "secret.grad" submitted by one rank only (pending)
 * until the two viewers (2: another user, 3: an admin) are done (*done == 2). */
static int viewed_or_viewer(int i, void *arg)
{
    volatile int *done = arg;
    if (i < 2) {
        ringd_t *r = th_open(daemon_.sock, job_, 2, 0, 10000);
        if (r == NULL)
            return 10;
        float *x = ringd_alloc(r, 64);
        ringd_request_t *q = NULL;
        if (ringd_rank(r) == 0 &&
            ringd_allreduce_async(r, "secret.grad", x, x, 4, RINGD_F32, RINGD_SUM, &q) != 0)
            return 11;
        for (int k = 0; k < 20000 && *done < 2; k++)
            usleep(1000);
        if (ringd_rank(r) == 1 &&
            ringd_allreduce(r, "secret.grad", x, x, 4, RINGD_F32, RINGD_SUM) != RINGD_OK)
            return 12;
        int ok = q == NULL || ringd_wait(q) == RINGD_OK;
        ringd_close(r);
        return ok && *done == 2 ? 0 : 13;
    }
    int admin = i == 3;
    gid_t g = VIEW_ADMIN_GID;
    uid_t uid = admin ? VIEW_UID_ADMIN : VIEW_UID_OTHER;
    if (setgroups(admin ? 1 : 0, &g) != 0 || setgid(uid) != 0 || setuid(uid) != 0)
        return 20;
    int ok = 0;
    const Ringd__JobInfo *j = NULL;
    rd_msg *st = NULL;
    for (int64_t end = th_now_ms() + 10000;
         th_now_ms() < end && (j == NULL || j->n_pending == 0);) {
        rd_frame_free(st);
        j = NULL;
        if ((st = th_status(daemon_.sock)) == NULL)
            return 21;
        for (size_t n = 0; n < st->status_reply->n_jobs; n++)
            if (strcmp(st->status_reply->jobs[n]->name, job_) == 0)
                j = st->status_reply->jobs[n];
        usleep(10000);
    }
    if (j != NULL && j->n_pending == 1 && j->uid == 0) {
        int named = strcmp(j->pending[0], "secret.grad") == 0, pids = 0;
        for (size_t n = 0; n < st->status_reply->n_clients; n++)
            pids += strcmp(st->status_reply->clients[n]->job, job_) == 0 &&
                    st->status_reply->clients[n]->pid != 0;
        ok = admin ? named && pids == 2 : !named && pids == 0;
        if (!ok)
            fprintf(stderr, "%s: pending '%s', %d pids shown\n", admin ? "admin" : "other",
                    j->pending[0], pids);
    } else {
        fprintf(stderr, "viewer %d: job %s not shown with one pending tensor of uid 0\n", i, job_);
    }
    rd_frame_free(st);

    int fd = th_connect(daemon_.sock);
    rd_msg *t = ask_timeline(fd, 1) == 0 ? th_recv(fd, 5000, NULL) : NULL;
    const Ringd__TimelineReply *tr =
        t != NULL && t->body_case == RINGD__MSG__BODY_TIMELINE_REPLY ? t->timeline_reply : NULL;
    if (admin) /* a recording of 1 s, of the ops of the job's uid 0 clients */
        ok &= tr != NULL && tr->status == (uint32_t)RINGD_OK;
    else
        ok &= tr != NULL && tr->status == (uint32_t)RINGD_E_REFUSED &&
              strstr(tr->message, "runs as uid 0") != NULL &&
              strstr(tr->message, "--admin-group") != NULL && tr->n_ops == 0;
    if (!ok)
        fprintf(stderr, "%s: timeline answer: status %d: %s\n", admin ? "admin" : "other",
                tr != NULL ? (int)tr->status : -1, tr != NULL ? tr->message : "(none)");
    rd_frame_free(t);
    close(fd);
    if (!admin) { /* nor may it drain the node under everyone's jobs */
        Ringd__DrainRequest dq = RINGD__DRAIN_REQUEST__INIT;
        rd_msg dm = RINGD__MSG__INIT;
        dm.body_case = RINGD__MSG__BODY_DRAIN_REQUEST;
        dm.drain_request = &dq;
        fd = th_connect(daemon_.sock);
        rd_msg *d = fd >= 0 && th_send(fd, &dm) == 0 ? th_recv(fd, 5000, NULL) : NULL;
        int refused = d != NULL && d->body_case == RINGD__MSG__BODY_DRAIN_REPLY &&
                      d->drain_reply->status == (uint32_t)RINGD_E_REFUSED &&
                      strstr(d->drain_reply->message, "may not drain") != NULL;
        if (!refused)
            fprintf(stderr, "other: its drain was not refused\n");
        ok &= refused;
        rd_frame_free(d);
        close(fd);
    }
    __atomic_add_fetch(done, 1, __ATOMIC_SEQ_CST);
    return ok ? 0 : 1;
}

Test(faults, another_user_sees_no_tensor_names_or_pids_no_timeline_no_drain_an_admin_group_does)
{
    if (getuid() != 0)
        cr_skip_test("needs root to run clients as other users");
    th_daemon_finish(&daemon_);
    char gid[16];
    snprintf(gid, sizeof(gid), "%d", VIEW_ADMIN_GID);
    const char *const extra[] = {"--admin-group", gid, NULL};
    cr_assert_eq(th_daemon_start(&daemon_, extra), 0, "ringd did not start");
    run_with_other_users(4, viewed_or_viewer);
}

Test(faults, an_admin_group_that_does_not_exist_stops_the_daemon_at_start)
{
    th_daemon_finish(&daemon_);
    const char *const extra[] = {"--admin-group", "no-such-group-ringd", NULL};
    cr_expect_neq(th_daemon_start(&daemon_, extra), 0, "ringd ran with an unknown --admin-group");
    char *text = th_daemon_log(&daemon_);
    cr_expect(text != NULL && strstr(text, "--admin-group no-such-group-ringd: no such group"),
              "log: %s", text ? text : "(none)");
    free(text);
}

/* 0: another user asks for a 2 s recording of a job not there yet (*step 1 once asked); 1: root
 * then runs that job's ops. The recording must hold none of them. */
static int early_recorder(int i, void *arg)
{
    volatile int *step = arg;
    if (i == 1) {
        for (int k = 0; k < 5000 && *step == 0; k++)
            usleep(1000);
        ringd_t *r = th_open(daemon_.sock, job_, 1, 0, 10000);
        if (r == NULL)
            return 10;
        float *x = ringd_alloc(r, 64);
        int ok = 1;
        for (int k = 0; k < 3; k++)
            ok &= ringd_allreduce(r, "secret.later", x, x, 4, RINGD_F32, RINGD_SUM) == RINGD_OK;
        ringd_close(r);
        return ok ? 0 : 11;
    }
    if (setgroups(0, NULL) != 0 || setgid(VIEW_UID_OTHER) != 0 || setuid(VIEW_UID_OTHER) != 0)
        return 20;
    int fd = th_connect(daemon_.sock);
    if (ask_timeline(fd, 2) != 0)
        return 21;
    usleep(100000); /* mostly the daemon has read it by now; if not, it refuses it (below) */
    *step = 1;
    rd_msg *t = th_recv(fd, 10000, NULL);
    const Ringd__TimelineReply *tr =
        t != NULL && t->body_case == RINGD__MSG__BODY_TIMELINE_REPLY ? t->timeline_reply : NULL;
    int ok = tr != NULL && tr->n_ops == 0 &&
             (tr->status == (uint32_t)RINGD_OK ||
              (tr->status == (uint32_t)RINGD_E_REFUSED && strstr(tr->message, "runs as uid 0")));
    if (!ok)
        fprintf(stderr, "the early recording: %s\n",
                t == NULL ? "no reply" : "it holds another user's ops");
    rd_frame_free(t);
    close(fd);
    return ok ? 0 : 1;
}

Test(faults, a_recording_asked_for_before_another_users_job_comes_never_records_it)
{
    if (getuid() != 0)
        cr_skip_test("needs root to run a client as another user");
    run_with_other_users(2, early_recorder);
}
