/* The scheduling messages of a ring's nodes (Ready: ops a node announces; Go: the coordinator's
 * order) as plain values: the engine builds and reads these, the net layer encodes and decodes
 * them here, the only place that knows their wire format. What comes from a peer is checked here
 * (counts, names, lengths, each direct op's data against its own count and dtype); what needs the
 * engine's state (--direct-bytes, the table's size) is checked there. */
#ifndef RD_SCHEDMSG_H
#define RD_SCHEDMSG_H

#include <stddef.h>
#include <stdint.h>

struct Ringd__Msg;

/* Ops one message may carry: announcements are sent one at a time, and the coordinator splits a
 * longer order over several Go messages. */
#define RD_SCHEDMSG_OPS_MAX 65536u
/* Bytes of an op's failure message (the daemon writes at most 767). */
#define RD_SCHEDMSG_MESSAGE_MAX 1024u
/* Bytes of a direct op's data: the top of --direct-bytes' range. */
#define RD_SCHEDMSG_DATA_MAX (16u << 20)

/* What every rank's submission of one op must agree on: the wire's op spec. coll, dtype and redop
 * are OpType, DataType and ReduceOp values (rd_coll, rd_dtype and rd_redop in gpu/backend.h match
 * them); fields an op does not use are fixed (count 0 for a barrier, root 0 unless broadcast,
 * scales 1 unless allreduce). */
typedef struct {
    int coll, dtype, redop;
    uint32_t root;
    uint64_t count;
    double prescale, postscale;
} rd_op_params;

/* One op a node announces: all its ranks submitted it (status 0), or it failed there (status, a
 * ringd_result_t, with message). A direct op carries the node's contribution in data[0..len).
 * Strings and data are borrowed. */
typedef struct {
    const char *name;
    rd_op_params p;
    uint32_t status;
    const char *message; /* never NULL once decoded ("" when the sender gave none) */
    int direct;
    const uint8_t *data;
    size_t len;
} rd_op_spec;

typedef enum {
    RD_SCHEDMSG_READY, /* ops[0..nops) ready (or failed) at the sender; stalled[0..nstalled): ops
                          it announced long ago, which a node that has not announced them ends as
                          stalled (name and message; params as the asker has them) */
    RD_SCHEDMSG_GO,    /* names[0..nnames): ops bound for the ring, run in that order */
} rd_schedmsg_kind;

/* One scheduling message. generation is the ring's (rd_world_send stamps the current one). */
typedef struct {
    rd_schedmsg_kind kind;
    uint64_t generation;
    const rd_op_spec *ops, *stalled; /* Ready */
    size_t nops, nstalled;
    const char *const *names; /* Go */
    size_t nnames;
} rd_schedmsg;

typedef enum {
    RD_SCHEDMSG_DECODED = 0, /* *out holds the message */
    RD_SCHEDMSG_OTHER = 1,   /* m is no scheduling message: *out is untouched */
    RD_SCHEDMSG_BAD = -1,    /* impossible, or out of memory (err says which) */
} rd_schedmsg_status;

/* Decodes m, a control message from a peer, into *out. On RD_SCHEDMSG_DECODED, out's strings and
 * data are borrowed from m and its arrays are the caller's to release (rd_schedmsg_release):
 * every name is valid (rd_name_valid), every op's coll is known, and so are its dtype and reduce
 * op unless it failed; messages are at most RD_SCHEDMSG_MESSAGE_MAX bytes, data at most
 * RD_SCHEDMSG_DATA_MAX, and only a direct op has any: of an allreduce exactly count elements, of
 * a broadcast those or none, of an allgather a whole number of times those. The entries of a Go
 * carry only their names (no node sets the rest). Any thread. */
rd_schedmsg_status rd_schedmsg_decode(const struct Ringd__Msg *m, rd_schedmsg *out, char *err,
                                      size_t errlen);

/* Frees the arrays of a decoded message. */
void rd_schedmsg_release(rd_schedmsg *s);

/* The control message of v, its values as they are (rd_schedmsg_decode is what checks them), as
 * one allocation that borrows v's strings and data (rd_schedmsg_encoded_free frees it); a NULL
 * message goes as "". Returns NULL when out of memory. Any thread. */
struct Ringd__Msg *rd_schedmsg_encode(const rd_schedmsg *v);

/* NULL is a no-op. */
void rd_schedmsg_encoded_free(struct Ringd__Msg *m);

#endif
