/* Client arenas: one sealed memfd per client, mapped by the daemon and the client alike; and
 * device arenas, device memory a backend shares with the client by file descriptor. */
#ifndef RD_ARENA_H
#define RD_ARENA_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

typedef struct rd_arena {
    uint8_t *base; /* mem.base: where the daemon reaches it */
    uint64_t size;
    const rd_backend *backend; /* that imported it */
    rd_mem mem;
    int fd;   /* open until handed to the client, then -1 */
    int refs; /* the session and every op using it; touched on the event loop only */
} rd_arena;

/* Creates an arena of size bytes (at least RD_CTRL_BYTES; its control area initialised): a memfd
 * sealed against resizing (so a client cannot truncate it under the daemon), mapped shared. Returns
 * NULL with err set. The caller owns one reference. */
rd_arena *rd_arena_new(uint64_t size, char *err, size_t errlen);

/* Creates a device arena: at least size bytes of memory of kind on device, from backend b (its
 * share), exported as fd for the client; no control area. Returns NULL with err set. The caller
 * owns one reference. */
rd_arena *rd_arena_new_shared(const rd_backend *b, rd_mem_kind kind, int device, uint64_t size,
                              char *err, size_t errlen);

void rd_arena_ref(rd_arena *a);

/* Drops a reference; the last one unmaps and frees. rd_arena_unref(NULL) is a no-op. */
void rd_arena_unref(rd_arena *a);

/* Closes the memfd once it has been passed to the client; the mapping stays. */
void rd_arena_close_fd(rd_arena *a);

/* 1 when [off, off+len) lies inside the arena. */
int rd_arena_contains(const rd_arena *a, uint64_t off, uint64_t len);

#endif
