/* Sealing of daemon links (daemon/net/seal.c) on its own, and a sealed control channel
 * (daemon/net/peer.c) over a socket pair whose other end is the test: what crosses is not in the
 * clear, and a frame altered, replayed or sealed under other keys fails the channel. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <event2/event.h>
#include <poll.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "frame.h"
#include "peer.h"
#include "seal.h"

static rd_auth_key key;
static uint8_t chal[RD_AUTH_CHALLENGE_LEN], ans[RD_AUTH_ANSWER_LEN], hello[40];

static void setup(void)
{
    cr_assert_eq(rd_auth_init(), RINGD_OK);
    randombytes_buf(key.key, sizeof(key.key));
    randombytes_buf(chal, sizeof(chal));
    randombytes_buf(ans, sizeof(ans));
    randombytes_buf(hello, sizeof(hello));
}

TestSuite(seal, .init = setup, .timeout = 30);

static const rd_cipher ciphers[] = {RD_CIPHER_CHACHA, RD_CIPHER_AES};

/* 1 when the CPU runs c (AES-256-GCM needs AES-NI); libsodium refuses it otherwise. */
static int runs(rd_cipher c)
{
    return c != RD_CIPHER_AES || rd_seal_best() == RD_CIPHER_AES;
}

Test(seal, both_ends_of_a_handshake_derive_each_others_keys_and_nothing_else_does)
{
    rd_seal c, s, other;
    rd_seal_derive(&c, RD_CIPHER_CHACHA, &key, 1, chal, ans, hello, sizeof(hello));
    rd_seal_derive(&s, RD_CIPHER_CHACHA, &key, 0, chal, ans, hello, sizeof(hello));
    cr_assert_eq(c.cipher, RD_CIPHER_CHACHA);
    cr_assert_arr_eq(c.tx.key, s.rx.key, 32);
    cr_assert_arr_eq(c.rx.key, s.tx.key, 32);
    cr_assert_arr_neq(c.tx.key, c.rx.key, 32, "both directions share a key");
    /* a byte of the PeerHello, the nonces, the cipher or the ring key changed: other keys */
    hello[3] ^= 1;
    rd_seal_derive(&other, RD_CIPHER_CHACHA, &key, 1, chal, ans, hello, sizeof(hello));
    cr_assert_arr_neq(other.tx.key, c.tx.key, 32, "the PeerHello is not bound");
    hello[3] ^= 1;
    ans[0] ^= 1;
    rd_seal_derive(&other, RD_CIPHER_CHACHA, &key, 1, chal, ans, hello, sizeof(hello));
    cr_assert_arr_neq(other.tx.key, c.tx.key, 32, "the client's nonce is not bound");
    ans[0] ^= 1;
    rd_seal_derive(&other, RD_CIPHER_AES, &key, 1, chal, ans, hello, sizeof(hello));
    cr_assert_arr_neq(other.tx.key, c.tx.key, 32, "the cipher is not bound");
    rd_auth_key k2 = key;
    k2.key[31] ^= 1;
    rd_seal_derive(&other, RD_CIPHER_CHACHA, &k2, 1, chal, ans, hello, sizeof(hello));
    cr_assert_arr_neq(other.tx.key, c.tx.key, 32, "the ring key is not used");
    rd_seal_wipe(&c);
    uint8_t zero[sizeof(c)];
    memset(zero, 0, sizeof(zero));
    cr_assert_arr_eq(&c, zero, sizeof(c), "wiped keys are not zero");
}

Test(seal, the_ciphers_agreed_are_the_best_both_run)
{
    cr_assert_eq(rd_seal_agree(RD_CIPHER_AES, RD_CIPHER_AES), RD_CIPHER_AES);
    cr_assert_eq(rd_seal_agree(RD_CIPHER_AES, RD_CIPHER_CHACHA), RD_CIPHER_CHACHA);
    cr_assert_eq(rd_seal_agree(RD_CIPHER_CHACHA, RD_CIPHER_AES), RD_CIPHER_CHACHA);
    cr_assert_eq(rd_seal_agree(RD_CIPHER_AES, RD_CIPHER_NONE), RD_CIPHER_NONE);
    cr_assert_eq(rd_seal_agree(RD_CIPHER_NONE, RD_CIPHER_CHACHA), RD_CIPHER_NONE);
    cr_assert_str_eq(rd_cipher_name(RD_CIPHER_AES), "AES-256-GCM");
    cr_assert_str_eq(rd_cipher_name(RD_CIPHER_CHACHA), "ChaCha20-Poly1305");
}

