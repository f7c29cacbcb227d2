/* On devices, through two real ringd daemons that form a ring over loopback (a job of one rank
 * per daemon, each with a device arena):
 *   - --gpu-transport tcp (one GPU is enough: both daemons serve GPU 0): device tensors cross
 *     through host memory in the daemons and the TCP ring; every dtype and op equal to the CPU
 *     kernels bit for bit, broadcast and allgather; reducescatter, allgatherv and alltoall of 2
 *     ranks on each daemon (gpu_sharded_cases); status says tcp and why;
 *   - --gpu-transport nccl on one GPU: the plan is TCP, a device allreduce is refused saying
 *     why, and reducescatter, allgatherv and alltoall run through host memory;
 *   - auto on two GPUs (n0 serves GPU 0, n1 GPU 1): the ring agrees on NCCL (status says nccl),
 *     allreduce (sum, average, max), broadcast and allgather are exact, and the collectives of
 *     per-rank counts cross through host memory; a second job forms a
 *     communicator of its own. On a machine with one GPU this part prints one SKIP line (NCCL
 *     refuses two ranks on one GPU).
 * Without a device it prints one line saying why and exits 77 (meson's skip). CUDA is touched
 * only in forked children (a process that initialised the driver cannot fork a working child). */
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
#include "th_ring.h"

#define COUNT 300007 /* odd: the kernels' tails, and ring chunks of unequal sizes */

static th_ring ring_;
static char job_[96];

/* A session on daemon i of a job of world ranks, local of them on each daemon, with a device
 * arena; NULL after saying why. */
static ringd_t *open_ranks(int i, const char *job, int world, int local, size_t dev_arena)
{
    ringd_options_t o;
    ringd_t *r = NULL;
    ringd_options_init(&o, sizeof(o));
    o.socket_path = ring_.d[i].sock;
    o.job = job;
    o.world_size = world;
    o.local_size = local;
    o.open_timeout_ms = 60000;
    o.op_timeout_ms = 120000;
    o.device_arena_size = dev_arena;
    ringd_result_t rc = ringd_open(&o, &r);
    if (rc != RINGD_OK) {
        fprintf(stderr, "node %d: ringd_open: %s: %s\n", i, ringd_strerror(rc), ringd_errmsg(r));
        ringd_close(r);
        return NULL;
    }
    return r;
}

/* Rank i's session on daemon i of a 2-rank job. */
static ringd_t *open_node(int i, const char *job, size_t dev_arena)
{
    return open_ranks(i, job, 2, 1, dev_arena);
}

/* Broadcast from rank 1 and allgather of int32 on device-arena buffers. Returns 0 or a code. */
static int broadcast_and_gather(ringd_t *r)
{
    char why[256];
    int me = ringd_rank(r), dev = ringd_device(r);
    enum { N = 40961 };
    static int32_t host[2 * N], got[2 * N];
    int32_t *d = ringd_alloc_device(r, sizeof(host)), *g = ringd_alloc_device(r, sizeof(host));
    for (int e = 0; e < N; e++)
        host[e] = me * 1000000 + e;
    if (d == NULL || g == NULL || rd_cuda_copy(dev, d, host, N * 4, why, sizeof(why)) != 0)
        return 31;
    if (ringd_broadcast(r, "b", d, N, RINGD_I32, 1) != RINGD_OK ||
        rd_cuda_copy(dev, got, d, N * 4, why, sizeof(why)) != 0) {
        fprintf(stderr, "broadcast: %s\n", ringd_errmsg(r));
        return 32;
    }
    for (int e = 0; e < N; e++)
        if (got[e] != 1000000 + e)
            return 33;
    if (rd_cuda_copy(dev, d, host, N * 4, why, sizeof(why)) != 0 ||
        ringd_allgather(r, "g", d, g, N, RINGD_I32) != RINGD_OK ||
        rd_cuda_copy(dev, got, g, 2 * N * 4, why, sizeof(why)) != 0) {
        fprintf(stderr, "allgather: %s\n", ringd_errmsg(r));
        return 34;
    }
    for (int k = 0; k < 2; k++)
        for (int e = 0; e < N; e++)
            if (got[k * N + e] != k * 1000000 + e)
                return 35;
    return 0;
}

