/* Arena allocator: first-fit over a byte range, bookkeeping kept outside the range (the range is
 * shared memory the daemon writes into). */
#ifndef RD_ALLOC_H
#define RD_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#define RD_ALLOC_ALIGN 64

typedef struct rd_block rd_block;

typedef struct {
    rd_block *head; /* blocks in offset order, free and used, covering the whole range */
    uint64_t size;
} rd_alloc;

/* Starts managing [0, size). Returns 0, or -1 when out of memory. */
int rd_alloc_init(rd_alloc *a, uint64_t size);

/* Frees the bookkeeping (not the range). */
void rd_alloc_destroy(rd_alloc *a);

/* Reserves bytes (rounded up to RD_ALLOC_ALIGN); stores the offset in *off. Returns 0, or -1 when
 * no free block is large enough. bytes == 0 reserves RD_ALLOC_ALIGN. */
int rd_alloc_get(rd_alloc *a, uint64_t bytes, uint64_t *off);

/* Releases the reservation at off, merging with free neighbours. Returns 0, or -1 when off is not
 * the start of a reservation. */
int rd_alloc_put(rd_alloc *a, uint64_t off);

/* Bytes currently reserved. */
uint64_t rd_alloc_used(const rd_alloc *a);

#endif
