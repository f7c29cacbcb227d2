/* Unit tests for the control-message framing in proto/frame.c. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "request.h"
#include "segment.h"

#define MAX 4096u

/* Deterministic 64-bit generator (splitmix64). */
static uint64_t next_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Packs msg into a fresh buffer; the caller frees it. */
static uint8_t *pack(const rd_msg *msg, size_t *len)
{
    size_t n = rd_frame_size(msg);
    uint8_t *buf = malloc(n);
    cr_assert_not_null(buf);
    cr_assert_eq(rd_frame_pack(msg, buf), n);
    cr_assert_eq(rd_frame_payload_len(buf), n - RD_FRAME_HEADER);
    *len = n;
    return buf;
}

/* Packs msg, decodes it back and checks the frame was consumed whole. Caller frees the result. */
static rd_msg *round_trip(const rd_msg *msg)
{
    size_t len, consumed = 0;
    rd_msg *out = NULL;
    char err[128] = "";
    uint8_t *buf = pack(msg, &len);

    cr_assert_eq(rd_frame_decode(buf, len, MAX, &out, &consumed, err, sizeof(err)), RD_FRAME_OK,
                 "decode failed: %s", err);
    cr_assert_not_null(out);
    cr_assert_eq(consumed, len);
    cr_assert_eq(out->body_case, msg->body_case);
    free(buf);
    return out;
}

/* Writes a header announcing n payload bytes. */
static void put_header(uint8_t *buf, uint32_t n)
{
    buf[0] = (uint8_t)n;
    buf[1] = (uint8_t)(n >> 8);
    buf[2] = (uint8_t)(n >> 16);
    buf[3] = (uint8_t)(n >> 24);
}

/* ------------------------------------------------------------------------------------------ */
/* Round trips                                                                                */
/* ------------------------------------------------------------------------------------------ */

Test(frame, round_trips_a_hello)
{
    Ringd__Hello h = RINGD__HELLO__INIT;
    rd_msg m = RINGD__MSG__INIT;
    h.protocol = RD_PROTOCOL_VERSION;
    h.job = (char *)"train-42";
    h.world_size = 16;
    h.local_size = 8;
    h.arena_size = UINT64_C(1) << 40;
    m.body_case = RINGD__MSG__BODY_HELLO;
    m.hello = &h;

    rd_msg *out = round_trip(&m);
    cr_assert_eq(out->hello->protocol, RD_PROTOCOL_VERSION);
    cr_assert_str_eq(out->hello->job, "train-42");
    cr_assert_eq(out->hello->world_size, 16);
    cr_assert_eq(out->hello->local_size, 8);
    cr_assert_eq(out->hello->arena_size, UINT64_C(1) << 40);
    rd_frame_free(out);
}

Test(frame, round_trips_a_submit_with_every_field_set)
{
    Ringd__Submit s = RINGD__SUBMIT__INIT;
    rd_msg m = RINGD__MSG__INIT;
    s.request_id = UINT64_MAX - 1;
    s.op = RINGD__OP_TYPE__OP_ALLGATHER;
    s.name = (char *)"layer.3.weight.grad";
    s.dtype = RINGD__DATA_TYPE__DT_BF16;
    s.count = 123456789;
    s.in_offset = 4096;
    s.out_offset = UINT64_C(1) << 33;
    s.redop = RINGD__REDUCE_OP__RED_PROD;
    s.root = 7;
    s.prescale = 0.125;
    s.postscale = -3.5;
    m.body_case = RINGD__MSG__BODY_SUBMIT;
    m.submit = &s;

    rd_msg *out = round_trip(&m);
    Ringd__Submit *o = out->submit;
    cr_assert_eq(o->request_id, UINT64_MAX - 1);
    cr_assert_eq(o->op, RINGD__OP_TYPE__OP_ALLGATHER);
    cr_assert_str_eq(o->name, "layer.3.weight.grad");
    cr_assert_eq(o->dtype, RINGD__DATA_TYPE__DT_BF16);
    cr_assert_eq(o->count, 123456789);
    cr_assert_eq(o->in_offset, 4096);
    cr_assert_eq(o->out_offset, UINT64_C(1) << 33);
    cr_assert_eq(o->redop, RINGD__REDUCE_OP__RED_PROD);
    cr_assert_eq(o->root, 7);
    cr_assert_eq(o->prescale, 0.125);
    cr_assert_eq(o->postscale, -3.5);
    rd_frame_free(out);
}

