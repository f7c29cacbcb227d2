/* The CUDA driver loaded with dlopen, and the reduction kernels of cuda_kernels.cu launched on
 * it from the fatbin embedded at build time (rd_cuda_fatbin). Only the driver API: no CUDA
 * runtime, so nothing CUDA is linked and a machine without a driver loses the GPU path only. */
#include "cuda_dev.h"

#include <cuda.h> /* types and constants only: every function comes through dlsym */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dl.h"
#include "gpu_util.h"

extern const unsigned char rd_cuda_fatbin[];
extern const size_t rd_cuda_fatbin_len;

#define RD_CUDA_MAX_DEVICES 64
#define RD_CUDA_THREADS 256 /* threads per block */

/* The driver entry points ringd uses, by the symbol names libcuda exports. */
static struct {
    CUresult (*init)(unsigned);
    CUresult (*driver_version)(int *);
    CUresult (*error_name)(CUresult, const char **);
    CUresult (*device_count)(int *);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*device_name)(char *, int, CUdevice);
    CUresult (*device_total_mem)(size_t *, CUdevice);
    CUresult (*device_uuid)(CUuuid *, CUdevice);
    CUresult (*device_uuid_v1)(CUuuid *, CUdevice); /* optional: the parent GPU's under MIG */
    CUresult (*device_attribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*primary_ctx_retain)(CUcontext *, CUdevice);
    CUresult (*primary_ctx_release)(CUdevice);
    CUresult (*ctx_set_current)(CUcontext);
    CUresult (*ctx_get_current)(CUcontext *);
    CUresult (*can_access_peer)(int *, CUdevice, CUdevice);
    CUresult (*event_create)(CUevent *, unsigned);
    CUresult (*event_record)(CUevent, CUstream);
    CUresult (*event_query)(CUevent);
    CUresult (*event_destroy)(CUevent);
    CUresult (*module_load_data)(CUmodule *, const void *);
    CUresult (*module_unload)(CUmodule);
    CUresult (*module_function)(CUfunction *, CUmodule, const char *);
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                       unsigned, CUstream, void **, void **);
    CUresult (*stream_create)(CUstream *, unsigned);
    CUresult (*stream_sync)(CUstream);
    CUresult (*mem_alloc)(CUdeviceptr *, size_t);
    CUresult (*mem_free)(CUdeviceptr);
    CUresult (*memcpy_async)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*mem_granularity)(size_t *, const CUmemAllocationProp *,
                                CUmemAllocationGranularity_flags);
    CUresult (*mem_create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                           unsigned long long);
    CUresult (*mem_export)(void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                           unsigned long long);
    CUresult (*mem_import)(CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType);
    CUresult (*mem_release)(CUmemGenericAllocationHandle);
    CUresult (*mem_reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*mem_address_free)(CUdeviceptr, size_t);
    CUresult (*mem_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                        unsigned long long);
    CUresult (*mem_unmap)(CUdeviceptr, size_t);
    CUresult (*mem_set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
    CUresult (*pointer_attribute)(void *, CUpointer_attribute, CUdeviceptr);
    CUresult (*stream_destroy)(CUstream);
    CUresult (*memset_d32_async)(CUdeviceptr, unsigned int, size_t, CUstream);
} drv;

