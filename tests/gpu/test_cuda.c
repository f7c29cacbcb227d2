/* On a device: the CUDA kernels against the CPU kernels, bit for bit (every dtype, op, scale
 * and divisor, 1 to 16 sources, counts from 1 to 2^26 with odd ones between); device memory
 * shared with another process by file descriptor; libringd's device-pointer check. Without a
 * device or driver it prints one line saying why and exits 77 (meson's skip). */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda_dev.h"
#include "cuda_ptr.h"
#include "kernel_cases.h"

/* rd_cuda_reduce on copies of the host buffers in device memory. */
static int run_on_device(void *ctx, rd_dtype dt, rd_redop op, void *dst, const void *const *src,
                         int nsrc, size_t count, const rd_reduce_args *args, char *why,
                         size_t whylen)
{
    size_t bytes = count * rd_dtype_size(dt);
    void *dsrc[RD_CUDA_MAX_SRC] = {0}, *ddst = NULL;
    int k, rc = -1;

    (void)ctx;
    for (k = 0; k < nsrc; k++) {
        dsrc[k] = rd_cuda_alloc(0, bytes, why, whylen);
        if (dsrc[k] == NULL || rd_cuda_copy(0, dsrc[k], src[k], bytes, why, whylen) != 0)
            goto out;
    }
    ddst = rd_cuda_alloc(0, bytes, why, whylen);
    if (ddst != NULL &&
        rd_cuda_reduce(0, dt, op, ddst, (const void *const *)dsrc, nsrc, count, args, why,
                       whylen) == 0 &&
        rd_cuda_copy(0, dst, ddst, bytes, why, whylen) == 0)
        rc = 0;
out:
    for (k = 0; k < nsrc; k++)
        rd_cuda_free(0, dsrc[k]);
    rd_cuda_free(0, ddst);
    return rc;
}

extern char **environ;

/* The byte at i of the pattern the parent writes; the child writes its complement back. */
static unsigned char pattern(size_t i)
{
    return (unsigned char)(i * 7 + 1);
}

/* In a process of its own (no CUDA state inherited): maps the device memory behind fd, checks
 * the parent's pattern and writes its complement. Exit status 0 when all went well. */
static int child(int fd, size_t size)
{
    char why[256] = "out of memory";
    unsigned char *host = malloc(size);
    rd_cuda_shared *m;
    size_t i;

    if (host == NULL || rd_cuda_load(why, sizeof(why)) <= 0 ||
        (m = rd_cuda_shared_import(0, fd, size, why, sizeof(why))) == NULL ||
        (size = rd_cuda_shared_size(m)) == 0 || (host = realloc(host, size)) == NULL ||
        rd_cuda_copy(0, host, rd_cuda_shared_ptr(m), size, why, sizeof(why)) != 0) {
        printf("FAIL: child: %s\n", why);
        return 1;
    }
    if (rd_cuda_ptr_is_device(rd_cuda_shared_ptr(m)) != 1) {
        printf("FAIL: child: the mapped device memory is not told from host memory\n");
        return 1;
    }
    for (i = 0; i < size; i++) {
        if (host[i] != pattern(i)) {
            printf("FAIL: child: byte %zu of the shared memory is %u, want %u\n", i, host[i],
                   pattern(i));
            return 1;
        }
        host[i] = (unsigned char)~pattern(i);
    }
    if (rd_cuda_copy(0, rd_cuda_shared_ptr(m), host, size, why, sizeof(why)) != 0) {
        printf("FAIL: child: %s\n", why);
        return 1;
    }
    rd_cuda_shared_free(m);
    free(host);
    return 0;
}

/* Device memory exported as a file descriptor, mapped by another process (started anew, as a
 * training process is, from this program: /proc/self/exe, whatever argv[0] says): each sees
 * what the other wrote. Returns 0 when it does. */
