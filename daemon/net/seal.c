/* Sealing of daemon links: key derivation from the handshake (libsodium) and the AEAD of each
 * frame: the same standard AES-256-GCM or ChaCha20-Poly1305 from either library, by size. A
 * large frame goes through OpenSSL's EVP (2.4-2.6x libsodium 1.0.18's throughput per core here,
 * which bounds a sealed ring's bandwidth), a small one through libsodium (no context to make:
 * 0.17 against 0.71 us for a 64-byte frame, which bounds a small op's latency). */
#include "seal.h"

#include <openssl/evp.h>
#include <sodium.h>
#include <string.h>

/* The keys the KDF makes are the AEADs' (both take 32 bytes, a 12-byte nonce, a 16-byte tag). */
_Static_assert(crypto_kdf_KEYBYTES == 32 && crypto_aead_aes256gcm_KEYBYTES == 32 &&
                   crypto_aead_chacha20poly1305_IETF_KEYBYTES == 32,
               "key sizes");
_Static_assert(crypto_aead_aes256gcm_ABYTES == RD_SEAL_TAG &&
                   crypto_aead_chacha20poly1305_IETF_ABYTES == RD_SEAL_TAG,
               "tag sizes");

#define SEAL_KDF_CONTEXT "ringdlnk" /* crypto_kdf_CONTEXTBYTES (8) characters */
#define SEAL_TX_CLIENT 1            /* subkey ids: the client's direction */
#define SEAL_TX_SERVER 2            /* the server's */

rd_cipher rd_seal_best(void)
{
    return crypto_aead_aes256gcm_is_available() ? RD_CIPHER_AES : RD_CIPHER_CHACHA;
}

rd_cipher rd_seal_agree(rd_cipher mine, rd_cipher theirs)
{
    return mine < theirs ? mine : theirs; /* NONE is the least */
}

const char *rd_cipher_name(rd_cipher c)
{
    switch (c) {
    case RD_CIPHER_AES: return "AES-256-GCM";
    case RD_CIPHER_CHACHA: return "ChaCha20-Poly1305";
    case RD_CIPHER_NONE: break;
    }
    return "none";
}

/* The master key of a connection: BLAKE2b keyed with the ring key over a label, the cipher and
 * every byte of the handshake that both sides hold, so that either side altered in flight
 * leaves the two with different keys. */
void rd_seal_derive(rd_seal *s, rd_cipher cipher, const rd_auth_key *k, int client,
                    const uint8_t challenge[RD_AUTH_CHALLENGE_LEN],
                    const uint8_t answer[RD_AUTH_ANSWER_LEN], const uint8_t *hello,
                    size_t hello_len)
{
    static const char label[] = "ringd link keys 1";
    const uint8_t c = (uint8_t)cipher;
    uint8_t master[crypto_kdf_KEYBYTES];
    crypto_generichash_state st;

    crypto_generichash_init(&st, k->key, sizeof(k->key), sizeof(master));
    crypto_generichash_update(&st, (const uint8_t *)label, sizeof(label) - 1);
    crypto_generichash_update(&st, &c, 1);
    crypto_generichash_update(&st, challenge, RD_AUTH_CHALLENGE_LEN);
    crypto_generichash_update(&st, answer, RD_AUTH_ANSWER_LEN);
    crypto_generichash_update(&st, hello, hello_len);
    crypto_generichash_final(&st, master, sizeof(master));
    sodium_memzero(&st, sizeof(st));

    memset(s, 0, sizeof(*s));
    s->cipher = cipher;
    crypto_kdf_derive_from_key(s->tx.key, sizeof(s->tx.key),
                               client ? SEAL_TX_CLIENT : SEAL_TX_SERVER, SEAL_KDF_CONTEXT, master);
    crypto_kdf_derive_from_key(s->rx.key, sizeof(s->rx.key),
                               client ? SEAL_TX_SERVER : SEAL_TX_CLIENT, SEAL_KDF_CONTEXT, master);
    sodium_memzero(master, sizeof(master));
}

/* The nonce of d's next frame: its count, little-endian, then zeros. Never reused under a key:
 * the count only grows, and every connection has keys of its own. */
static void seal_nonce(const rd_seal_dir *d, uint8_t nonce[12])
{
    memset(nonce, 0, 12);
    for (int i = 0; i < 8; i++)
        nonce[i] = (uint8_t)(d->frames >> (8 * i));
}