static const rd_dl_symbol drv_symbols[] = {
#define SYM(field, name)                                                                           \
    {                                                                                              \
        name, offsetof(__typeof__(drv), field)                                                     \
    }
    SYM(init, "cuInit"),
    SYM(driver_version, "cuDriverGetVersion"),
    SYM(error_name, "cuGetErrorName"),
    SYM(device_count, "cuDeviceGetCount"),
    SYM(device_get, "cuDeviceGet"),
    SYM(device_name, "cuDeviceGetName"),
    SYM(device_total_mem, "cuDeviceTotalMem_v2"),
    SYM(device_uuid, "cuDeviceGetUuid_v2"),
    SYM(device_attribute, "cuDeviceGetAttribute"),
    SYM(primary_ctx_retain, "cuDevicePrimaryCtxRetain"),
    SYM(primary_ctx_release, "cuDevicePrimaryCtxRelease_v2"),
    SYM(ctx_set_current, "cuCtxSetCurrent"),
    SYM(ctx_get_current, "cuCtxGetCurrent"),
    SYM(can_access_peer, "cuDeviceCanAccessPeer"),
    SYM(event_create, "cuEventCreate"),
    SYM(event_record, "cuEventRecord"),
    SYM(event_query, "cuEventQuery"),
    SYM(event_destroy, "cuEventDestroy_v2"),
    SYM(module_load_data, "cuModuleLoadData"),
    SYM(module_unload, "cuModuleUnload"),
    SYM(module_function, "cuModuleGetFunction"),
    SYM(launch, "cuLaunchKernel"),
    SYM(stream_create, "cuStreamCreate"),
    SYM(stream_sync, "cuStreamSynchronize"),
    SYM(mem_alloc, "cuMemAlloc_v2"),
    SYM(mem_free, "cuMemFree_v2"),
    SYM(memcpy_async, "cuMemcpyAsync"),
    SYM(mem_granularity, "cuMemGetAllocationGranularity"),
    SYM(mem_create, "cuMemCreate"),
    SYM(mem_export, "cuMemExportToShareableHandle"),
    SYM(mem_import, "cuMemImportFromShareableHandle"),
    SYM(mem_release, "cuMemRelease"),
    SYM(mem_reserve, "cuMemAddressReserve"),
    SYM(mem_address_free, "cuMemAddressFree"),
    SYM(mem_map, "cuMemMap"),
    SYM(mem_unmap, "cuMemUnmap"),
    SYM(mem_set_access, "cuMemSetAccess"),
    SYM(pointer_attribute, "cuPointerGetAttribute"),
    SYM(stream_destroy, "cuStreamDestroy_v2"),
    SYM(memset_d32_async, "cuMemsetD32Async"),
#undef SYM
};

/* One device, set up on first use: its primary context, the kernels, a stream. A setup that
 * failed is not tried again: its reason is kept. */
typedef struct {
    pthread_mutex_t lock; /* held while it is set up (a PTX JIT may take seconds) */
    int ready;            /* 1: set up; -1: setup failed, why in failure */
    char failure[256];
    CUdevice dev;
    CUcontext ctx;
    CUstream stream;
    CUfunction reduce[RD_DT_COUNT];
    int kernels_ready; /* 1: reduce[] loaded; -1: loading failed, why in kernels_failure */
    char kernels_failure[256];
    int sms;
} cuda_device;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int ndevices; /* -1: a driver is there but failed */
static char load_why[256];
static cuda_device devices[RD_CUDA_MAX_DEVICES];

static const char *const kernel_names[RD_DT_COUNT] = {
    "rd_cuda_reduce_f32", "rd_cuda_reduce_f64", "rd_cuda_reduce_f16", "rd_cuda_reduce_bf16",
    "rd_cuda_reduce_i32", "rd_cuda_reduce_i64", "rd_cuda_reduce_u8"};

/* "cuInit: CUDA_ERROR_NO_DEVICE" for a failed call; 0 for CUDA_SUCCESS. */
static int failed(CUresult rc, const char *call, char *why, size_t whylen)
{
    const char *name = NULL;
    if (rc == CUDA_SUCCESS)
        return 0;
    if (drv.error_name == NULL || drv.error_name(rc, &name) != CUDA_SUCCESS || name == NULL)
        name = "unknown CUDA error";
    rd_gpu_say(why, whylen, "%s: %s (%d)", call, name, (int)rc);
    return -1;
}

