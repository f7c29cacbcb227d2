/* Fuzzes the shared-memory control queues as a hostile client drives them: the input writes the
 * shared indices, the sleep flag and the ring's bytes between the daemon's reads and writes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ctlq.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Reads n bytes of the input as a little-endian number (what is left of it, zero-padded). */
static uint64_t take(const uint8_t **p, size_t *left, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i<n && * left> 0; i++, (*p)++, (*left)--)
        v |= (uint64_t) * *p << (8 * i);
    return v;
}

/* The input is a script of one-byte commands with their operands:
 *   0 head=u64  1 tail=u64  2 head+=u16  3 write u16 offset, u8 length, bytes  4 get  5 put
 *   6 prepare sleep / wake  7 re-attach both sides from the shared indices. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static rd_ctrl *ctrl;
    if (ctrl == NULL && (ctrl = aligned_alloc(64, RD_CTRL_BYTES)) == NULL)
        return 0;
    memset(ctrl, 0, RD_CTRL_BYTES);
    rd_ctrl_init(ctrl);
    if (!rd_ctrl_valid(ctrl))
        abort();
    rd_ctlq sq, cq;
    rd_ctlq_attach_consumer(&sq, &ctrl->sq);
    rd_ctlq_attach_producer(&cq, &ctrl->cq);

    Ringd__Complete c = RINGD__COMPLETE__INIT;
    rd_msg reply = RINGD__MSG__INIT;
    c.request_id = 7;
    c.message = "done";
    reply.body_case = RINGD__MSG__BODY_COMPLETE;
    reply.complete = &c;

    const uint8_t *p = data;
    size_t left = size;
    int steps = 0;
    while (left > 0 && steps++ < 256) {
        uint8_t op = (uint8_t)take(&p, &left, 1) % 8;
        switch (op) {
        case 0: atomic_store(&ctrl->sq.head, take(&p, &left, 8)); break;
        case 1: atomic_store(&ctrl->cq.tail, take(&p, &left, 8)); break;
        case 2: atomic_fetch_add(&ctrl->sq.head, take(&p, &left, 2)); break;
        case 3: {
            size_t off = (size_t)take(&p, &left, 2) % RD_CTLQ_BYTES;
            size_t len = (size_t)take(&p, &left, 1);
            if (len > left)
                len = left;
            for (size_t i = 0; i < len; i++)
                ctrl->sq.data[(off + i) % RD_CTLQ_BYTES] = p[i];
            p += len;
            left -= len;
            break;
        }
        case 4: {
            rd_msg *m = NULL;
            char err[256];
            rd_ctlq_status st = rd_ctlq_get(&sq, RD_FRAME_MAX_DEFAULT, &m, err, sizeof(err));
            if ((st == RD_CTLQ_OK) != (m != NULL))
                abort();
            rd_frame_free(m);
            break;
        }
        case 5:
            c.request_id++;
            if (rd_ctlq_put(&cq, &reply) == RD_CTLQ_OK)
                (void)rd_ctlq_consumer_asleep(&cq);
            break;
        case 6:
            if (rd_ctlq_prepare_sleep(&sq))
                rd_ctlq_wake(&sq);
            break;
        case 7:
            rd_ctlq_attach_consumer(&sq, &ctrl->sq);
            rd_ctlq_attach_producer(&cq, &ctrl->cq);
            break;
        }
    }
    return 0;
}
