/* The CUDA backend behind gpu/backend.h: device arenas a client maps by file descriptor, and
 * the reductions and copies of the data path on them, through cuda_dev.c. */
#include "backend.h"

#include "ringd_build.h"

#if RINGD_HAVE_CUDA

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cuda_dev.h"
#include "nccl_transport.h"

#define RD_GATHER_DEVICES 64 /* devices with a gathering area (cuda_dev.c serves as many) */

/* Why the calling thread's last reduce or copy failed. */
static __thread char cuda_why[256];

static const char *cuda_error(void)
{
    return cuda_why;
}

/* The device of the memory at p; -1 (why set) when p is not device memory. */
static int device_of(const void *p)
{
    int dev = rd_cuda_pointer_device(p);
    if (dev < 0)
        snprintf(cuda_why, sizeof(cuda_why), "%p is not CUDA device memory", p);
    return dev;
}

/* Per device: where sources on other devices are gathered before a reduction, a chunk of each
 * at a time (allocated on first need, RD_GATHER_CHUNK per remote source at most, kept; one
 * reduction with remote sources at a time per device). */
#define RD_GATHER_CHUNK (64u << 20)
static struct {
    pthread_mutex_t lock;
    void *p;
    size_t bytes;
} gather_area[RD_GATHER_DEVICES];

static pthread_once_t gather_once = PTHREAD_ONCE_INIT;

static void gather_init(void)
{
    for (int i = 0; i < RD_GATHER_DEVICES; i++)
        pthread_mutex_init(&gather_area[i].lock, NULL);
}

/* Sources on other GPUs of the node (local ranks on different devices) are copied to dst's
 * device a chunk at a time (cuMemcpy: peer to peer where the device arena grants the reducing
 * GPU access, else through the host by the driver), and each chunk reduced there with the
 * local ones: elementwise, so chunking changes no bit of the result. */
static int cuda_reduce(rd_dtype dt, rd_redop op, void *dst, const void *const *src, int nsrc,
                       size_t count, const rd_reduce_args *args)
{
    int dev = device_of(dst), remote = 0, rc = 0;
    int where[RD_CUDA_MAX_SRC];
    const void *part[RD_CUDA_MAX_SRC];
    size_t esz = rd_dtype_size(dt);
    if (dev < 0)
        return -1;
    if (nsrc < 1 || nsrc > RD_CUDA_MAX_SRC || esz == 0) /* rd_cuda_reduce says why */
        return rd_cuda_reduce(dev, dt, op, dst, src, nsrc, count, args, cuda_why, sizeof(cuda_why));
    for (int k = 0; k < nsrc; k++) {
        where[k] = rd_cuda_pointer_device(src[k]);
        remote += where[k] != dev;
    }
    if (remote == 0)
        return rd_cuda_reduce(dev, dt, op, dst, src, nsrc, count, args, cuda_why, sizeof(cuda_why));
    if (dev >= RD_GATHER_DEVICES) {
        snprintf(cuda_why, sizeof(cuda_why), "device %d: beyond the %d ringd gathers on", dev,
                 RD_GATHER_DEVICES);
        return -1;
    }
    size_t step = RD_GATHER_CHUNK / esz, want = (size_t)remote * RD_GATHER_CHUNK;
    pthread_once(&gather_once, gather_init);
    pthread_mutex_lock(&gather_area[dev].lock);
    if (gather_area[dev].bytes < want) {
        rd_cuda_free(dev, gather_area[dev].p);
        gather_area[dev].bytes = 0;
        gather_area[dev].p = rd_cuda_alloc(dev, want, cuda_why, sizeof(cuda_why));
        rc = gather_area[dev].p == NULL ? -1 : 0;
        if (rc == 0)
            gather_area[dev].bytes = want;
    }
    for (size_t off = 0; rc == 0 && off < count; off += step) {
        size_t n = count - off < step ? count - off : step;
        for (int k = 0, slot = 0; rc == 0 && k < nsrc; k++) {
            part[k] = (const uint8_t *)src[k] + off * esz;
            if (where[k] == dev)
                continue;
            uint8_t *to = (uint8_t *)gather_area[dev].p + (size_t)slot++ * RD_GATHER_CHUNK;
            rc = rd_cuda_copy(dev, to, part[k], n * esz, cuda_why, sizeof(cuda_why));
            part[k] = to;
        }
        if (rc == 0)
            rc = rd_cuda_reduce(dev, dt, op, (uint8_t *)dst + off * esz, part, nsrc, n, args,
                                cuda_why, sizeof(cuda_why));
    }
    pthread_mutex_unlock(&gather_area[dev].lock);
    return rc;
}