Test(frame, round_trips_a_complete)
{
    Ringd__Complete c = RINGD__COMPLETE__INIT;
    rd_msg m = RINGD__MSG__INIT;
    c.request_id = 99;
    c.status = 3;
    c.message = (char *)"allreduce 'x': peer 10.0.0.3:7070 closed the connection";
    m.body_case = RINGD__MSG__BODY_COMPLETE;
    m.complete = &c;

    rd_msg *out = round_trip(&m);
    cr_assert_eq(out->complete->request_id, 99);
    cr_assert_eq(out->complete->status, 3);
    cr_assert_str_eq(out->complete->message, c.message);
    rd_frame_free(out);
}

Test(frame, round_trips_an_error)
{
    Ringd__Error e = RINGD__ERROR__INIT;
    rd_msg m = RINGD__MSG__INIT;
    e.status = 12;
    e.message = (char *)"protocol 2 is not supported; upgrade ringd";
    m.body_case = RINGD__MSG__BODY_ERROR;
    m.error = &e;

    rd_msg *out = round_trip(&m);
    cr_assert_eq(out->error->status, 12);
    cr_assert_str_eq(out->error->message, e.message);
    rd_frame_free(out);
}

Test(frame, round_trips_an_empty_status_request)
{
    Ringd__StatusRequest r = RINGD__STATUS_REQUEST__INIT;
    rd_msg m = RINGD__MSG__INIT;
    m.body_case = RINGD__MSG__BODY_STATUS_REQUEST;
    m.status_request = &r;

    /* An empty submessage still has to be on the wire, or the type would be lost. */
    cr_assert_gt(rd_frame_size(&m), RD_FRAME_HEADER);
    rd_msg *out = round_trip(&m);
    cr_assert_not_null(out->status_request);
    rd_frame_free(out);
}