/* Allreduces of dtypes dts[0..ndts) x ops[0..nops) on device arenas, each against rd_reduce of
 * the two ranks' inputs on the host, bit for bit. Returns 0 or a code. */
static int allreduce_cases(ringd_t *r, const char *tag, const int *dts, int ndts,
                           const ringd_redop_t *ops, int nops)
{
    char why[256];
    int me = ringd_rank(r), dev = ringd_device(r);
    size_t most = COUNT * 8;
    uint8_t *in[2] = {malloc(most), malloc(most)}, *want = malloc(most), *got = malloc(most);
    uint8_t *d = ringd_alloc_device(r, most);
    if (!in[0] || !in[1] || !want || !got || !d)
        return 21;
    for (int x = 0; x < ndts; x++) {
        rd_dtype dt = (rd_dtype)dts[x];
        size_t esz = rd_dtype_size(dt);
        for (int k = 0; k < 2; k++)
            for (size_t e = 0; e < COUNT; e++)
                rd_dtype_store(dt, in[k], e, gpu_input_value(k, e, dt));
        for (int o = 0; o < nops; o++) {
            int fl = rd_dtype_is_float(dt);
            rd_reduce_args a = RD_REDUCE_ARGS_INIT;
            a.prescale = fl ? 0.5 : 1.0;
            a.postscale = fl ? 3.0 : 1.0;
            a.divisor = ops[o] == RINGD_AVG ? 2 : 1;
            const void *src[2] = {in[0], in[1]};
            rd_reduce(dt, ops[o] == RINGD_AVG ? RD_OP_SUM : (rd_redop)ops[o], want, src, 2, COUNT,
                      &a);
            char name[64];
            snprintf(name, sizeof(name), "%s.%d.%d", tag, (int)dt, (int)ops[o]);
            if (rd_cuda_copy(dev, d, in[me], COUNT * esz, why, sizeof(why)) != 0)
                return 22;
            ringd_result_t rc = ringd_allreduce_scaled(r, name, d, d, COUNT, (ringd_dtype_t)dt,
                                                       ops[o], a.prescale, a.postscale);
            if (rc != RINGD_OK) {
                fprintf(stderr, "%s: %s: %s\n", name, ringd_strerror(rc), ringd_errmsg(r));
                return 23;
            }
            if (rd_cuda_copy(dev, got, d, COUNT * esz, why, sizeof(why)) != 0)
                return 24;
            if (memcmp(got, want, COUNT * esz) != 0) {
                fprintf(stderr, "%s: the result differs from the CPU kernels'\n", name);
                return 25;
            }
        }
    }
    free(in[0]);
    free(in[1]);
    free(want);
    free(got);
    return 0;
}

static int transport_is(const char *job, const char *want, const char *why);

static const ringd_redop_t all_ops[] = {RINGD_SUM, RINGD_AVG, RINGD_MIN, RINGD_MAX, RINGD_PROD};

/* The TCP ring: every dtype and op (host staging keeps the CPU kernels' bits). */
static int over_tcp(int i, void *arg)
{
    (void)arg;
    char job[128];
    snprintf(job, sizeof(job), "%s.tcp", job_);
    ringd_t *r = open_node(i, job, 64 << 20);
    if (r == NULL)
        return 10;
    static const int dts[] = {RD_DT_F32, RD_DT_F64, RD_DT_F16, RD_DT_BF16,
                              RD_DT_I32, RD_DT_I64, RD_DT_U8};
    int rc = allreduce_cases(r, "t", dts, 7, all_ops, 5);
    if (rc == 0)
        rc = broadcast_and_gather(r);
    if (rc == 0 && i == 0 && transport_is(job, "tcp", "node n0: --gpu-transport tcp") != 0)
        rc = 40;
    if (rc == 0 && ringd_barrier(r, "looked") != RINGD_OK)
        rc = 41;
    ringd_close(r);
    return rc;
}

