/* The scheduling messages of a ring's nodes (Ready: ops a node announces; Go: the coordinator's
 * order; DevOffer, DevPlan, DevConfirm: the agreement on the generation's device transport) as
 * plain values: the engine builds and reads these, the net layer encodes and decodes
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
/* Bytes of a device communicator's unique id (NCCL's are 128). */
#define RD_SCHEDMSG_ID_MAX 128u

/* What every rank's submission of one op must agree on: the wire's op spec. coll, dtype and redop
 * are OpType, DataType and ReduceOp values (rd_coll, rd_dtype and rd_redop of dtype.h: the same
 * values, checked at compile time); fields an op does not use are fixed (count 0 for a barrier,
 * root 0 unless broadcast, scales 1 unless allreduce or reducescatter). count is a reducescatter's
 * input and an allgatherv's output, in elements: the sum of every rank's count. */
typedef struct {
    int coll, dtype, redop;
    uint32_t root;
    uint64_t count;
    double prescale, postscale;
    int device; /* 1: the node's ranks pass it in device memory (crosses on the device transport) */
    uint64_t counts_digest; /* reducescatter, allgatherv: of every rank's count (rd_counts_digest);
                               0: equal counts */
    uint64_t group_digest;  /* of the op's group, its size and place in it; 0: in none */
    uint64_t shape;         /* the tensor's packed shape (Submit.shape); 0: none given */
} rd_op_params;

/* Slots in a node's cache of the ops it announced, per generation (OpSpec.fill). */
#define RD_SCHEDMSG_CACHE_MAX 1024u

/* One op a node announces: all its ranks submitted it (status 0), or it failed there (status, a
 * ringd_result_t, with message). A direct op carries the node's contribution in data[0..len).
 * Strings and data are borrowed. Cached (cached != 0), it is the op in that slot of the sender's
 * cache: name is "", p zero and status 0 until the receiver fills them in from the slot; a full
 * spec may fill the sender's next slot (fill != 0). */
typedef struct {
    const char *name;
    rd_op_params p;
    uint32_t status;
    const char *message; /* never NULL once decoded ("" when the sender gave none) */
    int direct;
    const uint8_t *data;
    size_t len;
    uint32_t fill, cached; /* 1 up to RD_SCHEDMSG_CACHE_MAX; 0: none */
} rd_op_spec;

typedef enum {
    RD_SCHEDMSG_READY, /* ops[0..nops) ready (or failed) at the sender; stalled[0..nstalled): ops
                          it announced long ago, which a node that has not announced them ends as
                          stalled (name and message; params as the asker has them) */
    RD_SCHEDMSG_GO,    /* names[0..nnames): ops bound for the ring, run in that order */
    RD_SCHEDMSG_DEV_OFFER,   /* node -> coordinator: dev.want, dev.device, dev.can, dev.why,
                                dev.gpu */
    RD_SCHEDMSG_DEV_PLAN,    /* coordinator -> nodes: dev.transport (RD_DEV_TCP with dev.why, or
                                RD_DEV_NCCL with dev.id[0..dev.id_len)) */
    RD_SCHEDMSG_DEV_CONFIRM, /* node -> coordinator: dev.confirm (and dev.why when failed) */
} rd_schedmsg_kind;

/* --gpu-transport values, as DevOffer carries them. */
enum { RD_DEV_WANT_AUTO = 0, RD_DEV_WANT_NCCL = 1, RD_DEV_WANT_TCP = 2 };
/* A generation's device transport, as DevPlan carries it. */
enum { RD_DEV_TCP = 0, RD_DEV_NCCL = 1 };
/* How a node's communicator came on, as DevConfirm carries it. */
enum { RD_DEV_JOINED = 1, RD_DEV_FORMED = 2, RD_DEV_FAILED = 3 };

/* The fields of the device-transport messages; strings and id borrowed. */
typedef struct {
    int want, device, can;   /* DevOffer */
    const char *gpu;         /* DevOffer: its GPU's UUID, "" for none (never NULL once decoded;
                                at most RD_SCHEDMSG_GPU_MAX bytes) */
    int transport, required; /* DevPlan (required: TCP, though some node wants NCCL) */
    const uint8_t *id;       /* DevPlan of NCCL: 1..RD_SCHEDMSG_ID_MAX bytes; else none */
    size_t id_len;
    int confirm;     /* DevConfirm */
    const char *why; /* never NULL once decoded; at most RD_SCHEDMSG_MESSAGE_MAX bytes */
} rd_devmsg;