Test(frame, round_trips_a_status_reply_with_jobs_and_clients)
{
    char *pending[] = {(char *)"a.grad", (char *)"b.grad", (char *)"c.grad"};
    Ringd__JobInfo j0 = RINGD__JOB_INFO__INIT, j1 = RINGD__JOB_INFO__INIT;
    Ringd__ClientInfo c0 = RINGD__CLIENT_INFO__INIT, c1 = RINGD__CLIENT_INFO__INIT,
                      c2 = RINGD__CLIENT_INFO__INIT;
    Ringd__JobInfo *jobs[] = {&j0, &j1};
    Ringd__ClientInfo *clients[] = {&c0, &c1, &c2};
    Ringd__StatusReply r = RINGD__STATUS_REPLY__INIT;
    rd_msg m = RINGD__MSG__INIT;

    j0.name = (char *)"job0";
    j0.world_size = 4;
    j0.local_size = 2;
    j0.clients = 2;
    j0.generation = 5;
    j0.ops_in_flight = 1;
    j0.ops_completed = 1000;
    j0.ops_failed = 2;
    j0.n_pending = 3;
    j0.pending = pending;
    j1.name = (char *)"job1";
    j1.world_size = 1;
    for (int i = 0; i < 3; i++) {
        clients[i]->job = i < 2 ? (char *)"job0" : (char *)"job1";
        clients[i]->pid = 1000 + (uint32_t)i;
        clients[i]->uid = 500;
        clients[i]->local_rank = (uint32_t)i;
        clients[i]->ops_in_flight = (uint64_t)i;
        clients[i]->ops_completed = 10 * (uint64_t)i;
        clients[i]->arena_size = UINT64_C(1) << (30 + i);
    }
    r.version = (char *)"0.1.0";
    r.pid = 4242;
    r.uptime_ms = 86400000;
    r.n_jobs = 2;
    r.jobs = jobs;
    r.n_clients = 3;
    r.clients = clients;
    r.ops_in_flight = 1;
    r.ops_completed = 1000;
    r.ops_failed = 2;
    r.bytes_reduced = UINT64_C(1) << 50;
    m.body_case = RINGD__MSG__BODY_STATUS_REPLY;
    m.status_reply = &r;

    rd_msg *out = round_trip(&m);
    Ringd__StatusReply *o = out->status_reply;
    cr_assert_str_eq(o->version, "0.1.0");
    cr_assert_eq(o->pid, 4242);
    cr_assert_eq(o->uptime_ms, 86400000);
    cr_assert_eq(o->ops_in_flight, 1);
    cr_assert_eq(o->ops_completed, 1000);
    cr_assert_eq(o->ops_failed, 2);
    cr_assert_eq(o->bytes_reduced, UINT64_C(1) << 50);
    cr_assert_eq(o->n_jobs, 2);
    cr_assert_str_eq(o->jobs[0]->name, "job0");
    cr_assert_eq(o->jobs[0]->world_size, 4);
    cr_assert_eq(o->jobs[0]->local_size, 2);
    cr_assert_eq(o->jobs[0]->clients, 2);
    cr_assert_eq(o->jobs[0]->generation, 5);
    cr_assert_eq(o->jobs[0]->ops_in_flight, 1);
    cr_assert_eq(o->jobs[0]->ops_completed, 1000);
    cr_assert_eq(o->jobs[0]->ops_failed, 2);
    cr_assert_eq(o->jobs[0]->n_pending, 3);
    for (int i = 0; i < 3; i++)
        cr_assert_str_eq(o->jobs[0]->pending[i], pending[i]);
    cr_assert_str_eq(o->jobs[1]->name, "job1");
    cr_assert_eq(o->jobs[1]->world_size, 1);
    cr_assert_eq(o->jobs[1]->n_pending, 0);
    cr_assert_eq(o->n_clients, 3);
    for (int i = 0; i < 3; i++) {
        cr_assert_str_eq(o->clients[i]->job, clients[i]->job);
        cr_assert_eq(o->clients[i]->pid, 1000 + (uint32_t)i);
        cr_assert_eq(o->clients[i]->uid, 500);
        cr_assert_eq(o->clients[i]->local_rank, (uint32_t)i);
        cr_assert_eq(o->clients[i]->ops_in_flight, (uint64_t)i);
        cr_assert_eq(o->clients[i]->ops_completed, 10 * (uint64_t)i);
        cr_assert_eq(o->clients[i]->arena_size, UINT64_C(1) << (30 + i));
    }
    rd_frame_free(out);
}

Test(frame, free_accepts_null)
{
    rd_frame_free(NULL);
}

/* ------------------------------------------------------------------------------------------ */
/* Partial, oversized and malformed frames                                                    */
/* ------------------------------------------------------------------------------------------ */

Test(frame, needs_more_bytes_for_every_truncation_of_a_valid_frame)
{
    Ringd__Complete c = RINGD__COMPLETE__INIT;
    rd_msg m = RINGD__MSG__INIT;
    c.request_id = 7;
    c.message = (char *)"done";
    m.body_case = RINGD__MSG__BODY_COMPLETE;
    m.complete = &c;
    size_t len;
    uint8_t *full = pack(&m, &len);

    for (size_t cut = 0; cut < len; cut++) {
        /* A buffer of exactly cut bytes, so ASan catches any read past the end. */
        uint8_t *part = malloc(cut ? cut : 1);
        cr_assert_not_null(part);
        memcpy(part, full, cut);
        rd_msg *out = (rd_msg *)&m; /* must be overwritten with NULL */
        size_t consumed = 12345;
        char err[128] = "";
        cr_assert_eq(rd_frame_decode(part, cut, MAX, &out, &consumed, err, sizeof(err)),
                     RD_FRAME_NEED, "truncated to %zu of %zu bytes", cut, len);
        cr_assert_null(out);
        free(part);
    }
    free(full);
}