/* Either side may be host memory (unified addressing): the device is the device side's. */
static int cuda_copy(void *dst, const void *src, size_t bytes)
{
    if (bytes == 0 || dst == src)
        return 0;
    int dev = rd_cuda_pointer_device(dst);
    if (dev < 0)
        dev = device_of(src);
    if (dev < 0)
        return -1;
    return rd_cuda_copy(dev, dst, src, bytes, cuda_why, sizeof(cuda_why));
}

static int cuda_bind(int device)
{
    return rd_cuda_use(device, cuda_why, sizeof(cuda_why));
}

static int cuda_share(rd_mem_kind kind, int device, uint64_t size, int *fd, rd_mem *m, char *err,
                      size_t errlen)
{
    memset(m, 0, sizeof(*m));
    if (kind != RD_MEM_DEVICE) {
        snprintf(err, errlen, "the cuda backend shares device memory only (kind %d asked)",
                 (int)kind);
        return -1;
    }
    if (size == 0 || size > (uint64_t)SIZE_MAX) {
        snprintf(err, errlen, "device memory of %llu bytes: need 1 byte or more",
                 (unsigned long long)size);
        return -1;
    }
    rd_cuda_shared *sh = rd_cuda_shared_new(device, (size_t)size, fd, err, errlen);
    if (sh == NULL)
        return -1;
    m->kind = RD_MEM_DEVICE;
    m->device = device;
    m->base = rd_cuda_shared_ptr(sh);
    m->size = rd_cuda_shared_size(sh);
    m->priv = sh;
    return 0;
}

/* Device memory a client allocated and passes by fd (PyTorch's expandable segments) is not
 * taken yet: device arenas are the daemon's own (share). */
static int cuda_import(rd_mem_kind kind, int device, int fd, uint64_t size, rd_mem *m, char *err,
                       size_t errlen)
{
    (void)device;
    (void)fd;
    (void)size;
    memset(m, 0, sizeof(*m));
    snprintf(err, errlen,
             "the cuda backend maps device arenas it shares itself; it does not import memory "
             "of kind %d",
             (int)kind);
    return -1;
}

static void cuda_release(rd_mem *m)
{
    rd_cuda_shared_free(m->priv);
    memset(m, 0, sizeof(*m));
}

/* The asynchronous forms run the work during the call (the kernel and a stream synchronise)
 * and report on the loop's next turn; the engine keeps device ops off the loop by running
 * them on its executor's threads. */
static int cuda_reduce_async(struct event_base *base, rd_dtype dt, rd_redop op, void *dst,
                             const void *const *src, int nsrc, size_t count,
                             const rd_reduce_args *args, rd_backend_done_fn done, void *arg)
{
    int rc = cuda_reduce(dt, op, dst, src, nsrc, count, args);
    return rd_backend_report(base, rc, cuda_why, done, arg);
}

static int cuda_copy_async(struct event_base *base, void *dst, const void *src, size_t bytes,
                           rd_backend_done_fn done, void *arg)
{
    int rc = cuda_copy(dst, src, bytes);
    return rd_backend_report(base, rc, cuda_why, done, arg);
}

const rd_backend *rd_backend_cuda(void)
{
    static const rd_backend cuda = {
        .name = "cuda",
        .device_memory = 1,
        .max_sources = RD_CUDA_MAX_SRC,
        .reduce = cuda_reduce,
        .copy = cuda_copy,
        .error = cuda_error,
        .bind = cuda_bind,
        .share = cuda_share,
        .import = cuda_import,
        .release = cuda_release,
        .reduce_async = cuda_reduce_async,
        .copy_async = cuda_copy_async,
        .transport = &rd_nccl_ops,
    };
    return &cuda;
}

int rd_backend_helper_main(int argc, char **argv)
{
    return rd_nccl_root_main(argc, argv);
}

#else

const rd_backend *rd_backend_cuda(void)
{
    return NULL;
}

int rd_backend_helper_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return -1;
}

#endif
