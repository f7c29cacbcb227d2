/* The ring's shared key (key file or --insecure) and the HMAC-SHA-256 challenge-response over it.
 */
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

/* Largest key file accepted; one byte more is read to tell "exactly this big" from "bigger". */
#define AUTH_FILE_MAX (64u * 1024u)

#define AUTH_NONCE_LEN 32
#define AUTH_MAC_LEN crypto_auth_hmacsha256_BYTES

/* Challenge layout: magic, then the protocol version (big-endian), then the server's nonce. The
 * version is checked by the client, so daemons speaking different handshakes fail at the first
 * message with a clear error instead of at a MAC mismatch. */
static const uint8_t auth_magic[4] = {'R', 'N', 'G', 'D'};
static const uint8_t auth_version[4] = {0, 0, 0, 1};
#define AUTH_MAGIC_OFF 0
#define AUTH_VERSION_OFF 4
#define AUTH_NONCE_OFF 8

_Static_assert(AUTH_NONCE_OFF + AUTH_NONCE_LEN == RD_AUTH_CHALLENGE_LEN, "challenge layout");
_Static_assert(AUTH_NONCE_LEN + AUTH_MAC_LEN == RD_AUTH_ANSWER_LEN, "answer layout");
_Static_assert(AUTH_MAC_LEN == RD_AUTH_CONFIRM_LEN, "confirm layout");
_Static_assert(sizeof(((rd_auth_key *)0)->key) == crypto_hash_sha256_BYTES, "key size");
_Static_assert(crypto_auth_hmacsha256_BYTES == 32, "crypto_verify_32 compares MACs");

/* Initialises libsodium (idempotent; it returns 1 when already done). */
rd_status rd_auth_init(void)
{
    return sodium_init() < 0 ? RINGD_E_SYSTEM : RINGD_OK;
}

/* Reads at most cap bytes of fd into buf, retrying short reads and EINTR. Returns the byte count,
 * or -1 with errno set. */
static ssize_t read_upto(int fd, uint8_t *buf, size_t cap)
{
    size_t got = 0;
    while (got < cap) {
        ssize_t n = read(fd, buf + got, cap - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        got += (size_t)n;
    }
    return (ssize_t)got;
}

/* Reads the key file, checks its size, and stores the SHA-256 of its contents (trailing whitespace
 * removed) in k. k is left untouched on failure. The file's bytes are wiped before returning. */
rd_status rd_auth_load(rd_auth_key *k, const char *path, char *err, size_t errlen)
{
    uint8_t *buf = NULL;
    int fd = -1;
    rd_status rc = RINGD_E_SYSTEM;
    struct stat st;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "key file %s: %s", path, strerror(errno));
        goto out;
    }
    if (fstat(fd, &st) != 0) {
        snprintf(err, errlen, "key file %s: fstat: %s", path, strerror(errno));
        goto out;
    }
    if (S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "key file %s: %s", path, strerror(EISDIR));
        goto out;
    }
    buf = malloc(AUTH_FILE_MAX + 1);
    if (buf == NULL) {
        snprintf(err, errlen, "key file %s: %s", path, strerror(ENOMEM));
        rc = RINGD_E_NOMEM;
        goto out;
    }
    ssize_t n = read_upto(fd, buf, AUTH_FILE_MAX + 1);
    if (n < 0) {
        snprintf(err, errlen, "key file %s: read: %s", path, strerror(errno));
        goto out;
    }
    size_t len = (size_t)n;
    rc = RINGD_E_INVALID; /* read: what follows is about its contents */
    if (len > AUTH_FILE_MAX) {
        snprintf(err, errlen, "key file %s: larger than %u bytes; a key needs only 32 random bytes",
                 path, AUTH_FILE_MAX);
        goto out;
    }
    while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r' || buf[len - 1] == ' ' ||
                       buf[len - 1] == '\t'))
        len--;
    if (len < RD_AUTH_KEY_MIN) {
        snprintf(err, errlen,
                 "key file %s: %zu bytes of key (trailing whitespace removed), at least %d needed; "
                 "make one with: head -c 32 /dev/urandom | base64 > %s",
                 path, len, RD_AUTH_KEY_MIN, path);
        goto out;
    }
    /* A group read bit for the daemon's own group is how Kubernetes hands a Secret to a non-root
     * container (fsGroup): only a group that others share is worth a warning. */
    int group_shared = (st.st_mode & S_IRGRP) && st.st_gid != getegid();
    if ((st.st_mode & S_IROTH) || group_shared)
        rd_log(RD_LOG_WARN, "auth", "key file %s is readable by %s (mode %04o); chmod 600 %s", path,
               (st.st_mode & S_IROTH) ? "others" : "its group", (unsigned)(st.st_mode & 07777),
               path);
    crypto_hash_sha256(k->key, buf, len);
    k->insecure = 0;
    rc = RINGD_OK;

