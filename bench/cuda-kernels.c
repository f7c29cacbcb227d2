/* cuda-kernels: the CUDA reduction kernels' effective bandwidth next to the same device's own
 * device-to-device copy, in one run. Effective bytes: a reduction of k sources reads k buffers
 * and writes one, (k + 1) x bytes; a copy reads one and writes one, 2 x bytes. The target
 * (issue 13): f32 and bf16 sum of 2 sources at 256 MiB, at least 0.80 of the copy's rate.
 *
 *   cuda-kernels [--bytes N] [--iters N] [--device D]
 *
 * Each timing is the median of --iters calls, each launched and waited for (as the daemon
 * does); the copy is timed the same way, so the ratio compares like with like. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "cuda_dev.h"

/* Median seconds of iters runs of reduce (nsrc >= 1) or, for nsrc 0, of the copy src[0] to dst. */
static double median_time(int dev, rd_dtype dt, void *dst, void *const *src, int nsrc, size_t bytes,
                          int iters, char *why, size_t whylen)
{
    double *t = calloc((size_t)iters, sizeof(*t)), m;
    size_t count = bytes / rd_dtype_size(dt);
    if (t == NULL)
        return -1;
    for (int i = -2; i < iters; i++) { /* two warm-up runs */
        double t0 = rb_now_s();
        int rc = nsrc == 0 ? rd_cuda_copy(dev, dst, src[0], bytes, why, whylen)
                           : rd_cuda_reduce(dev, dt, RD_OP_SUM, dst, (const void *const *)src, nsrc,
                                            count, NULL, why, whylen);
        if (rc != 0) {
            free(t);
            return -1;
        }
        if (i >= 0)
            t[i] = rb_now_s() - t0;
    }
    m = rb_median(t, iters);
    free(t);
    return m;
}

int main(int argc, char **argv)
{
    size_t bytes = (size_t)256 << 20;
    int iters = 20, dev = 0, n, nsrc_max = 8;
    char why[256], name[128], uuid[48];
    uint64_t mem = 0;
    static const rd_dtype dts[] = {RD_DT_F32, RD_DT_BF16, RD_DT_F16, RD_DT_F64, RD_DT_I32};
    static const int srcs[] = {2, 4, 8};
    void *buf[9] = {0};

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--bytes") == 0 && i + 1 < argc)
            bytes = strtoull(argv[++i], NULL, 0);
        else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc)
            iters = atoi(argv[++i]);
        else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc)
            dev = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: cuda-kernels [--bytes N] [--iters N] [--device D]\n");
            return 2;
        }
    }
    if (bytes < 64 || iters < 1) {
        fprintf(stderr, "cuda-kernels: need --bytes >= 64 and --iters >= 1\n");
        return 2;
    }
    bytes &= ~(size_t)7; /* whole elements of every dtype */
    n = rd_cuda_load(why, sizeof(why));
    if (n <= 0 || rd_cuda_device_info(dev, name, sizeof(name), uuid, sizeof(uuid), &mem, why,
                                      sizeof(why)) != 0) {
        fprintf(stderr, "cuda-kernels: %s\n", why);
        return 2;
    }
    /* bytes of 0x3c: moderate, normal values in every floating dtype (no NaN, no subnormal) */
    unsigned char *host = malloc(bytes);
    if (host == NULL) {
        fprintf(stderr, "cuda-kernels: out of memory\n");
        return 1;
    }
    memset(host, 0x3c, bytes);
    for (int i = 0; i <= nsrc_max; i++) {
        if ((buf[i] = rd_cuda_alloc(dev, bytes, why, sizeof(why))) == NULL ||
            rd_cuda_copy(dev, buf[i], host, bytes, why, sizeof(why)) != 0) {
            fprintf(stderr, "cuda-kernels: %zu bytes on device %d: %s\n", bytes, dev, why);
            return 1;
        }
    }
    free(host);
    double copy = median_time(dev, RD_DT_U8, buf[0], &buf[1], 0, bytes, iters, why, sizeof(why));
    if (copy <= 0) {
        fprintf(stderr, "cuda-kernels: copy: %s\n", why);
        return 1;
    }
    double copy_gbs = 2.0 * (double)bytes / copy / 1e9;
    printf("# device %d: %s, %.1f GiB; %zu bytes per buffer, median of %d\n", dev, name,
           (double)mem / (1u << 30), bytes, iters);
    printf("# copy (device to device): %.1f us, %.1f GB/s\n", copy * 1e6, copy_gbs);
    printf("# %-5s %4s %10s %10s %6s\n", "dtype", "srcs", "time(us)", "eff GB/s", "ratio");
    for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); d++) {
        for (size_t k = 0; k < sizeof(srcs) / sizeof(srcs[0]); k++) {
            double t =
                median_time(dev, dts[d], buf[0], &buf[1], srcs[k], bytes, iters, why, sizeof(why));
            if (t <= 0) {
                fprintf(stderr, "cuda-kernels: %s: %s\n", rd_dtype_name(dts[d]), why);
                return 1;
            }
            double gbs = (double)(srcs[k] + 1) * (double)bytes / t / 1e9;
            printf("  %-5s %4d %10.1f %10.1f %6.2f\n", rd_dtype_name(dts[d]), srcs[k], t * 1e6, gbs,
                   gbs / copy_gbs);
            if (srcs[k] == 2 && (dts[d] == RD_DT_F32 || dts[d] == RD_DT_BF16)) {
                printf("# target %s sum of 2 at %zu bytes: %.2f of the copy (>= 0.80): %s\n",
                       rd_dtype_name(dts[d]), bytes, gbs / copy_gbs,
                       gbs / copy_gbs >= 0.80 ? "met" : "NOT met");
            }
        }
    }
    for (int i = 0; i <= nsrc_max; i++)
        rd_cuda_free(dev, buf[i]);
    return 0;
}