static const EVP_CIPHER *seal_evp(rd_cipher cipher)
{
    return cipher == RD_CIPHER_AES ? EVP_aes_256_gcm() : EVP_chacha20_poly1305();
}

/* EVP counts bytes in int: len in pieces that fit. */
#define SEAL_PIECE ((size_t)1 << 30)
/* Frames shorter than this go through libsodium: the libraries cost the same at about 1.7 KB. */
#define SEAL_SMALL ((size_t)4096)

/* One frame through OpenSSL's EVP: sealed into out and tag (enc), or opened into out against
 * tag. Returns 0, -1 when the frame is not authentic, or -2 when the library failed. */
static int evp_aead(int enc, rd_cipher cipher, const uint8_t key[32], const uint8_t nonce[12],
                    uint8_t *out, const uint8_t *in, size_t len, uint8_t tag[RD_SEAL_TAG],
                    const uint8_t *ad, size_t adlen)
{
    int n;
    EVP_CIPHER_CTX *x = EVP_CIPHER_CTX_new();
    int ok = x != NULL && EVP_CipherInit_ex(x, seal_evp(cipher), NULL, key, nonce, enc) == 1 &&
             (adlen == 0 || EVP_CipherUpdate(x, NULL, &n, ad, (int)adlen) == 1);
    for (size_t off = 0; ok && off < len; off += SEAL_PIECE) {
        size_t piece = len - off < SEAL_PIECE ? len - off : SEAL_PIECE;
        ok = EVP_CipherUpdate(x, out + off, &n, in + off, (int)piece) == 1;
    }
    ok = ok && (enc || EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_AEAD_SET_TAG, RD_SEAL_TAG, tag) == 1);
    /* Opening, only the final step checks the tag: its failure alone says "not authentic". */
    int rc = !ok ? -2 : EVP_CipherFinal_ex(x, out + len, &n) != 1 ? (enc ? -2 : -1) : 0;
    if (rc == 0 && enc && EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_AEAD_GET_TAG, RD_SEAL_TAG, tag) != 1)
        rc = -2;
    EVP_CIPHER_CTX_free(x);
    return rc;
}

int rd_seal_seal(rd_cipher cipher, rd_seal_dir *d, uint8_t *out, uint8_t tag[RD_SEAL_TAG],
                 const uint8_t *in, size_t len, const uint8_t *ad, size_t adlen)
{
    uint8_t nonce[12];
    int rc;
    seal_nonce(d, nonce);
    if (len >= SEAL_SMALL)
        rc = evp_aead(1, cipher, d->key, nonce, out, in, len, tag, ad, adlen);
    else if (cipher == RD_CIPHER_AES)
        rc = crypto_aead_aes256gcm_encrypt_detached(out, tag, NULL, in, len, ad, adlen, NULL, nonce,
                                                    d->key);
    else
        rc = crypto_aead_chacha20poly1305_ietf_encrypt_detached(out, tag, NULL, in, len, ad, adlen,
                                                                NULL, nonce, d->key);
    if (rc != 0)
        return -2;
    d->frames++; /* only a frame that went out sealed takes a nonce */
    return 0;
}

int rd_seal_open(rd_cipher cipher, rd_seal_dir *d, uint8_t *out, const uint8_t *in, size_t len,
                 const uint8_t tag[RD_SEAL_TAG], const uint8_t *ad, size_t adlen)
{
    uint8_t nonce[12], t[RD_SEAL_TAG];
    int rc;
    seal_nonce(d, nonce);
    memcpy(t, tag, sizeof(t)); /* EVP takes the tag it checks as writable */
    if (len >= SEAL_SMALL)
        rc = evp_aead(0, cipher, d->key, nonce, out, in, len, t, ad, adlen);
    else if (cipher == RD_CIPHER_AES)
        rc = crypto_aead_aes256gcm_decrypt_detached(out, NULL, in, len, tag, ad, adlen, nonce,
                                                    d->key);
    else
        rc = crypto_aead_chacha20poly1305_ietf_decrypt_detached(out, NULL, in, len, tag, ad, adlen,
                                                                nonce, d->key);
    if (rc != 0) {
        sodium_memzero(out, len);
        return rc == -2 ? -2 : -1; /* libsodium's failures are all "not authentic" */
    }
    d->frames++;
    return 0;
}

void rd_seal_wipe(rd_seal *s)
{
    sodium_memzero(s, sizeof(*s));
}
