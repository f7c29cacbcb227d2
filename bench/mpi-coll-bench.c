/* mpi-coll-bench: MPI_Reduce_scatter_block (f32 sum), MPI_Allgatherv (f32, equal counts) or
 * MPI_Alltoall (f32) timed
 * the way ringd-bench times itself, sizes the whole op's as nccl-tests gives them and as
 * ringd-bench --op reducescatter|allgatherv does, printed in the same table, so
 * bench/coll-peers.sh can set them side by side. */
#include <errno.h>
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

enum { OP_REDUCESCATTER, OP_ALLGATHERV, OP_ALLTOALL };

/* Rank r's element i: exact in f32 once summed over a few ranks. */
static float value(int r, size_t i)
{
    return (float)((r + 1) * (int)((i % 61) + 1));
}

/* One op of count elements per rank. */
static int run_op(int op, const float *send, float *recv, size_t count, int nranks, int *counts,
                  int *displs)
{
    if (op == OP_REDUCESCATTER)
        return MPI_Reduce_scatter_block(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (op == OP_ALLTOALL)
        return MPI_Alltoall(send, (int)count, MPI_FLOAT, recv, (int)count, MPI_FLOAT,
                            MPI_COMM_WORLD);
    for (int r = 0; r < nranks; r++) {
        counts[r] = (int)count;
        displs[r] = (int)count * r;
    }
    return MPI_Allgatherv(send, (int)count, MPI_FLOAT, recv, counts, displs, MPI_FLOAT,
                          MPI_COMM_WORLD);
}

/* One extra op on known inputs; returns how many elements of this rank's result are wrong. */
static long long check_row(int op, float *send, float *recv, size_t count, int rank, int nranks,
                           int *counts, int *displs)
{
    size_t in = op == OP_ALLGATHERV ? count : count * (size_t)nranks;
    size_t out = op == OP_REDUCESCATTER ? count : count * (size_t)nranks;
    for (size_t i = 0; i < in; i++)
        send[i] = value(rank, i);
    for (size_t i = 0; i < out; i++)
        recv[i] = -1.0f;
    if (run_op(op, send, recv, count, nranks, counts, displs) != MPI_SUCCESS)
        return (long long)out;
    long long wrong = 0;
    for (size_t i = 0; i < out; i++) {
        float want = 0;
        if (op == OP_REDUCESCATTER)
            for (int r = 0; r < nranks; r++)
                want += value(r, (size_t)rank * count + i);
        else if (op == OP_ALLTOALL) /* rank r's block for this rank */
            want = value((int)(i / count), (size_t)rank * count + i % count);
        else
            want = value((int)(i / count), i % count);
        wrong += recv[i] != want;
    }
    return wrong;
}

/* Runs the sweep and prints the table on rank 0. Returns 0 when every check passed, 1 when any
 * element was wrong, 2 on a setup error. */
static int run_bench(int op, const rb_sweep *o, int rank, int nranks)
{
    size_t most = o->max_bytes / sizeof(float) / (size_t)nranks;
    most = most ? most : 1;
    size_t big = most * (size_t)nranks * sizeof(float);
    float *send = NULL, *recv = NULL;
    int status = 0;
    double *times = malloc((size_t)o->iters * sizeof(*times));
    double *max_times = malloc((size_t)o->iters * sizeof(*max_times));
    int *counts = malloc((size_t)nranks * sizeof(int)),
        *displs = malloc((size_t)nranks * sizeof(int));
    if (most > INT_MAX || posix_memalign((void **)&send, 64, big) != 0 ||
        posix_memalign((void **)&recv, 64, big) != 0 || times == NULL || max_times == NULL ||
        counts == NULL || displs == NULL) {
        fprintf(stderr, "mpi-coll-bench: rank %d: allocating 2 x %zu bytes failed\n", rank, big);
        status = 2;
        goto out;
    }
    memset(send, 0, big); /* first-touch faults stay out of the timings */
    memset(recv, 0, big);
    if (rank == 0)
        rb_print_header("mpi-coll-bench", nranks,
                        op == OP_REDUCESCATTER ? "reducescatter f32 sum"
                        : op == OP_ALLTOALL    ? "alltoall f32"
                                               : "allgatherv f32",
                        o);
    for (uint64_t bytes = o->min_bytes; bytes <= o->max_bytes; bytes *= o->factor) {
        size_t count = bytes / sizeof(float) / (size_t)nranks;
        count = count ? count : 1;
        for (int i = 0; i < o->warmup; i++)
            run_op(op, send, recv, count, nranks, counts, displs);
        for (int i = 0; i < o->iters; i++) {
            double t0 = rb_now_s();
            run_op(op, send, recv, count, nranks, counts, displs);
            times[i] = rb_now_s() - t0;
        }
        MPI_Reduce(times, max_times, o->iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        long long wrong =
            o->check ? check_row(op, send, recv, count, rank, nranks, counts, displs) : 0;
        long long total = 0;
        MPI_Allreduce(&wrong, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
        if (total > 0)
            status = 1;
        if (rank == 0)
            rb_print_row(count * (size_t)nranks * sizeof(float), count * (size_t)nranks, "f32",
                         op == OP_REDUCESCATTER ? "sum" : "none", rb_median(max_times, o->iters),
                         (double)(nranks - 1) / nranks, total);
        if (bytes > o->max_bytes / o->factor)
            break;
    }

out:
    free(displs);
    free(counts);
    free(max_times);
    free(times);
    free(recv);
    free(send);
    return status;
}

int main(int argc, char **argv)
{
    rb_sweep o;
    int rank, nranks, c, bad = 0, op = OP_REDUCESCATTER;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    rb_sweep_defaults(&o);
    while ((c = getopt(argc, argv, "o:b:e:f:n:w:c:h")) != -1) {
        if (c == 'o') {
            if (strcmp(optarg, "reducescatter") == 0)
                op = OP_REDUCESCATTER;
            else if (strcmp(optarg, "allgatherv") == 0)
                op = OP_ALLGATHERV;
            else if (strcmp(optarg, "alltoall") == 0)
                op = OP_ALLTOALL;
            else
                bad = 2;
        } else if (c == 'h' || rb_sweep_option(&o, c, optarg) != 0) {
            bad = c == 'h' ? 1 : 2;
        }
        if (bad)
            break;
    }
    if (!bad && (optind < argc || o.min_bytes > o.max_bytes))
        bad = 2;
    if (bad) {
        if (rank == 0)
            fprintf(
                bad == 1 ? stdout : stderr,
                "usage: %s [-o reducescatter|allgatherv|alltoall] [-b MIN] [-e MAX] [-f FACTOR] "
                "[-n ITERS] [-w WARMUP] [-c 0|1]\n%s",
                argv[0], rb_sweep_usage);
        MPI_Finalize();
        return bad == 1 ? 0 : 2;
    }
    int status = run_bench(op, &o, rank, nranks);
    MPI_Finalize();
    return status;
}
