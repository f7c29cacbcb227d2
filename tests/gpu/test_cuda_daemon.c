/* On a device, through a real ringd: device arenas (ringd_alloc_device) reduced by the daemon's
 * CUDA kernels bit for bit as the CPU kernels (every dtype and op, scales, averages), device
 * memory from elsewhere staged device to device, broadcast and allgather, reducescatter,
 * allgatherv and alltoall (gpu_sharded_cases), two clients on one
 * GPU (on a machine with several, on different GPUs: each gets local_rank % count), the
 * caller's stream still filling a tensor when it is submitted, host and device memory mixed on
 * a node (refused on every rank), and a client killed while the daemon maps its device arena
 * (released, daemon up). Without a device or driver it prints
 * one line saying why and exits 77 (meson's skip). CUDA is touched only in forked children: a
 * process that initialised the driver cannot fork a working child. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "cuda_dev.h"
#include "gpu_common.h"
#include "harness.h"
#include "ringd.h"
#include "ringd.pb-c.h"

#define COUNT 1000003 /* odd: the kernels' tails */

static th_daemon daemon_;
static char job_[64];

/* A session of a job of nranks on the test daemon with a device arena of dev_arena bytes; NULL
 * after saying why. */
static ringd_t *open_gpu(const char *job, int nranks, size_t dev_arena)
{
    ringd_options_t o;
    ringd_t *r = NULL;
    ringd_options_init(&o, sizeof(o));
    o.socket_path = daemon_.sock;
    o.job = job;
    o.world_size = o.local_size = nranks;
    o.open_timeout_ms = 20000;
    o.op_timeout_ms = 60000;
    o.device_arena_size = dev_arena;
    ringd_result_t rc = ringd_open(&o, &r);
    if (rc != RINGD_OK) {
        fprintf(stderr, "ringd_open: %s: %s\n", ringd_strerror(rc), ringd_errmsg(r));
        ringd_close(r);
        return NULL;
    }
    return r;
}

/* Every dtype and op on device-arena buffers (in place and apart), against rd_reduce of the
 * same inputs on the host, bit for bit; then the same from cudaMalloc'd memory (staged). */
static int reduce_everything(int i, void *arg)
{
    (void)i;
    (void)arg;
    char why[256], job[96];
    snprintf(job, sizeof(job), "%s.reduce", job_);
    ringd_t *r = open_gpu(job, 2, 64 << 20);
    if (r == NULL)
        return 10;
    int me = ringd_local_rank(r), dev = ringd_device(r);
    size_t most = COUNT * 8;
    uint8_t *in[2] = {malloc(most), malloc(most)}, *want = malloc(most), *got = malloc(most);
    uint8_t *din = ringd_alloc_device(r, most), *dout = ringd_alloc_device(r, most);
    uint8_t *raw = rd_cuda_alloc(dev, most, why, sizeof(why));
    if (!in[0] || !in[1] || !want || !got || !din || !dout || !raw) {
        fprintf(stderr, "buffers: %s / %s\n", ringd_errmsg(r), why);
        return 11;
    }
    static const ringd_redop_t ops[] = {RINGD_SUM, RINGD_AVG, RINGD_MIN, RINGD_MAX, RINGD_PROD};
    int n = 0;
    for (int dt = 0; dt < RD_DT_COUNT; dt++) {
        size_t esz = rd_dtype_size((rd_dtype)dt);
        for (int k = 0; k < 2; k++)
            for (size_t e = 0; e < COUNT; e++)
                rd_dtype_store((rd_dtype)dt, in[k], e, gpu_input_value(k, e, (rd_dtype)dt));
        for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
            for (int where = 0; where < 3; where++) { /* arena apart, arena in place, staged */
                int fl = rd_dtype_is_float((rd_dtype)dt);
                double pre = fl && where == 0 ? 0.5 : 1.0, post = fl && where == 0 ? 3.0 : 1.0;
                rd_reduce_args a = RD_REDUCE_ARGS_INIT;
                a.prescale = pre;
                a.postscale = post;
                a.divisor = ops[o] == RINGD_AVG ? 2 : 1;
                const void *src[2] = {in[0], in[1]};
                rd_reduce((rd_dtype)dt, ops[o] == RINGD_AVG ? RD_OP_SUM : (rd_redop)ops[o], want,
                          src, 2, COUNT, &a);
                uint8_t *send = where == 2 ? raw : din, *recv = where == 0 ? dout : send;
                char name[64];
                snprintf(name, sizeof(name), "t.%d.%zu.%d", dt, o, where);
                if (rd_cuda_copy(dev, send, in[me], COUNT * esz, why, sizeof(why)) != 0) {
                    fprintf(stderr, "%s: fill: %s\n", name, why);
                    return 12;
                }
                ringd_result_t rc = ringd_allreduce_scaled(r, name, send, recv, COUNT,
                                                           (ringd_dtype_t)dt, ops[o], pre, post);
                if (rc != RINGD_OK) {
                    fprintf(stderr, "%s: %s: %s\n", name, ringd_strerror(rc), ringd_errmsg(r));
                    return 13;
                }
                if (rd_cuda_copy(dev, got, recv, COUNT * esz, why, sizeof(why)) != 0) {
                    fprintf(stderr, "%s: read back: %s\n", name, why);
                    return 14;
                }
                if (memcmp(got, want, COUNT * esz) != 0) {
                    fprintf(stderr, "%s: the result differs from the CPU kernels'\n", name);
                    return 15;
                }
                n++;
            }
        }
    }
    if (me == 0)
        printf("device arena allreduce: %d cases (7 dtypes x 5 ops x arena/in place/staged) "
               "equal to the CPU kernels\n",
               n);
    rd_cuda_free(dev, raw);
    ringd_close(r);
    return 0;
}

