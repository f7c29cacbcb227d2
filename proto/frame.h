/* Framing of control messages: a 4-byte little-endian length, then one serialized ringd.Msg. */
#ifndef RD_FRAME_H
#define RD_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "ringd.pb-c.h"

#define RD_PROTOCOL_VERSION 1 /* client <-> daemon (Hello) */
/* Daemon <-> daemon (PeerHello). 2: Ready.stalled, which a daemon of 1 would ignore, leaving
 * stalled ops to wait; 4: Go.tuning, which a daemon of 3 would ignore, grouping by its own
 * flags; 5: direct links of alltoall (LINK_PAIR, PeerHello.pair_links), which a daemon of 4
 * would refuse; 6: OpSpec.shape, compared across nodes, which a daemon of 5 would neither send
 * nor compare; 7: PeerHello.encrypt and sealed links (--encrypt), which a daemon of 6 would
 * ignore, talking in the clear to a node that seals, and PeerHello.to, which it would not send;
 * 8: Tuning.doubling_bytes, which a daemon of 7 would ignore, running round the ring an
 * allreduce the others run by recursive doubling; 9: broadcast and allgather under
 * Tuning.doubling_bytes by recursive doubling, which a daemon of 8 would run round the ring;
 * 10: reducescatter under it by recursive halving, which a daemon of 9 would run round the
 * ring, and broadcast, allgather and reducescatter of 3 or 5 nodes round the ring, which a
 * daemon of 9 would run by recursive doubling; PeerHello.max_frame and direct_bytes, which
 * both ends must agree on (a node batches its announcements up to its --max-frame); 11: control
 * links along a tree, every message in a Relay, which a daemon of 10 would neither dial nor pass
 * on; 12: OpSpec.fill and cached (a node's announcements of ops it announced before at that
 * generation name only the slot), which a daemon of 11 would take for ops without a name; nodes
 * of one job run one version. */
#define RD_PEER_PROTOCOL_VERSION 12
#define RD_FRAME_HEADER 4
#define RD_FRAME_MAX_DEFAULT (1u << 20)
#define RD_NAME_MAX 256           /* bytes in a job or tensor name, terminator excluded */
#define RD_JOB_RESERVED '~'       /* first byte of the jobs ringd names itself (no client's) */
#define RD_JOIN_NAME "ringd.join" /* the name of ringd_join's op (Submit.join), and no other's */

typedef Ringd__Msg rd_msg;

typedef enum {
    RD_FRAME_OK = 0,   /* one message decoded */
    RD_FRAME_NEED = 1, /* the buffer holds less than one whole frame */
    RD_FRAME_BAD = -1, /* too large, undecodable, or of no known type: close the connection */
} rd_frame_status;

/* Bytes one frame of msg takes on the wire, header included. */
size_t rd_frame_size(const rd_msg *msg);

/* Writes the frame of msg into buf, which must hold rd_frame_size(msg) bytes.
 * Returns the bytes written. */
size_t rd_frame_pack(const rd_msg *msg, uint8_t *buf);

/* Decodes the first frame of buf[0..len). On RD_FRAME_OK, *msg is owned by the caller
 * (rd_frame_free) and *consumed is the frame's length; on RD_FRAME_BAD, err says why.
 * Frames whose payload exceeds max_payload are refused before any of it is read. */
rd_frame_status rd_frame_decode(const uint8_t *buf, size_t len, uint32_t max_payload, rd_msg **msg,
                                size_t *consumed, char *err, size_t errlen);

/* Payload length announced by a frame header (buf holds at least RD_FRAME_HEADER bytes). */
uint32_t rd_frame_payload_len(const uint8_t *buf);

void rd_frame_free(rd_msg *msg);

/* Bytes a Relay adds around its message in a Relays frame, at most: the frame's header and
 * tags, and the Relay's own fields and lengths. */
#define RD_RELAY_OVERHEAD 64

/* A Relay of inner, a message from ring position origin for position to (-1: every node): one
 * allocation holding the message packed (rd_relay_free frees it); NULL out of memory. */
Ringd__Relay *rd_relay_new(const rd_msg *inner, uint32_t origin, int to);
/* A copy of r, one allocation as rd_relay_new's; NULL out of memory. */
Ringd__Relay *rd_relay_copy(const Ringd__Relay *r);
/* NULL is a no-op. */
void rd_relay_free(Ringd__Relay *r);
/* Bytes r takes as an entry of a Relays frame. */
size_t rd_relay_size(const Ringd__Relay *r);
/* Makes *m the Relays message of relays[0..n), borrowed, held in *rs. */
void rd_relays_msg(rd_msg *m, Ringd__Relays *rs, Ringd__Relay **relays, size_t n);
/* Opens r, a Relay a peer sent: *inner (the caller's, rd_frame_free) is the message it carries,
 * from ring position *origin to position *to (-1: every node). RD_FRAME_BAD with err set when r
 * carries nothing, something undecodable, Relays or a Poke, or goes to no possible position. */
rd_frame_status rd_relay_open(const Ringd__Relay *r, rd_msg **inner, uint32_t *origin, int *to,
                              char *err, size_t errlen);

/* A hash of a name for tables (FNV-1a: names are short and chosen by clients). */
size_t rd_name_hash(const char *s);

/* 1 when s is a usable job or tensor name: 1..RD_NAME_MAX bytes of printable ASCII. */
int rd_name_valid(const char *s);

/* 1 when s is a job name a client may use: a valid name that does not start with
 * RD_JOB_RESERVED. */
int rd_job_name_valid(const char *s);

#endif
