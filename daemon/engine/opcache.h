/* The caches of the ops the nodes of a ring announce, for one generation: an op a node announces
 * again with the same name and parameters travels as the slot it filled the first time
 * (OpSpec.cached) and its data, about 10 bytes instead of its name and a dozen numbers. Each
 * node fills its own slots in the order it announces, and every node hears every node's Ready in
 * the order it was sent, so each node's slots read alike everywhere. Loop thread only. */
#ifndef RD_OPCACHE_H
#define RD_OPCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "schedmsg.h"

typedef struct rd_opcache rd_opcache;

/* The caches of a ring of nnodes nodes, self being this node. Returns NULL out of memory. */
rd_opcache *rd_opcache_new(int nnodes, int self);
void rd_opcache_free(rd_opcache *c);

/* How this node sends *spec (status 0), its name and parameters as the op has them: as a slot
 * filled earlier (spec->cached set: it is encoded as that slot, direct and data alone), as the op
 * filling the next slot (spec->fill set), or, with every slot filled or out of memory, as it is
 * (nothing filled). Call it for what is sent, in the order sent. */
void rd_opcache_own(rd_opcache *c, rd_op_spec *spec);

/* Node (not this one) announced *spec, decoded (rd_schedmsg_decode): a cached op gets the name,
 * parameters and direct of its slot (the name owned by the cache until rd_opcache_free) and is
 * checked as a full one; one that fills a slot is kept in it. Returns 0, or -1 with err set: a
 * slot never filled, one filled out of turn, data that does not fit the slot's op, or out of
 * memory. */
int rd_opcache_heard(rd_opcache *c, int node, rd_op_spec *spec, char *err, size_t errlen);

#endif
