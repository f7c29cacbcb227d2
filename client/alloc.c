/* Arena allocator: a list of blocks in offset order, first fit, neighbours merged on release. */
#include "alloc.h"

#include <stdlib.h>

struct rd_block {
    uint64_t off, len;
    int used;
    rd_block *next;
};

int rd_alloc_init(rd_alloc *a, uint64_t size)
{
    a->size = size;
    a->head = calloc(1, sizeof(rd_block));
    if (a->head == NULL)
        return -1;
    a->head->len = size;
    return 0;
}

void rd_alloc_destroy(rd_alloc *a)
{
    while (a->head != NULL) {
        rd_block *n = a->head->next;
        free(a->head);
        a->head = n;
    }
}

int rd_alloc_get(rd_alloc *a, uint64_t bytes, uint64_t *off)
{
    if (bytes > UINT64_MAX - RD_ALLOC_ALIGN)
        return -1;
    uint64_t need = bytes == 0 ? RD_ALLOC_ALIGN
                               : (bytes + RD_ALLOC_ALIGN - 1) & ~(uint64_t)(RD_ALLOC_ALIGN - 1);
    for (rd_block *b = a->head; b != NULL; b = b->next) {
        if (b->used || b->len < need)
            continue;
        if (b->len > need) {
            rd_block *rest = malloc(sizeof(*rest));
            if (rest == NULL)
                return -1;
            rest->off = b->off + need;
            rest->len = b->len - need;
            rest->used = 0;
            rest->next = b->next;
            b->next = rest;
            b->len = need;
        }
        b->used = 1;
        *off = b->off;
        return 0;
    }
    return -1;
}

int rd_alloc_put(rd_alloc *a, uint64_t off)
{
    rd_block *prev = NULL, *b = a->head;
    while (b != NULL && b->off != off) {
        prev = b;
        b = b->next;
    }
    if (b == NULL || !b->used)
        return -1;
    b->used = 0;
    rd_block *n = b->next;
    if (n != NULL && !n->used) {
        b->len += n->len;
        b->next = n->next;
        free(n);
    }
    if (prev != NULL && !prev->used) {
        prev->len += b->len;
        prev->next = b->next;
        free(b);
    }
    return 0;
}

uint64_t rd_alloc_used(const rd_alloc *a)
{
    uint64_t used = 0;
    for (const rd_block *b = a->head; b != NULL; b = b->next)
        if (b->used)
            used += b->len;
    return used;
}