static int shared_memory_crosses_processes(void)
{
    char why[256] = "", fds[16], sizes[32];
    int fd = -1, status = 0, rc;
    pid_t pid;
    size_t asked = (3u << 20) + 5;
    rd_cuda_shared *m = rd_cuda_shared_new(0, asked, &fd, why, sizeof(why));
    if (m == NULL) {
        printf("FAIL: shared device memory: %s\n", why);
        return 1;
    }
    size_t size = rd_cuda_shared_size(m), i;
    unsigned char *host = malloc(size);
    if (host == NULL) {
        printf("FAIL: shared device memory: out of memory\n");
        return 1;
    }
    for (i = 0; i < size; i++)
        host[i] = pattern(i);
    snprintf(fds, sizeof(fds), "%d", fd);
    snprintf(sizes, sizeof(sizes), "%zu", asked); /* the child rounds it up alike */
    char *argv[] = {"test_cuda", "--child", fds, sizes, NULL};
    if (rd_cuda_copy(0, rd_cuda_shared_ptr(m), host, size, why, sizeof(why)) != 0) {
        printf("FAIL: shared device memory: writing the pattern: %s\n", why);
        return 1;
    }
    if (fcntl(fd, F_SETFD, 0) != 0) {
        printf("FAIL: shared device memory: fcntl: %s\n", strerror(errno));
        return 1;
    }
    if ((rc = posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, environ)) != 0) {
        printf("FAIL: shared device memory: starting the child: %s\n", strerror(rc));
        return 1;
    }
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        printf("FAIL: shared device memory: the child ended with status %d\n", status);
        return 1;
    }
    if (rd_cuda_copy(0, host, rd_cuda_shared_ptr(m), size, why, sizeof(why)) != 0) {
        printf("FAIL: shared device memory: reading the child's write: %s\n", why);
        return 1;
    }
    for (i = 0; i < size; i++) {
        if (host[i] != (unsigned char)~pattern(i)) {
            printf("FAIL: byte %zu: the child's write is not seen\n", i);
            return 1;
        }
    }
    close(fd);
    rd_cuda_shared_free(m);
    free(host);
    printf("shared device memory: %zu bytes mapped by two processes\n", size);
    return 0;
}

int main(int argc, char **argv)
{
    static const size_t counts[] = {1, 3, 255, 256, 257, 4099, 65537, 1000003, (size_t)1 << 22};
    static const size_t big[] = {(size_t)1 << 26};
    char why[256], name[128], uuid[48];
    uint64_t mem = 0;
    long ran = 0, ran_big = 0, bad;
    int n;

    if (argc == 4 && strcmp(argv[1], "--child") == 0)
        return child(atoi(argv[2]), (size_t)strtoull(argv[3], NULL, 10));
    n = rd_cuda_load(why, sizeof(why));
    if (n == 0) {
        printf("SKIP tests/gpu/test_cuda: no CUDA device here (%s)\n", why);
        return 77;
    }
    if (n < 0) { /* a driver that fails is a failure, not a machine without a GPU */
        printf("FAIL: the CUDA driver: %s\n", why);
        return 1;
    }
    if (rd_cuda_device_info(0, name, sizeof(name), uuid, sizeof(uuid), &mem, why, sizeof(why)) !=
        0) {
        printf("FAIL: device 0: %s\n", why);
        return 1;
    }
    printf("device 0 of %d: %s (%s), %.1f GiB\n", n, name, uuid, (double)mem / (1u << 30));
    if ((strncmp(uuid, "GPU-", 4) != 0 && strncmp(uuid, "MIG-", 4) != 0) || strlen(uuid) != 40) {
        printf("FAIL: device 0's UUID '%s' is not GPU- (or MIG-) and 36 characters\n", uuid);
        return 1;
    }
    { /* libringd's guard: device memory is told from host memory */
        void *dp = rd_cuda_alloc(0, 4096, why, sizeof(why)), *hp = malloc(4096);
        int ok = dp != NULL && rd_cuda_ptr_is_device(dp) == 1 && rd_cuda_ptr_is_device(hp) == 0;
        rd_cuda_free(0, dp);
        free(hp);
        if (!ok) {
            printf("FAIL: rd_cuda_ptr_is_device does not tell device from host memory\n");
            return 1;
        }
    }
    if (shared_memory_crosses_processes() != 0)
        return 1;
    bad = rd_check_kernels(run_on_device, NULL, counts, 9, RD_CUDA_MAX_SRC, ~0u, &ran);
    /* 2^26 elements: the dtypes of the performance targets, 1 and 2 sources */
    bad += rd_check_kernels(run_on_device, NULL, big, 1, 2, 1u << RD_DT_F32 | 1u << RD_DT_BF16,
                            &ran_big);
    printf("CUDA kernels on %s: %ld cases, %ld differ from the CPU kernels\n", name, ran + ran_big,
           bad);
    return bad ? 1 : 0;
}
