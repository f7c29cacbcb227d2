/* The GPUs a daemon serves: see devices.h. */
#include "devices.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringd_build.h"
#if RINGD_HAVE_CUDA
#include "cuda_dev.h"
#endif

int rd_devices_parse(const char *spec, int *all, int *idx, int *nidx, char *err, size_t errlen)
{
    const char *p = spec;

    *all = 0;
    *nidx = 0;
    if (strcmp(spec, "all") == 0) {
        *all = 1;
        return 0;
    }
    if (strcmp(spec, "none") == 0)
        return 0;
    for (;;) {
        char *end;
        long v;
        int i;
        errno = 0;
        v = strtol(p, &end, 10);
        if (end == p || *p == '-' || *p == '+' || *p == ' ' || errno != 0 || v >= 1024 ||
            (*end != ',' && *end != '\0')) {
            snprintf(err, errlen,
                     "--devices '%s': need all, none, or device indices separated "
                     "by commas (0,2)",
                     spec);
            return -1;
        }
        for (i = 0; i < *nidx; i++) {
            if (idx[i] == (int)v) {
                snprintf(err, errlen, "--devices '%s': device %ld is named twice", spec, v);
                return -1;
            }
        }
        if (*nidx == RD_MAX_DEVICES) {
            snprintf(err, errlen, "--devices '%s': more than %d devices", spec, RD_MAX_DEVICES);
            return -1;
        }
        idx[(*nidx)++] = (int)v;
        if (*end == '\0')
            return 0;
        p = end + 1;
    }
}

int rd_devices_open(rd_devices *d, const char *spec, char *err, size_t errlen)
{
    int all, idx[RD_MAX_DEVICES], nidx, i;

    memset(d, 0, sizeof(*d));
    if (rd_devices_parse(spec, &all, idx, &nidx, err, errlen) != 0)
        return -1;
    if (!all && nidx == 0) {
        snprintf(d->why, sizeof(d->why), "--devices none");
        return 0;
    }
#if RINGD_HAVE_CUDA
    /* Each device is checked now (can it run ringd's kernels?) without a context on it: one
     * that cannot is known at start, not at a client's first collective. "all" leaves it out,
     * saying why; a list naming it fails. */
    char why[256];
    int have = rd_cuda_load(why, sizeof(why)), left_out = 0;
    if (all) {
        for (i = 0; i < have && i < RD_MAX_DEVICES; i++)
            idx[i] = i;
        nidx = i;
        if (have <= 0) {
            snprintf(d->why, sizeof(d->why), "%s", why);
            d->troubled = have < 0;
            return 0;
        }
    }
    for (i = 0; i < nidx; i++) {
        rd_device *dev = &d->dev[d->n];
        if (idx[i] >= have) {
            snprintf(err, errlen, "--devices %s: there is no CUDA device %d (%s)", spec, idx[i],
                     have <= 0 ? why : "fewer devices are visible");
            return -1;
        }
        dev->index = idx[i];
        if (rd_cuda_device_info(idx[i], dev->name, sizeof(dev->name), dev->uuid, sizeof(dev->uuid),
                                &dev->memory, why, sizeof(why)) != 0 ||
            rd_cuda_check(idx[i], why, sizeof(why)) != 0) {
            if (!all) {
                snprintf(err, errlen, "--devices %s: %s", spec, why);
                return -1;
            }
            left_out++;
            snprintf(d->why, sizeof(d->why), "%d visible device(s) left out; the last: %s",
                     left_out, why);
            d->troubled = 1;
            continue;
        }
        d->n++;
    }
    return 0;
#else
    (void)i;
    if (all) {
        snprintf(d->why, sizeof(d->why), "built without CUDA");
        return 0;
    }
    snprintf(err, errlen, "--devices %s: this ringd was built without CUDA (-Dcuda=enabled)", spec);
    return -1;
#endif
}

const rd_device *rd_devices_find(const rd_devices *d, int index)
{
    for (int i = 0; i < d->n; i++)
        if (d->dev[i].index == index)
            return &d->dev[i];
    return NULL;
}

int rd_devices_pick(const rd_devices *d, int asked, uint32_t local_rank, int *device, char *err,
                    size_t errlen)
{
    if (asked >= 0) {
        if (rd_devices_find(d, asked) == NULL) {
            if (d->n == 0)
                snprintf(err, errlen, "asked for CUDA device %d: this ringd serves no GPU (%s)",
                         asked, d->why);
            else
                snprintf(err, errlen,
                         "asked for CUDA device %d: this ringd serves %d other "
                         "device(s) (--devices); device %d is among them",
                         asked, d->n, d->dev[0].index);
            return -1;
        }
        *device = asked;
        return 0;
    }
    *device = d->n > 0 ? d->dev[local_rank % (uint32_t)d->n].index : -1;
    return 0;
}
