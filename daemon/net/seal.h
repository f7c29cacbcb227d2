/* Sealing of daemon links (--encrypt): the keys of one connection, derived from the ring key and
 * its handshake, and the AEAD that seals each frame sent on it and opens each frame received.
 *
 * Each connection has a key per direction: libsodium's KDF over a master key that BLAKE2b, keyed
 * with the ring key, makes from the handshake (both sides' nonces, the PeerHello, the cipher).
 * Connections belong to one ring generation, so keys are per link and per generation. A frame's
 * nonce is the count of frames sealed before it in its direction, and the caller's header of the
 * frame is its associated data: a frame replayed, reordered, cut, altered or taken from another
 * connection or generation fails to open. The key derivation is libsodium's; the AEADs OpenSSL's
 * for frames from 4 KiB and libsodium's below (the same standard frames either way). Pure
 * functions; a seal is used by one thread at a time.
 */
#ifndef RD_SEAL_H
#define RD_SEAL_H

#include <stddef.h>
#include <stdint.h>

#include "auth.h"

#define RD_SEAL_TAG 16 /* bytes a sealed frame adds to its payload */

/* Ciphers, in the order of preference; PeerHello.encrypt carries the best a dialler has. */
typedef enum {
    RD_CIPHER_NONE = 0,   /* in the clear */
    RD_CIPHER_CHACHA = 1, /* ChaCha20-Poly1305 (IETF): any CPU */
    RD_CIPHER_AES = 2,    /* AES-256-GCM: CPUs with AES-NI and PCLMUL */
} rd_cipher;

/* One direction of a connection. */
typedef struct {
    uint8_t key[32];
    uint64_t frames; /* sealed or opened so far: the next frame's nonce */
} rd_seal_dir;

/* A connection's keys; all zero (cipher RD_CIPHER_NONE) for a link in the clear. */
typedef struct {
    rd_cipher cipher;
    rd_seal_dir tx, rx;
} rd_seal;

/* The best cipher this CPU runs (call after rd_auth_init). */
rd_cipher rd_seal_best(void);

/* The cipher two sides share: the better of the two that both run; RD_CIPHER_NONE when either
 * is (a link with one side sealing is refused, never run in the clear). */
rd_cipher rd_seal_agree(rd_cipher mine, rd_cipher theirs);

const char *rd_cipher_name(rd_cipher c);

/* Derives s's keys for cipher (not NONE) from the ring key and the handshake: the server's
 * challenge, the client's answer and the PeerHello frame as sent. client says which side this is
 * (its tx is the server's rx). */
void rd_seal_derive(rd_seal *s, rd_cipher cipher, const rd_auth_key *k, int client,
                    const uint8_t challenge[RD_AUTH_CHALLENGE_LEN],
                    const uint8_t answer[RD_AUTH_ANSWER_LEN], const uint8_t *hello,
                    size_t hello_len);

/* Seals len bytes of in into out (len bytes; out may be in) and their tag (RD_SEAL_TAG bytes)
 * under the next nonce of d, binding ad. Returns 0, or -2 when the crypto library failed (out of
 * memory): nothing is to be sent, and d stays where it was. */
int rd_seal_seal(rd_cipher cipher, rd_seal_dir *d, uint8_t *out, uint8_t tag[RD_SEAL_TAG],
                 const uint8_t *in, size_t len, const uint8_t *ad, size_t adlen);

/* Opens len sealed bytes of in with their tag into out (len bytes; out may be in) under the
 * next nonce of d and ad. Returns 0; -1 when they fail authentication, or -2 when the crypto
 * library failed (out of memory): out is then zeroed, and d stays where it was (its link is to
 * be dropped). */
int rd_seal_open(rd_cipher cipher, rd_seal_dir *d, uint8_t *out, const uint8_t *in, size_t len,
                 const uint8_t tag[RD_SEAL_TAG], const uint8_t *ad, size_t adlen);

/* Zeroes the keys. */
void rd_seal_wipe(rd_seal *s);

#endif