/* Broadcast from rank 1 and allgather, on device-arena buffers. */
static int broadcast_and_gather(int i, void *arg)
{
    (void)i;
    (void)arg;
    char why[256], job[96];
    snprintf(job, sizeof(job), "%s.bcast", job_);
    ringd_t *r = open_gpu(job, 2, 16 << 20);
    if (r == NULL)
        return 20;
    int me = ringd_local_rank(r), dev = ringd_device(r);
    enum { N = 4097 };
    int32_t host[2 * N], got[2 * N];
    int32_t *d = ringd_alloc_device(r, sizeof(host)), *g = ringd_alloc_device(r, sizeof(host));
    for (int e = 0; e < N; e++)
        host[e] = me * 100000 + e;
    if (d == NULL || g == NULL || rd_cuda_copy(dev, d, host, N * 4, why, sizeof(why)) != 0)
        return 21;
    if (ringd_broadcast(r, "b", d, N, RINGD_I32, 1) != RINGD_OK ||
        rd_cuda_copy(dev, got, d, N * 4, why, sizeof(why)) != 0)
        return 22;
    for (int e = 0; e < N; e++)
        if (got[e] != 100000 + e)
            return 23;
    if (rd_cuda_copy(dev, d, host, N * 4, why, sizeof(why)) != 0 ||
        ringd_allgather(r, "g", d, g, N, RINGD_I32) != RINGD_OK ||
        rd_cuda_copy(dev, got, g, 2 * N * 4, why, sizeof(why)) != 0)
        return 24;
    for (int k = 0; k < 2; k++)
        for (int e = 0; e < N; e++)
            if (got[k * N + e] != k * 100000 + e)
                return 25;
    ringd_close(r);
    return 0;
}

/* Reducescatter, allgatherv and alltoall on the device arenas of three ranks (gpu_common.h). */
static int sharded(int i, void *arg)
{
    (void)i;
    (void)arg;
    char job[96];
    snprintf(job, sizeof(job), "%s.sharded", job_);
    ringd_t *r = open_gpu(job, 3, 32 << 20);
    if (r == NULL)
        return 20;
    int rc = gpu_sharded_cases(r, "s");
    /* the last rank moves nothing in the alltoall: its empty buffers, passed as host memory,
     * match the others' device memory */
    if (rc == 0)
        rc = gpu_either_memory_cases(r, "s", 1, 2);
    if (rc == 0 && ringd_barrier(r, "done") != RINGD_OK)
        rc = 21;
    ringd_close(r);
    return rc;
}

/* Stream order: each rank queues fills of its device-arena tensor on a stream of its own (the
 * last one writing rank + 1) and submits at once, with the stream in its options: the result
 * is 3 everywhere, never what the buffer held before the fills ran. */
