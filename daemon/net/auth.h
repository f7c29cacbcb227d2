/* The ring's shared key and the HMAC-SHA-256 challenge-response that opens every
 * daemon-to-daemon connection, as pure functions over byte strings (the I/O is the caller's).
 *
 *   server -> client  challenge: magic "RNGD", version, 32-byte server nonce
 * (RD_AUTH_CHALLENGE_LEN) client -> server  answer:    32-byte client nonce, HMAC(key, "c" |
 * challenge | nonce_c) server -> client  confirm:   HMAC(key, "s" | challenge | answer)
 *
 * Each side proves the key before the other trusts a byte after it. Thread-safe. */
#ifndef RD_AUTH_H
#define RD_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#define RD_AUTH_CHALLENGE_LEN 40
#define RD_AUTH_ANSWER_LEN 64
#define RD_AUTH_CONFIRM_LEN 32
#define RD_AUTH_KEY_MIN 16 /* bytes of key material a key file must hold */

typedef struct {
    uint8_t key[32]; /* SHA-256 of the key file's contents */
    int insecure;    /* --insecure: a fixed, public key; logged as such */
} rd_auth_key;

/* Initialises the crypto library; call once before any other function. Returns RINGD_OK, or
 * RINGD_E_SYSTEM when libsodium cannot start. */
rd_status rd_auth_init(void);

/* Loads the key from path: its contents without trailing whitespace, at least RD_AUTH_KEY_MIN
 * bytes, at most 64 KiB. Warns (rd_log) when group or others may read the file. Returns RINGD_OK,
 * or RINGD_E_SYSTEM (cannot read it) or RINGD_E_INVALID (not a key) with err naming the file and
 * the problem. */
rd_status rd_auth_load(rd_auth_key *k, const char *path, char *err, size_t errlen);

/* The key of --insecure rings: every such daemon knows it, so it proves nothing. */
void rd_auth_insecure(rd_auth_key *k);

/* Server: a fresh challenge. */
void rd_auth_challenge(uint8_t challenge[RD_AUTH_CHALLENGE_LEN]);

/* Client: checks the challenge's magic and version and computes the answer. Returns RINGD_OK, or
 * RINGD_E_PROTOCOL when the bytes are not a ringd challenge. */
rd_status rd_auth_answer(const rd_auth_key *k, const uint8_t challenge[RD_AUTH_CHALLENGE_LEN],
                         uint8_t answer[RD_AUTH_ANSWER_LEN]);

/* Server: verifies the answer in constant time and computes the confirmation. Returns RINGD_OK,
 * or RINGD_E_REFUSED when the client does not hold the key. */
rd_status rd_auth_verify_answer(const rd_auth_key *k,
                                const uint8_t challenge[RD_AUTH_CHALLENGE_LEN],
                                const uint8_t answer[RD_AUTH_ANSWER_LEN],
                                uint8_t confirm[RD_AUTH_CONFIRM_LEN]);

/* Client: verifies the server's confirmation. Returns RINGD_OK, or RINGD_E_REFUSED when the
 * server does not hold the key. */
rd_status rd_auth_verify_confirm(const rd_auth_key *k,
                                 const uint8_t challenge[RD_AUTH_CHALLENGE_LEN],
                                 const uint8_t answer[RD_AUTH_ANSWER_LEN],
                                 const uint8_t confirm[RD_AUTH_CONFIRM_LEN]);

#endif