static void load(void)
{
    void *lib;
    int version = 0;
    size_t i;

    for (i = 0; i < RD_CUDA_MAX_DEVICES; i++)
        pthread_mutex_init(&devices[i].lock, NULL);
    const char *missing;
    char why[256];
    lib = rd_dl_open("libcuda.so.1", drv_symbols, sizeof(drv_symbols) / sizeof(drv_symbols[0]),
                     &drv, sizeof(drv), &missing, why, sizeof(why));
    if (lib == NULL && missing == NULL) {
        rd_gpu_say(load_why, sizeof(load_why), "no CUDA driver: %s", why);
        return;
    }
    if (lib == NULL) {
        rd_gpu_say(load_why, sizeof(load_why), "the CUDA driver lacks %s: too old", missing);
        ndevices = -1;
        return;
    }
    { /* optional entry points, absent from some drivers */
        void *fn = dlsym(lib, "cuDeviceGetUuid");
        memcpy(&drv.device_uuid_v1, &fn, sizeof(fn));
    }
    CUresult rc = drv.init(0);
    if (rc == CUDA_ERROR_NO_DEVICE) {
        rd_gpu_say(load_why, sizeof(load_why), "the CUDA driver sees no device");
        return;
    }
    if (rc == CUDA_ERROR_STUB_LIBRARY) { /* the toolkit's stub, found before a real driver */
        rd_gpu_say(load_why, sizeof(load_why),
                   "no CUDA driver: libcuda.so.1 is the toolkit's stub");
        return;
    }
    if (failed(rc, "cuInit", load_why, sizeof(load_why)) ||
        failed(drv.driver_version(&version), "cuDriverGetVersion", load_why, sizeof(load_why)) ||
        failed(drv.device_count(&ndevices), "cuDeviceGetCount", load_why, sizeof(load_why))) {
        ndevices = -1;
        return;
    }
    if (ndevices <= 0) {
        ndevices = 0;
        rd_gpu_say(load_why, sizeof(load_why), "the CUDA driver (%d) sees no device", version);
    } else if (ndevices > RD_CUDA_MAX_DEVICES) {
        ndevices = RD_CUDA_MAX_DEVICES;
    }
}

int rd_cuda_load(char *why, size_t whylen)
{
    pthread_once(&load_once, load);
    if (ndevices <= 0)
        rd_gpu_say(why, whylen, "%s", load_why);
    return ndevices;
}

/* Sets d up (lock held): its primary context, the kernels from the fatbin, a stream. Returns 0,
 * or -1 with why set, having released what it took. */
static int setup(cuda_device *d, int dev, char *why, size_t whylen)
{
    CUcontext before = NULL;

    drv.ctx_get_current(&before);
    if (failed(drv.device_get(&d->dev, dev), "cuDeviceGet", why, whylen) ||
        failed(drv.primary_ctx_retain(&d->ctx, d->dev), "cuDevicePrimaryCtxRetain", why, whylen))
        return -1;
    if (failed(drv.ctx_set_current(d->ctx), "cuCtxSetCurrent", why, whylen) ||
        failed(drv.device_attribute(&d->sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d->dev),
               "cuDeviceGetAttribute", why, whylen) ||
        /* non-blocking: a training process's legacy default stream neither waits for
         * libringd's copies nor holds them up (the library syncs the caller's stream first) */
        failed(drv.stream_create(&d->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate", why,
               whylen)) {
        drv.ctx_set_current(before); /* the caller's context, as it was */
        drv.primary_ctx_release(d->dev);
        return -1;
    }
    return 0;
}

/* Loads ringd's kernels on d (current) from the fatbin, once: only reductions need them, so a
 * process that only copies (libringd in a training process) never loads them, and a GPU or
 * driver that cannot run them fails reductions alone. Returns 0, or -1 with why set. */
static int kernels(cuda_device *d, char *why, size_t whylen)
{
    CUmodule module = NULL;
    int i;

    pthread_mutex_lock(&d->lock);
    if (d->kernels_ready == 0) {
        d->kernels_ready = 1;
        if (failed(drv.module_load_data(&module, rd_cuda_fatbin),
                   "cuModuleLoadData (ringd's kernels: compute capability 8.0 and 9.0, PTX 9.0 "
                   "for later GPUs; a CUDA 13 driver, r580 or newer)",
                   d->kernels_failure, sizeof(d->kernels_failure)))
            d->kernels_ready = -1;
        for (i = 0; d->kernels_ready > 0 && i < RD_DT_COUNT; i++)
            if (failed(drv.module_function(&d->reduce[i], module, kernel_names[i]), kernel_names[i],
                       d->kernels_failure, sizeof(d->kernels_failure)))
                d->kernels_ready = -1;
        if (d->kernels_ready < 0 && module != NULL)
            drv.module_unload(module);
    }
    pthread_mutex_unlock(&d->lock);
    if (d->kernels_ready < 0) {
        rd_gpu_say(why, whylen, "%s", d->kernels_failure);
        return -1;
    }
    return 0;
}

/* Device dev, set up and current on this thread; NULL with why set. */
static cuda_device *device(int dev, char *why, size_t whylen)
{
    cuda_device *d;
    int n = rd_cuda_load(why, whylen);

    if (n <= 0)
        return NULL;
    if (dev < 0 || dev >= n) {
        rd_gpu_say(why, whylen, "CUDA device %d: there are %d", dev, n);
        return NULL;
    }
    d = &devices[dev];
    pthread_mutex_lock(&d->lock);
    if (d->ready == 0)
        d->ready = setup(d, dev, d->failure, sizeof(d->failure)) == 0 ? 1 : -1;
    pthread_mutex_unlock(&d->lock);
    if (d->ready < 0) {
        rd_gpu_say(why, whylen, "CUDA device %d: %s", dev, d->failure);
        return NULL;
    }
    if (failed(drv.ctx_set_current(d->ctx), "cuCtxSetCurrent", why, whylen))
        return NULL;
    return d;
}

int rd_cuda_check(int dev, char *why, size_t whylen)
{
    CUdevice d;
    int major = 0, minor = 0, version = 0;

    if (rd_cuda_load(why, whylen) <= 0)
        return -1;
    if (failed(drv.device_get(&d, dev), "cuDeviceGet", why, whylen) ||
        failed(drv.device_attribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d),
               "cuDeviceGetAttribute", why, whylen) ||
        failed(drv.device_attribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d),
               "cuDeviceGetAttribute", why, whylen) ||
        failed(drv.driver_version(&version), "cuDriverGetVersion", why, whylen))
        return -1;
    if (major < 8) {
        rd_gpu_say(why, whylen,
                   "CUDA device %d has compute capability %d.%d: ringd's kernels need 8.0 "
                   "or newer",
                   dev, major, minor);
        return -1;
    }
    if (version < 13000) {
        rd_gpu_say(why, whylen,
                   "the CUDA driver supports CUDA %d.%d: ringd's kernels need 13.0 (driver "
                   "r580 or newer)",
                   version / 1000, version % 1000 / 10);
        return -1;
    }
    return 0;
}