static int stream_ordered(int i, void *arg)
{
    (void)i;
    (void)arg;
    char why[256], job[96];
    ringd_options_t o;
    ringd_t *r = NULL;
    enum { N = 64 << 18 }; /* 64 MiB of f32 */
    snprintf(job, sizeof(job), "%s.stream", job_);
    ringd_options_init(&o, sizeof(o));
    o.socket_path = daemon_.sock;
    o.job = job;
    o.world_size = o.local_size = 2;
    o.open_timeout_ms = 20000;
    o.device_arena_size = (size_t)N * 4 + (1 << 20);
    o.ask_device = 1;
    o.device = 0;
    /* the stream exists before the session: made in this process's primary context */
    void *stream = rd_cuda_stream_new(0, why, sizeof(why));
    o.cuda_stream = stream;
    if (stream == NULL || ringd_open(&o, &r) != RINGD_OK || ringd_device(r) != 0) {
        fprintf(stderr, "stream test: %s / %s\n", why, r ? ringd_errmsg(r) : "");
        return 60;
    }
    float *t = ringd_alloc_device(r, (size_t)N * 4), *host = malloc((size_t)N * 4);
    float one = 1.0f, mine = (float)(ringd_local_rank(r) + 1);
    uint32_t bits_one, bits_mine;
    memcpy(&bits_one, &one, 4);
    memcpy(&bits_mine, &mine, 4);
    if (t == NULL || host == NULL || rd_cuda_fill_async(0, stream, t, 0, N, why, sizeof(why)) ||
        ringd_allreduce(r, "zero", t, t, N, RINGD_F32, RINGD_SUM) != RINGD_OK)
        return 61;
    for (int k = 0; k < 32; k++) /* keeps the stream busy for a while */
        if (rd_cuda_fill_async(0, stream, t, k == 31 ? bits_mine : bits_one, N, why, sizeof(why)) !=
            0)
            return 62;
    if (ringd_allreduce(r, "ordered", t, t, N, RINGD_F32, RINGD_SUM) != RINGD_OK ||
        rd_cuda_copy(0, host, t, (size_t)N * 4, why, sizeof(why)) != 0)
        return 63;
    for (size_t e = 0; e < N; e++)
        if (host[e] != 3.0f) {
            fprintf(stderr, "element %zu is %g, not 3: read before the stream's fills ran\n", e,
                    host[e]);
            return 64;
        }
    ringd_close(r);
    rd_cuda_stream_free(0, stream);
    free(host);
    return 0;
}

/* Local rank 0 passes device memory, local rank 1 host memory: both fail, naming it. */
static int mixed_memory(int i, void *arg)
{
    (void)i;
    (void)arg;
    char job[96];
    snprintf(job, sizeof(job), "%s.mixed", job_);
    ringd_t *r = open_gpu(job, 2, 4 << 20);
    if (r == NULL)
        return 30;
    float *buf = ringd_local_rank(r) == 0 ? ringd_alloc_device(r, 4096) : ringd_alloc(r, 4096);
    if (buf == NULL)
        return 31;
    ringd_result_t rc = ringd_allreduce(r, "m", buf, buf, 1024, RINGD_F32, RINGD_SUM);
    if (rc != RINGD_E_MISMATCH || strstr(ringd_errmsg(r), "memory") == NULL) {
        fprintf(stderr, "mixed memory: %s: %s\n", ringd_strerror(rc), ringd_errmsg(r));
        return 32;
    }
    ringd_close(r);
    return 0;
}

/* Opens a one-rank job with a 256 MiB device arena, touches it, and waits to be killed. */
static int hold_and_die(int i, void *arg)
{
    (void)i;
    int *ready = arg;
    char job[96];
    snprintf(job, sizeof(job), "%s.killed", job_);
    ringd_t *r = open_gpu(job, 1, 256 << 20);
    float *p = r != NULL ? ringd_alloc_device(r, 1 << 20) : NULL;
    if (p == NULL || ringd_allreduce(r, "k", p, p, 1 << 18, RINGD_F32, RINGD_SUM) != RINGD_OK)
        return 40;
    if (write(ready[1], "x", 1) != 1)
        return 41;
    pause();
    return 0;
}

/* After the kill: a new session gets a device arena as large and reduces on it. */
static int reduce_after_kill(int i, void *arg)
{
    (void)i;
    (void)arg;
    char job[96], why[256];
    snprintf(job, sizeof(job), "%s.after", job_);
    ringd_t *r = open_gpu(job, 1, 256 << 20);
    float host[1024], got[1024];
    float *p = r != NULL ? ringd_alloc_device(r, sizeof(host)) : NULL;
    for (int e = 0; e < 1024; e++)
        host[e] = (float)e;
    if (p == NULL || rd_cuda_copy(ringd_device(r), p, host, sizeof(host), why, sizeof(why)) ||
        ringd_allreduce(r, "a", p, p, 1024, RINGD_F32, RINGD_SUM) != RINGD_OK ||
        rd_cuda_copy(ringd_device(r), got, p, sizeof(got), why, sizeof(why)) ||
        memcmp(got, host, sizeof(got)) != 0)
        return 50;
    ringd_close(r);
    return 0;
}

