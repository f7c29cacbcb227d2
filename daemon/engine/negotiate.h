/* Negotiation across nodes: the parameters an op's submissions must agree on, and the table every
 * node keeps of which node has which named op ready (each node announces its ops to all). An op
 * every node has announced is done negotiating, identically everywhere: failed (a disagreement,
 * or a failure on some node), direct (small: the result is computed here from every node's
 * contribution), or bound for the ring, whose order the coordinator decides. Loop thread only. */
#ifndef RD_NEGOTIATE_H
#define RD_NEGOTIATE_H

#include <stddef.h>
#include <stdint.h>

#include "schedmsg.h"
#include "world.h"

/* A digest of every rank's count of a reducescatter or allgatherv (FNV-1a over the values and
 * their number): ranks that passed the same counts agree on it; never 0, which stands for equal
 * counts. */
uint64_t rd_counts_digest(const uint64_t *counts, size_t n);

/* Describes p for messages: "allreduce f32 count 8 op sum prescale 1 postscale 1". */
void rd_op_params_describe(char *buf, size_t len, const rd_op_params *p);

/* Returns 1 when a and b agree; else 0 with the differing fields named in fields ("dtype, count").
 */
int rd_op_params_compare(const rd_op_params *a, const rd_op_params *b, char *fields, size_t len);

/* The params to announce a failure of an op with: p when every node can take them, else a
 * barrier's (a failure of an op nobody can run is announced all the same). */
rd_op_params rd_op_params_announceable(rd_op_params p);

typedef struct rd_neg rd_neg;

/* A table for nnodes nodes (copied), self being this node; a direct op's contribution is at most
 * max_data bytes. below (nnodes entries, copied; NULL: this node alone) marks the nodes whose
 * announcements reach the coordinator through this node in the control tree, this node
 * included (rd_world_below): rd_neg_news says when they have all announced an op. Returns NULL
 * when out of memory. */
rd_neg *rd_neg_new(int nnodes, const rd_ring_node *nodes, int self, uint64_t max_data,
                   const uint8_t *below);
void rd_neg_free(rd_neg *n);

/* The name of the node at position node (0 <= node < nnodes). */
const char *rd_neg_node(const rd_neg *n, int node);

/* Records that node has spec ready (or failed there, spec->status != 0); spec is one
 * rd_schedmsg_decode takes (this node's own are), its strings and data copied. own is this
 * node's handle for its own announcements (node == self), handed back when the op is done. Ops
 * now done are queued for rd_neg_take in that order; a disagreement between nodes fails the op
 * with a message naming the ranks and fields. Returns RINGD_OK, or with err set RINGD_E_PROTOCOL
 * when node sent something impossible (data over --direct-bytes, too many pending ops) or
 * RINGD_E_NOMEM: the caller drops the ring. */
rd_status rd_neg_ready(rd_neg *n, int node, const rd_op_spec *spec, void *own, char *err,
                       size_t errlen);

/* How an op every node has announced ends: failed (status, message), direct (the result in
 * data[0..len)) or bound for the ring (status 0, direct 0). name, message and data are owned by
 * the rd_neg_done holding it. */
typedef struct {
    char *name;
    uint32_t status;
    char *message;
    int direct;
    uint8_t *data;
    size_t len;
} rd_neg_outcome;

/* An op every node has announced: own is this node's handle, e its outcome. */
typedef struct {
    void *own;
    rd_neg_outcome e;
} rd_neg_done;

/* What the announcements recorded since the last call mean for the ones the control tree holds
 * (rd_world_release): RD_RELEASE_UP when the nodes below this one have all announced some op
 * (the coordinator needs theirs), RD_RELEASE_DOWN when every node has (the nodes below need the
 * rest), both when an op failed (a failure or a mismatch ends it early where it is not
 * announced) and while a join is pending (a joined node takes part in what it hears of). Clears
 * them. */
unsigned rd_neg_news(rd_neg *n);

/* Moves the done ops into *out (malloc'd; rd_neg_done_free frees it). Returns how many. */
size_t rd_neg_take(rd_neg *n, rd_neg_done **out);
void rd_neg_done_free(rd_neg_done *d, size_t n);

/* Ops some nodes have ready and others not. */
size_t rd_neg_pending(const rd_neg *n);

/* The nodes that have not announced the op own (this node's handle), or with own NULL the
 * oldest op of that name this node has not announced, as "ranks 2-3 (node n1); rank 4 (node
 * n2)" into buf; "" when every other node has. */
void rd_neg_missing(const rd_neg *n, const char *name, const void *own, char *buf, size_t len);

/* When the oldest op named name that this node has not announced has already failed (a node
 * announced a failure, or two announcements disagree), returns the reason (owned by the table,
 * valid until its next change) with *status and the first announcement's *p set; else NULL. */
const char *rd_neg_failed(const rd_neg *n, const char *name, uint32_t *status, rd_op_params *p);

/* The names of the failed ops this node has not announced (rd_neg_failed says more), into
 * *names (malloc'd, each name too). Returns how many. */
size_t rd_neg_failed_names(const rd_neg *n, char ***names);

/* 1 when the oldest op named name that this node has not announced is one node `from` has: the
 * one from waits in. */
int rd_neg_awaits(const rd_neg *n, const char *name, int from);

/* An op some node has announced and this node has not: its name and failure message (owned by
 * the table, valid until its next change), the first announcement's params, and its status (a
 * node announced it failed, or the announcements disagree). */
typedef struct {
    const char *name;
    rd_op_params p;
    uint32_t status;
    const char *message;
} rd_neg_unheard;

/* The ops that some node announced before announcing the join (RD_JOIN_NAME) this table has
 * pending, or with no join pending, and that this node has not announced: what ranks still at
 * work submitted, which a node whose ranks have all joined takes part in (what a node announces
 * after its join is for the next round, once the join has ended). Each name's in announcement
 * order, up to max into out. Returns how many there are (more than max: call again with room for
 * all). */
size_t rd_neg_unannounced(const rd_neg *n, rd_neg_unheard *out, size_t max);

/* The positions of the nodes that have not announced this node's op own, up to max into pos.
 * Returns how many. */
int rd_neg_missing_nodes(const rd_neg *n, const void *own, int *pos, int max);

#endif
