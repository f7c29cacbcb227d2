/* The ring's data links: every non-empty segment of a collective is preceded by a fixed 32-byte
 * header (little-endian) naming the generation, the op's place in the agreed order and the
 * segment's index, so that a segment of another ring or op is caught before its bytes land. */
#ifndef RD_SEGMENT_H
#define RD_SEGMENT_H

#include <stdint.h>

#include "ringd.h"

#define RD_SEG_HEADER 32

typedef struct {
    uint32_t len;        /* payload bytes that follow */
    uint64_t generation; /* of the ring */
    uint64_t seq;        /* the op's number in the ring's agreed order */
    uint64_t g;          /* the segment's index in the op */
} rd_seg;

/* Writes the header of s into out. */
void rd_seg_encode(const rd_seg *s, uint8_t out[RD_SEG_HEADER]);

/* Reads a header from in into *s. Returns RINGD_OK, or RINGD_E_PROTOCOL when in is not a segment
 * header (its magic is wrong: the stream is out of step or not ringd's). */
ringd_result_t rd_seg_decode(const uint8_t in[RD_SEG_HEADER], rd_seg *s);

#endif