int rd_cuda_device_info(int dev, char *name, size_t namelen, char *uuid, size_t uuidlen,
                        uint64_t *total_bytes, char *why, size_t whylen)
{
    CUdevice d;
    CUuuid u;
    size_t total = 0;

    if (rd_cuda_load(why, whylen) <= 0)
        return -1;
    if (dev < 0 || dev >= ndevices) {
        rd_gpu_say(why, whylen, "CUDA device %d: there are %d", dev, ndevices);
        return -1;
    }
    if (failed(drv.device_get(&d, dev), "cuDeviceGet", why, whylen) ||
        failed(drv.device_name(name, (int)namelen, d), "cuDeviceGetName", why, whylen) ||
        failed(drv.device_uuid(&u, d), "cuDeviceGetUuid", why, whylen) ||
        failed(drv.device_total_mem(&total, d), "cuDeviceTotalMem", why, whylen))
        return -1;
    /* A MIG instance has a UUID of its own, which nvidia-smi prints as MIG-...; the first
     * cuDeviceGetUuid gives the parent GPU's, so the two differ exactly on MIG instances. */
    CUuuid parent;
    const char *kind = "GPU";
    if (drv.device_uuid_v1 != NULL && drv.device_uuid_v1(&parent, d) == CUDA_SUCCESS &&
        memcmp(parent.bytes, u.bytes, sizeof(u.bytes)) != 0)
        kind = "MIG";
    const unsigned char *b = (const unsigned char *)u.bytes;
    snprintf(uuid, uuidlen,
             "%s-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", kind, b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
    *total_bytes = total;
    return 0;
}

/* The kernels' parameter block: the sources, by value (cuda_kernels.cu's rd_cuda_srcs). */
typedef struct {
    const void *p[RD_CUDA_MAX_SRC];
} cuda_srcs;

int rd_cuda_reduce(int dev, rd_dtype dt, rd_redop op, void *dst, const void *const *src, int nsrc,
                   size_t count, const rd_reduce_args *args, char *why, size_t whylen)
{
    static const rd_reduce_args defaults = RD_REDUCE_ARGS_INIT;
    cuda_device *d;
    cuda_srcs srcs;
    int iop = (int)op, k;
    double pre, post;
    uint32_t divisor;
    size_t blocks;
    void *params[8];

    if (args == NULL)
        args = &defaults;
    if ((unsigned)dt >= RD_DT_COUNT || (unsigned)op >= RD_OP_COUNT || nsrc < 1 ||
        nsrc > RD_CUDA_MAX_SRC) {
        rd_gpu_say(why, whylen,
                   "rd_cuda_reduce: dtype %d, op %d, %d sources: need a dtype, an op and "
                   "1 to %d sources",
                   (int)dt, (int)op, nsrc, RD_CUDA_MAX_SRC);
        return -1;
    }
    if (count == 0)
        return 0;
    d = device(dev, why, whylen);
    if (d == NULL || kernels(d, why, whylen) != 0)
        return -1;
    memset(&srcs, 0, sizeof(srcs));
    for (k = 0; k < nsrc; k++)
        srcs.p[k] = src[k];
    pre = args->prescale;
    post = args->postscale;
    divisor = args->divisor;
    params[0] = &dst;
    params[1] = &srcs;
    params[2] = &nsrc;
    params[3] = &count;
    params[4] = &iop;
    params[5] = &pre;
    params[6] = &post;
    params[7] = &divisor;
    /* a grid-stride loop: enough blocks to fill every multiprocessor several times over */
    blocks = (count + RD_CUDA_THREADS - 1) / RD_CUDA_THREADS;
    if (blocks > (size_t)d->sms * 32)
        blocks = (size_t)d->sms * 32;
    if (failed(drv.launch(d->reduce[dt], (unsigned)blocks, 1, 1, RD_CUDA_THREADS, 1, 1, 0,
                          d->stream, params, NULL),
               "cuLaunchKernel", why, whylen) ||
        failed(drv.stream_sync(d->stream), "cuStreamSynchronize", why, whylen))
        return -1;
    return 0;
}

void *rd_cuda_alloc(int dev, size_t bytes, char *why, size_t whylen)
{
    CUdeviceptr p = 0;
    if (device(dev, why, whylen) == NULL ||
        failed(drv.mem_alloc(&p, bytes), "cuMemAlloc", why, whylen))
        return NULL;
    return (void *)(uintptr_t)p;
}

void rd_cuda_free(int dev, void *p)
{
    if (p != NULL && device(dev, NULL, 0) != NULL)
        drv.mem_free((CUdeviceptr)(uintptr_t)p);
}

int rd_cuda_copy(int dev, void *dst, const void *src, size_t bytes, char *why, size_t whylen)
{
    cuda_device *d = device(dev, why, whylen);
    if (d == NULL ||
        failed(drv.memcpy_async((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, bytes,
                                d->stream),
               "cuMemcpyAsync", why, whylen) ||
        failed(drv.stream_sync(d->stream), "cuStreamSynchronize", why, whylen))
        return -1;
    return 0;
}

int rd_cuda_device_by_uuid(const char *uuid, char *why, size_t whylen)
{
    char name[128], id[48];
    uint64_t mem;
    int n = rd_cuda_load(why, whylen);
    for (int i = 0; i < n; i++)
        if (rd_cuda_device_info(i, name, sizeof(name), id, sizeof(id), &mem, why, whylen) == 0 &&
            strcmp(id, uuid) == 0)
            return i;
    if (n > 0)
        rd_gpu_say(why, whylen, "none of the %d CUDA devices this process sees is %s", n, uuid);
    return -1;
}

void *rd_cuda_context(void)
{
    CUcontext ctx = NULL;
    if (rd_cuda_load(NULL, 0) <= 0 || drv.ctx_get_current(&ctx) != CUDA_SUCCESS)
        return NULL;
    return ctx;
}

void rd_cuda_set_context(void *ctx)
{
    if (rd_cuda_load(NULL, 0) > 0)
        drv.ctx_set_current((CUcontext)ctx);
}

int rd_cuda_use(int dev, char *why, size_t whylen)
{
    return device(dev, why, whylen) != NULL ? 0 : -1;
}

int rd_cuda_pointer_device(const void *p)
{
    int ordinal = -1;
    unsigned int type = 0;
    if (rd_cuda_load(NULL, 0) <= 0 ||
        drv.pointer_attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)p) !=
            CUDA_SUCCESS ||
        type != CU_MEMORYTYPE_DEVICE ||
        drv.pointer_attribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                              (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS)
        return -1;
    return ordinal;
}

int rd_cuda_stream_sync(int dev, void *stream, char *why, size_t whylen)
{
    if (device(dev, why, whylen) == NULL ||
        failed(drv.stream_sync(stream != NULL ? (CUstream)stream : CU_STREAM_LEGACY),
               "cuStreamSynchronize (the caller's stream)", why, whylen))
        return -1;
    return 0;
}

void *rd_cuda_stream_new(int dev, char *why, size_t whylen)
{
    CUstream s = NULL;
    if (device(dev, why, whylen) == NULL ||
        failed(drv.stream_create(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate", why, whylen))
        return NULL;
    return s;
}

void rd_cuda_stream_free(int dev, void *stream)
{
    if (stream != NULL && device(dev, NULL, 0) != NULL)
        drv.stream_destroy((CUstream)stream);
}

void *rd_cuda_event_new(int dev, char *why, size_t whylen)
{
    CUevent e = NULL;
    if (device(dev, why, whylen) == NULL ||
        failed(drv.event_create(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate", why, whylen))
        return NULL;
    return e;
}

int rd_cuda_event_record(int dev, void *event, void *stream, char *why, size_t whylen)
{
    if (device(dev, why, whylen) == NULL ||
        failed(drv.event_record((CUevent)event, (CUstream)stream), "cuEventRecord", why, whylen))
        return -1;
    return 0;
}

int rd_cuda_event_done(int dev, void *event, char *why, size_t whylen)
{
    if (device(dev, why, whylen) == NULL)
        return -1;
    CUresult rc = drv.event_query((CUevent)event);
    if (rc == CUDA_ERROR_NOT_READY)
        return 0;
    return failed(rc, "cuEventQuery", why, whylen) ? -1 : 1;
}

void rd_cuda_event_free(int dev, void *event)
{
    if (event != NULL && device(dev, NULL, 0) != NULL)
        drv.event_destroy((CUevent)event);
}

int rd_cuda_fill_async(int dev, void *stream, void *p, uint32_t value, size_t n, char *why,
                       size_t whylen)
{
    if (device(dev, why, whylen) == NULL ||
        failed(drv.memset_d32_async((CUdeviceptr)(uintptr_t)p, value, n, (CUstream)stream),
               "cuMemsetD32Async", why, whylen))
        return -1;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Device memory shared by file descriptor (the virtual memory management API)                */
/* ------------------------------------------------------------------------------------------ */

struct rd_cuda_shared {
    int dev;
    CUmemGenericAllocationHandle handle;
    CUdeviceptr base; /* where it is mapped in this process */
    size_t size;
};

/* The allocation properties of shareable device memory on dev. */
static CUmemAllocationProp shared_prop(int dev)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    return prop;
}

/* Maps m->handle (m->size bytes) into this process, readable and writable from m->dev. */
static int shared_map(rd_cuda_shared *m, int peers, char *why, size_t whylen)
{
    CUmemAccessDesc access[RD_CUDA_MAX_DEVICES];
    CUdevice owner, other;
    size_t naccess = 1;
    int can = 0;
    memset(access, 0, sizeof(access));
    access[0].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access[0].location.id = m->dev;
    access[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    /* the GPUs that can reach it peer to peer may (local ranks on several GPUs: the reducing
     * GPU gathers the others' inputs); the rest go through the host in the driver's copies */
    for (int i = 0; peers && i < ndevices && drv.device_get(&owner, m->dev) == CUDA_SUCCESS; i++) {
        if (i == m->dev || drv.device_get(&other, i) != CUDA_SUCCESS ||
            drv.can_access_peer(&can, other, owner) != CUDA_SUCCESS || !can)
            continue;
        access[naccess] = access[0];
        access[naccess++].location.id = i;
    }
    if (failed(drv.mem_reserve(&m->base, m->size, 0, 0, 0), "cuMemAddressReserve", why, whylen))
        return -1;
    if (failed(drv.mem_map(m->base, m->size, 0, m->handle, 0), "cuMemMap", why, whylen)) {
        drv.mem_address_free(m->base, m->size);
        m->base = 0;
        return -1;
    }
    if (failed(drv.mem_set_access(m->base, m->size, access, naccess), "cuMemSetAccess", why,
               whylen)) {
        drv.mem_unmap(m->base, m->size);
        drv.mem_address_free(m->base, m->size);
        m->base = 0;
        return -1;
    }
    return 0;
}

/* A new rd_cuda_shared for dev, its size bytes rounded up to the allocation granularity (an
 * exporter and an importer of one allocation round alike), nothing allocated on the device yet.
 * NULL with why set. */
static rd_cuda_shared *shared_alloc(int dev, size_t bytes, char *why, size_t whylen)
{
    CUmemAllocationProp prop = shared_prop(dev);
    size_t gran = 0;
    rd_cuda_shared *m;

    if (device(dev, why, whylen) == NULL ||
        failed(drv.mem_granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
               "cuMemGetAllocationGranularity", why, whylen))
        return NULL;
    if (bytes == 0 || gran == 0 || bytes > SIZE_MAX - gran) {
        rd_gpu_say(why, whylen, "device memory of %zu bytes: need 1 byte or more", bytes);
        return NULL;
    }
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        rd_gpu_say(why, whylen, "out of memory");
        return NULL;
    }
    m->dev = dev;
    m->size = (bytes + gran - 1) / gran * gran;
    return m;
}

rd_cuda_shared *rd_cuda_shared_new(int dev, size_t bytes, int *fd, char *why, size_t whylen)
{
    CUmemAllocationProp prop = shared_prop(dev);
    int exported = -1;
    rd_cuda_shared *m = shared_alloc(dev, bytes, why, whylen);

    if (m == NULL)
        return NULL;
    if (failed(drv.mem_create(&m->handle, m->size, &prop, 0), "cuMemCreate", why, whylen)) {
        free(m);
        return NULL;
    }
    /* mapped and cleared before the fd leaves: memory the driver reuses within this process
     * would otherwise show one client what another left there */
    cuda_device *d = device(dev, why, whylen);
    if (d == NULL ||
        failed(drv.mem_export(&exported, m->handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
               "cuMemExportToShareableHandle", why, whylen) ||
        fcntl(exported, F_SETFD, FD_CLOEXEC) != 0 || shared_map(m, 1, why, whylen) != 0 ||
        failed(drv.memset_d32_async(m->base, 0, m->size / 4, d->stream), "cuMemsetD32Async", why,
               whylen) ||
        failed(drv.stream_sync(d->stream), "cuStreamSynchronize", why, whylen)) {
        if (m->base != 0) {
            drv.mem_unmap(m->base, m->size);
            drv.mem_address_free(m->base, m->size);
        }
        if (exported >= 0)
            close(exported);
        drv.mem_release(m->handle);
        free(m);
        return NULL;
    }
    *fd = exported;
    return m;
}

rd_cuda_shared *rd_cuda_shared_import(int dev, int fd, size_t bytes, char *why, size_t whylen)
{
    rd_cuda_shared *m = shared_alloc(dev, bytes, why, whylen);

    if (m == NULL)
        return NULL;
    if (failed(drv.mem_import(&m->handle, (void *)(uintptr_t)fd,
                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
               "cuMemImportFromShareableHandle", why, whylen)) {
        free(m);
        return NULL;
    }
    if (shared_map(m, 0, why, whylen) != 0) {
        drv.mem_release(m->handle);
        free(m);
        return NULL;
    }
    return m;
}

void *rd_cuda_shared_ptr(const rd_cuda_shared *m)
{
    return (void *)(uintptr_t)m->base;
}

size_t rd_cuda_shared_size(const rd_cuda_shared *m)
{
    return m->size;
}

void rd_cuda_shared_free(rd_cuda_shared *m)
{
    if (m == NULL)
        return;
    if (device(m->dev, NULL, 0) != NULL) {
        drv.mem_unmap(m->base, m->size);
        drv.mem_address_free(m->base, m->size);
        drv.mem_release(m->handle);
    }
    free(m);
}