/* Frames of len bytes under cipher ci: in order, in place or not, and nothing else opens. */
static void frames_in_order(rd_cipher ci, size_t len)
{
    rd_seal c, s;
    rd_seal_derive(&c, ci, &key, 1, chal, ans, hello, sizeof(hello));
    rd_seal_derive(&s, ci, &key, 0, chal, ans, hello, sizeof(hello));
    uint8_t *msg = malloc(len), *box = malloc(len), *out = malloc(len), *frame1 = malloc(len);
    uint8_t tag[RD_SEAL_TAG], tag1[RD_SEAL_TAG], ad[32];
    cr_assert(msg != NULL && box != NULL && out != NULL && frame1 != NULL);
    for (size_t k = 0; k < len; k++)
        msg[k] = (uint8_t)(k * 31 + 7);
    memset(ad, 0x5a, sizeof(ad));
    /* frame 0 out of place, frame 1 in place */
    cr_assert_eq(rd_seal_seal(ci, &c.tx, box, tag, msg, len, ad, sizeof(ad)), 0);
    cr_assert(memcmp(box, msg, len) != 0, "%s: sealed bytes are the message", rd_cipher_name(ci));
    cr_assert_eq(rd_seal_open(ci, &s.rx, out, box, len, tag, ad, sizeof(ad)), 0);
    cr_assert_arr_eq(out, msg, len);
    memcpy(box, msg, len);
    cr_assert_eq(rd_seal_seal(ci, &c.tx, box, tag, box, len, ad, sizeof(ad)), 0);
    memcpy(frame1, box, len);
    memcpy(tag1, tag, sizeof(tag));
    /* altered: a payload bit, a tag bit, a header bit; each leaves out zeroed */
    box[len / 2] ^= 4;
    memset(out, 1, len);
    cr_assert_eq(rd_seal_open(ci, &s.rx, out, box, len, tag, ad, sizeof(ad)), -1);
    for (size_t k = 0; k < len; k++)
        cr_assert_eq(out[k], 0, "%s: byte %zu of a refused frame kept", rd_cipher_name(ci), k);
    box[len / 2] ^= 4;
    tag[0] ^= 1;
    cr_assert_eq(rd_seal_open(ci, &s.rx, out, box, len, tag, ad, sizeof(ad)), -1);
    tag[0] ^= 1;
    ad[5] ^= 1;
    cr_assert_eq(rd_seal_open(ci, &s.rx, out, box, len, tag, ad, sizeof(ad)), -1);
    ad[5] ^= 1;
    /* failures did not move the count: frame 1 opens now, in place, then never again */
    cr_assert_eq(rd_seal_open(ci, &s.rx, box, box, len, tag, ad, sizeof(ad)), 0);
    cr_assert_arr_eq(box, msg, len);
    cr_assert_eq(rd_seal_open(ci, &s.rx, out, frame1, len, tag1, ad, sizeof(ad)), -1,
                 "%s: a replayed frame opened", rd_cipher_name(ci));
    /* the other direction's key opens nothing of this one, at the same count */
    c.rx.frames = c.tx.frames;
    cr_assert_eq(rd_seal_seal(ci, &c.tx, box, tag, msg, len, ad, sizeof(ad)), 0);
    cr_assert_eq(rd_seal_open(ci, &c.rx, out, box, len, tag, ad, sizeof(ad)), -1);
    s.rx.frames = c.tx.frames - 1; /* while this direction's does */
    cr_assert_eq(rd_seal_open(ci, &s.rx, out, box, len, tag, ad, sizeof(ad)), 0);
    free(msg);
    free(box);
    free(out);
    free(frame1);
}

/* fn for every cipher this CPU runs and every length of lens[0..n) */
static void each_cipher(void (*fn)(rd_cipher, size_t), const size_t *lens, size_t n)
{
    for (size_t i = 0; i < sizeof(ciphers) / sizeof(ciphers[0]); i++)
        for (size_t k = 0; runs(ciphers[i]) && k < n; k++)
            fn(ciphers[i], lens[k]);
}

Test(seal, frames_open_in_order_in_place_or_not_and_nothing_else_opens)
{
    static const size_t lens[] = {3000, 70000}; /* through libsodium, through OpenSSL */
    each_cipher(frames_in_order, lens, sizeof(lens) / sizeof(lens[0]));
}

