/* Fuzzes the framing of control messages (rd_frame_decode) as a stream of frames off a socket;
 * every decoded message is packed again and decoded once more. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"

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
        if (m->body_case == RINGD__MSG__BODY_HELLO)
            (void)rd_name_valid(m->hello->job);
        if (m->body_case == RINGD__MSG__BODY_SUBMIT && rd_name_valid(m->submit->name))
            (void)rd_name_hash(m->submit->name);
        rd_frame_free(m);
        off += used;
    }
    return 0;
}
