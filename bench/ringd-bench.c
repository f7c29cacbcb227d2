/* ringd-bench: nccl-tests style sweep of one collective through the local ringd, with N client
 * processes started here (one node's share of a job that may span several nodes). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "common.h"
#include "conn.h"
#include "model.h"
#include "ringd.h"
#include "ringd_build.h"
#if RINGD_HAVE_CUDA
#include "cuda_dev.h"
#endif

typedef struct {
    rb_sweep sweep;
    const char *socket;
    const char *job; /* NULL: ringd-bench.<pid>, fine for one node */
    int procs;       /* client processes started here: the job's ranks on this node */
    int world;       /* the job's ranks on all nodes */
    ringd_dtype_t dtype;
    ringd_redop_t redop;
    int op; /* rd_coll: allreduce, broadcast, allgather, reducescatter, allgatherv */
    int root;
    int cuda;              /* --device cuda: tensors in the session's device arena */
    const rb_model *model; /* --model: one step of the model's gradients per iteration */
    long gap_us;           /* --gap-us: between two gradients of a step, standing in for compute */
} bench_opts;

/* Rank r's input buf[0..count): the pattern from its element first on. */
static void fill(void *buf, ringd_dtype_t dt, size_t count, int r, size_t first)
{
    for (size_t i = 0; i < count; i++)
        rd_dtype_store((rd_dtype)dt, buf, i, rb_pattern(r, first + i));
}

/* The allreduce of n ranks' inputs (the pattern from element first on) into want[0..count), as
 * the daemon computes it; ins holds n * count elements of scratch. */
static void expect_allreduce(const bench_opts *o, int n, size_t first, size_t count, uint8_t *ins,
                             void *want)
{
    size_t esz = ringd_dtype_size(o->dtype);
    const void *src[n];
    for (int r = 0; r < n; r++) {
        fill(ins + (size_t)r * count * esz, o->dtype, count, r, first);
        src[r] = ins + (size_t)r * count * esz;
    }
    rd_reduce_args args = RD_REDUCE_ARGS_INIT;
    if (o->redop == RINGD_AVG)
        args.divisor = (uint32_t)n;
    rd_reduce((rd_dtype)o->dtype, o->redop == RINGD_AVG ? RD_OP_SUM : (rd_redop)o->redop, want, src,
              n, count, &args);
}

/* The device of device memory p as this process numbers it (ringd_device is the daemon's
 * number, which differs in a pod that sees fewer GPUs). */
static int device_here(const void *p)
{
#if RINGD_HAVE_CUDA
    return rd_cuda_pointer_device(p);
#else
    (void)p;
    return -1;
#endif
}

/* bytes from src to dst, where either may be device memory of device dev (-1: host only). */
static int copy_mem(int dev, void *dst, const void *src, size_t bytes)
{
    if (dev < 0) {
        memmove(dst, src, bytes);
        return 0;
    }
#if RINGD_HAVE_CUDA
    char why[256];
    if (rd_cuda_copy(dev, dst, src, bytes, why, sizeof(why)) != 0) {
        fprintf(stderr, "ringd-bench: %s\n", why);
        return -1;
    }
    return 0;
#else
    return -1;
#endif
}

/* Elements of the op's input and output per element of count (each rank's share). */
static size_t in_factor(const bench_opts *o)
{
    return o->op == RD_COLL_REDUCESCATTER || o->op == RD_COLL_ALLTOALL ? (size_t)o->world : 1;
}

static size_t out_factor(const bench_opts *o)
{
    return o->op == RD_COLL_ALLGATHER || o->op == RD_COLL_ALLGATHERV || o->op == RD_COLL_ALLTOALL
               ? (size_t)o->world
               : 1;
}