/* seals a frame of len bytes with ringd and opens it with libsodium, and back */
static void standard_frames(rd_cipher ci, size_t len)
{
    rd_seal c;
    rd_seal_derive(&c, ci, &key, 1, chal, ans, hello, sizeof(hello));
    uint8_t *msg = malloc(len), *box = malloc(len), *out = malloc(len);
    uint8_t tag[RD_SEAL_TAG], ad[32], nonce[12] = {0};
    cr_assert(msg != NULL && box != NULL && out != NULL);
    for (size_t k = 0; k < len; k++)
        msg[k] = (uint8_t)(k * 13 + 1);
    memset(ad, 0x3c, sizeof(ad));
    c.tx.frames = 0x0102030405060708ull;
    for (int k = 0; k < 8; k++)
        nonce[k] = (uint8_t)(c.tx.frames >> (8 * k));
    cr_assert_eq(rd_seal_seal(ci, &c.tx, box, tag, msg, len, ad, sizeof(ad)), 0);
    int rc = ci == RD_CIPHER_AES
                 ? crypto_aead_aes256gcm_decrypt_detached(out, NULL, box, len, tag, ad, sizeof(ad),
                                                          nonce, c.tx.key)
                 : crypto_aead_chacha20poly1305_ietf_decrypt_detached(out, NULL, box, len, tag, ad,
                                                                      sizeof(ad), nonce, c.tx.key);
    cr_assert_eq(rc, 0, "%s: libsodium does not open ringd's frame of %zu bytes",
                 rd_cipher_name(ci), len);
    cr_assert_arr_eq(out, msg, len);
    /* and back: libsodium seals the next frame, ringd opens it */
    rd_seal_dir rx = c.tx; /* the peer's receiving side, at the same count */
    nonce[0]++;
    if (ci == RD_CIPHER_AES)
        crypto_aead_aes256gcm_encrypt_detached(box, tag, NULL, msg, len, ad, sizeof(ad), NULL,
                                               nonce, c.tx.key);
    else
        crypto_aead_chacha20poly1305_ietf_encrypt_detached(box, tag, NULL, msg, len, ad, sizeof(ad),
                                                           NULL, nonce, c.tx.key);
    memcpy(out, box, len); /* in place, as the data plane opens */
    cr_assert_eq(rd_seal_open(ci, &rx, out, out, len, tag, ad, sizeof(ad)), 0,
                 "%s: ringd does not open libsodium's frame of %zu bytes", rd_cipher_name(ci), len);
    cr_assert_arr_eq(out, msg, len);
    box[len / 2] ^= 1; /* and refuses it altered, on either library */
    rx.frames--;
    cr_assert_eq(rd_seal_open(ci, &rx, out, box, len, tag, ad, sizeof(ad)), -1);
    free(msg);
    free(box);
    free(out);
}

/* The frames are the standard AEADs (RFC 5116 AES-256-GCM, RFC 8439 ChaCha20-Poly1305, a
 * 12-byte nonce of the frame count): another implementation, libsodium's, opens what ringd seals
 * and seals what it opens, so daemons built against either library share a ring. */
Test(seal, frames_are_the_standard_aeads_that_libsodium_opens_and_seals_alike)
{
    /* small frames go through libsodium here too, large ones through OpenSSL */
    static const size_t lens[] = {1, 100, 4095, 4096, 70000};
    each_cipher(standard_frames, lens, sizeof(lens) / sizeof(lens[0]));
}

/* --- a sealed control channel --------------------------------------------------------------- */

typedef struct {
    struct event_base *base;
    int msgs, failed;
    uint64_t last_gen;
    char why[160];
} chan_seen;

static void on_msg(void *arg, rd_peer_chan *c, const rd_msg *m)
{
    chan_seen *o = arg;
    (void)c;
    o->msgs++;
    if (m->body_case == RINGD__MSG__BODY_BYE)
        o->last_gen = m->bye->generation;
    event_base_loopbreak(o->base);
}

static void on_err(void *arg, rd_peer_chan *c, const char *why)
{
    chan_seen *o = arg;
    (void)c;
    o->failed = 1;
    snprintf(o->why, sizeof(o->why), "%s", why);
    event_base_loopbreak(o->base);
}

/* A Bye{generation} frame sealed by the test with s (the channel's peer), into f. */
static size_t sealed_bye(rd_seal *s, uint64_t gen, uint8_t *f)
{
    Ringd__Bye b = RINGD__BYE__INIT;
    b.generation = gen;
    rd_msg m = RINGD__MSG__INIT;
    m.body_case = RINGD__MSG__BODY_BYE;
    m.bye = &b;
    size_t plain = rd_frame_pack(&m, f), body = plain - RD_FRAME_HEADER;
    uint32_t n = (uint32_t)(body + RD_SEAL_TAG);
    for (int i = 0; i < 4; i++)
        f[i] = (uint8_t)(n >> (8 * i));
    cr_assert_eq(rd_seal_seal(s->cipher, &s->tx, f + RD_FRAME_HEADER, f + plain,
                              f + RD_FRAME_HEADER, body, f, RD_FRAME_HEADER),
                 0);
    return plain + RD_SEAL_TAG;
}