Test(frame, refuses_an_oversized_header_without_waiting_for_the_payload)
{
    uint8_t hdr[RD_FRAME_HEADER];
    rd_msg *out = NULL;
    size_t consumed = 0;
    char err[128] = "";

    put_header(hdr, 1025);
    cr_assert_eq(rd_frame_decode(hdr, sizeof(hdr), 1024, &out, &consumed, err, sizeof(err)),
                 RD_FRAME_BAD);
    cr_assert_null(out);
    cr_assert_not_null(strstr(err, "1025"), "error does not name the size: '%s'", err);

    put_header(hdr, UINT32_MAX);
    err[0] = '\0';
    cr_assert_eq(
        rd_frame_decode(hdr, sizeof(hdr), RD_FRAME_MAX_DEFAULT, &out, &consumed, err, sizeof(err)),
        RD_FRAME_BAD);
    cr_assert_not_null(strstr(err, "4294967295"), "error does not name the size: '%s'", err);
}

Test(frame, accepts_a_payload_of_exactly_max_payload)
{
    Ringd__Error e = RINGD__ERROR__INIT;
    rd_msg m = RINGD__MSG__INIT;
    e.message = (char *)"x";
    m.body_case = RINGD__MSG__BODY_ERROR;
    m.error = &e;
    size_t len, consumed = 0;
    uint8_t *buf = pack(&m, &len);
    rd_msg *out = NULL;
    char err[128] = "";
    uint32_t payload = (uint32_t)(len - RD_FRAME_HEADER);

    cr_assert_eq(rd_frame_decode(buf, len, payload, &out, &consumed, err, sizeof(err)), RD_FRAME_OK,
                 "%s", err);
    rd_frame_free(out);
    cr_assert_eq(rd_frame_decode(buf, len, payload - 1, &out, &consumed, err, sizeof(err)),
                 RD_FRAME_BAD);
    cr_assert_null(out);
    free(buf);
}

Test(frame, never_crashes_on_random_garbage_payloads)
{
    uint64_t seed = 0x5EED;
    int ok = 0, bad = 0;

    for (int iter = 0; iter < 20000; iter++) {
        size_t n = (size_t)(next_rand(&seed) % 200);
        uint8_t *buf = malloc(RD_FRAME_HEADER + n);
        cr_assert_not_null(buf);
        put_header(buf, (uint32_t)n);
        for (size_t i = 0; i < n; i++)
            buf[RD_FRAME_HEADER + i] = (uint8_t)next_rand(&seed);
        /* Half the time start with a valid tag so decoding gets past the first byte. */
        if (n > 0 && (iter & 1))
            buf[RD_FRAME_HEADER] = (uint8_t)((1 + next_rand(&seed) % 7) << 3 | 2);

        rd_msg *out = NULL;
        size_t consumed = 0;
        char err[128] = "";
        rd_frame_status st =
            rd_frame_decode(buf, RD_FRAME_HEADER + n, MAX, &out, &consumed, err, sizeof(err));
        if (st == RD_FRAME_OK) {
            cr_assert_not_null(out);
            cr_assert_eq(consumed, RD_FRAME_HEADER + n);
            cr_assert_neq(out->body_case, RINGD__MSG__BODY__NOT_SET);
            rd_frame_free(out);
            ok++;
        } else {
            cr_assert_eq(st, RD_FRAME_BAD, "iteration %d, %zu bytes: status %d", iter, n, st);
            cr_assert_null(out);
            cr_assert_neq(err[0], '\0', "BAD without a reason");
            bad++;
        }
        free(buf);
    }
    cr_assert_gt(bad, 0);
}

