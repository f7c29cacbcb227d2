/* mpi-allreduce-bench: MPI_Allreduce (f32 sum) timed the way ringd-bench times itself, printed in
 * the same table, so bench/peers.sh can set them side by side. */
#include <errno.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

/* Number of f32 elements a row of size bytes reduces (at least one). */
static size_t count_for(uint64_t bytes)
{
    return bytes < 4 ? 1 : (size_t)(bytes / 4);
}

/* MPI_Allreduce with a count that may exceed INT_MAX, split into int-sized chunks. */
static int allreduce_f32(const float *send, float *recv, size_t count)
{
    const size_t chunk = (size_t)1 << 30;
    for (size_t off = 0; off < count; off += chunk) {
        size_t n = count - off < chunk ? count - off : chunk;
        int rc = MPI_Allreduce(send + off, recv + off, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS)
            return rc;
    }
    return MPI_SUCCESS;
}

/* One extra allreduce with known inputs; returns how many elements on this rank differ from the
 * exact sum (every value stays below 2^24, so f32 sums are exact). */
static long long check_row(float *send, float *recv, size_t count, int rank, int nranks)
{
    for (size_t i = 0; i < count; i++) {
        send[i] = (float)((rank + 1) * (int)((i % 61) + 1));
        recv[i] = -1.0f;
    }
    if (allreduce_f32(send, recv, count) != MPI_SUCCESS)
        return (long long)count;
    long long wrong = 0, tri = (long long)nranks * (nranks + 1) / 2;
    for (size_t i = 0; i < count; i++)
        wrong += recv[i] != (float)(tri * (long long)((i % 61) + 1));
    return wrong;
}

/* Runs the size sweep and prints the table on rank 0. Returns 0 when every check passed, 1 when
 * any element was wrong, 2 on a setup error. */
static int run_bench(const rb_sweep *o, int rank, int nranks)
{
    size_t half = (count_for(o->max_bytes) * sizeof(float) + 63) & ~(size_t)63;
    void *mem = NULL;
    int status = 0;
    int prc = posix_memalign(&mem, 64, 2 * half);
    double *times = malloc((size_t)o->iters * sizeof(*times));
    double *max_times = malloc((size_t)o->iters * sizeof(*max_times));
    if (prc != 0 || times == NULL || max_times == NULL) {
        fprintf(stderr, "mpi-allreduce-bench: rank %d: allocating %zu bytes: %s\n", rank, 2 * half,
                strerror(prc ? prc : ENOMEM));
        status = 2;
        goto out;
    }
    float *send = mem, *recv = (float *)((char *)mem + half);
    memset(mem, 0, 2 * half); /* first-touch faults stay out of the timings */
    if (rank == 0)
        rb_print_header("mpi-allreduce-bench", nranks, "allreduce f32 sum", o);

    for (uint64_t bytes = o->min_bytes; bytes <= o->max_bytes; bytes *= o->factor) {
        size_t count = count_for(bytes);
        for (int i = 0; i < o->warmup; i++)
            allreduce_f32(send, recv, count);
        for (int i = 0; i < o->iters; i++) {
            double t0 = rb_now_s();
            allreduce_f32(send, recv, count);
            times[i] = rb_now_s() - t0;
        }
        MPI_Reduce(times, max_times, o->iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        long long wrong = o->check ? check_row(send, recv, count, rank, nranks) : 0, total = 0;
        MPI_Allreduce(&wrong, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
        if (total > 0)
            status = 1;
        if (rank == 0)
            rb_print_row(bytes, count, "f32", "sum", rb_median(max_times, o->iters),
                         2.0 * (nranks - 1) / nranks, total);
        if (bytes > o->max_bytes / o->factor)
            break;
    }

out:
    free(max_times);
    free(times);
    free(mem);
    return status;
}

int main(int argc, char **argv)
{
    rb_sweep o;
    int rank, nranks, c, bad = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    rb_sweep_defaults(&o);
    while ((c = getopt(argc, argv, "b:e:f:n:w:c:h")) != -1) {
        if (c == 'h' || rb_sweep_option(&o, c, optarg) != 0) {
            bad = c == 'h' ? 1 : 2;
            break;
        }
    }
    if (!bad && (optind < argc || o.min_bytes > o.max_bytes))
        bad = 2;
    if (bad) {
        if (rank == 0)
            fprintf(bad == 1 ? stdout : stderr,
                    "usage: %s [-b MIN] [-e MAX] [-f FACTOR] "
                    "[-n ITERS] [-w WARMUP] [-c 0|1]\n%s",
                    argv[0], rb_sweep_usage);
        MPI_Finalize();
        return bad == 1 ? 0 : 2;
    }
    int status = run_bench(&o, rank, nranks);
    MPI_Finalize();
    return status;
}