/* Runs one collective of count elements per rank (an allgatherv's counts all equal). */
static ringd_result_t run_op(ringd_t *h, const bench_opts *o, const char *name, void *send,
                             void *recv, size_t count)
{
    size_t counts[o->world];
    switch (o->op) {
    case RD_COLL_ALLREDUCE: return ringd_allreduce(h, name, send, recv, count, o->dtype, o->redop);
    case RD_COLL_BROADCAST: return ringd_broadcast(h, name, recv, count, o->dtype, o->root);
    case RD_COLL_REDUCESCATTER:
        return ringd_reducescatter(h, name, send, recv, count, o->dtype, o->redop);
    case RD_COLL_ALLGATHERV:
        for (int r = 0; r < o->world; r++)
            counts[r] = count;
        return ringd_allgatherv(h, name, send, count, recv, counts, o->dtype);
    case RD_COLL_ALLTOALL: return ringd_alltoall(h, name, send, recv, count, o->dtype);
    default: return ringd_allgather(h, name, send, recv, count, o->dtype);
    }
}

/* Runs the op on known inputs and counts the elements of this rank's result that differ from the
 * expected one, rebuilt here from every rank's pattern. */
static long long check(ringd_t *h, const bench_opts *o, void *send, void *recv, void *scratch,
                       size_t count, ringd_result_t *rc)
{
    int n = ringd_size(h), me = ringd_rank(h), dev = o->cuda ? device_here(send) : -1;
    size_t esz = ringd_dtype_size(o->dtype);
    size_t out_count = count * out_factor(o), in_count = count * in_factor(o);
    /* scratch holds n inputs, the expected output, and this rank's input, then its result */
    uint8_t *ins = scratch, *want = ins + (size_t)n * in_count * esz, *got = want + out_count * esz;

    fill(got, o->dtype, in_count, me, 0);
    if (copy_mem(dev, send, got, in_count * esz) != 0 ||
        (o->op == 1 && copy_mem(dev, recv, got, count * esz) != 0)) {
        *rc = RINGD_E_SYSTEM;
        return (long long)out_count;
    }
    *rc = run_op(h, o, "bench.check", send, recv, count);
    if (*rc == RINGD_OK && copy_mem(dev, got, recv, out_count * esz) != 0)
        *rc = RINGD_E_SYSTEM;
    if (*rc != RINGD_OK)
        return (long long)out_count;

    if (o->op == RD_COLL_ALLREDUCE) {
        expect_allreduce(o, n, 0, count, ins, want);
    } else if (o->op == RD_COLL_REDUCESCATTER) {
        expect_allreduce(o, n, (size_t)me * count, count, ins, want);
    } else if (o->op == RD_COLL_ALLTOALL) { /* block r of the result: rank r's block me */
        for (int r = 0; r < n; r++) {
            fill(ins, o->dtype, in_count, r, 0);
            memcpy(want + (size_t)r * count * esz, ins + (size_t)me * count * esz, count * esz);
        }
    } else {
        for (int r = 0; r < n; r++)
            fill(ins + (size_t)r * count * esz, o->dtype, count, r, 0);
        memcpy(want, o->op == 1 ? ins + (size_t)o->root * count * esz : ins,
               (o->op == 1 ? count : out_count) * esz);
    }
    long long wrong = 0;
    for (size_t i = 0; i < out_count; i++)
        wrong += memcmp(got + i * esz, want + i * esz, esz) != 0;
    return wrong;
}

/* Opens this process's session of the job with an arena of at least arena bytes (and a device
 * arena of device_arena bytes, 0: none) into *h. Returns 0, or -1 after printing why (*h NULL). */
static int open_session(const bench_opts *o, const char *job, size_t arena, size_t device_arena,
                        ringd_t **h)
{
    ringd_options_t opts = RINGD_OPTIONS_INIT;
    opts.socket_path = o->socket;
    opts.job = job;
    opts.local_size = o->procs;
    opts.world_size = o->world;
    opts.arena_size = (arena + 4095) & ~(size_t)4095;
    opts.device_arena_size = device_arena;
    *h = NULL;
    ringd_result_t rc = ringd_open(&opts, h);
    if (rc == RINGD_OK)
        return 0;
    fprintf(stderr, "ringd-bench: ringd_open: %s: %s\n", ringd_strerror(rc), ringd_errmsg(*h));
    ringd_close(*h);
    *h = NULL;
    return -1;
}