/* Reducescatter, allgatherv and alltoall of 2 ranks on each of the two daemons (gpu_common.h):
 * staged through host memory onto the TCP ring; then alltoall and allgatherv with one daemon's
 * ranks in device memory and the other's in host memory. */
static int sharded_over_tcp(int i, void *arg)
{
    (void)arg;
    char job[128];
    snprintf(job, sizeof(job), "%s.sharded", job_);
    ringd_t *r = open_ranks(i / 2, job, 4, 2, 32 << 20);
    if (r == NULL)
        return 10;
    int rc = gpu_sharded_cases(r, "s");
    /* ranks 0 and 1 (one daemon) in device arenas, 2 and 3 (the other) in host memory, and
     * rank 1 moving nothing in the alltoall */
    if (rc == 0)
        rc = gpu_either_memory_cases(r, "s", ringd_rank(r) < 2, 1);
    if (rc == 0 && ringd_barrier(r, "done") != RINGD_OK)
        rc = 41;
    ringd_close(r);
    return rc;
}

/* --gpu-transport nccl on two daemons of one GPU: the plan is TCP (NCCL takes one rank per
 * GPU), so a device allreduce is refused, saying why, while reducescatter, allgatherv and
 * alltoall, which cross through host memory whatever the plan, run. */
static int nccl_required(int i, void *arg)
{
    (void)arg;
    char job[128], why[256];
    snprintf(job, sizeof(job), "%s.required", job_);
    ringd_t *r = open_node(i, job, 32 << 20);
    if (r == NULL)
        return 10;
    float *d = ringd_alloc_device(r, 1024 * sizeof(float));
    static float zero[1024];
    if (d == NULL || rd_cuda_copy(ringd_device(r), d, zero, sizeof(zero), why, sizeof(why)) != 0)
        return 11;
    ringd_result_t rc = ringd_allreduce(r, "refused", d, d, 1024, RINGD_F32, RINGD_SUM);
    if (rc != RINGD_E_REFUSED) {
        fprintf(stderr, "rank %d: a device allreduce with NCCL required and a TCP plan: %s: %s\n",
                ringd_rank(r), ringd_strerror(rc), ringd_errmsg(r));
        return 12;
    }
    int code = gpu_sharded_cases(r, "q");
    if (code == 0 && ringd_barrier(r, "done") != RINGD_OK)
        code = 13;
    ringd_close(r);
    return code;
}

/* NCCL: exact cases only (NCCL rounds f16/bf16 sums its own way). */
static int over_nccl(int i, void *arg)
{
    const char *suffix = arg;
    char job[128];
    snprintf(job, sizeof(job), "%s.%s", job_, suffix);
    ringd_t *r = open_node(i, job, 64 << 20);
    if (r == NULL)
        return 10;
    static const int dts[] = {RD_DT_F32, RD_DT_I32};
    static const ringd_redop_t ops[] = {RINGD_SUM, RINGD_AVG, RINGD_MAX};
    int rc = allreduce_cases(r, "n", dts, 2, ops, 3);
    if (rc == 0)
        rc = broadcast_and_gather(r);
    if (rc == 0) /* through host memory, in a generation on NCCL */
        rc = gpu_sharded_cases(r, "s");
    if (rc == 0 && i == 0 && transport_is(job, "nccl", "") != 0)
        rc = 40;
    if (rc == 0 && ringd_barrier(r, "looked") != RINGD_OK)
        rc = 41;
    ringd_close(r);
    return rc;
}

