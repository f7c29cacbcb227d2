/* Framing of control messages: length prefix, size limit, decode and type check; the Relay
 * envelope of the control tree. */
#include "frame.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t rd_frame_size(const rd_msg *msg)
{
    return RD_FRAME_HEADER + ringd__msg__get_packed_size(msg);
}

size_t rd_frame_pack(const rd_msg *msg, uint8_t *buf)
{
    size_t n = ringd__msg__pack(msg, buf + RD_FRAME_HEADER);
    buf[0] = (uint8_t)n;
    buf[1] = (uint8_t)(n >> 8);
    buf[2] = (uint8_t)(n >> 16);
    buf[3] = (uint8_t)(n >> 24);
    return RD_FRAME_HEADER + n;
}

uint32_t rd_frame_payload_len(const uint8_t *buf)
{
    return (uint32_t)buf[0] | (uint32_t)buf[1] << 8 | (uint32_t)buf[2] << 16 |
           (uint32_t)buf[3] << 24;
}

rd_frame_status rd_frame_decode(const uint8_t *buf, size_t len, uint32_t max_payload, rd_msg **msg,
                                size_t *consumed, char *err, size_t errlen)
{
    *msg = NULL;
    if (len < RD_FRAME_HEADER)
        return RD_FRAME_NEED;
    uint32_t n = rd_frame_payload_len(buf);
    if (n > max_payload) {
        snprintf(err, errlen, "frame of %u bytes exceeds the limit of %u", n, max_payload);
        return RD_FRAME_BAD;
    }
    if (len - RD_FRAME_HEADER < n)
        return RD_FRAME_NEED;
    rd_msg *m = ringd__msg__unpack(NULL, n, buf + RD_FRAME_HEADER);
    if (m == NULL) {
        snprintf(err, errlen, "undecodable frame of %u bytes", n);
        return RD_FRAME_BAD;
    }
    if (m->body_case == RINGD__MSG__BODY__NOT_SET) {
        ringd__msg__free_unpacked(m, NULL);
        snprintf(err, errlen, "frame of %u bytes carries no known message type", n);
        return RD_FRAME_BAD;
    }
    *msg = m;
    *consumed = RD_FRAME_HEADER + n;
    return RD_FRAME_OK;
}

void rd_frame_free(rd_msg *msg)
{
    if (msg != NULL)
        ringd__msg__free_unpacked(msg, NULL);
}

/* A Relay of origin and to (the wire's) whose message is a copy of data[0..len). */
static Ringd__Relay *relay_make(uint32_t origin, uint32_t to, size_t len)
{
    Ringd__Relay *r = malloc(sizeof(*r) + (len > 0 ? len : 1));
    if (r == NULL)
        return NULL;
    ringd__relay__init(r);
    r->origin = origin;
    r->to = to;
    r->msg.data = (uint8_t *)(r + 1);
    r->msg.len = len;
    return r;
}

Ringd__Relay *rd_relay_new(const rd_msg *inner, uint32_t origin, int to)
{
    Ringd__Relay *r =
        relay_make(origin, to < 0 ? 0 : (uint32_t)to + 1, ringd__msg__get_packed_size(inner));
    if (r != NULL)
        ringd__msg__pack(inner, r->msg.data);
    return r;
}

Ringd__Relay *rd_relay_copy(const Ringd__Relay *from)
{
    Ringd__Relay *r = relay_make(from->origin, from->to, from->msg.len);
    if (r != NULL && from->msg.len > 0)
        memcpy(r->msg.data, from->msg.data, from->msg.len);
    return r;
}

void rd_relay_free(Ringd__Relay *r)
{
    free(r);
}

size_t rd_relay_size(const Ringd__Relay *r)
{
    return 1 + 5 + ringd__relay__get_packed_size(r); /* tag, length, the Relay */
}

void rd_relays_msg(rd_msg *m, Ringd__Relays *rs, Ringd__Relay **relays, size_t n)
{
    ringd__relays__init(rs);
    rs->n_relays = n;
    rs->relays = relays;
    *m = (rd_msg)RINGD__MSG__INIT;
    m->body_case = RINGD__MSG__BODY_RELAYS;
    m->relays = rs;
}

rd_frame_status rd_relay_open(const Ringd__Relay *r, rd_msg **inner, uint32_t *origin, int *to,
                              char *err, size_t errlen)
{
    *inner = NULL;
    if (r->to > (uint32_t)INT32_MAX) {
        snprintf(err, errlen, "a Relay to position %" PRIu32, r->to);
        return RD_FRAME_BAD;
    }
    rd_msg *in = r->msg.len > 0 ? ringd__msg__unpack(NULL, r->msg.len, r->msg.data) : NULL;
    if (in == NULL) {
        snprintf(err, errlen, "a Relay from position %" PRIu32 " carries %s", r->origin,
                 r->msg.len > 0 ? "an undecodable message" : "nothing");
        return RD_FRAME_BAD;
    }
    if (in->body_case == RINGD__MSG__BODY__NOT_SET || in->body_case == RINGD__MSG__BODY_RELAYS ||
        in->body_case == RINGD__MSG__BODY_POKE) {
        snprintf(err, errlen, "a Relay from position %" PRIu32 " carries a message of type %d",
                 r->origin, (int)in->body_case);
        ringd__msg__free_unpacked(in, NULL);
        return RD_FRAME_BAD;
    }
    *inner = in;
    *origin = r->origin;
    *to = (int)r->to - 1;
    return RD_FRAME_OK;
}

int rd_name_valid(const char *s)
{
    size_t n = 0;
    if (s == NULL)
        return 0;
    for (; s[n] != '\0'; n++) {
        if (n >= RD_NAME_MAX || s[n] < 0x20 || s[n] > 0x7e)
            return 0;
    }
    return n > 0;
}

int rd_job_name_valid(const char *s)
{
    return rd_name_valid(s) && s[0] != RD_JOB_RESERVED;
}

size_t rd_name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return (size_t)h;
}