/* Go.tuning's autotune. */
enum { RD_AUTOTUNE_OFF = 0, RD_AUTOTUNE_TUNING = 1, RD_AUTOTUNE_SETTLED = 2 };

/* How the ops of a Go fuse and cross, as the coordinator sets them for every node. */
typedef struct {
    uint64_t fusion_threshold; /* at most RD_SCHEDMSG_FUSION_MAX */
    uint64_t segment_size;     /* RD_SCHEDMSG_SEGMENT_MIN up to RD_SCHEDMSG_SEGMENT_MAX */
    uint32_t conns;            /* 1 up to RD_SCHEDMSG_CONNS_MAX */
    uint32_t cycle_us;         /* at most RD_SCHEDMSG_CYCLE_MAX */
    int autotune;              /* RD_AUTOTUNE_* */
    uint64_t doubling_bytes;   /* at most RD_SCHEDMSG_DOUBLING_MAX */
} rd_tuning;

/* The ranges of the matching flags (--fusion-threshold, --segment-size, --conns-per-link). */
#define RD_SCHEDMSG_FUSION_MAX (1ull << 30)
#define RD_SCHEDMSG_SEGMENT_MIN 4096u
#define RD_SCHEDMSG_SEGMENT_MAX (64ull << 20)
#define RD_SCHEDMSG_CONNS_MAX 16u
#define RD_SCHEDMSG_CYCLE_MAX 1000000u         /* --fusion-cycle-us */
#define RD_SCHEDMSG_DOUBLING_MAX (16ull << 20) /* --doubling-bytes */
#define RD_SCHEDMSG_GPU_MAX 63u                /* a GPU's UUID ("GPU-" or "MIG-" and 36 more) */

/* One scheduling message. generation is the ring's (rd_world_send stamps the current one). */
typedef struct {
    rd_schedmsg_kind kind;
    uint64_t generation;
    const rd_op_spec *ops, *stalled; /* Ready */
    size_t nops, nstalled;
    const char *const *names; /* Go */
    size_t nnames;
    rd_tuning tuning; /* Go */
    rd_devmsg dev;    /* DevOffer, DevPlan, DevConfirm */
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
 * a broadcast those or none, of an allgather a whole number of times those, of a reducescatter
 * exactly count elements (the node's partial sum), of any other op none. The entries of a Go
 * carry only their names (no node sets the rest); its tuning is there, within the ranges above
 * (the engine checks it against its own links and flags). The device messages' enums are in range,
 * a plan of NCCL carries an id and one of TCP none. A cached op of a Ready is the exception: its
 * name is "", nothing but its slot, direct and data may be set, and its data is checked by the
 * receiver once it has the slot's op (rd_schedmsg_spec_check); an op fills a slot only when it
 * did not fail, and stall requests use no slot. Any thread. */
rd_schedmsg_status rd_schedmsg_decode(const struct Ringd__Msg *m, rd_schedmsg *out, char *err,
                                      size_t errlen);

/* Checks one announced op as rd_schedmsg_decode does a full one: for a cached op once its name
 * and parameters are filled in from the sender's slot. Returns 0, or -1 with err set. Any
 * thread. */
int rd_schedmsg_spec_check(const rd_op_spec *s, char *err, size_t errlen);

/* Frees the arrays of a decoded message. */
void rd_schedmsg_release(rd_schedmsg *s);

/* The control message of v, its values as they are (rd_schedmsg_decode is what checks them; a
 * cached op goes as its slot, direct and data alone), as
 * one allocation that borrows v's strings and data (rd_schedmsg_encoded_free frees it); a NULL
 * message goes as "". Returns NULL when out of memory. Any thread. */
struct Ringd__Msg *rd_schedmsg_encode(const rd_schedmsg *v);

/* NULL is a no-op. */
void rd_schedmsg_encoded_free(struct Ringd__Msg *m);

/* Bytes a Ready's frame takes at most around its entries (header, message and body tags, the
 * generation). */
#define RD_SCHEDMSG_READY_OVERHEAD 64

/* Bytes the entry of spec takes at most in a Ready's frame: its name, message and data, and
 * its numbers, flags, tags and lengths at their longest. Any thread. */
size_t rd_schedmsg_spec_bound(const rd_op_spec *spec);

#endif