struct typeless_case {
    char what[32];
    uint8_t payload[8];
    uint32_t len;
};

ParameterizedTestParameters(frame, refuses_a_valid_msg_of_no_known_type)
{
    static struct typeless_case cases[] = {
        {"empty Msg", {0}, 0},
        /* field 99, wire type 0 (varint): tag (99 << 3) = 792 = 0x98 0x06, value 1 */
        {"unknown varint field 99", {0x98, 0x06, 0x01}, 3},
        /* field 99, wire type 2 (bytes), two bytes long */
        {"unknown bytes field 99", {0x9a, 0x06, 0x02, 'h', 'i'}, 5},
    };
    return cr_make_param_array(struct typeless_case, cases, sizeof(cases) / sizeof(cases[0]));
}

ParameterizedTest(struct typeless_case *c, frame, refuses_a_valid_msg_of_no_known_type)
{
    uint8_t buf[RD_FRAME_HEADER + sizeof(c->payload)];
    rd_msg *out = NULL;
    size_t consumed = 0;
    char err[128] = "";

    put_header(buf, c->len);
    memcpy(buf + RD_FRAME_HEADER, c->payload, c->len);
    cr_assert_eq(
        rd_frame_decode(buf, RD_FRAME_HEADER + c->len, MAX, &out, &consumed, err, sizeof(err)),
        RD_FRAME_BAD, "%s", c->what);
    cr_assert_null(out);
    cr_assert_not_null(strstr(err, "no known message type"), "%s: err '%s'", c->what, err);
}

Test(frame, decodes_back_to_back_frames_one_at_a_time)
{
    Ringd__Hello h = RINGD__HELLO__INIT;
    Ringd__StatusRequest r = RINGD__STATUS_REQUEST__INIT;
    rd_msg m1 = RINGD__MSG__INIT, m2 = RINGD__MSG__INIT;
    h.protocol = 1;
    h.job = (char *)"j";
    m1.body_case = RINGD__MSG__BODY_HELLO;
    m1.hello = &h;
    m2.body_case = RINGD__MSG__BODY_STATUS_REQUEST;
    m2.status_request = &r;

    size_t n1 = rd_frame_size(&m1), n2 = rd_frame_size(&m2);
    uint8_t *buf = malloc(n1 + n2);
    cr_assert_not_null(buf);
    cr_assert_eq(rd_frame_pack(&m1, buf), n1);
    cr_assert_eq(rd_frame_pack(&m2, buf + n1), n2);

    rd_msg *out = NULL;
    size_t consumed = 0;
    char err[128] = "";
    cr_assert_eq(rd_frame_decode(buf, n1 + n2, MAX, &out, &consumed, err, sizeof(err)), RD_FRAME_OK,
                 "%s", err);
    cr_assert_eq(consumed, n1);
    cr_assert_eq(out->body_case, RINGD__MSG__BODY_HELLO);
    cr_assert_str_eq(out->hello->job, "j");
    rd_frame_free(out);

    consumed = 0;
    cr_assert_eq(rd_frame_decode(buf + n1, n2, MAX, &out, &consumed, err, sizeof(err)), RD_FRAME_OK,
                 "%s", err);
    cr_assert_eq(consumed, n2);
    cr_assert_eq(out->body_case, RINGD__MSG__BODY_STATUS_REQUEST);
    rd_frame_free(out);

    /* The second frame cut short after the first is still NEED, not BAD. */
    cr_assert_eq(rd_frame_decode(buf + n1, n2 - 1, MAX, &out, &consumed, err, sizeof(err)),
                 RD_FRAME_NEED);
    free(buf);
}

/* ------------------------------------------------------------------------------------------ */
/* Names                                                                                      */
/* ------------------------------------------------------------------------------------------ */

/* Strings are held inline: Criterion may run a test in a fresh process image where pointers
 * into the parent's static data are not valid. */
struct name_case {
    char name[32];
    int valid;
};

