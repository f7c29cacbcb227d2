/* Daemon-to-daemon connections: the TCP listener for peers, the authenticated handshake in both
 * directions (challenge-response, then PeerHello answered by PeerAccept or Error), and framed
 * control channels. Everything here runs on the loop thread. */
#ifndef RD_PEER_H
#define RD_PEER_H

#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "frame.h"
#include "ringd.h"
#include "seal.h"
#include "status.h"

struct event_base;
struct sockaddr_storage;

#define RD_PEER_ADDR_MAX 128 /* "HOST:PORT" */

typedef struct rd_peer_net rd_peer_net;
typedef struct rd_peer_dial rd_peer_dial;
typedef struct rd_peer_chan rd_peer_chan;

/* Decides on an authenticated inbound connection from its PeerHello. Returning RINGD_OK takes
 * ownership of fd and of its keys, seal (copied: it is valid during the call; cipher
 * RD_CIPHER_NONE in the clear), and PeerAccept{generation} is sent first; anything else refuses
 * it with err, which the function logs as it sees fit and which is sent back as Error before fd
 * is closed. A PeerHello whose --encrypt differs from the net's is refused before this. */
typedef rd_status (*rd_peer_accept_fn)(void *arg, const Ringd__PeerHello *h, int fd,
                                       const rd_seal *seal, const char *remote,
                                       uint64_t *generation, char *err, size_t errlen);

/* Binds listen ("HOST:PORT", port 0 for any) and serves handshakes; key must outlive the net.
 * encrypt: every connection, both ways, is sealed (--encrypt), and a peer that does not seal is
 * refused. timeout_ms bounds each handshake. Returns NULL with err set. */
rd_peer_net *rd_peer_net_new(struct event_base *base, const char *listen, const rd_auth_key *key,
                             int encrypt, int64_t timeout_ms, rd_peer_accept_fn fn, void *arg,
                             char *err, size_t errlen);

/* Closes the listener and every handshake in progress (dials get no callback).
 * rd_peer_net_free(NULL) is a no-op. */
void rd_peer_net_free(rd_peer_net *n);

/* The bound address, "HOST:PORT" with the real port. */
const char *rd_peer_net_address(const rd_peer_net *n);

/* A dial's outcome: fd >= 0 is an authenticated connection the peer accepted, owned by the
 * callee with its keys, seal (valid during the call; cipher RD_CIPHER_NONE in the clear); fd < 0
 * comes with why (the peer's Error message, or the local failure) and seal NULL. */
typedef void (*rd_peer_dial_fn)(void *arg, int fd, const rd_seal *seal, const char *why);

/* Connects to addr, proves the key, sends h and waits for the answer; fn is called exactly once
 * unless the dial is cancelled first. Returns NULL when out of memory or addr is malformed. */
rd_peer_dial *rd_peer_dial_new(rd_peer_net *n, const char *addr, const Ringd__PeerHello *h,
                               rd_peer_dial_fn fn, void *arg);

/* Abandons a dial in progress: no callback follows. NULL is a no-op. */
void rd_peer_dial_cancel(rd_peer_dial *d);

/* A message arrived on a channel (m is valid during the call; the channel may be freed in it). */
typedef void (*rd_peer_chan_msg_fn)(void *arg, rd_peer_chan *c, const rd_msg *m);
/* The channel failed (EOF, error, bad frame, too much unread output); free it. */
typedef void (*rd_peer_chan_err_fn)(void *arg, rd_peer_chan *c, const char *why);

/* Wraps an accepted or dialled connection into a framed channel, which then owns fd; its frames
 * are sealed with seal's keys (copied) unless its cipher is RD_CIPHER_NONE, and one that fails
 * to open fails the channel. peer names the other end in logs. Returns NULL when out of memory
 * (fd stays the caller's). */
rd_peer_chan *rd_peer_chan_new(struct event_base *base, int fd, const rd_seal *seal,
                               const char *peer, uint32_t max_frame, rd_peer_chan_msg_fn on_msg,
                               rd_peer_chan_err_fn on_err, void *arg);

/* Queues m; a failure is reported through on_err on a later loop turn. Returns the bytes queued
 * (framing included), 0 when nothing was (the channel failed). */
size_t rd_peer_chan_send(rd_peer_chan *c, const rd_msg *m);

/* Lets the channel go: no callback comes any more. What was sent still goes out, then the
 * connection is half closed and read until the peer closes it (a second at most), so the peer
 * reads everything sent rather than a reset. NULL is a no-op. */
void rd_peer_chan_free(rd_peer_chan *c);

/* Closes at once the connections still lingering (rd_peer_net_free does it). */
void rd_peer_chan_free_lingering(void);

const char *rd_peer_chan_name(const rd_peer_chan *c);

/* Splits "HOST:PORT" or "[V6]:PORT" and resolves it: numeric hosts without a lookup, a host name
 * with one blocking lookup, so only for start-up (the peer listener); dials look names up through
 * evdns. Returns RINGD_OK, or RINGD_E_INVALID with err set (a malformed address, or one that does
 * not resolve). */
rd_status rd_peer_resolve(const char *addr, struct sockaddr_storage *ss, unsigned *sslen, char *err,
                          size_t errlen);

/* A probe: does anything listen at addr ("host:port")? One non-blocking connect, closed at
 * once, bounded by a second. fn gets alive 1 (it accepted), 0 (refused: no process listens
 * there) or -1 (no answer or another error), with a reason. */
typedef struct rd_peer_probe rd_peer_probe;
typedef void (*rd_peer_probe_fn)(void *arg, int alive, const char *why);

/* Starts a probe after delay_ms; NULL when addr does not resolve or out of memory. fn is called
 * on a later turn, once, unless cancelled first. */
rd_peer_probe *rd_peer_probe_new(struct event_base *base, const char *addr, int delay_ms,
                                 rd_peer_probe_fn fn, void *arg);

/* Stops a probe before it reports. NULL is a no-op. */
void rd_peer_probe_cancel(rd_peer_probe *p);

#endif
