/* Unit tests for the ring key and the challenge-response handshake in daemon/auth.c. */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"

static char dir[64];

/* Per-test scratch directory for key files; libsodium ready. */
static void setup(void)
{
    cr_assert_eq(rd_auth_init(), 0);
    snprintf(dir, sizeof(dir), "/tmp/ringd-test-auth.XXXXXX");
    cr_assert_not_null(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

/* Removes the scratch directory and everything in it. */
static void teardown(void)
{
    if (dir[0] != '\0')
        nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
}

TestSuite(auth, .init = setup, .fini = teardown, .timeout = 30);

/* Writes len bytes of data to dir/name with the given mode; returns the path (static buffer). */
static const char *write_file(const char *name, const void *data, size_t len, mode_t mode)
{
    static char path[128];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    cr_assert_geq(fd, 0, "open %s: %s", path, strerror(errno));
    cr_assert_eq(write(fd, data, len), (ssize_t)len);
    cr_assert_eq(fchmod(fd, mode), 0);
    cr_assert_eq(close(fd), 0);
    return path;
}

/* A key made from a given key file text (written with mode 0600). */
static rd_auth_key key_from(const char *text)
{
    rd_auth_key k;
    char err[256] = "";
    const char *path = write_file("key", text, strlen(text), 0600);
    cr_assert_eq(rd_auth_load(&k, path, err, sizeof(err)), 0, "load: %s", err);
    return k;
}

/* Runs the whole handshake between a client holding ck and a server holding sk. Returns 0 when
 * both sides accept, 1 when the server rejects the answer, 2 when the client rejects the
 * confirmation (the confirm then being whatever the server produced). */
static int handshake(const rd_auth_key *ck, const rd_auth_key *sk)
{
    uint8_t ch[RD_AUTH_CHALLENGE_LEN], ans[RD_AUTH_ANSWER_LEN], conf[RD_AUTH_CONFIRM_LEN];
    rd_auth_challenge(ch);
    cr_assert_eq(rd_auth_answer(ck, ch, ans), 0);
    int server = rd_auth_verify_answer(sk, ch, ans, conf);
    int client = rd_auth_verify_confirm(ck, ch, ans, conf);
    if (server != 0) {
        cr_assert_neq(client, 0, "a confirm from a rejecting server must not verify");
        return 1;
    }
    return client != 0 ? 2 : 0;
}

/* HMAC-SHA-256(key, label | a | b), computed here from the header's description of the wire. */
static void doc_mac(const rd_auth_key *k, char label, const uint8_t *a, size_t alen,
                    const uint8_t *b, size_t blen, uint8_t out[32])
{
    crypto_auth_hmacsha256_state st;
    unsigned char l = (unsigned char)label;
    crypto_auth_hmacsha256_init(&st, k->key, sizeof(k->key));
    crypto_auth_hmacsha256_update(&st, &l, 1);
    crypto_auth_hmacsha256_update(&st, a, alen);
    crypto_auth_hmacsha256_update(&st, b, blen);
    crypto_auth_hmacsha256_final(&st, out);
}

Test(auth, round_trip_succeeds_with_the_same_key)
{
    rd_auth_key k = key_from("correct horse battery staple\n");
    cr_assert_eq(k.insecure, 0);
    cr_assert_eq(handshake(&k, &k), 0);
}

Test(auth, messages_follow_the_documented_layout)
{
    rd_auth_key k = key_from("correct horse battery staple");
    uint8_t ch[RD_AUTH_CHALLENGE_LEN], ch2[RD_AUTH_CHALLENGE_LEN];
    uint8_t ans[RD_AUTH_ANSWER_LEN], ans2[RD_AUTH_ANSWER_LEN], conf[RD_AUTH_CONFIRM_LEN];
    uint8_t mac[32];

    rd_auth_challenge(ch);
    rd_auth_challenge(ch2);
    cr_assert_eq(memcmp(ch, "RNGD", 4), 0);
    cr_assert_eq(memcmp(ch, ch2, 8), 0, "magic and version are fixed");
    cr_assert_neq(memcmp(ch + 8, ch2 + 8, 32), 0, "server nonces are fresh");

    cr_assert_eq(rd_auth_answer(&k, ch, ans), 0);
    cr_assert_eq(rd_auth_answer(&k, ch, ans2), 0);
    cr_assert_neq(memcmp(ans, ans2, 32), 0, "client nonces are fresh");
    doc_mac(&k, 'c', ch, sizeof(ch), ans, 32, mac);
    cr_assert_eq(memcmp(ans + 32, mac, 32), 0, "answer = nonce_c | HMAC(key, c|challenge|nonce_c)");

    cr_assert_eq(rd_auth_verify_answer(&k, ch, ans, conf), 0);
    doc_mac(&k, 's', ch, sizeof(ch), ans, sizeof(ans), mac);
    cr_assert_eq(memcmp(conf, mac, 32), 0, "confirm = HMAC(key, s|challenge|answer)");
}

Test(auth, a_client_with_the_wrong_key_fails_at_verify_answer)
{
    rd_auth_key good = key_from("the ring's real key, 32 bytes ok");
    rd_auth_key bad = key_from("the ring's real key, 32 bytes oK");
    cr_assert_eq(handshake(&bad, &good), 1);
}

Test(auth, a_server_with_the_wrong_key_fails_at_verify_confirm)
{
    rd_auth_key client = key_from("the ring's real key, 32 bytes ok");
    rd_auth_key server = key_from("an impostor's key of some length");
    uint8_t ch[RD_AUTH_CHALLENGE_LEN], ans[RD_AUTH_ANSWER_LEN], conf[RD_AUTH_CONFIRM_LEN];

    rd_auth_challenge(ch);
    cr_assert_eq(rd_auth_answer(&client, ch, ans), 0);
    /* The impostor cannot check the answer, so it confirms with what it has: its own key. */
    cr_assert_neq(rd_auth_verify_answer(&server, ch, ans, conf), 0);
    doc_mac(&server, 's', ch, sizeof(ch), ans, sizeof(ans), conf);
    cr_assert_neq(rd_auth_verify_confirm(&client, ch, ans, conf), 0);
    /* Nor does it pass by echoing the client's own MAC back (the labels differ). */
    memcpy(conf, ans + 32, sizeof(conf));
    cr_assert_neq(rd_auth_verify_confirm(&client, ch, ans, conf), 0);
    /* Nor with what a rejecting verify_answer leaves behind. */
    cr_assert_neq(rd_auth_verify_answer(&server, ch, ans, conf), 0);
    cr_assert_neq(rd_auth_verify_confirm(&client, ch, ans, conf), 0);
}

Test(auth, tampering_with_any_byte_of_the_challenge_fails)
{
    rd_auth_key k = key_from("correct horse battery staple");
    for (size_t i = 0; i < RD_AUTH_CHALLENGE_LEN; i++) {
        uint8_t ch[RD_AUTH_CHALLENGE_LEN], seen[RD_AUTH_CHALLENGE_LEN];
        uint8_t ans[RD_AUTH_ANSWER_LEN], conf[RD_AUTH_CONFIRM_LEN];
        rd_auth_challenge(ch);
        memcpy(seen, ch, sizeof(ch));
        seen[i] ^= 0x01;
        /* magic or version changed: refused outright; nonce changed: the MAC no longer fits */
        if (rd_auth_answer(&k, seen, ans) != 0) {
            cr_assert_lt(i, 8, "only magic/version bytes may be refused by rd_auth_answer");
            continue;
        }
        cr_assert_neq(rd_auth_verify_answer(&k, ch, ans, conf), 0, "challenge byte %zu", i);
    }
}

Test(auth, tampering_with_any_byte_of_the_answer_fails)
{
    rd_auth_key k = key_from("correct horse battery staple");
    uint8_t ch[RD_AUTH_CHALLENGE_LEN], ans[RD_AUTH_ANSWER_LEN], conf[RD_AUTH_CONFIRM_LEN];
    rd_auth_challenge(ch);
    cr_assert_eq(rd_auth_answer(&k, ch, ans), 0);
    for (size_t i = 0; i < RD_AUTH_ANSWER_LEN; i++) {
        for (int bit = 0; bit < 8; bit += 7) {
            ans[i] ^= (uint8_t)(1u << bit);
            cr_assert_neq(rd_auth_verify_answer(&k, ch, ans, conf), 0, "answer byte %zu", i);
            ans[i] ^= (uint8_t)(1u << bit);
        }
    }
    cr_assert_eq(rd_auth_verify_answer(&k, ch, ans, conf), 0);
}

Test(auth, tampering_with_any_byte_of_the_confirm_fails)
{
    rd_auth_key k = key_from("correct horse battery staple");
    uint8_t ch[RD_AUTH_CHALLENGE_LEN], ans[RD_AUTH_ANSWER_LEN], conf[RD_AUTH_CONFIRM_LEN];
    rd_auth_challenge(ch);
    cr_assert_eq(rd_auth_answer(&k, ch, ans), 0);
    cr_assert_eq(rd_auth_verify_answer(&k, ch, ans, conf), 0);
    for (size_t i = 0; i < RD_AUTH_CONFIRM_LEN; i++) {
        conf[i] ^= 0x80;
        cr_assert_neq(rd_auth_verify_confirm(&k, ch, ans, conf), 0, "confirm byte %zu", i);
        conf[i] ^= 0x80;
    }
    cr_assert_eq(rd_auth_verify_confirm(&k, ch, ans, conf), 0);
    /* The confirm binds the client's answer: the right confirm for a different answer fails. */
    uint8_t ans2[RD_AUTH_ANSWER_LEN];
    cr_assert_eq(rd_auth_answer(&k, ch, ans2), 0);
    cr_assert_neq(rd_auth_verify_confirm(&k, ch, ans2, conf), 0);
}

Test(auth, a_non_ringd_challenge_is_refused)
{
    rd_auth_key k = key_from("correct horse battery staple");
    uint8_t ch[RD_AUTH_CHALLENGE_LEN], ans[RD_AUTH_ANSWER_LEN];

    memset(ch, 0, sizeof(ch));
    memcpy(ch, "HTTP/1.1 400 Bad Request\r\n\r\n", 28);
    cr_assert_neq(rd_auth_answer(&k, ch, ans), 0);
    memset(ch, 0, sizeof(ch));
    cr_assert_neq(rd_auth_answer(&k, ch, ans), 0);

    /* Our magic with another protocol version: refused too. */
    rd_auth_challenge(ch);
    ch[7] ^= 0x03;
    cr_assert_neq(rd_auth_answer(&k, ch, ans), 0);
}

Test(auth, insecure_keys_interoperate_only_with_insecure_keys)
{
    rd_auth_key a, b;
    rd_auth_insecure(&a);
    rd_auth_insecure(&b);
    cr_assert_eq(a.insecure, 1);
    cr_assert_eq(memcmp(a.key, b.key, sizeof(a.key)), 0);
    cr_assert_eq(handshake(&a, &b), 0);

    rd_auth_key k = key_from("correct horse battery staple");
    cr_assert_eq(handshake(&a, &k), 1);
    cr_assert_eq(handshake(&k, &a), 1);
}

Test(auth, a_missing_key_file_is_an_error_naming_it)
{
    rd_auth_key k;
    char err[256] = "", path[128], want[256];
    snprintf(path, sizeof(path), "%s/nope", dir);
    snprintf(want, sizeof(want), "key file %s: No such file or directory", path);
    cr_assert_eq(rd_auth_load(&k, path, err, sizeof(err)), RINGD_E_SYSTEM);
    cr_assert_str_eq(err, want);
}

Test(auth, a_directory_is_not_a_key_file)
{
    rd_auth_key k;
    char err[256] = "";
    cr_assert_eq(rd_auth_load(&k, dir, err, sizeof(err)), RINGD_E_SYSTEM);
    cr_assert_not_null(strstr(err, dir), "%s", err);
    cr_assert_not_null(strstr(err, "Is a directory"), "%s", err);
}

Test(auth, an_unreadable_key_file_is_an_error)
{
    if (geteuid() == 0) {
        teardown(); /* a skipped test does not run .fini */
        cr_skip_test("root reads mode 0000 files");
    }
    rd_auth_key k;
    char err[256] = "";
    const char *path = write_file("locked", "correct horse battery staple", 28, 0000);
    cr_assert_eq(rd_auth_load(&k, path, err, sizeof(err)), RINGD_E_SYSTEM);
    cr_assert_not_null(strstr(err, "Permission denied"), "%s", err);
}

/* Loads dir/name holding data; expects failure with an error naming the file and containing
 * what. */
static void expect_rejected(const char *name, const void *data, size_t len, const char *what)
{
    rd_auth_key k;
    char err[256] = "";
    const char *path = write_file(name, data, len, 0600);
    memset(&k, 0xA5, sizeof(k));
    rd_auth_key before = k;
    cr_assert_eq(rd_auth_load(&k, path, err, sizeof(err)), RINGD_E_INVALID, "%s loaded", name);
    cr_assert_not_null(strstr(err, path), "error does not name the file: %s", err);
    cr_assert_not_null(strstr(err, what), "error: %s", err);
    cr_assert_eq(memcmp(&k, &before, sizeof(k)), 0, "key changed on failure");
}

Test(auth, an_empty_key_file_is_rejected)
{
    expect_rejected("empty", "", 0, "0 bytes of key");
}

Test(auth, a_too_short_key_file_is_rejected)
{
    expect_rejected("short", "fifteen bytes!!", 15, "15 bytes of key");
    /* trailing whitespace does not count towards the minimum */
    expect_rejected("short-nl", "fifteen bytes!!\n\n\n", 18, "15 bytes of key");
}

Test(auth, a_key_file_of_only_whitespace_is_rejected)
{
    expect_rejected("blank", " \t\r\n \t\r\n \t\r\n \t\r\n \t\r\n", 20, "0 bytes of key");
}

Test(auth, a_key_file_of_exactly_the_minimum_loads)
{
    rd_auth_key k;
    char err[256] = "";
    const char *path = write_file("min", "sixteen bytes!!!", RD_AUTH_KEY_MIN, 0600);
    cr_assert_eq(rd_auth_load(&k, path, err, sizeof(err)), 0, "%s", err);
}

Test(auth, trailing_whitespace_is_stripped)
{
    rd_auth_key bare = key_from("correct horse battery staple");
    rd_auth_key nl = key_from("correct horse battery staple\n");
    rd_auth_key crlf = key_from("correct horse battery staple \t\r\n");
    rd_auth_key other = key_from("correct horse battery stapl");
    cr_assert_eq(memcmp(bare.key, nl.key, sizeof(bare.key)), 0);
    cr_assert_eq(memcmp(bare.key, crlf.key, sizeof(bare.key)), 0);
    cr_assert_neq(memcmp(bare.key, other.key, sizeof(bare.key)), 0);
    /* leading and inner whitespace are key material */
    rd_auth_key lead = key_from(" correct horse battery staple");
    cr_assert_neq(memcmp(bare.key, lead.key, sizeof(bare.key)), 0);
    /* the key is the SHA-256 of the stripped contents */
    uint8_t want[32];
    crypto_hash_sha256(want, (const unsigned char *)"correct horse battery staple", 28);
    cr_assert_eq(memcmp(bare.key, want, sizeof(want)), 0);
}

Test(auth, a_key_file_over_64_KiB_is_rejected)
{
    size_t max = 64 * 1024;
    char *big = malloc(max + 1);
    cr_assert_not_null(big);
    memset(big, 'k', max + 1);
    expect_rejected("big", big, max + 1, "larger than 65536 bytes");

    rd_auth_key k;
    char err[256] = "";
    const char *path = write_file("max", big, max, 0600);
    cr_assert_eq(rd_auth_load(&k, path, err, sizeof(err)), 0, "exactly 64 KiB: %s", err);
    free(big);
}

/* Loads path with stderr (where rd_log writes) captured; returns what was logged (caller
 * frees). */
static char *load_logged(const char *path)
{
    rd_auth_key k;
    char err[256] = "", logpath[128];
    snprintf(logpath, sizeof(logpath), "%s/log", dir);
    int logfd = open(logpath, O_RDWR | O_CREAT | O_TRUNC, 0600);
    cr_assert_geq(logfd, 0);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    cr_assert_geq(saved, 0);
    cr_assert_geq(dup2(logfd, STDERR_FILENO), 0);
    int rc = rd_auth_load(&k, path, err, sizeof(err));
    dup2(saved, STDERR_FILENO);
    close(saved);
    cr_assert_eq(rc, 0, "%s", err);

    char *text = calloc(1, 4096);
    cr_assert_not_null(text);
    cr_assert_geq(pread(logfd, text, 4095, 0), 0);
    close(logfd);
    return text;
}

Test(auth, a_key_file_readable_by_others_loads_with_a_warning)
{
    const char *path = write_file("shared", "correct horse battery staple\n", 29, 0644);
    char *log = load_logged(path);
    cr_assert_not_null(strstr(log, "warn"), "log: %s", log);
    cr_assert_not_null(strstr(log, "auth"), "log: %s", log);
    cr_assert_not_null(strstr(log, path), "log: %s", log);
    free(log);

    /* A group the daemon shares with others: a warning. */
    path = write_file("group", "correct horse battery staple\n", 29, 0640);
    if (chown(path, (uid_t)-1, getegid() + 1) == 0) {
        log = load_logged(path);
        cr_assert_not_null(strstr(log, "group"), "log: %s", log);
        free(log);
    }
}

/* Kubernetes mounts a Secret into a non-root container as mode 0440 with the pod's fsGroup: the
 * daemon's own group reading it is expected, not worth a warning. */
Test(auth, a_key_file_readable_by_the_daemons_own_group_loads_silently)
{
    const char *path = write_file("fsgroup", "correct horse battery staple\n", 29, 0440);
    cr_assert_eq(chown(path, (uid_t)-1, getegid()), 0);
    char *log = load_logged(path);
    cr_assert_str_eq(log, "");
    free(log);
}

Test(auth, a_private_key_file_loads_silently)
{
    const char *path = write_file("private", "correct horse battery staple\n", 29, 0600);
    char *log = load_logged(path);
    cr_assert_str_eq(log, "");
    free(log);
}
