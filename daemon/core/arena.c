/* Client arenas: memfd creation, sealing, import into the backend, and reference counting. */
#define _GNU_SOURCE
#include "arena.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ctlq.h"

rd_arena *rd_arena_new(uint64_t size, char *err, size_t errlen)
{
    rd_arena *a = calloc(1, sizeof(*a));
    if (a == NULL) {
        snprintf(err, errlen, "arena: out of memory");
        return NULL;
    }
    a->backend = rd_backend_cpu();
    a->fd = memfd_create("ringd-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (a->fd < 0) {
        snprintf(err, errlen, "memfd_create: %s", strerror(errno));
        goto fail;
    }
    if (ftruncate(a->fd, (off_t)size) != 0) {
        snprintf(err, errlen, "ftruncate arena to %llu bytes: %s", (unsigned long long)size,
                 strerror(errno));
        goto fail;
    }
    if (fcntl(a->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        snprintf(err, errlen, "seal arena: %s", strerror(errno));
        goto fail;
    }
    if (a->backend->import(RD_MEM_ARENA, 0, a->fd, size, &a->mem, err, errlen) != 0)
        goto fail;
    a->base = a->mem.base;
    a->size = size;
    rd_ctrl_init(a->base);
    a->refs = 1;
    return a;

fail:
    if (a->fd >= 0)
        close(a->fd);
    free(a);
    return NULL;
}

rd_arena *rd_arena_new_shared(const rd_backend *b, rd_mem_kind kind, int device, uint64_t size,
                              char *err, size_t errlen)
{
    if (b == NULL || b->share == NULL) {
        snprintf(err, errlen, "this ringd has no backend that shares device memory");
        return NULL;
    }
    rd_arena *a = calloc(1, sizeof(*a));
    if (a == NULL) {
        snprintf(err, errlen, "device arena: out of memory");
        return NULL;
    }
    a->backend = b;
    if (b->share(kind, device, size, &a->fd, &a->mem, err, errlen) != 0) {
        free(a);
        return NULL;
    }
    a->base = a->mem.base;
    a->size = a->mem.size;
    a->refs = 1;
    return a;
}

void rd_arena_ref(rd_arena *a)
{
    a->refs++;
}

void rd_arena_unref(rd_arena *a)
{
    if (a == NULL || --a->refs > 0)
        return;
    a->backend->release(&a->mem);
    rd_arena_close_fd(a);
    free(a);
}

void rd_arena_close_fd(rd_arena *a)
{
    if (a->fd >= 0) {
        close(a->fd);
        a->fd = -1;
    }
}

int rd_arena_contains(const rd_arena *a, uint64_t off, uint64_t len)
{
    return off <= a->size && len <= a->size - off;
}