/* A client killed while the daemon maps its device arena: the daemon stays up, forgets the
 * client (its job goes), and serves a new device arena. */
static int killed_client(void)
{
    int ready[2];
    char c;
    if (pipe(ready) != 0)
        return 1;
    pid_t pid = fork();
    if (pid == 0)
        _exit(hold_and_die(0, ready));
    if (read(ready[0], &c, 1) != 1) {
        printf("FAIL: the client holding a device arena did not get going\n");
        return 1;
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    char job[96];
    th_jobinfo info = {.found = 1};
    snprintf(job, sizeof(job), "%s.killed", job_);
    for (int tries = 0; info.found && tries < 200; tries++) {
        if (th_job_info(daemon_.sock, job, &info) != 0)
            break;
        if (info.found)
            th_sleep_ms(50);
    }
    if (info.found) {
        printf("FAIL: the killed client's job is still there after 10 s\n");
        return 1;
    }
    if (!th_daemon_alive(&daemon_) || !th_status_ok(daemon_.sock)) {
        printf("FAIL: ringd did not survive a client killed while it held its device arena\n");
        return 1;
    }
    if (th_run(1, reduce_after_kill, NULL, 60000) != 0) {
        printf("FAIL: a device arena after a killed client\n");
        return 1;
    }
    return 0;
}

/* Whether a CUDA device is here. Prints the skip line itself. */
static int have_device(void)
{
    char why[256];
    int n = gpu_devices(why, sizeof(why));
    if (n == 0)
        printf("SKIP tests/gpu/test_cuda_daemon: no CUDA device ringd can use here (%s)\n", why);
    else if (n < 0)
        printf("FAIL: the CUDA driver: %s\n", why);
    return n > 0 ? 0 : n == 0 ? 1 : 2;
}

int main(void)
{
    int rc = have_device();
    if (rc != 0)
        return rc == 1 ? 77 : 1;
    if (th_daemon_start(&daemon_, NULL) != 0) {
        printf("FAIL: ringd did not start\n");
        return 1;
    }
    snprintf(job_, sizeof(job_), "gpu.%d", (int)getpid());
    int failed = 0;
    if (th_run(2, reduce_everything, NULL, 300000) != 0) {
        printf("FAIL: allreduce on device arenas\n");
        failed = 1;
    }
    { /* ringctl status counts what the device arenas moved */
        rd_msg *m = th_status(daemon_.sock);
        const Ringd__StatusReply *st = m != NULL ? m->status_reply : NULL;
        if (st == NULL || st->n_devices == 0 || st->devices[0]->bytes_reduced == 0) {
            printf("FAIL: status shows no bytes reduced on GPU 0\n");
            failed = 1;
        } else {
            printf("status: GPU %u reduced %.1f MB\n", st->devices[0]->index,
                   (double)st->devices[0]->bytes_reduced / 1e6);
        }
        rd_frame_free(m);
    }
    if (th_run(2, broadcast_and_gather, NULL, 60000) != 0) {
        printf("FAIL: broadcast and allgather on device arenas\n");
        failed = 1;
    }
    if (th_run(3, sharded, NULL, 120000) != 0) {
        printf("FAIL: reducescatter, allgatherv and alltoall on device arenas\n");
        failed = 1;
    } else {
        printf("sharded: reducescatter, allgatherv, alltoall on 3 device arenas, exact\n");
    }
    if (th_run(2, stream_ordered, NULL, 120000) != 0) {
        printf("FAIL: device tensors ordered with the caller's stream\n");
        failed = 1;
    }
    if (th_run(2, mixed_memory, NULL, 60000) != 0) {
        printf("FAIL: host and device memory mixed on a node\n");
        failed = 1;
    }
    failed |= killed_client();
    if (th_daemon_stop(&daemon_) != 0) {
        printf("FAIL: ringd did not stop cleanly\n%s\n", th_daemon_log(&daemon_));
        failed = 1;
    }
    if (!failed)
        printf("ringd with device arenas: every check passed\n");
    return failed;
}