/* One client process: opens the session, sweeps the sizes, prints on rank 0. */
static int client_main(const bench_opts *o, const char *job)
{
    const rb_sweep *s = &o->sweep;
    size_t esz = ringd_dtype_size(o->dtype);
    int whole =
        o->op == RD_COLL_REDUCESCATTER || o->op == RD_COLL_ALLGATHERV || o->op == RD_COLL_ALLTOALL;
    size_t max_count = s->max_bytes / esz / (whole ? (size_t)o->world : 1);
    max_count = max_count ? max_count : 1;
    size_t gather = out_factor(o), scatter = in_factor(o);
    size_t arena = max_count * esz * (1 + scatter + gather) + ((size_t)s->iters * 16) + (1u << 20);

    ringd_t *h;
    if (open_session(o, job, arena, o->cuda ? max_count * esz * (scatter + gather) + (1u << 20) : 0,
                     &h) != 0)
        return 2;
    ringd_result_t rc = RINGD_OK;
    int n = ringd_size(h), me = ringd_rank(h);
    if (n != o->world) {
        fprintf(stderr,
                "ringd-bench: rank %d: the daemon reports a job of %d ranks, not --world %d\n", me,
                n, o->world);
        ringd_close(h);
        return 2;
    }
    void *(*alloc)(ringd_t *, size_t) = o->cuda ? ringd_alloc_device : ringd_alloc;
    void *send = alloc(h, max_count * esz * scatter);
    void *recv = alloc(h, max_count * esz * gather);
    double *times = ringd_alloc(h, (size_t)s->iters * sizeof(double));
    void *zeros = calloc(max_count * (gather > scatter ? gather : scatter), esz);
    void *scratch = o->sweep.check
                        ? malloc(max_count * esz * ((size_t)n * scatter + 2 * gather + scatter))
                        : NULL;
    int status = 0, dev = o->cuda && send != NULL ? device_here(send) : -1;
    if (send == NULL || recv == NULL || times == NULL || zeros == NULL ||
        (o->sweep.check && scratch == NULL)) {
        fprintf(stderr, "ringd-bench: rank %d: out of arena or memory: %s\n", me, ringd_errmsg(h));
        status = 2;
        goto out;
    }
    if (copy_mem(dev, send, zeros, max_count * esz * scatter) != 0 ||
        copy_mem(dev, recv, zeros, max_count * esz * gather) != 0) {
        status = 2;
        goto out;
    }

    if (me == 0) {
        char what[64];
        int reduces = o->op == RD_COLL_ALLREDUCE || o->op == RD_COLL_REDUCESCATTER;
        snprintf(what, sizeof(what), "%s %s%s%s", rd_coll_name((rd_coll)o->op),
                 rd_dtype_name((rd_dtype)o->dtype), reduces ? " " : "",
                 reduces ? rd_redop_name((rd_redop)o->redop) : "");
        rb_print_header("ringd-bench", n, what, s);
        if (o->cuda)
            printf("# device: GPU %d (%s), tensors in the session's device arena\n",
                   ringd_device(h), ringd_device_uuid(h));
    }
    /* nccl-tests' bus bandwidths; reducescatter and allgatherv sizes are the whole op's, as
     * nccl-tests gives them (allgather's are each rank's, as this bench always had them) */
    double bus = o->op == RD_COLL_ALLREDUCE   ? 2.0 * (n - 1) / n
                 : o->op == RD_COLL_BROADCAST ? 1.0
                                              : (double)(n - 1) / n;
    for (uint64_t bytes = s->min_bytes; bytes <= s->max_bytes; bytes *= s->factor) {
        size_t count = bytes / esz / (whole ? (size_t)n : 1);
        count = count ? count : 1;
        for (int i = 0; i < s->warmup && rc == RINGD_OK; i++)
            rc = run_op(h, o, "bench.op", send, recv, count);
        for (int i = 0; i < s->iters && rc == RINGD_OK; i++) {
            double t0 = rb_now_s();
            rc = run_op(h, o, "bench.op", send, recv, count);
            times[i] = rb_now_s() - t0;
        }
        if (rc == RINGD_OK)
            rc = ringd_allreduce(h, "bench.times", times, times, (size_t)s->iters, RINGD_F64,
                                 RINGD_MAX);
        long long wrong = 0;
        if (rc == RINGD_OK && s->check)
            wrong = check(h, o, send, recv, scratch, count, &rc);
        if (rc == RINGD_OK)
            rc = ringd_allreduce(h, "bench.wrong", &wrong, &wrong, 1, RINGD_I64, RINGD_SUM);
        if (rc != RINGD_OK) {
            fprintf(stderr, "ringd-bench: rank %d, %" PRIu64 " bytes: %s: %s\n", me, bytes,
                    ringd_strerror(rc), ringd_errmsg(h));
            status = 2;
            break;
        }
        if (wrong > 0)
            status = 1;
        if (me == 0) {
            uint64_t shown = o->op == RD_COLL_ALLREDUCE || o->op == RD_COLL_BROADCAST
                                 ? (uint64_t)count * esz
                                 : (uint64_t)count * esz * (uint64_t)n;
            int reduces = o->op == RD_COLL_ALLREDUCE || o->op == RD_COLL_REDUCESCATTER;
            rb_print_row(shown, whole ? count * (size_t)n : count,
                         rd_dtype_name((rd_dtype)o->dtype),
                         reduces ? rd_redop_name((rd_redop)o->redop) : "none",
                         rb_median(times, s->iters), bus, wrong);
        }
        if (bytes > s->max_bytes / s->factor)
            break;
    }

out:
    free(scratch);
    free(zeros);
    ringd_close(h);
    return status;
}

