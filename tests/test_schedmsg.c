/* Unit tests for the scheduling messages in proto/schedmsg.c: plain values survive the wire, and
 * what no node sends (oversize counts, bad names, long messages, data that does not fit its op)
 * is refused with a reason. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "schedmsg.h"

/* v encoded, packed into a frame, and the frame decoded (the caller frees it). */
static rd_msg *over_the_wire(const rd_schedmsg *v)
{
    rd_msg *m = rd_schedmsg_encode(v);
    cr_assert_not_null(m);
    size_t n = rd_frame_size(m), used = 0;
    uint8_t *buf = malloc(n);
    cr_assert_not_null(buf);
    cr_assert_eq(rd_frame_pack(m, buf), n);
    rd_schedmsg_encoded_free(m);
    rd_msg *out = NULL;
    char err[128] = "";
    cr_assert_eq(rd_frame_decode(buf, n, UINT32_MAX, &out, &used, err, sizeof(err)), RD_FRAME_OK,
                 "%s", err);
    cr_assert_eq(used, n);
    free(buf);
    return out;
}

/* The status of decoding v after the wire, with the reason in err. */
static rd_schedmsg_status decode_after_wire(const rd_schedmsg *v, char *err, size_t errlen)
{
    rd_msg *m = over_the_wire(v);
    rd_schedmsg d;
    err[0] = '\0';
    rd_schedmsg_status st = rd_schedmsg_decode(m, &d, err, errlen);
    if (st == RD_SCHEDMSG_DECODED)
        rd_schedmsg_release(&d);
    rd_frame_free(m);
    return st;
}

/* v after the wire, decoded into *d, with the same kind, generation and counts (the caller
 * releases *d, then frees *m, the message it borrows from). */
static void decoded_after_wire(const rd_schedmsg *v, rd_msg **m, rd_schedmsg *d)
{
    char err[256] = "";
    *m = over_the_wire(v);
    cr_assert_eq(rd_schedmsg_decode(*m, d, err, sizeof(err)), RD_SCHEDMSG_DECODED, "%s", err);
    cr_assert_eq(d->kind, v->kind);
    cr_assert_eq(d->generation, v->generation);
    cr_assert_eq(d->nops, v->nops);
    cr_assert_eq(d->nstalled, v->nstalled);
    cr_assert_eq(d->nnames, v->nnames);
}

/* A Ready announcing the single op s. */
static rd_schedmsg ready_of(const rd_op_spec *s)
{
    return (rd_schedmsg){.kind = RD_SCHEDMSG_READY, .generation = 7, .ops = s, .nops = 1};
}

static const float grads[4] = {1.5f, -2.0f, 0.25f, 8.0f};