ParameterizedTestParameters(frame, validates_names)
{
    static struct name_case cases[] = {
        {"", 0},     {"a", 1},       {"layer.3.weight", 1}, {"job with spaces/and~punct!", 1},
        {" ", 1},    {"~", 1},       {"tab\there", 0},      {"new\nline", 0},
        {"\x1f", 0}, {"del\x7f", 0}, {"caf\xc3\xa9", 0},    {"\x80", 0},
        {"\xff", 0},
    };
    return cr_make_param_array(struct name_case, cases, sizeof(cases) / sizeof(cases[0]));
}

ParameterizedTest(struct name_case *c, frame, validates_names)
{
    cr_assert_eq(rd_name_valid(c->name), c->valid, "rd_name_valid(\"%s\")", c->name);
}

Test(frame, rejects_a_null_name)
{
    cr_assert_eq(rd_name_valid(NULL), 0);
}

Test(frame, accepts_names_up_to_name_max_bytes_and_no_longer)
{
    char name[RD_NAME_MAX + 2];

    memset(name, 'n', sizeof(name));
    name[RD_NAME_MAX] = '\0';
    cr_assert_eq(strlen(name), 256);
    cr_assert_eq(rd_name_valid(name), 1);
    name[RD_NAME_MAX] = 'n';
    name[RD_NAME_MAX + 1] = '\0';
    cr_assert_eq(strlen(name), 257);
    cr_assert_eq(rd_name_valid(name), 0);
}

/* The data links' segment header: 32 bytes, little-endian, a magic first. */
Test(frame, a_segment_header_round_trips_in_a_fixed_little_endian_layout)
{
    rd_seg s = {0x01020304u, 0x1122334455667788ull, 9, 10}, back;
    uint8_t b[RD_SEG_HEADER];
    rd_seg_encode(&s, b);
    cr_assert_eq(b[0], 0x31, "the magic \"RDG1\" read as a little-endian integer");
    cr_assert_eq(b[4], 0x04);
    cr_assert_eq(b[8], 0x88);
    cr_assert_eq(b[16], 9);
    cr_assert_eq(b[24], 10);
    cr_assert_eq(rd_seg_decode(b, &back), 0);
    cr_assert_eq(back.len, s.len);
    cr_assert_eq(back.generation, s.generation);
    cr_assert_eq(back.seq, s.seq);
    cr_assert_eq(back.g, s.g);
    b[1] ^= 0xff;
    cr_assert_eq(rd_seg_decode(b, &back), RINGD_E_PROTOCOL,
                 "a header without the magic is refused");
}

/* A decoded Submit into the plain values the engine takes: descriptors present or not. */
Test(frame, a_submit_becomes_plain_values_with_or_without_tensor_descriptors)
{
    Ringd__Submit m = RINGD__SUBMIT__INIT;
    Ringd__TensorRef in = RINGD__TENSOR_REF__INIT;
    m.request_id = 7;
    m.op = RINGD__OP_TYPE__OP_BROADCAST;
    m.name = "w";
    m.count = 3;
    m.root = 2;
    m.in_offset = 4096;
    in.kind = RINGD__MEMORY_KIND__MEM_DEVICE;
    in.device = 1;
    in.handle = 9;
    in.offset = 64;
    m.input = &in;
    rd_submit s;
    rd_submit_of(&m, &s);
    cr_assert_eq(s.request_id, 7);
    cr_assert_eq(s.op, 1, "OpType values are rd_coll's");
    cr_assert_str_eq(s.name, "w");
    cr_assert_eq(s.root, 2);
    cr_assert_eq(s.in_offset, 4096);
    cr_assert(s.input.present);
    cr_assert_eq(s.input.kind, 1);
    cr_assert_eq(s.input.device, 1);
    cr_assert_eq(s.input.handle, 9);
    cr_assert_eq(s.input.offset, 64);
    cr_assert_not(s.output.present, "no output descriptor: an older library");
    Ringd__Hello h = RINGD__HELLO__INIT;
    h.job = NULL;
    h.world_size = 4;
    rd_hello hv;
    rd_hello_of(&h, &hv);
    cr_assert_str_eq(hv.job, "", "a missing string reads as empty");
    cr_assert_eq(hv.world_size, 4);
}

