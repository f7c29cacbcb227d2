/* The GPUs a daemon serves (--devices) and which one each client gets: resolved once at start
 * against the CUDA driver (cuda_dev.h), then looked up. Without CUDA (a build without it, no
 * driver, no device) the daemon serves none and says why; clients then use host memory. */
#ifndef RD_DEVICES_H
#define RD_DEVICES_H

#include <stddef.h>
#include <stdint.h>

#define RD_MAX_DEVICES 64

typedef struct {
    int index;       /* the CUDA device index (as the driver numbers the visible devices) */
    char name[128];  /* "NVIDIA H100 80GB HBM3" */
    char uuid[48];   /* "GPU-8c1d...": the device in every container, whatever its index */
    uint64_t memory; /* total bytes */
} rd_device;

typedef struct {
    int n; /* devices served, dev[0..n) */
    rd_device dev[RD_MAX_DEVICES];
    char why[512]; /* why none ("--devices none", "no CUDA driver: ...", ...), or why visible
                      devices were left out; "" otherwise */
    int troubled;  /* 1: a driver that fails, or visible devices left out (worth a warning) */
} rd_devices;

/* Parses a --devices value: "all", "none", or device indices separated by commas ("0,2"), each
 * at most once. Sets *all (1 for "all"), idx[0..*nidx) (at most RD_MAX_DEVICES). Returns 0, or
 * -1 with err set. Pure. */
int rd_devices_parse(const char *spec, int *all, int *idx, int *nidx, char *err, size_t errlen);

/* Fills d from spec (see rd_devices_parse) and the driver, checking that each device can run
 * ringd's kernels (rd_cuda_check: no context is made). "all" serves every visible device that
 * can, and none on a machine without a driver or device: not an error; d->why then says why
 * none, or why devices were left out. A list must name devices the driver has and that can:
 * otherwise, or without a driver, returns -1 with err set. */
int rd_devices_open(rd_devices *d, const char *spec, char *err, size_t errlen);

/* The device a client gets: asked (>= 0: a device index it asked for, which d must serve), or
 * for asked -1 the local rank's share (dev[local_rank % n]), -1 when d serves none. Returns 0
 * with *device set, or -1 with err set (asked for one d does not serve). Pure. */
int rd_devices_pick(const rd_devices *d, int asked, uint32_t local_rank, int *device, char *err,
                    size_t errlen);

/* The entry of device index, or NULL when d does not serve it. */
const rd_device *rd_devices_find(const rd_devices *d, int index);

#endif