/* Every daemon reports job's ring with gpu_transport want, its why containing why. */
static int transport_is(const char *job, const char *want, const char *why)
{
    for (int k = 0; k < 2; k++) {
        rd_msg *m = th_status(ring_.d[k].sock);
        const Ringd__StatusReply *st = m != NULL ? m->status_reply : NULL;
        const Ringd__RingInfo *ri = NULL;
        for (size_t j = 0; st != NULL && j < st->n_jobs; j++)
            if (strcmp(st->jobs[j]->name, job) == 0)
                ri = st->jobs[j]->ring;
        int ok = ri != NULL && strcmp(ri->gpu_transport, want) == 0 &&
                 strstr(ri->gpu_transport_why, why) != NULL;
        if (!ok)
            printf("FAIL: n%d shows job %s's device transport as '%s' (%s), not %s (%s)\n", k, job,
                   ri != NULL ? ri->gpu_transport : "?", ri != NULL ? ri->gpu_transport_why : "",
                   want, why);
        rd_frame_free(m);
        if (!ok)
            return -1;
    }
    return 0;
}

static void dump_and_fail(const char *what, int *failed)
{
    printf("FAIL: %s\n", what);
    th_ring_dump_logs(&ring_, 8192);
    *failed = 1;
}

int main(void)
{
    char why[256] = "";
    int n = gpu_devices(why, sizeof(why)), failed = 0;
    if (n == 0) {
        printf("SKIP tests/gpu/test_gpu_ring: no CUDA device ringd can use here (%s)\n", why);
        return 77;
    }
    if (n < 0) {
        printf("FAIL: the CUDA driver: %s\n", why);
        return 1;
    }
    snprintf(job_, sizeof(job_), "gpuring.%d", (int)getpid());

    static const char *const tcp[] = {"--gpu-transport", "tcp", "--devices", "0", NULL};
    if (th_ring_start(&ring_, 2, tcp) != 0) {
        printf("FAIL: redis-server and two ringd did not start\n");
        return 1;
    }
    if (th_run(2, over_tcp, NULL, 600000) != 0)
        dump_and_fail("device tensors across two daemons on the TCP ring", &failed);
    else
        printf("tcp: every dtype and op, broadcast and allgather across two daemons, exact\n");
    if (th_run(4, sharded_over_tcp, NULL, 300000) != 0)
        dump_and_fail("reducescatter, allgatherv, alltoall of device tensors, 2 daemons x 2 ranks",
                      &failed);
    else
        printf("tcp: reducescatter, allgatherv, alltoall of 2 x 2 ranks, exact\n");
    th_ring_finish(&ring_);

    static const char *const required[] = {"--gpu-transport", "nccl", "--devices", "0", NULL};
    if (th_ring_start(&ring_, 2, required) != 0) {
        printf("FAIL: redis-server and two ringd (--gpu-transport nccl) did not start\n");
        return 1;
    }
    if (th_run(2, nccl_required, NULL, 300000) != 0)
        dump_and_fail("NCCL required on one GPU: device allreduce refused, the others run",
                      &failed);
    else
        printf("tcp with nccl required: allreduce refused; reducescatter, allgatherv, alltoall "
               "run\n");
    th_ring_finish(&ring_);

    if (n < 2) {
        printf("SKIP the NCCL part of tests/gpu/test_gpu_ring: it needs 2 GPUs (%d here); NCCL "
               "takes one rank per GPU\n",
               n);
        return failed;
    }
    if (th_ring_init(&ring_, 1) != 0) {
        printf("FAIL: redis-server did not start\n");
        return 1;
    }
    for (int k = 0; k < 2; k++) {
        char dev[8];
        snprintf(dev, sizeof(dev), "%d", k);
        const char *const args[] = {"--devices", dev, NULL};
        if (th_ring_start_node(&ring_, k, args) != 0) {
            printf("FAIL: ringd n%d did not start\n", k);
            th_ring_teardown(&ring_);
            return 1;
        }
    }
    ring_.n = 2;
    static const char *const jobs[] = {"nccl1", "nccl2"}; /* a communicator each */
    for (int k = 0; k < 2; k++) {
        char what[128];
        snprintf(what, sizeof(what), "device tensors across two GPUs on NCCL (job %s)", jobs[k]);
        if (th_run(2, over_nccl, (void *)jobs[k], 300000) != 0)
            dump_and_fail(what, &failed);
        else
            printf("nccl: allreduce, broadcast and allgather across two GPUs, exact (%s)\n",
                   jobs[k]);
    }
    th_ring_finish(&ring_);
    return failed;
}
