/* Segment headers of the ring's data links. */
#include "segment.h"

#include <endian.h>
#include <string.h>

#define RD_SEG_MAGIC 0x52444731u /* "RDG1" */

void rd_seg_encode(const rd_seg *s, uint8_t out[RD_SEG_HEADER])
{
    uint32_t magic = htole32(RD_SEG_MAGIC), len = htole32(s->len);
    uint64_t gen = htole64(s->generation), seq = htole64(s->seq), g = htole64(s->g);
    memcpy(out, &magic, 4);
    memcpy(out + 4, &len, 4);
    memcpy(out + 8, &gen, 8);
    memcpy(out + 16, &seq, 8);
    memcpy(out + 24, &g, 8);
}

ringd_result_t rd_seg_decode(const uint8_t in[RD_SEG_HEADER], rd_seg *s)
{
    uint32_t magic, len;
    uint64_t gen, seq, g;
    memcpy(&magic, in, 4);
    memcpy(&len, in + 4, 4);
    memcpy(&gen, in + 8, 8);
    memcpy(&seq, in + 16, 8);
    memcpy(&g, in + 24, 8);
    s->len = le32toh(len);
    s->generation = le64toh(gen);
    s->seq = le64toh(seq);
    s->g = le64toh(g);
    return le32toh(magic) == RD_SEG_MAGIC ? RINGD_OK : RINGD_E_PROTOCOL;
}