static void assert_spec_eq(const rd_op_spec *a, const rd_op_spec *b)
{
    cr_assert_str_eq(a->name, b->name);
    cr_assert_eq(memcmp(&a->p, &b->p, sizeof(a->p)), 0, "params of '%s'", a->name);
    cr_assert_eq(a->status, b->status);
    cr_assert_str_eq(a->message, b->message);
    cr_assert_eq(a->direct, b->direct);
    cr_assert_eq(a->len, b->len);
    cr_assert(a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
    cr_assert_eq(a->fill, b->fill);
    cr_assert_eq(a->cached, b->cached);
}

/* An op that fills a slot of the sender's cache, then the same op by its slot with new data. */
Test(schedmsg, an_op_by_its_slot_survives_the_wire_with_its_data)
{
    static const float more[4] = {0.5f, 1.0f, 2.0f, 4.0f};
    const rd_op_spec ops[] = {
        {"grad.0",
         {0, 0, 0, 0, 4, 1.0, 1.0, 0, 0, 0, 0},
         0,
         "",
         1,
         (const uint8_t *)grads,
         sizeof(grads),
         3,
         0},
        {"", {0}, 0, "", 1, (const uint8_t *)more, sizeof(more), 0, 3},
        {"", {0}, 0, "", 0, NULL, 0, 0, RD_SCHEDMSG_CACHE_MAX},
    };
    rd_schedmsg v = {.kind = RD_SCHEDMSG_READY, .generation = 7, .ops = ops, .nops = 3};
    rd_msg *m;
    rd_schedmsg d;
    decoded_after_wire(&v, &m, &d);
    for (size_t i = 0; i < 3; i++)
        assert_spec_eq(&d.ops[i], &ops[i]);
    rd_schedmsg_release(&d);
    rd_frame_free(m);
}

Test(schedmsg, a_ready_survives_the_wire)
{
    const rd_op_spec ops[] = {
        {"grad.0",
         {0, 0, 0, 0, 4, 1.0, 0.5, 0, 0, 0, 0},
         0,
         "",
         1,
         (const uint8_t *)grads,
         sizeof(grads),
         0,
         0},
        {"weights", {1, 3, 0, 2, 1 << 20, 1.0, 1.0, 1, 0, 0, 0}, 0, "", 0, NULL, 0, 0, 0},
        {"odd",
         {0, 0, 17, 0, 8, 1.0, 1.0, 0, 0, 0, 0},
         5,
         "unknown reduce op 17",
         0,
         NULL,
         0,
         0,
         0},
    };
    const rd_op_spec stalled = {.name = "late",
                                .p = {.coll = 3},
                                .status = 14,
                                .message = "tensor 'late' stalled: rank 3 never submitted it"};
    rd_schedmsg v = {.kind = RD_SCHEDMSG_READY, .generation = 42, .ops = ops, .nops = 3};
    v.stalled = &stalled;
    v.nstalled = 1;
    rd_msg *m;
    rd_schedmsg d;
    decoded_after_wire(&v, &m, &d);
    for (size_t i = 0; i < 3; i++)
        assert_spec_eq(&d.ops[i], &ops[i]);
    assert_spec_eq(&d.stalled[0], &stalled);
    rd_schedmsg_release(&d);
    rd_frame_free(m);
}

/* A Ready of entries at their longest (a 256-byte name, a 1023-byte message, data, every number
 * at its largest, negative enums) takes no more than rd_schedmsg_spec_bound says: a node that
 * batches its announcements by it stays within the frame size it aims for. */
Test(schedmsg, a_ready_is_no_bigger_than_its_entries_bounds)
{
    char name[RD_NAME_MAX + 1], message[RD_SCHEDMSG_MESSAGE_MAX];
    memset(name, 'n', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    memset(message, 'm', sizeof(message) - 1);
    message[sizeof(message) - 1] = '\0';
    static uint8_t data[3000];
    rd_op_spec big = {.name = name,
                      .p = {.coll = -1,
                            .dtype = -1,
                            .redop = -1,
                            .root = UINT32_MAX,
                            .count = UINT64_MAX,
                            .prescale = 0.1,
                            .postscale = 0.3,
                            .device = 1,
                            .counts_digest = UINT64_MAX,
                            .group_digest = UINT64_MAX,
                            .shape = UINT64_MAX},
                      .status = UINT32_MAX,
                      .message = message,
                      .direct = 1,
                      .data = data,
                      .len = sizeof(data)};
    rd_op_spec ops[5] = {big, big, big, big, big};
    ops[1].len = 0;
    ops[2].message = "";
    for (size_t n = 1; n <= 5; n++) {
        rd_schedmsg v = {
            .kind = RD_SCHEDMSG_READY, .generation = UINT64_MAX, .ops = ops, .nops = n};
        rd_msg *m = rd_schedmsg_encode(&v);
        cr_assert_not_null(m);
        size_t bound = RD_SCHEDMSG_READY_OVERHEAD;
        for (size_t i = 0; i < n; i++)
            bound += rd_schedmsg_spec_bound(&ops[i]);
        cr_assert_leq(rd_frame_size(m), bound, "%zu entries: %zu bytes, bound %zu", n,
                      rd_frame_size(m), bound);
        rd_schedmsg_encoded_free(m);
    }
}

/* A tuning every node can run. */
#define TUNING_OK                                                                                  \
    {                                                                                              \
        .fusion_threshold = 64u << 20, .segment_size = 1u << 20, .conns = 2                        \
    }

Test(schedmsg, a_go_survives_the_wire_in_order_with_its_tuning)
{
    const char *names[] = {"b", "a", "b", "layer.3.weight"};
    rd_schedmsg v = {.kind = RD_SCHEDMSG_GO,
                     .generation = 9,
                     .names = names,
                     .nnames = 4,
                     .tuning = {.fusion_threshold = 3u << 20,
                                .segment_size = 256u << 10,
                                .conns = 3,
                                .cycle_us = 2500,
                                .autotune = RD_AUTOTUNE_SETTLED,
                                .doubling_bytes = 48u << 10}};
    rd_msg *m;
    rd_schedmsg d;
    decoded_after_wire(&v, &m, &d);
    for (size_t i = 0; i < 4; i++)
        cr_assert_str_eq(d.names[i], names[i]);
    cr_assert_eq(d.tuning.fusion_threshold, 3u << 20);
    cr_assert_eq(d.tuning.segment_size, 256u << 10);
    cr_assert_eq(d.tuning.conns, 3);
    cr_assert_eq(d.tuning.cycle_us, 2500);
    cr_assert_eq(d.tuning.autotune, RD_AUTOTUNE_SETTLED);
    cr_assert_eq(d.tuning.doubling_bytes, 48u << 10);
    rd_schedmsg_release(&d);
    rd_frame_free(m);
}

/* A Go whose tuning no node could run, and a word its refusal must contain. */
static const struct {
    rd_tuning tuning;
    const char *says;
} bad_tunings[] = {
    {{.fusion_threshold = (1ull << 30) + 1, .segment_size = 1u << 20, .conns = 2}, "fusion"},
    {{.fusion_threshold = 1u << 20, .segment_size = 4095, .conns = 2}, "segment"},
    {{.fusion_threshold = 1u << 20, .segment_size = (64ull << 20) + 1, .conns = 2}, "segment"},
    {{.fusion_threshold = 1u << 20, .segment_size = 1u << 20, .conns = 0}, "connections"},
    {{.fusion_threshold = 1u << 20, .segment_size = 1u << 20, .conns = 17}, "connections"},
    {{.fusion_threshold = 1u << 20, .segment_size = 1u << 20, .conns = 1, .autotune = 3},
     "autotune"},
    {{.fusion_threshold = 1u << 20, .segment_size = 1u << 20, .conns = 1, .cycle_us = 1000001},
     "cycle"},
    {{.fusion_threshold = 1u << 20,
      .segment_size = 1u << 20,
      .conns = 1,
      .doubling_bytes = (16ull << 20) + 1},
     "doubling"},
};

Test(schedmsg, a_go_with_an_impossible_tuning_is_refused_naming_it)
{
    const char *names[] = {"a"};
    for (size_t i = 0; i < sizeof(bad_tunings) / sizeof(bad_tunings[0]); i++) {
        rd_schedmsg v = {.kind = RD_SCHEDMSG_GO,
                         .generation = 1,
                         .names = names,
                         .nnames = 1,
                         .tuning = bad_tunings[i].tuning};
        char err[256] = "";
        cr_assert_eq(decode_after_wire(&v, err, sizeof(err)), RD_SCHEDMSG_BAD, "case %zu", i);
        cr_assert(strstr(err, bad_tunings[i].says) != NULL, "case %zu: %s", i, err);
    }
}

Test(schedmsg, a_go_without_a_tuning_is_refused)
{
    const char *names[] = {"a"};
    rd_schedmsg v = {
        .kind = RD_SCHEDMSG_GO, .generation = 1, .names = names, .nnames = 1, .tuning = TUNING_OK};
    rd_msg *m = rd_schedmsg_encode(&v);
    cr_assert_not_null(m);
    m->go->tuning = NULL; /* as a daemon of protocol 3 sends it */
    rd_schedmsg d;
    char err[256] = "";
    cr_assert_eq(rd_schedmsg_decode(m, &d, err, sizeof(err)), RD_SCHEDMSG_BAD);
    cr_assert(strstr(err, "without its tuning") != NULL, "%s", err);
    rd_schedmsg_encoded_free(m);
}

Test(schedmsg, an_empty_go_is_an_order_of_nothing)
{
    rd_schedmsg v = {.kind = RD_SCHEDMSG_GO, .generation = 1, .tuning = TUNING_OK};
    char err[256];
    cr_assert_eq(decode_after_wire(&v, err, sizeof(err)), RD_SCHEDMSG_DECODED, "%s", err);
}

Test(schedmsg, other_control_messages_are_left_alone)
{
    rd_msg m = RINGD__MSG__INIT;
    Ringd__Bye bye = RINGD__BYE__INIT;
    m.body_case = RINGD__MSG__BODY_BYE;
    m.bye = &bye;
    rd_schedmsg d = {.generation = 77};
    char err[64] = "";
    cr_assert_eq(rd_schedmsg_decode(&m, &d, err, sizeof(err)), RD_SCHEDMSG_OTHER);
    cr_assert_eq(d.generation, 77, "untouched");
}

/* The encoded entries of a Go, each pointing at entry. */
static Ringd__GoEntry **go_entries(size_t n, Ringd__GoEntry *entry)
{
    Ringd__GoEntry **e = malloc(n * sizeof(*e));
    cr_assert_not_null(e);
    for (size_t i = 0; i < n; i++)
        e[i] = entry;
    return e;
}

Test(schedmsg, counts_over_the_limit_are_refused)
{
    Ringd__GoEntry entry = RINGD__GO_ENTRY__INIT;
    entry.name = "g";
    Ringd__Tuning tuning = RINGD__TUNING__INIT;
    tuning.segment_size = 1u << 20;
    tuning.conns = 1;
    Ringd__Go go = RINGD__GO__INIT;
    go.tuning = &tuning;
    go.ops = go_entries(RD_SCHEDMSG_OPS_MAX + 1, &entry);
    rd_msg m = RINGD__MSG__INIT;
    m.body_case = RINGD__MSG__BODY_GO;
    m.go = &go;
    rd_schedmsg d;
    char err[256] = "";
    go.n_ops = RD_SCHEDMSG_OPS_MAX;
    cr_assert_eq(rd_schedmsg_decode(&m, &d, err, sizeof(err)), RD_SCHEDMSG_DECODED, "%s", err);
    cr_assert_eq(d.nnames, RD_SCHEDMSG_OPS_MAX);
    rd_schedmsg_release(&d);
    go.n_ops = RD_SCHEDMSG_OPS_MAX + 1;
    cr_assert_eq(rd_schedmsg_decode(&m, &d, err, sizeof(err)), RD_SCHEDMSG_BAD);
    cr_assert(strstr(err, "over 65536") != NULL, "%s", err);

    Ringd__OpSpec spec = RINGD__OP_SPEC__INIT;
    spec.name = "g";
    Ringd__OpSpec **specs = malloc((RD_SCHEDMSG_OPS_MAX + 1) * sizeof(*specs));
    cr_assert_not_null(specs);
    for (size_t i = 0; i <= RD_SCHEDMSG_OPS_MAX; i++)
        specs[i] = &spec;
    Ringd__Ready r = RINGD__READY__INIT;
    m.body_case = RINGD__MSG__BODY_READY;
    m.ready = &r;
    r.ops = r.stalled = specs;
    r.n_ops = RD_SCHEDMSG_OPS_MAX + 1;
    cr_assert_eq(rd_schedmsg_decode(&m, &d, err, sizeof(err)), RD_SCHEDMSG_BAD);
    r.n_ops = 0;
    r.n_stalled = RD_SCHEDMSG_OPS_MAX + 1;
    cr_assert_eq(rd_schedmsg_decode(&m, &d, err, sizeof(err)), RD_SCHEDMSG_BAD);
    free(specs);
    free(go.ops);
}

Test(schedmsg, a_go_with_a_bad_name_is_refused)
{
    const char *names[] = {"ok", "tab\there"};
    rd_schedmsg v = {
        .kind = RD_SCHEDMSG_GO, .generation = 1, .names = names, .nnames = 2, .tuning = TUNING_OK};
    char err[256];
    cr_assert_eq(decode_after_wire(&v, err, sizeof(err)), RD_SCHEDMSG_BAD);
    cr_assert(strstr(err, "invalid name") != NULL, "%s", err);
}

/* An announcement no node sends, and a word its refusal must contain. */
typedef struct {
    rd_op_spec spec;
    int stalled; /* sent as a stall request rather than an announcement */
    const char *says;
} bad_spec;

static char long_name[RD_NAME_MAX + 2];
static char long_message[RD_SCHEDMSG_MESSAGE_MAX + 2];
static uint8_t bytes[64];

#define ALLREDUCE_F32(count)                                                                       \
    {                                                                                              \
        0, 0, 0, 0, count, 1.0, 1.0, 0, 0, 0, 0                                                    \
    }

/* Criterion runs each case in a new process where pointers of this one mean nothing: the cases
 * are passed by index. */
static const bad_spec bad_specs[] = {
    {{"bad\nname", ALLREDUCE_F32(8), 0, "", 0, NULL, 0, 0, 0}, 0, "invalid name"},
    {{"", ALLREDUCE_F32(8), 0, "", 0, NULL, 0, 0, 0}, 0, "invalid name"},
    {{long_name, ALLREDUCE_F32(8), 0, "", 0, NULL, 0, 0, 0}, 0, "invalid name"},
    {{"bad\x7f", ALLREDUCE_F32(8), 14, "stalled", 0, NULL, 0, 0, 0}, 1, "invalid name"},
    {{"g", {9, 0, 0, 0, 8, 1.0, 1.0, 0, 0, 0, 0}, 0, "", 0, NULL, 0, 0, 0}, 0, "op 9"},
    {{"g", {-1, 0, 0, 0, 8, 1.0, 1.0, 0, 0, 0, 0}, 5, "failed", 0, NULL, 0, 0, 0}, 0, "op -1"},
    {{"g", {0, 99, 0, 0, 8, 1.0, 1.0, 0, 0, 0, 0}, 0, "", 0, NULL, 0, 0, 0}, 0, "dtype 99"},
    {{"g", {0, -2, 0, 0, 8, 1.0, 1.0, 0, 0, 0, 0}, 0, "", 0, NULL, 0, 0, 0}, 0, "dtype -2"},
    {{"g", {0, 0, 17, 0, 8, 1.0, 1.0, 0, 0, 0, 0}, 0, "", 0, NULL, 0, 0, 0}, 0, "reduce op 17"},
    {{"g", ALLREDUCE_F32(8), 5, long_message, 0, NULL, 0, 0, 0}, 0, "message over 1024"},
    {{"g", ALLREDUCE_F32(8), 14, long_message, 0, NULL, 0, 0, 0}, 1, "message over 1024"},
    /* data that does not fit its op */
    {{"g", ALLREDUCE_F32(2), 0, "", 1, bytes, 4, 0, 0}, 0, "4 bytes of data"},
    {{"g", ALLREDUCE_F32(2), 0, "", 1, bytes, 12, 0, 0}, 0, "12 bytes of data"},
    {{"g", {1, 0, 0, 0, 2, 1.0, 1.0, 0, 0, 0, 0}, 0, "", 1, bytes, 4, 0, 0}, 0, "4 bytes of data"},
    {{"g", {2, 6, 0, 0, 3, 1.0, 1.0, 0, 0, 0, 0}, 0, "", 1, bytes, 10, 0, 0},
     0,
     "10 bytes of data"},
    {{"g", {2, 6, 0, 0, 0, 1.0, 1.0, 0, 0, 0, 0}, 0, "", 1, bytes, 1, 0, 0}, 0, "1 bytes of data"},
    {{"g", {3, 6, 0, 0, 0, 1.0, 1.0, 0, 0, 0, 0}, 0, "", 1, bytes, 1, 0, 0}, 0, "1 bytes of data"},
    /* count * 8 wraps to 8 */
    {{"g", {0, 1, 0, 0, (1ull << 61) + 1, 1.0, 1.0, 0, 0, 0, 0}, 0, "", 1, bytes, 8, 0, 0},
     0,
     "8 bytes"},
    {{"g", ALLREDUCE_F32(2), 0, "", 0, bytes, 8, 0, 0}, 0, "not direct"},
    {{"g", ALLREDUCE_F32(2), 5, "failed", 1, bytes, 8, 0, 0}, 0, "failed"},
    /* the cache: a slot past its end, a failure filling one, a stall request using one */
    {{"g", ALLREDUCE_F32(2), 0, "", 0, NULL, 0, RD_SCHEDMSG_CACHE_MAX + 1, 0}, 0, "slot 1025"},
    {{"g", ALLREDUCE_F32(2), 5, "failed", 0, NULL, 0, 1, 0}, 0, "filling slot 1"},
    {{"", {0}, 0, "", 0, NULL, 0, 0, RD_SCHEDMSG_CACHE_MAX + 1}, 0, "slot 1025"},
    {{"g", ALLREDUCE_F32(2), 14, "stalled", 0, NULL, 0, 0, 2}, 1, "stall request"},
    {{"g", ALLREDUCE_F32(2), 14, "stalled", 0, NULL, 0, 2, 0}, 1, "stall request"},
};

ParameterizedTestParameters(schedmsg, an_announcement_no_node_sends_is_refused)
{
    static size_t index[sizeof(bad_specs) / sizeof(bad_specs[0])];
    for (size_t i = 0; i < sizeof(index) / sizeof(index[0]); i++)
        index[i] = i;
    return cr_make_param_array(size_t, index, sizeof(index) / sizeof(index[0]));
}

ParameterizedTest(size_t *i, schedmsg, an_announcement_no_node_sends_is_refused)
{
    const bad_spec *c = &bad_specs[*i];
    memset(long_name, 'n', sizeof(long_name) - 1);
    memset(long_message, 'm', sizeof(long_message) - 1);
    rd_schedmsg v = ready_of(&c->spec);
    if (c->stalled) {
        v.stalled = v.ops;
        v.nstalled = 1;
        v.ops = NULL;
        v.nops = 0;
    }
    char err[256];
    cr_assert_eq(decode_after_wire(&v, err, sizeof(err)), RD_SCHEDMSG_BAD, "'%s' accepted",
                 c->says);
    cr_assert(strstr(err, c->says) != NULL, "'%s' not in: %s", c->says, err);
}

Test(schedmsg, what_nodes_do_send_is_taken)
{
    static uint8_t data[24];
    static char message[RD_SCHEDMSG_MESSAGE_MAX + 1];
    memset(message, 'm', RD_SCHEDMSG_MESSAGE_MAX);
    const rd_op_spec ok[] = {
        /* a failure goes with the parameters it failed for */
        {"g", {0, 99, 17, 0, 8, 1.0, 1.0, 0, 0, 0, 0}, 5, "unknown reduce op 17", 0, NULL, 0, 0, 0},
        {"g", ALLREDUCE_F32(8), 5, message, 0, NULL, 0, 0, 0},
        /* a broadcast's root is on one node: the others send nothing */
        {"b", {1, 0, 0, 5, 6, 1.0, 1.0, 0, 0, 0, 0}, 0, "", 1, data, 24, 0, 0},
        {"b", {1, 0, 0, 5, 6, 1.0, 1.0, 0, 0, 0, 0}, 0, "", 1, NULL, 0, 0, 0},
        /* an allgather sends each local rank's part */
        {"a", {2, 6, 0, 0, 8, 1.0, 1.0, 0, 0, 0, 0}, 0, "", 1, data, 24, 0, 0},
        {"r", {0, 1, 1, 0, 3, 0.5, 2.0, 0, 0, 0, 0}, 0, "", 1, data, 24, 0, 0},
        {"x", {3, 6, 0, 0, 0, 1.0, 1.0, 0, 0, 0, 0}, 0, "", 0, NULL, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        rd_schedmsg v = ready_of(&ok[i]);
        char err[256];
        cr_assert_eq(decode_after_wire(&v, err, sizeof(err)), RD_SCHEDMSG_DECODED, "case %zu: %s",
                     i, err);
    }
}

Test(schedmsg, data_over_the_limit_is_refused)
{
    size_t n = RD_SCHEDMSG_DATA_MAX + 1;
    uint8_t *big = calloc(1, n);
    cr_assert_not_null(big);
    rd_op_spec s = {"big", {2, 6, 0, 0, 1, 1.0, 1.0, 0, 0, 0, 0}, 0, "", 1, big, n, 0, 0};
    rd_schedmsg v = ready_of(&s);
    char err[256];
    cr_assert_eq(decode_after_wire(&v, err, sizeof(err)), RD_SCHEDMSG_BAD);
    cr_assert(strstr(err, "over 16777216") != NULL, "%s", err);
    s.len = RD_SCHEDMSG_DATA_MAX;
    cr_assert_eq(decode_after_wire(&v, err, sizeof(err)), RD_SCHEDMSG_DECODED, "%s", err);
    free(big);
}

Test(schedmsg, device_transport_messages_survive_the_wire)
{
    uint8_t id[RD_SCHEDMSG_ID_MAX];
    for (size_t i = 0; i < sizeof(id); i++)
        id[i] = (uint8_t)(i * 7 + 1);
    const rd_schedmsg v[] = {
        {.kind = RD_SCHEDMSG_DEV_OFFER,
         .generation = 9,
         .dev = {.want = RD_DEV_WANT_NCCL,
                 .device = 1,
                 .can = 0,
                 .why = "no NCCL library",
                 .gpu = "GPU-4af5b3ca-9524-0518-05cb-58aa5664c4f1"}},
        {.kind = RD_SCHEDMSG_DEV_PLAN,
         .generation = 9,
         .dev = {.transport = RD_DEV_NCCL, .id = id, .id_len = sizeof(id)}},
        {.kind = RD_SCHEDMSG_DEV_PLAN,
         .generation = 9,
         .dev = {.transport = RD_DEV_TCP, .why = "ranks on node b pass host memory"}},
        {.kind = RD_SCHEDMSG_DEV_CONFIRM,
         .generation = 9,
         .dev = {.confirm = RD_DEV_FAILED, .why = "ncclCommInitRankConfig: timeout"}},
    };
    for (size_t k = 0; k < sizeof(v) / sizeof(v[0]); k++) {
        rd_msg *m;
        rd_schedmsg d;
        decoded_after_wire(&v[k], &m, &d);
        cr_assert_eq(d.dev.want, v[k].dev.want);
        cr_assert_eq(d.dev.device, v[k].dev.device);
        cr_assert_eq(d.dev.can, v[k].dev.can);
        cr_assert_eq(d.dev.transport, v[k].dev.transport);
        cr_assert_eq(d.dev.confirm, v[k].dev.confirm);
        cr_assert_eq(d.dev.id_len, v[k].dev.id_len);
        cr_assert(d.dev.id_len == 0 || memcmp(d.dev.id, id, d.dev.id_len) == 0);
        cr_assert_str_eq(d.dev.why, v[k].dev.why != NULL ? v[k].dev.why : "");
        if (v[k].kind == RD_SCHEDMSG_DEV_OFFER)
            cr_assert_str_eq(d.dev.gpu, v[k].dev.gpu);
        rd_schedmsg_release(&d);
        rd_frame_free(m);
    }
}

Test(schedmsg, impossible_device_transport_messages_are_refused)
{
    uint8_t id[RD_SCHEDMSG_ID_MAX + 1] = {0};
    char *long_why = malloc(RD_SCHEDMSG_MESSAGE_MAX + 2);
    cr_assert_not_null(long_why);
    memset(long_why, 'w', RD_SCHEDMSG_MESSAGE_MAX + 1);
    long_why[RD_SCHEDMSG_MESSAGE_MAX + 1] = '\0';
    const struct {
        rd_schedmsg v;
        const char *says;
    } bad[] = {
        {{.kind = RD_SCHEDMSG_DEV_OFFER, .dev = {.want = 3}}, "transport choice 3"},
        {{.kind = RD_SCHEDMSG_DEV_PLAN, .dev = {.transport = 2}}, "transport 2"},
        {{.kind = RD_SCHEDMSG_DEV_PLAN, .dev = {.transport = RD_DEV_NCCL}}, "0-byte id"},
        {{.kind = RD_SCHEDMSG_DEV_PLAN,
          .dev = {.transport = RD_DEV_NCCL, .id = id, .id_len = sizeof(id)}},
         "129-byte id"},
        {{.kind = RD_SCHEDMSG_DEV_PLAN, .dev = {.transport = RD_DEV_TCP, .id = id, .id_len = 8}},
         "8-byte id"},
        {{.kind = RD_SCHEDMSG_DEV_CONFIRM, .dev = {.confirm = 0}}, "state 0"},
        {{.kind = RD_SCHEDMSG_DEV_CONFIRM, .dev = {.confirm = 4}}, "state 4"},
        {{.kind = RD_SCHEDMSG_DEV_CONFIRM, .dev = {.confirm = RD_DEV_FAILED, .why = long_why}},
         "reason over"},
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        char err[256];
        cr_assert_eq(decode_after_wire(&bad[k].v, err, sizeof(err)), RD_SCHEDMSG_BAD, "case %zu",
                     k);
        cr_assert(strstr(err, bad[k].says) != NULL, "case %zu: '%s' lacks '%s'", k, err,
                  bad[k].says);
    }
    free(long_why);
}

Test(schedmsg, a_dev_offer_naming_an_overlong_gpu_is_refused)
{
    char gpu[RD_SCHEDMSG_GPU_MAX + 2];
    memset(gpu, 'g', sizeof(gpu) - 1);
    gpu[sizeof(gpu) - 1] = '\0';
    rd_schedmsg v = {.kind = RD_SCHEDMSG_DEV_OFFER,
                     .generation = 3,
                     .dev = {.want = RD_DEV_WANT_AUTO, .device = 1, .can = 1, .gpu = gpu}};
    char err[256];
    cr_assert_eq(decode_after_wire(&v, err, sizeof(err)), RD_SCHEDMSG_BAD);
    cr_assert(strstr(err, "GPU name over 63 bytes") != NULL, "%s", err);
    gpu[RD_SCHEDMSG_GPU_MAX] = '\0';
    cr_assert_eq(decode_after_wire(&v, err, sizeof(err)), RD_SCHEDMSG_DECODED, "%s", err);
}

/* An op by its slot (OpSpec.cached) that carries anything but its slot, direct and data: no
 * node's encoder sends one, so the message is made here field by field. */
Test(schedmsg, an_op_by_its_slot_carrying_more_than_its_data_is_refused)
{
    for (int k = 0; k < 15; k++) {
        Ringd__OpSpec o = RINGD__OP_SPEC__INIT, *ops[] = {&o};
        o.cached = 2;
        o.name = (char *)"";
        o.message = (char *)"";
        switch (k) {
        case 0: o.name = (char *)"g"; break;
        case 1: o.op = RINGD__OP_TYPE__OP_BROADCAST; break;
        case 2: o.dtype = RINGD__DATA_TYPE__DT_F64; break;
        case 3: o.count = 2; break;
        case 4: o.redop = RINGD__REDUCE_OP__RED_MIN; break;
        case 5: o.root = 1; break;
        case 6: o.prescale = 1; break;
        case 7: o.status = 5; break;
        case 8: o.message = (char *)"failed"; break;
        case 9: o.fill = 1; break;
        case 10: o.shape = 3; break;
        case 11: o.device = 1; break;
        case 12: o.postscale = 2; break;
        case 13: o.counts_digest = 9; break;
        case 14: o.group_digest = 9; break;
        }
        Ringd__Ready r = RINGD__READY__INIT;
        r.ops = ops;
        r.n_ops = 1;
        rd_msg m = RINGD__MSG__INIT;
        m.body_case = RINGD__MSG__BODY_READY;
        m.ready = &r;
        rd_schedmsg d;
        char err[256];
        cr_assert_eq(rd_schedmsg_decode(&m, &d, err, sizeof(err)), RD_SCHEDMSG_BAD, "case %d", k);
        cr_assert(strstr(err, "more than its data") != NULL, "case %d: %s", k, err);
    }
}