/* ------------------------------------------------------------------------------------------ */
/* The control tree's Relay                                                                   */
/* ------------------------------------------------------------------------------------------ */

Test(frame, relays_carry_messages_from_their_origin_to_one_node_or_every_node_in_order)
{
    Ringd__Bye bye = RINGD__BYE__INIT;
    bye.generation = 7;
    bye.leaving = 1;
    bye.loss = "rank 3 left";
    rd_msg m = RINGD__MSG__INIT;
    m.body_case = RINGD__MSG__BODY_BYE;
    m.bye = &bye;
    int tos[] = {-1, 0, 5, 255};
    Ringd__Relay *r[4];
    for (size_t k = 0; k < 4; k++) {
        Ringd__Relay *made = rd_relay_new(&m, 9 + (uint32_t)k, tos[k]);
        cr_assert_not_null(made);
        r[k] = rd_relay_copy(made);
        cr_assert_not_null(r[k]);
        cr_assert_leq(rd_relay_size(r[k]), ringd__relay__get_packed_size(r[k]) + 6);
        rd_relay_free(made);
    }
    Ringd__Relays rs;
    rd_msg batch;
    rd_relays_msg(&batch, &rs, r, 4);
    rd_msg *out = round_trip(&batch);
    cr_assert_eq(out->relays->n_relays, 4);
    for (size_t k = 0; k < 4; k++) {
        rd_msg *inner = NULL;
        uint32_t origin = 0;
        int to = -2;
        char err[128] = "";
        cr_assert_eq(rd_relay_open(out->relays->relays[k], &inner, &origin, &to, err, sizeof(err)),
                     RD_FRAME_OK, "%s", err);
        cr_assert_eq(origin, 9 + k);
        cr_assert_eq(to, tos[k]);
        cr_assert_eq(inner->body_case, RINGD__MSG__BODY_BYE);
        cr_assert_eq(inner->bye->generation, 7);
        cr_assert(inner->bye->leaving);
        cr_assert_str_eq(inner->bye->loss, "rank 3 left");
        rd_frame_free(inner);
        rd_relay_free(r[k]);
    }
    rd_frame_free(out);
    rd_relay_free(NULL);
}

/* Opens a Relay of payload[0..len) (NULL: none) from origin 1 to position to (the wire's, plus
 * one). */
static rd_frame_status open_relay(const uint8_t *payload, size_t len, uint32_t to, char *err,
                                  size_t errlen)
{
    Ringd__Relay r = RINGD__RELAY__INIT;
    r.origin = 1;
    r.to = to;
    r.msg.data = (uint8_t *)payload;
    r.msg.len = len;
    rd_msg sentinel = RINGD__MSG__INIT, *inner = &sentinel; /* NULL after every failure */
    uint32_t origin;
    int at;
    rd_frame_status st = rd_relay_open(&r, &inner, &origin, &at, err, errlen);
    if (st != RD_FRAME_OK)
        cr_assert_null(inner);
    rd_frame_free(st == RD_FRAME_OK ? inner : NULL);
    return st;
}

