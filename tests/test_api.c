/* libringd's ABI conveniences: ringd_options_init gives what RINGD_OPTIONS_INIT gives, ringd_open
 * takes an older header's smaller options and refuses a struct_size no header had, and
 * ringd_version agrees with the header. Calls that need no daemon run in the test process;
 * collectives go through a real ringd with forked clients. */
#include <criterion/criterion.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "ringd.h"

/* No daemon listens here: an open that gets past the options fails with RINGD_E_CONNECT. */
#define NO_SOCKET "/nonexistent/ringd-test-api.sock"

/* ringd_options_t as ringd.h 0.1 had it (before min_size), as an old program passes it. */
typedef struct {
    size_t struct_size;
    const char *socket_path, *job;
    int world_size, local_size, open_timeout_ms, op_timeout_ms;
    size_t arena_size;
    int poll_us;
} options_v0_1;

TestSuite(api, .timeout = 120);

Test(api, options_init_gives_the_values_of_the_init_macro)
{
    ringd_options_t m = RINGD_OPTIONS_INIT, f;
    memset(&f, 0xa5, sizeof(f)); /* no field may keep what was there */
    ringd_options_init(&f);
    cr_assert_eq(f.struct_size, sizeof(ringd_options_t));
    cr_assert_eq(f.struct_size, m.struct_size);
    cr_assert_eq(f.socket_path, m.socket_path);
    cr_assert_eq(f.job, m.job);
    cr_assert_eq(f.world_size, m.world_size);
    cr_assert_eq(f.local_size, m.local_size);
    cr_assert_eq(f.open_timeout_ms, m.open_timeout_ms);
    cr_assert_eq(f.op_timeout_ms, m.op_timeout_ms);
    cr_assert_eq(f.arena_size, m.arena_size);
    cr_assert_eq(f.poll_us, m.poll_us);
    cr_assert_eq(f.reserved, m.reserved);
    cr_assert_eq(f.min_size, m.min_size);
    ringd_options_init(NULL);
}

/* Opens with o and closes; returns the result, its message in msg. */
static ringd_result_t open_result(const ringd_options_t *o, char *msg, size_t len)
{
    ringd_t *r = NULL;
    ringd_result_t rc = ringd_open(o, &r);
    cr_assert_not_null(r);
    snprintf(msg, len, "%s", ringd_errmsg(r));
    ringd_close(r);
    return rc;
}

Test(api, options_with_a_struct_size_no_header_had_are_refused)
{
    const size_t bad[] = {0, 1, sizeof(size_t), sizeof(options_v0_1) - 1,
                          sizeof(ringd_options_t) + 1, sizeof(ringd_options_t) + 4096, (size_t)-1};
    char msg[1024];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ringd_options_t o;
        ringd_options_init(&o);
        o.socket_path = NO_SOCKET;
        o.struct_size = bad[i];
        ringd_result_t rc = open_result(&o, msg, sizeof(msg));
        char want[64];
        snprintf(want, sizeof(want), "ringd_options_t.struct_size is %zu", bad[i]);
        cr_expect_eq(rc, RINGD_E_INVALID, "struct_size %zu: %s (%s)", bad[i], ringd_strerror(rc),
                     msg);
        cr_expect(strstr(msg, want) != NULL && strstr(msg, "ringd_options_init()") != NULL,
                  "struct_size %zu: the message '%s' does not say what is wrong and what to do",
                  bad[i], msg);
    }
}

Test(api, options_of_an_older_smaller_header_are_taken)
{
    char msg[1024];
    /* Its struct as 0.1 had it: every field it has is read (the socket path), and the open gets
     * as far as connecting. */
    options_v0_1 old = {sizeof(options_v0_1), NO_SOCKET, "old", 1, 1, 1000, 0, 0, 0};
    cr_assert_eq(open_result((const ringd_options_t *)(const void *)&old, msg, sizeof(msg)),
                 RINGD_E_CONNECT, "%s", msg);
    cr_assert(strstr(msg, NO_SOCKET) != NULL, "the socket path was not read: %s", msg);
    /* What lies beyond an older struct_size is the caller's memory, not options: a min_size
     * there that ringd_open would refuse is never read. */
    ringd_options_t o;
    ringd_options_init(&o);
    o.socket_path = NO_SOCKET;
    o.world_size = o.local_size = 1;
    o.min_size = 99;
    cr_assert_eq(open_result(&o, msg, sizeof(msg)), RINGD_E_INVALID, "%s", msg);
    cr_assert(strstr(msg, "min_size 99") != NULL, "%s", msg);
    o.struct_size = sizeof(options_v0_1);
    cr_assert_eq(open_result(&o, msg, sizeof(msg)), RINGD_E_CONNECT, "%s", msg);
}

Test(api, version_names_the_header_s_major_and_minor)
{
    const char *v = ringd_version();
    int major = -1, minor = -1, patch = -1, end = 0;
    cr_assert_not_null(v);
    cr_assert_eq(sscanf(v, "%d.%d.%d%n", &major, &minor, &patch, &end), 3,
                 "ringd_version() is '%s', not MAJOR.MINOR.PATCH", v);
    cr_assert_eq(v[end], '\0', "ringd_version() '%s' has more after MAJOR.MINOR.PATCH", v);
    cr_assert(major == RINGD_VERSION_MAJOR && minor == RINGD_VERSION_MINOR,
              "ringd_version() is %s; ringd.h says %d.%d", v, RINGD_VERSION_MAJOR,
              RINGD_VERSION_MINOR);
}