/* The daemon's ring passes and the ops they carried, from its status (socket: the session's);
 * -1 when it cannot be asked. */
static int daemon_passes(const char *socket, uint64_t *passes, uint64_t *ops)
{
    Ringd__StatusRequest q = RINGD__STATUS_REQUEST__INIT;
    rd_msg m = RINGD__MSG__INIT, *reply = NULL;
    char err[512];
    m.body_case = RINGD__MSG__BODY_STATUS_REQUEST;
    m.status_request = &q;
    if (socket == NULL)
        socket = getenv("RINGD_SOCKET") ? getenv("RINGD_SOCKET") : "/run/ringd/ringd.sock";
    if (rd_conn_ask(socket, &m, 5000, &reply, err, sizeof(err)) != RINGD_OK) {
        fprintf(stderr, "ringd-bench: status: %s\n", err);
        return -1;
    }
    int rc = -1;
    if (reply->body_case == RINGD__MSG__BODY_STATUS_REPLY) {
        *passes = reply->status_reply->ring_passes;
        *ops = reply->status_reply->ring_ops;
        rc = 0;
    }
    rd_frame_free(reply);
    return rc;
}

/* One backward pass: every gradient of the model as an async allreduce in place, in reverse
 * declaration order with the gap between them, then waits for all. Returns the first failure. */
static ringd_result_t model_step(ringd_t *h, const bench_opts *o, char *const *tensors,
                                 ringd_request_t **reqs)
{
    const rb_model *m = o->model;
    ringd_result_t rc = RINGD_OK;
    size_t submitted = 0;
    for (size_t k = m->n; k-- > 0 && rc == RINGD_OK; submitted++) {
        if (k + 1 < m->n)
            rb_sleep_us(o->gap_us);
        rc = ringd_allreduce_async(h, m->names[k], tensors[k], tensors[k], m->counts[k], o->dtype,
                                   o->redop, &reqs[k]);
    }
    for (size_t i = 0; i < submitted; i++) {
        ringd_result_t w = ringd_wait(reqs[m->n - 1 - i]);
        if (rc == RINGD_OK)
            rc = w;
    }
    return rc;
}

/* One client process of --model: warm-up and timed steps, a checked one, and on rank 0 the step
 * times and the summary line. */