out:
    if (buf != NULL) {
        sodium_memzero(buf, AUTH_FILE_MAX + 1);
        free(buf);
    }
    if (fd >= 0)
        close(fd);
    return rc;
}

/* The fixed key of --insecure rings: SHA-256 of a public string. No key file can produce it, since
 * the string is shorter than RD_AUTH_KEY_MIN. */
void rd_auth_insecure(rd_auth_key *k)
{
    static const char phrase[] = "ringd-insecure";
    _Static_assert(sizeof(phrase) - 1 < RD_AUTH_KEY_MIN, "insecure phrase must not be a valid key");
    crypto_hash_sha256(k->key, (const unsigned char *)phrase, sizeof(phrase) - 1);
    k->insecure = 1;
}

/* Magic, version and a fresh random nonce. */
void rd_auth_challenge(uint8_t challenge[RD_AUTH_CHALLENGE_LEN])
{
    memcpy(challenge + AUTH_MAGIC_OFF, auth_magic, sizeof(auth_magic));
    memcpy(challenge + AUTH_VERSION_OFF, auth_version, sizeof(auth_version));
    randombytes_buf(challenge + AUTH_NONCE_OFF, AUTH_NONCE_LEN);
}

/* mac = HMAC-SHA-256(key, label | a | b). The one-byte label keeps the client's and the server's
 * MACs apart, so neither can be reflected back as the other. */
static void auth_mac(const rd_auth_key *k, char label, const uint8_t *a, size_t alen,
                     const uint8_t *b, size_t blen, uint8_t mac[AUTH_MAC_LEN])
{
    crypto_auth_hmacsha256_state st;
    const unsigned char l = (unsigned char)label;

    crypto_auth_hmacsha256_init(&st, k->key, sizeof(k->key));
    crypto_auth_hmacsha256_update(&st, &l, 1);
    crypto_auth_hmacsha256_update(&st, a, alen);
    crypto_auth_hmacsha256_update(&st, b, blen);
    crypto_auth_hmacsha256_final(&st, mac);
    sodium_memzero(&st, sizeof(st));
}

/* Refuses anything without our magic and version; otherwise answers with a fresh nonce and the
 * client MAC over the challenge and that nonce. */
rd_status rd_auth_answer(const rd_auth_key *k, const uint8_t challenge[RD_AUTH_CHALLENGE_LEN],
                         uint8_t answer[RD_AUTH_ANSWER_LEN])
{
    if (memcmp(challenge + AUTH_MAGIC_OFF, auth_magic, sizeof(auth_magic)) != 0 ||
        memcmp(challenge + AUTH_VERSION_OFF, auth_version, sizeof(auth_version)) != 0)
        return RINGD_E_PROTOCOL;
    randombytes_buf(answer, AUTH_NONCE_LEN);
    auth_mac(k, 'c', challenge, RD_AUTH_CHALLENGE_LEN, answer, AUTH_NONCE_LEN,
             answer + AUTH_NONCE_LEN);
    return RINGD_OK;
}

/* Recomputes the client MAC and compares it in constant time; on success writes the server MAC
 * over the challenge and the whole answer into confirm, on failure zeroes confirm. */
rd_status rd_auth_verify_answer(const rd_auth_key *k,
                                const uint8_t challenge[RD_AUTH_CHALLENGE_LEN],
                                const uint8_t answer[RD_AUTH_ANSWER_LEN],
                                uint8_t confirm[RD_AUTH_CONFIRM_LEN])
{
    uint8_t want[AUTH_MAC_LEN];

    auth_mac(k, 'c', challenge, RD_AUTH_CHALLENGE_LEN, answer, AUTH_NONCE_LEN, want);
    int ok = crypto_verify_32(want, answer + AUTH_NONCE_LEN) == 0;
    sodium_memzero(want, sizeof(want));
    if (!ok) {
        sodium_memzero(confirm, RD_AUTH_CONFIRM_LEN);
        return RINGD_E_REFUSED;
    }
    auth_mac(k, 's', challenge, RD_AUTH_CHALLENGE_LEN, answer, RD_AUTH_ANSWER_LEN, confirm);
    return RINGD_OK;
}

/* Recomputes the server MAC and compares it in constant time. */
rd_status rd_auth_verify_confirm(const rd_auth_key *k,
                                 const uint8_t challenge[RD_AUTH_CHALLENGE_LEN],
                                 const uint8_t answer[RD_AUTH_ANSWER_LEN],
                                 const uint8_t confirm[RD_AUTH_CONFIRM_LEN])
{
    uint8_t want[AUTH_MAC_LEN];

    auth_mac(k, 's', challenge, RD_AUTH_CHALLENGE_LEN, answer, RD_AUTH_ANSWER_LEN, want);
    rd_status rc = crypto_verify_32(want, confirm) == 0 ? RINGD_OK : RINGD_E_REFUSED;
    sodium_memzero(want, sizeof(want));
    return rc;
}
