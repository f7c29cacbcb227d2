/* Fuzzes the framing of control messages (rd_frame_decode) as a stream of frames off a socket;
 * every decoded message is packed again and decoded once more, and a scheduling message (Ready,
 * Go, DevOffer, DevPlan, DevConfirm) is decoded into its plain value (rd_schedmsg_decode), which
 * must survive the wire again. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "schedmsg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Packs m again and decodes the packing, as a daemon relaying it would: neither may touch memory
 * it does not own. The second decode is not required to succeed: protobuf-c 1.4 merges a
 * submessage that occurs twice in a way that can repack into bytes it then refuses (corpus entry
 * frame/merged_oneof_repack); ringd never re-packs a message it decoded. */
static void check_repack(const rd_msg *m)
{
    size_t n = rd_frame_size(m);
    uint8_t *buf = malloc(n);
    if (buf == NULL)
        return;
    if (rd_frame_pack(m, buf) != n)
        abort();
    rd_msg *again = NULL;
    size_t used = 0;
    char err[256];
    if (rd_frame_decode(buf, n, UINT32_MAX, &again, &used, err, sizeof(err)) == RD_FRAME_OK &&
        used != n)
        abort();
    rd_frame_free(again);
    free(buf);
}

/* 1 when two decoded announcements are the same. */
static int spec_same(const rd_op_spec *a, const rd_op_spec *b)
{
    return strcmp(a->name, b->name) == 0 && memcmp(&a->p, &b->p, sizeof(a->p)) == 0 &&
           a->status == b->status && strcmp(a->message, b->message) == 0 &&
           a->direct == b->direct && a->len == b->len &&
           (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

/* A scheduling message as world.c takes it from a peer: a plain value that checked, whose
 * encoding decodes to the same value. */
static void check_schedmsg(const rd_msg *m)
{
    rd_schedmsg v, again;
    char err[256];
    if (rd_schedmsg_decode(m, &v, err, sizeof(err)) != RD_SCHEDMSG_DECODED)
        return;
    rd_msg *enc = rd_schedmsg_encode(&v);
    uint8_t *buf = enc != NULL ? malloc(rd_frame_size(enc)) : NULL;
    if (buf == NULL) {
        rd_schedmsg_encoded_free(enc);
        rd_schedmsg_release(&v);
        return;
    }
    size_t n = rd_frame_pack(enc, buf), used = 0;
    rd_msg *back = NULL;
    if (rd_frame_decode(buf, n, UINT32_MAX, &back, &used, err, sizeof(err)) != RD_FRAME_OK ||
        rd_schedmsg_decode(back, &again, err, sizeof(err)) != RD_SCHEDMSG_DECODED)
        abort();
    if (again.kind != v.kind || again.generation != v.generation || again.nops != v.nops ||
        again.nstalled != v.nstalled || again.nnames != v.nnames)
        abort();
    int dev = v.kind != RD_SCHEDMSG_READY && v.kind != RD_SCHEDMSG_GO; /* why is set */
    if (dev && (again.dev.want != v.dev.want || again.dev.device != v.dev.device ||
                again.dev.can != v.dev.can || again.dev.transport != v.dev.transport ||
                again.dev.required != v.dev.required || again.dev.confirm != v.dev.confirm ||
                again.dev.id_len != v.dev.id_len || strcmp(again.dev.why, v.dev.why) != 0 ||
                (v.dev.id_len > 0 && memcmp(again.dev.id, v.dev.id, v.dev.id_len) != 0)))
        abort();
    for (size_t i = 0; i < v.nops; i++)
        if (!spec_same(&v.ops[i], &again.ops[i]))
            abort();
    for (size_t i = 0; i < v.nstalled; i++)
        if (!spec_same(&v.stalled[i], &again.stalled[i]))
            abort();
    for (size_t i = 0; i < v.nnames; i++)
        if (strcmp(v.names[i], again.names[i]) != 0)
            abort();
    rd_schedmsg_release(&again);
    rd_frame_free(back);
    free(buf);
    rd_schedmsg_encoded_free(enc);
    rd_schedmsg_release(&v);
}

/* Decodes frame after frame as a session does, under the default --max-frame. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t off = 0;
    while (off < size) {
        rd_msg *m = NULL;
        size_t used = 0;
        char err[256];
        rd_frame_status st = rd_frame_decode(data + off, size - off, RD_FRAME_MAX_DEFAULT, &m,
                                             &used, err, sizeof(err));
        if (st != RD_FRAME_OK)
            break;
        check_repack(m);
        check_schedmsg(m);
        for (size_t k = 0; m->body_case == RINGD__MSG__BODY_RELAYS && k < m->relays->n_relays;
             k++) {
            rd_msg *inner = NULL; /* a Relay's message, as world_ctrl.c opens it */
            uint32_t origin;
            int to;
            if (rd_relay_open(m->relays->relays[k], &inner, &origin, &to, err, sizeof(err)) !=
                RD_FRAME_OK)
                continue;
            if (inner->body_case == RINGD__MSG__BODY_RELAYS || to < -1)
                abort();
            check_repack(inner);
            check_schedmsg(inner);
            rd_frame_free(inner);
        }
        if (m->body_case == RINGD__MSG__BODY_HELLO)
            (void)rd_name_valid(m->hello->job);
        if (m->body_case == RINGD__MSG__BODY_SUBMIT && rd_name_valid(m->submit->name))
            (void)rd_name_hash(m->submit->name);
        rd_frame_free(m);
        off += used;
    }
    return 0;
}