static int model_main(const bench_opts *o, const char *job)
{
    const rb_model *m = o->model;
    const rb_sweep *s = &o->sweep;
    size_t esz = ringd_dtype_size(o->dtype), bytes = 0;
    for (size_t i = 0; i < m->n; i++)
        bytes += (m->counts[i] * esz + 63) & ~(size_t)63;

    ringd_t *h;
    if (open_session(o, job, bytes + (size_t)s->iters * 16 + (2u << 20), 0, &h) != 0)
        return 2;
    ringd_result_t rc = RINGD_OK;
    int n = ringd_size(h), me = ringd_rank(h), status = 0;
    uint8_t *base = ringd_alloc(h, bytes);
    double *times = ringd_alloc(h, (size_t)s->iters * sizeof(double));
    char **tensors = calloc(m->n, sizeof(*tensors));
    ringd_request_t **reqs = calloc(m->n, sizeof(*reqs));
    if (n != o->world || base == NULL || times == NULL || tensors == NULL || reqs == NULL) {
        fprintf(stderr, "ringd-bench: rank %d: %s\n", me,
                n != o->world ? "the daemon's job size differs from --world"
                              : "out of arena or memory");
        status = 2;
        goto out;
    }
    memset(base, 0, bytes);
    for (size_t i = 0, off = 0; i < m->n; i++) {
        tensors[i] = (char *)base + off;
        off += (m->counts[i] * esz + 63) & ~(size_t)63;
    }

    uint64_t p0 = 0, ops0 = 0, p1 = 0, ops1 = 0;
    int counted = 0;
    for (int i = 0; i < s->warmup && rc == RINGD_OK; i++)
        rc = model_step(h, o, tensors, reqs);
    if (rc == RINGD_OK)
        rc = ringd_barrier(h, "bench.model.start");
    if (rc == RINGD_OK && me == 0)
        counted = daemon_passes(o->socket, &p0, &ops0) == 0;
    for (int i = 0; i < s->iters && rc == RINGD_OK; i++) {
        double t0 = rb_now_s();
        rc = model_step(h, o, tensors, reqs);
        times[i] = rb_now_s() - t0;
    }
    if (rc == RINGD_OK && counted)
        counted = daemon_passes(o->socket, &p1, &ops1) == 0;
    if (rc == RINGD_OK)
        rc =
            ringd_allreduce(h, "bench.times", times, times, (size_t)s->iters, RINGD_F64, RINGD_MAX);

    /* Tensor i's inputs start at pattern element 7 i, so results that land in another tensor
     * of the same size show. */
    long long wrong = 0;
    enum { CHUNK = 4096 };
    uint8_t *ins = s->check ? malloc((size_t)n * CHUNK * esz) : NULL, want[CHUNK * 8];
    if (rc == RINGD_OK && s->check && ins == NULL)
        rc = RINGD_E_NOMEM;
    if (rc == RINGD_OK && s->check) {
        for (size_t i = 0; i < m->n; i++)
            fill(tensors[i], o->dtype, m->counts[i], me, 7 * i);
        rc = model_step(h, o, tensors, reqs);
        for (size_t i = 0; i < m->n && rc == RINGD_OK; i++) {
            for (size_t e = 0; e < m->counts[i]; e += CHUNK) {
                size_t len = m->counts[i] - e < CHUNK ? m->counts[i] - e : CHUNK;
                expect_allreduce(o, n, 7 * i + e, len, ins, want);
                for (size_t k = 0; k < len; k++)
                    wrong += memcmp(tensors[i] + (e + k) * esz, want + k * esz, esz) != 0;
            }
        }
    }
    free(ins);
    if (rc == RINGD_OK)
        rc = ringd_allreduce(h, "bench.wrong", &wrong, &wrong, 1, RINGD_I64, RINGD_SUM);
    if (rc != RINGD_OK) {
        fprintf(stderr, "ringd-bench: rank %d, model %s: %s: %s\n", me, m->name, ringd_strerror(rc),
                ringd_errmsg(h));
        status = 2;
        goto out;
    }
    if (wrong > 0)
        status = 1;
    if (me == 0) {
        uint64_t payload = (uint64_t)m->elems * esz;
        printf("# ringd-bench: %d ranks, model %s (%zu tensors, %llu bytes), allreduce %s %s in "
               "reverse order, gap %ld us, iters %d, warmup %d\n",
               n, m->name, m->n, (unsigned long long)payload, rd_dtype_name((rd_dtype)o->dtype),
               rd_redop_name((rd_redop)o->redop), o->gap_us, s->iters, s->warmup);
        printf("# step times (ms, slowest rank):");
        for (int i = 0; i < s->iters; i++)
            printf(" %.2f", times[i] * 1e3);
        printf("\n# #wrong %lld\n", wrong);
        double step = rb_median(times, s->iters);
        double passes = counted ? (double)(p1 - p0) / s->iters : -1;
        double per = counted && p1 > p0 ? (double)(ops1 - ops0) / (double)(p1 - p0) : 0;
        rb_model_print_summary(m, payload, step * 1e3, passes, per);
    }

out:
    free(reqs);
    free(tensors);
    ringd_close(h);
    return status;
}

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: ringd-bench [--socket PATH] [--procs N] [--world N] [--job NAME]\n"
        "                   [--op "
        "allreduce|broadcast|allgather|reducescatter|allgatherv|alltoall]\n"
        "                   [--dtype f32|f64|f16|bf16|i32|i64|u8] [--redop sum|avg|min|max|prod]\n"
        "                   [--root R] [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS]\n"
        "                   [-w WARMUP] [-c 0|1] [--device host|cuda]\n"
        "       ringd-bench --model %s|FILE [--gap-us US] [--list] [--socket PATH]\n"
        "                   [--procs N] [--world N] [--job NAME] [-n ITERS] [-w WARMUP] [-c 0|1]\n"
        "  --socket PATH  ringd's socket (env RINGD_SOCKET, default /run/ringd/ringd.sock)\n"
        "  --procs N      client processes to start, one rank each (default 2)\n"
        "  --world N      ranks of the job on all nodes; each node runs ringd-bench with the same\n"
        "                 --job and --world (default --procs: this node only)\n"
        "  --job NAME     the job's name, the same on every node (default ringd-bench.PID)\n"
        "  --device D     host: tensors in the shared arena (default); cuda: in the session's\n"
        "                 device arena on the GPU ringd gives each rank\n"
        "  --model M      one training step per iteration instead of a sweep: the model's\n"
        "                 gradients (FILE: one \"name count\" per line, in declaration order) as\n"
        "                 async allreduces in place, in reverse order, then a wait for all; ends\n"
        "                 with a \"# model\" line (median step, ring passes per step on this "
        "node)\n"
        "  --gap-us US    sleep between two gradients of a step, standing in for backward\n"
        "                 compute (default 0)\n"
        "  --list         print the model's tensors as \"name count\" lines and exit\n"
        "%s"
        "exit status: 0 all results right, 1 some #wrong > 0, 2 a failure\n",
        rb_model_builtins, rb_sweep_usage);
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"socket", required_argument, NULL, 'S'}, {"procs", required_argument, NULL, 'p'},
        {"op", required_argument, NULL, 'o'},     {"dtype", required_argument, NULL, 'd'},
        {"redop", required_argument, NULL, 'r'},  {"root", required_argument, NULL, 'R'},
        {"world", required_argument, NULL, 'W'},  {"job", required_argument, NULL, 'j'},
        {"device", required_argument, NULL, 'D'}, {"help", no_argument, NULL, 'h'},
        {"model", required_argument, NULL, 'M'},  {"gap-us", required_argument, NULL, 'G'},
        {"list", no_argument, NULL, 'L'},         {NULL, 0, NULL, 0},
    };
    bench_opts o = {.socket = NULL, .procs = 2, .world = 0, .dtype = RINGD_F32, .redop = RINGD_SUM};
    int c, v, list = 0;
    const char *model = NULL;
    rb_model mdl = {0};
    char *end;

    rb_sweep_defaults(&o.sweep);
    while ((c = getopt_long(argc, argv, "b:e:f:n:w:c:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'S': o.socket = optarg; break;
        case 'p':
            o.procs = atoi(optarg);
            if (o.procs < 1 || o.procs > 64)
                goto bad;
            break;
        case 'o':
            if ((o.op = rd_coll_parse(optarg)) < 0 || o.op == RD_COLL_BARRIER)
                goto bad;
            break;
        case 'd':
            if ((v = rd_dtype_parse(optarg)) < 0)
                goto bad;
            o.dtype = (ringd_dtype_t)v;
            break;
        case 'r':
            if ((v = rd_redop_parse(optarg)) < 0)
                goto bad;
            o.redop = (ringd_redop_t)v;
            break;
        case 'R': o.root = atoi(optarg); break;
        case 'D':
            if (strcmp(optarg, "host") == 0)
                o.cuda = 0;
            else if (strcmp(optarg, "cuda") == 0 && RINGD_HAVE_CUDA)
                o.cuda = 1;
            else if (strcmp(optarg, "cuda") == 0) {
                fprintf(stderr, "ringd-bench: --device cuda: built without CUDA\n");
                return 2;
            } else
                goto bad;
            break;
        case 'W':
            o.world = atoi(optarg);
            if (o.world < 1 || o.world > 65536)
                goto bad;
            break;
        case 'j':
            if (optarg[0] == '\0')
                goto bad;
            o.job = optarg;
            break;
        case 'M': model = optarg; break;
        case 'G':
            errno = 0;
            o.gap_us = strtol(optarg, &end, 10);
            if (errno != 0 || end == optarg || *end != '\0' || o.gap_us < 0 || o.gap_us > 10000000)
                goto bad;
            break;
        case 'L': list = 1; break;
        case 'h': usage(stdout); return 0;
        default:
            if (rb_sweep_option(&o.sweep, c, optarg) != 0)
                goto bad;
        }
    }
    if (o.world == 0)
        o.world = o.procs;
    if (optind < argc || o.sweep.min_bytes > o.sweep.max_bytes || o.world < o.procs || o.root < 0 ||
        o.root >= o.world || ((list || o.gap_us) && model == NULL))
        goto bad;
    if (model != NULL) {
        char err[512];
        if (o.op != 0 || (o.redop != RINGD_SUM && o.redop != RINGD_AVG) || o.cuda) {
            fprintf(stderr, "ringd-bench: --model runs allreduce sum or avg on host tensors\n");
            return 2;
        }
        if (rb_model_load(model, &mdl, err, sizeof(err)) != 0) {
            fprintf(stderr, "ringd-bench: --model %s\n", err);
            return 2;
        }
        if (list) {
            for (size_t i = 0; i < mdl.n; i++)
                printf("%s %zu\n", mdl.names[i], mdl.counts[i]);
            rb_model_free(&mdl);
            return 0;
        }
        o.model = &mdl;
    }

    char pid_job[64];
    const char *job = o.job;
    if (job == NULL) {
        snprintf(pid_job, sizeof(pid_job), "ringd-bench.%d", (int)getpid());
        job = pid_job;
    }
    pid_t kids[64];
    for (int i = 0; i < o.procs; i++) {
        fflush(stdout);
        kids[i] = fork();
        if (kids[i] == 0)
            _exit(o.model != NULL ? model_main(&o, job) : client_main(&o, job));
        if (kids[i] < 0) {
            perror("ringd-bench: fork");
            for (int k = 0; k < i; k++)
                kill(kids[k], SIGTERM);
            return 2;
        }
    }
    int status = 0;
    for (int i = 0; i < o.procs; i++) {
        int ws;
        if (waitpid(kids[i], &ws, 0) < 0 || !WIFEXITED(ws))
            status = 2;
        else if (WEXITSTATUS(ws) > status)
            status = WEXITSTATUS(ws);
    }
    rb_model_free(&mdl);
    return status;

bad:
    fprintf(stderr, "ringd-bench: bad arguments\n");
    usage(stderr);
    return 2;
}
