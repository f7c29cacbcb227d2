/* The CUDA driver, loaded at run time, and ringd's reduction kernels on it (cuda_kernels.cu).
 * The driver (libcuda.so.1) is opened with dlopen when first asked for, never linked: on a
 * machine without a GPU or driver every call here fails with a message saying so, and the rest
 * of ringd runs as before. Thread-safe; each call makes the device's primary context current
 * on the calling thread. */
#ifndef RD_CUDA_DEV_H
#define RD_CUDA_DEV_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

#define RD_CUDA_MAX_SRC 16 /* sources of one rd_cuda_reduce (local ranks of one GPU) */

/* Loads the driver and counts its devices, once per process. Returns the number of devices
 * (>= 1); 0 with why set when there is no driver or no device ("no CUDA driver: libcuda.so.1:
 * cannot open shared object file ...", "the CUDA driver sees no device"); -1 with why set when
 * a driver is there but fails ("cuInit: CUDA_ERROR_...", a driver too old). Later calls return
 * the first answer. */
int rd_cuda_load(char *why, size_t whylen);

/* Whether device dev can run ringd's kernels (compute capability 8.0 or newer, a CUDA 13
 * driver), without creating a context on it: a daemon that only serves a device must not hold
 * its memory or, in exclusive-process mode, the device itself. Returns 0, or -1 with why. */
int rd_cuda_check(int dev, char *why, size_t whylen);

/* Device dev's name, UUID ("GPU-8c1d...", "MIG-..." for a MIG instance, as nvidia-smi prints
 * it: the same in every container that sees the device, whatever index it has there) and total
 * memory. Returns 0, or -1 with why set. */
int rd_cuda_device_info(int dev, char *name, size_t namelen, char *uuid, size_t uuidlen,
                        uint64_t *total_bytes, char *why, size_t whylen);

/* rd_reduce's contract (backend.h) on memory device dev reaches (its own memory, or any
 * pointer of the unified address space it can access), computed by CUDA kernels, bit for bit
 * as the CPU kernels compute it (NaN payloads aside); nsrc at most RD_CUDA_MAX_SRC. Returns
 * once the result is in dst: 0, or -1 with why set. */
int rd_cuda_reduce(int dev, rd_dtype dt, rd_redop op, void *dst, const void *const *src, int nsrc,
                   size_t count, const rd_reduce_args *args, char *why, size_t whylen);

/* Device memory of dev for tools and tests: bytes (> 0) allocated, NULL with why set. */
void *rd_cuda_alloc(int dev, size_t bytes, char *why, size_t whylen);
void rd_cuda_free(int dev, void *p); /* NULL: no-op */

/* dst[0..bytes) = src[0..bytes), host or device memory either side (unified addressing).
 * Returns once done: 0, or -1 with why set. */
int rd_cuda_copy(int dev, void *dst, const void *src, size_t bytes, char *why, size_t whylen);

/* This process's index of the device with uuid (as rd_cuda_device_info gives it): processes in
 * different containers number their visible devices differently. -1 with why set when none
 * matches or there is no driver. */
int rd_cuda_device_by_uuid(const char *uuid, char *why, size_t whylen);

/* The calling thread's current CUDA context (NULL: none, or no driver), and putting one back:
 * a library's entry points leave the caller's context as they found it. */
void *rd_cuda_context(void);
void rd_cuda_set_context(void *ctx);

/* Makes dev's primary context current on the calling thread (set up on first use). Returns 0,
 * or -1 with why set. */
int rd_cuda_use(int dev, char *why, size_t whylen);

/* The device whose memory p points at (CUDA device memory of this process's unified address
 * space), or -1: host memory, or no driver. Thread-safe. */
int rd_cuda_pointer_device(const void *p);

/* Waits until the work queued so far on stream (a CUstream of dev's primary context; NULL: the
 * legacy default stream) has run. Returns 0, or -1 with why set. */
int rd_cuda_stream_sync(int dev, void *stream, char *why, size_t whylen);

/* For tools and tests: a stream of dev that does not wait on the legacy default stream (NULL
 * with why set), its release, and n 32-bit words at p set to value, queued on stream (returns
 * at once: 0, or -1 with why set). */
void *rd_cuda_stream_new(int dev, char *why, size_t whylen);
void rd_cuda_stream_free(int dev, void *stream);
int rd_cuda_fill_async(int dev, void *stream, void *p, uint32_t value, size_t n, char *why,
                       size_t whylen);

/* An event of dev (NULL with why set); recording it on stream, after the work queued so far
 * (0, or -1 with why set); whether it has happened (1; also before it was recorded), not yet
 * (0), or the device failed (-1, why set); its release. */
void *rd_cuda_event_new(int dev, char *why, size_t whylen);
int rd_cuda_event_record(int dev, void *event, void *stream, char *why, size_t whylen);
int rd_cuda_event_done(int dev, void *event, char *why, size_t whylen);
void rd_cuda_event_free(int dev, void *event);

/* Device memory shared between processes by file descriptor (CUDA's virtual memory management
 * API with POSIX file descriptor handles): training pods and the daemon share no IPC or PID
 * namespace, and a descriptor crosses the Unix socket like the host arena's memfd. */
typedef struct rd_cuda_shared rd_cuda_shared;

/* At least bytes of dev's memory (rounded up to the allocation granularity), mapped here,
 * cleared to zero, and exported as *fd (close-on-exec; the caller's, to pass on and close). NULL
 * with why set. Free with rd_cuda_shared_free. */
rd_cuda_shared *rd_cuda_shared_new(int dev, size_t bytes, int *fd, char *why, size_t whylen);

/* Maps the device memory behind fd (from rd_cuda_shared_new in another process, of at least
 * bytes, rounded up as it was; fd stays the caller's) into this process, for device dev. NULL
 * with why set. */
rd_cuda_shared *rd_cuda_shared_import(int dev, int fd, size_t bytes, char *why, size_t whylen);

void *rd_cuda_shared_ptr(const rd_cuda_shared *m);   /* where it is mapped here */
size_t rd_cuda_shared_size(const rd_cuda_shared *m); /* its bytes */

/* Unmaps and releases m (the memory goes once no process maps it). NULL is a no-op. */
void rd_cuda_shared_free(rd_cuda_shared *m);

#endif