static void run_loop(chan_seen *o)
{
    struct timeval tv = {3, 0};
    event_base_loopexit(o->base, &tv);
    event_base_dispatch(o->base);
}

Test(seal, a_sealed_channel_sends_nothing_in_the_clear_and_fails_on_a_frame_altered_or_replayed)
{
    for (int mode = 0; mode < 3; mode++) { /* a bit flipped; a frame replayed; foreign keys */
        chan_seen o = {.base = event_base_new()};
        cr_assert_not_null(o.base);
        int sp[2];
        cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
        rd_seal c, s;
        rd_seal_derive(&c, rd_seal_best(), &key, 1, chal, ans, hello, sizeof(hello));
        rd_seal_derive(&s, rd_seal_best(), &key, 0, chal, ans, hello, sizeof(hello));
        rd_peer_chan *ch = rd_peer_chan_new(o.base, sp[0], &c, "n9", 1 << 16, on_msg, on_err, &o);
        cr_assert_not_null(ch);

        /* the channel's frame: nothing of the job name in the clear, and it opens with s */
        Ringd__PeerHello h = RINGD__PEER_HELLO__INIT;
        h.job = "a-job-name-that-must-not-leak";
        h.node = "n9";
        rd_msg m = RINGD__MSG__INIT;
        m.body_case = RINGD__MSG__BODY_PEER_HELLO;
        m.peer_hello = &h;
        size_t len = rd_peer_chan_send(ch, &m);
        cr_assert_eq(len, rd_frame_size(&m) + RD_SEAL_TAG);
        uint8_t got[512], plain[512];
        /* written at once, not on a later turn of the loop (which has not run) */
        struct pollfd pf = {.fd = sp[1], .events = POLLIN};
        cr_assert_eq(poll(&pf, 1, 0), 1, "the frame waits for the event loop");
        cr_assert_eq(read(sp[1], got, sizeof(got)), (ssize_t)len);
        cr_assert_null(memmem(got, len, h.job, strlen(h.job)), "the job name crossed in the clear");
        cr_assert_eq(rd_seal_open(s.cipher, &s.rx, plain, got + RD_FRAME_HEADER,
                                  len - RD_FRAME_HEADER - RD_SEAL_TAG, got + len - RD_SEAL_TAG, got,
                                  RD_FRAME_HEADER),
                     0, "the peer cannot open the channel's frame");
        cr_assert_not_null(memmem(plain, len, h.job, strlen(h.job)));

        /* the peer's sealed Bye arrives */
        uint8_t f[256], f0[256];
        size_t flen = sealed_bye(&s, 41, f);
        memcpy(f0, f, flen);
        cr_assert_eq(write(sp[1], f, flen), (ssize_t)flen);
        run_loop(&o);
        cr_assert_eq(o.msgs, 1, "the sealed frame was not delivered (%s)", o.why);
        cr_assert_eq(o.last_gen, 41);

        /* then the attack */
        if (mode == 0) {
            flen = sealed_bye(&s, 42, f);
            f[RD_FRAME_HEADER + 1] ^= 0x20;
        } else if (mode == 1) {
            memcpy(f, f0, flen); /* Bye 41 again, byte for byte */
        } else {
            rd_seal stranger, unused;
            hello[0] ^= 1; /* another handshake's keys */
            rd_seal_derive(&unused, rd_seal_best(), &key, 1, chal, ans, hello, sizeof(hello));
            rd_seal_derive(&stranger, rd_seal_best(), &key, 0, chal, ans, hello, sizeof(hello));
            hello[0] ^= 1;
            stranger.tx.frames = s.tx.frames;
            flen = sealed_bye(&stranger, 42, f);
        }
        cr_assert_eq(write(sp[1], f, flen), (ssize_t)flen);
        run_loop(&o);
        cr_assert_eq(o.msgs, 1, "mode %d: a bad frame was delivered (generation %llu)", mode,
                     (unsigned long long)o.last_gen);
        cr_assert(o.failed, "mode %d: the channel did not fail", mode);
        cr_assert(strstr(o.why, "failed authentication") != NULL, "mode %d: \"%s\"", mode, o.why);
        rd_peer_chan_free(ch);
        rd_peer_chan_free_lingering();
        close(sp[1]);
        event_base_free(o.base);
    }
}