Test(frame, a_relay_of_nothing_of_garbage_of_relays_or_of_a_keepalive_is_refused_by_name)
{
    char err[128];
    cr_assert_eq(open_relay(NULL, 0, 0, err, sizeof(err)), RD_FRAME_BAD);
    cr_assert(strstr(err, "carries nothing") != NULL, "%s", err);
    uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0x0f};
    cr_assert_eq(open_relay(garbage, sizeof(garbage), 0, err, sizeof(err)), RD_FRAME_BAD);
    cr_assert(strstr(err, "undecodable") != NULL, "%s", err);

    Ringd__Poke p = RINGD__POKE__INIT;
    rd_msg poke = RINGD__MSG__INIT;
    poke.body_case = RINGD__MSG__BODY_POKE;
    poke.poke = &p;
    Ringd__Relay *r = rd_relay_new(&poke, 1, -1);
    cr_assert_not_null(r);
    cr_assert_eq(open_relay(r->msg.data, r->msg.len, 0, err, sizeof(err)), RD_FRAME_BAD);
    cr_assert(strstr(err, "carries a message of type") != NULL, "%s", err);
    Ringd__Relays rs;
    rd_msg batch;
    rd_relays_msg(&batch, &rs, &r, 1);
    Ringd__Relay *nested = rd_relay_new(&batch, 1, -1);
    cr_assert_not_null(nested);
    cr_assert_eq(open_relay(nested->msg.data, nested->msg.len, 0, err, sizeof(err)), RD_FRAME_BAD);
    cr_assert(strstr(err, "carries a message of type") != NULL, "%s", err);
    rd_relay_free(nested);
    rd_relay_free(r);

    Ringd__Error e = RINGD__ERROR__INIT;
    e.message = "x";
    rd_msg em = RINGD__MSG__INIT;
    em.body_case = RINGD__MSG__BODY_ERROR;
    em.error = &e;
    r = rd_relay_new(&em, 1, -1);
    cr_assert_not_null(r);
    cr_assert_eq(open_relay(r->msg.data, r->msg.len, UINT32_MAX, err, sizeof(err)), RD_FRAME_BAD);
    cr_assert(strstr(err, "to position") != NULL, "%s", err);
    cr_assert_eq(open_relay(r->msg.data, r->msg.len, 3, err, sizeof(err)), RD_FRAME_OK);
    rd_relay_free(r);
}

/* What the control tree's queues count a frame of Relays at (world_ctrl.c: 16 bytes and
 * rd_relay_size each) is never less than the frame, and one Relay adds at most
 * RD_RELAY_OVERHEAD to the message it carries, at every size up to the default --max-frame. */
Test(frame, a_frame_of_relays_is_never_larger_than_its_reckoning)
{
    size_t sizes[] = {
        0, 1, 100, 127, 128, 16383, 16384, 70000, RD_FRAME_MAX_DEFAULT - 64, RD_FRAME_MAX_DEFAULT};
    size_t n = sizeof(sizes) / sizeof(sizes[0]), sum = 16;
    Ringd__Relay *r[sizeof(sizes) / sizeof(sizes[0])];
    char *text = malloc(RD_FRAME_MAX_DEFAULT + 1);
    cr_assert_not_null(text);
    memset(text, 'x', RD_FRAME_MAX_DEFAULT);
    for (size_t k = 0; k < n; k++) {
        text[sizes[k]] = '\0';
        Ringd__Error e = RINGD__ERROR__INIT;
        e.message = text;
        rd_msg m = RINGD__MSG__INIT;
        m.body_case = RINGD__MSG__BODY_ERROR;
        m.error = &e;
        r[k] = rd_relay_new(&m, (uint32_t)(k * 1000), k % 2 ? -1 : 255);
        cr_assert_not_null(r[k]);
        text[sizes[k]] = 'x';
        Ringd__Relays one;
        rd_msg alone;
        rd_relays_msg(&alone, &one, &r[k], 1);
        cr_assert_leq(rd_frame_size(&alone), 16 + rd_relay_size(r[k]));
        cr_assert_leq(rd_frame_size(&alone) - RD_FRAME_HEADER, r[k]->msg.len + RD_RELAY_OVERHEAD,
                      "a Relay of %zu bytes takes %zu", r[k]->msg.len, rd_frame_size(&alone));
        sum += rd_relay_size(r[k]);
    }
    Ringd__Relays all;
    rd_msg batch;
    rd_relays_msg(&batch, &all, r, n);
    cr_assert_leq(rd_frame_size(&batch), sum);
    for (size_t k = 0; k < n; k++)
        rd_relay_free(r[k]);
    free(text);
}
