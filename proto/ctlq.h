/* Control queues: shared-memory queues of control frames between a client and ringd (a circular
 * buffer each way; "ring" in ringd means the ring of daemons only), in the first bytes of the
 * client's arena: the same frames as on the socket, without a system call or a wake-up while
 * both sides are polling. The socket stays the fallback and the doorbell: a consumer that goes to
 * sleep says so in the queue, and the producer then sends Poke over the socket.
 *
 * Each side keeps its own index privately and only publishes it, so a peer that scribbles on the
 * shared header cannot make the other side read or write outside the queue. */
#ifndef RD_CTLQ_H
#define RD_CTLQ_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "frame.h"

#define RD_CTLQ_BYTES (16u << 10) /* per direction; a power of two */
#define RD_CTRL_MAGIC 0x72696e67u /* "ring" */
#define RD_CTRL_BYTES (64u << 10) /* arena bytes reserved for the control area */

typedef struct {
    _Atomic uint64_t head; /* bytes ever produced */
    char pad0[56];
    _Atomic uint64_t tail; /* bytes ever consumed */
    char pad1[56];
    _Atomic uint32_t consumer_sleeping; /* the consumer waits on the socket: Poke it */
    char pad2[60];
    uint8_t data[RD_CTLQ_BYTES];
} rd_ctlq_shm;

/* The arena's control area: written by the daemon at creation, then shared. */
typedef struct {
    uint32_t magic;
    uint32_t version;
    char pad[56];
    rd_ctlq_shm sq; /* client -> daemon */
    rd_ctlq_shm cq; /* daemon -> client */
} rd_ctrl;

_Static_assert(sizeof(rd_ctrl) <= RD_CTRL_BYTES, "control area exceeds its reservation");

/* One side of a queue: the shared part and this side's private index. */
typedef struct {
    rd_ctlq_shm *shm;
    uint64_t pos; /* producer: bytes produced; consumer: bytes consumed */
} rd_ctlq;

typedef enum {
    RD_CTLQ_OK = 0,
    RD_CTLQ_EMPTY = 1,   /* get: no whole frame yet */
    RD_CTLQ_FULL = 2,    /* put: no room; send on the socket instead */
    RD_CTLQ_BROKEN = -1, /* the shared indices or a frame are corrupt: close the session */
} rd_ctlq_status;

/* Lays out a fresh control area at base (which must be RD_CTRL_BYTES long, zeroed). */
void rd_ctrl_init(void *base);

/* Checks the magic and version of a control area. Returns 1 when usable. */
int rd_ctrl_valid(const void *base);

/* Attaches to one direction; pos starts from the shared indices' current values. */
void rd_ctlq_attach_producer(rd_ctlq *r, rd_ctlq_shm *shm);
void rd_ctlq_attach_consumer(rd_ctlq *r, rd_ctlq_shm *shm);

/* Producer: appends msg as one frame. Returns OK, FULL or BROKEN. */
rd_ctlq_status rd_ctlq_put(rd_ctlq *r, const rd_msg *msg);

/* Producer, after put: 1 when the consumer sleeps and must be Poked (orders the put before the
 * check, pairing with rd_ctlq_prepare_sleep). */
int rd_ctlq_consumer_asleep(rd_ctlq *r);

/* Consumer: takes the next frame, copied out of shared memory before it is decoded. Returns OK
 * with *msg (rd_frame_free), EMPTY, or BROKEN with err set. */
rd_ctlq_status rd_ctlq_get(rd_ctlq *r, uint32_t max_payload, rd_msg **msg, char *err,
                           size_t errlen);

/* Consumer about to block on the socket: announces it, then re-checks. Returns 1 when it may
 * sleep; 0 when a frame arrived meanwhile (the announcement is withdrawn). */
int rd_ctlq_prepare_sleep(rd_ctlq *r);

/* Consumer awake again: withdraws the announcement. */
void rd_ctlq_wake(rd_ctlq *r);

#endif
