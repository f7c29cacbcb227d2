/* mpi-model-bench: one training step's gradients (bench/model.h) through OpenMPI the two ways a
 * framework without ringd would: an MPI_Iallreduce per tensor, or Horovod's fusion (tensors packed
 * into a fusion buffer, one blocking MPI_Allreduce per buffer, as Horovod's background thread
 * does), timed as ringd-bench --model times itself. */
#include <errno.h>
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "units.h"
#include "model.h"

typedef struct {
    const rb_model *m;
    float **tensors;   /* each gradient, in the model's order */
    float *fused;      /* staging for fused groups: room for every tensor */
    size_t fusion;     /* fusion buffer bytes; 0: one allreduce per tensor */
    long gap_us;       /* between two gradients, standing in for backward compute */
    MPI_Request *reqs; /* without fusion: one per tensor */
} step_ctx;

/* The gap between two gradients: OpenMPI moves a nonblocking collective on only inside MPI
 * calls, so the gap tests the outstanding requests[0..n) rather than sleeping (a framework's
 * progress thread would do no less). */
static void gap(long us, MPI_Request *reqs, size_t n)
{
    double end = rb_now_s() + (double)us * 1e-6;
    int done;
    while (rb_now_s() < end)
        if (n == 0 || MPI_Testall((int)n, reqs, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
            rb_sleep_us((int64_t)((end - rb_now_s()) * 1e6));
}

/* Starts the in-place allreduce of buf[0..count) as one request (one tensor or fused group is
 * far below INT_MAX elements). */
static int start(float *buf, size_t count, MPI_Request *req)
{
    if (count > INT_MAX)
        return MPI_ERR_COUNT;
    return MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, req);
}

/* Reduces a fused group, staging[0..count), and copies the results back to its tensors at[0..n)
 * (in the order they were packed). Returns an MPI result. */
static int run_group(step_ctx *c, size_t count, const size_t *at, size_t n)
{
    if (count > INT_MAX)
        return MPI_ERR_COUNT;
    int rc = MPI_Allreduce(MPI_IN_PLACE, c->fused, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    for (size_t i = 0, off = 0; rc == MPI_SUCCESS && i < n; i++) {
        memcpy(c->tensors[at[i]], c->fused + off, c->m->counts[at[i]] * sizeof(float));
        off += c->m->counts[at[i]];
    }
    return rc;
}

/* One step: the gradients in reverse order with the gap between them. Without fusion each goes
 * out at once (MPI_Iallreduce) and the step waits for all; with fusion each is copied into the
 * staging buffer, and a group is reduced when the next tensor would overflow the fusion buffer,
 * and at the end. Returns the number of allreduces, or -1. */
static long step(step_ctx *c)
{
    const rb_model *m = c->m;
    size_t nreq = 0, order = 0, group_order = 0, staged = 0; /* staged: elements packed */
    size_t *tensor_at = malloc(m->n * sizeof(*tensor_at));   /* submit order -> tensor */
    if (tensor_at == NULL)
        return -1;
    int rc = MPI_SUCCESS;
    for (size_t k = m->n; k-- > 0 && rc == MPI_SUCCESS; order++) {
        if (k + 1 < m->n && c->gap_us > 0)
            gap(c->gap_us, c->reqs, c->fusion ? 0 : nreq);
        size_t bytes = m->counts[k] * sizeof(float);
        tensor_at[order] = k;
        if (c->fusion == 0) {
            rc = start(c->tensors[k], m->counts[k], &c->reqs[nreq++]);
            continue;
        }
        if (staged > 0 && (staged * sizeof(float) + bytes > c->fusion)) {
            rc = run_group(c, staged, tensor_at + group_order, order - group_order);
            nreq++;
            staged = 0;
            group_order = order;
        }
        memcpy(c->fused + staged, c->tensors[k], bytes);
        staged += m->counts[k];
    }
    if (rc == MPI_SUCCESS && staged > 0) {
        rc = run_group(c, staged, tensor_at + group_order, order - group_order);
        nreq++;
    }
    if (rc == MPI_SUCCESS && c->fusion == 0)
        rc = MPI_Waitall((int)nreq, c->reqs, MPI_STATUSES_IGNORE);
    free(tensor_at);
    return rc == MPI_SUCCESS ? (long)nreq : -1;
}

/* Warm-up and timed steps, then a checked one (tensor k's inputs start at pattern element 7 k,
 * as ringd-bench's do); rank 0 prints the step times and the summary line. Returns the exit
 * status: 0, 1 (some result wrong) or 2. */
static int run(step_ctx *c, const rb_sweep *s, int rank, int nranks)
{
    const rb_model *m = c->m;
    double *times = calloc((size_t)s->iters, sizeof(double));
    double *slowest = calloc((size_t)s->iters, sizeof(double));
    long passes = 0;
    int status = 0;
    if (times == NULL || slowest == NULL) {
        fprintf(stderr, "mpi-model-bench: rank %d: out of memory\n", rank);
        status = 2;
        goto out;
    }
    for (int i = 0; i < s->warmup && passes >= 0; i++)
        passes = step(c);
    for (int i = 0; i < s->iters && passes >= 0; i++) {
        double t0 = rb_now_s();
        passes = step(c);
        times[i] = rb_now_s() - t0;
    }
    long long wrong = 0, total = 0;
    if (passes >= 0 && s->check) {
        for (size_t k = 0; k < m->n; k++)
            for (size_t e = 0; e < m->counts[k]; e++)
                c->tensors[k][e] = (float)rb_pattern(rank, 7 * k + e);
        if (step(c) < 0)
            passes = -1;
        for (size_t k = 0; k < m->n && passes >= 0; k++) {
            for (size_t e = 0; e < m->counts[k]; e++) {
                float want = 0;
                for (int r = 0; r < nranks; r++)
                    want += (float)rb_pattern(r, 7 * k + e);
                wrong += c->tensors[k][e] != want;
            }
        }
    }
    if (passes < 0) {
        fprintf(stderr, "mpi-model-bench: rank %d: an allreduce failed\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Reduce(times, slowest, s->iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Allreduce(&wrong, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (total > 0)
        status = 1;
    if (rank == 0) {
        uint64_t bytes = m->elems * sizeof(float);
        printf("# mpi-model-bench: %d ranks, model %s (%zu tensors, %llu bytes), f32 sum in "
               "reverse order, %s, gap %ld us, iters %d, warmup %d\n",
               nranks, m->name, m->n, (unsigned long long)bytes,
               c->fusion ? "MPI_Allreduce per fusion buffer (Horovod style)"
                         : "MPI_Iallreduce per tensor",
               c->gap_us, s->iters, s->warmup);
        if (c->fusion)
            printf("# fusion buffer %zu bytes\n", c->fusion);
        printf("# step times (ms, slowest rank):");
        for (int i = 0; i < s->iters; i++)
            printf(" %.2f", slowest[i] * 1e3);
        printf("\n# #wrong %lld\n", total);
        rb_model_print_summary(m, bytes, rb_median(slowest, s->iters) * 1e3, (double)passes,
                               passes > 0 ? (double)m->n / (double)passes : 0);
    }
out:
    free(slowest);
    free(times);
    return status;
}

int main(int argc, char **argv)
{
    rb_sweep s;
    rb_model m = {0};
    step_ctx c = {0};
    const char *spec = "resnet50";
    int rank, nranks, opt, bad = 0;
    uint64_t fusion = 0;
    char err[512] = "";

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    rb_sweep_defaults(&s);
    while ((opt = getopt(argc, argv, "m:F:g:n:w:c:h")) != -1) {
        char *end = NULL;
        switch (opt) {
        case 'm': spec = optarg; break;
        case 'F': bad = rd_units_parse_size(optarg, &fusion) != 0 || fusion > (1u << 30); break;
        case 'g':
            errno = 0;
            c.gap_us = strtol(optarg, &end, 10);
            bad =
                errno != 0 || end == optarg || *end != '\0' || c.gap_us < 0 || c.gap_us > 10000000;
            break;
        case 'h': bad = 1; break;
        default: bad = rb_sweep_option(&s, opt, optarg) != 0;
        }
        if (bad)
            break;
    }
    /* Packing waits for each fused group's allreduce here, where Horovod goes on producing
     * gradients while its background thread reduces: with gaps, this peer would be unfairly slow.
     */
    if (bad || optind < argc || (fusion && c.gap_us)) {
        if (rank == 0)
            fprintf(stderr,
                    "usage: %s [-m %s|FILE] [-F FUSION_BYTES (0: per tensor)] [-g GAP_US]\n"
                    "          [-n ITERS] [-w WARMUP] [-c 0|1]\n"
                    "  -g (a gap between gradients) only without fusion (-F 0)\n",
                    argv[0], rb_model_builtins);
        MPI_Finalize();
        return 2;
    }
    if (rb_model_load(spec, &m, err, sizeof(err)) != 0) {
        if (rank == 0)
            fprintf(stderr, "mpi-model-bench: %s\n", err);
        MPI_Finalize();
        return 2;
    }
    c.m = &m;
    c.fusion = (size_t)fusion;
    c.tensors = calloc(m.n, sizeof(*c.tensors));
    c.reqs = calloc(m.n, sizeof(*c.reqs));
    float *all = calloc(m.elems, sizeof(float));
    c.fused = fusion ? calloc(m.elems, sizeof(float)) : NULL;
    int status = 2;
    if (c.tensors == NULL || c.reqs == NULL || all == NULL || (fusion && c.fused == NULL)) {
        fprintf(stderr, "mpi-model-bench: rank %d: out of memory\n", rank);
    } else {
        for (size_t k = 0, off = 0; k < m.n; off += m.counts[k++])
            c.tensors[k] = all + off;
        status = run(&c, &s, rank, nranks);
    }
    free(c.fused);
    free(all);
    free(c.reqs);
    free(c.tensors);
    rb_model_free(&m);
    MPI_Finalize();
    return status;
}
