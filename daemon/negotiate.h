/* Negotiation across nodes: the parameters an op's submissions must agree on, and the
 * coordinator's table of which node has which named op ready, emitting ops in the one order in
 * which they become ready everywhere. Loop thread only. */
#ifndef RD_NEGOTIATE_H
#define RD_NEGOTIATE_H

#include <stddef.h>
#include <stdint.h>

#include "frame.h"

/* What every rank's submission of one op must agree on; fields an op does not use are fixed
 * (count 0 for a barrier, root 0 unless broadcast, scales 1 unless allreduce). */
typedef struct {
    int coll, dtype, redop;
    uint32_t root;
    uint64_t count;
    double prescale, postscale;
} rd_op_params;

/* Describes p for messages: "allreduce f32 count 8 op sum prescale 1 postscale 1". */
void rd_op_params_describe(char *buf, size_t len, const rd_op_params *p);

/* Returns 1 when a and b agree; else 0 with the differing fields named in fields ("dtype, count").
 */
int rd_op_params_compare(const rd_op_params *a, const rd_op_params *b, char *fields, size_t len);

/* The params an OpSpec carries. */
rd_op_params rd_op_params_of_spec(const Ringd__OpSpec *s);

/* An OpSpec of p (name and message borrowed). */
void rd_op_params_to_spec(const rd_op_params *p, Ringd__OpSpec *s);

/* A node of the ring, for messages. */
typedef struct {
    const char *node;
    uint32_t first_rank, local_size;
} rd_neg_node;

typedef struct rd_neg rd_neg;

/* A table for nnodes nodes (copied). Returns NULL when out of memory. */
rd_neg *rd_neg_new(int nnodes, const rd_neg_node *nodes);
void rd_neg_free(rd_neg *n);

/* Records that node has spec ready (or failed there, spec->status != 0). Ops now ready on every
 * node are queued for rd_neg_take in that order; a disagreement between nodes queues a failure
 * naming the ranks and fields. Returns 0, or -1 when node sent something impossible (a bad
 * spec, too many pending ops) with err set: the caller drops that node's link. */
int rd_neg_ready(rd_neg *n, int node, const Ringd__OpSpec *spec, char *err, size_t errlen);

/* Moves the queued entries into go (entries malloc'd; rd_neg_go_clear frees them). Returns how
 * many. */
size_t rd_neg_take(rd_neg *n, Ringd__Go *go);
void rd_neg_go_clear(Ringd__Go *go);

/* Ops some nodes have ready and others not. */
size_t rd_neg_pending(const rd_neg *n);

#endif
