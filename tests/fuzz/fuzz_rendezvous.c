/* Fuzzes what the rendezvous reads back from Redis: member records, and replies (parsed by
 * hiredis's own reader from the bytes of the RESP protocol) to the view script and to XREAD on a
 * job's event stream. */
#include <hiredis/hiredis.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "rendezvous.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define AGGREGATE_MAX 4096 /* hiredis 0.14 allocates whatever a '*' or '$' announces */

/* 1 when no "*N" or "$N" in data announces more than AGGREGATE_MAX: hiredis 0.14 has no limit
 * of its own, and its allocation failures are not what this harness looks for. */
static int lengths_bounded(const uint8_t *data, size_t size)
{
    for (size_t i = 0; i < size; i++) {
        if (data[i] != '*' && data[i] != '$')
            continue;
        uint64_t v = 0;
        for (size_t k = i + 1; k < size && data[k] >= '0' && data[k] <= '9'; k++)
            if ((v = v * 10 + (uint64_t)(data[k] - '0')) > AGGREGATE_MAX)
                return 0;
    }
    return 1;
}

/* Runs one reply through both parsers; a view they accept must be well formed. */
static void check_reply(const redisReply *rep)
{
    char status[32], id[48];
    int64_t soonest = 0;
    size_t nbad = 0;
    int same = 0;
    rd_rdv_view *v =
        rd_rdv_view_parse(rep, "fuzz", status, sizeof(status), id, &soonest, &nbad, &same);
    if (v != NULL) {
        if (strlen(status) >= sizeof(status) || strlen(id) >= sizeof(id) || soonest < -1 ||
            (same && v->nmembers != 0))
            abort();
        for (size_t i = 0; i < v->nmembers; i++)
            if (!rd_name_valid(v->members[i].node) || v->members[i].addr[0] == '\0')
                abort();
        rd_rdv_view_free(v);
    }
    const char *last;
    size_t lastlen;
    if (rd_rdv_stream_last_id(rep, &last, &lastlen) == 0 && (last == NULL || lastlen >= 48))
        abort();
}

/* The whole input is tried as one member record, then as a stream of RESP replies. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rd_log_set_level(RD_LOG_ERROR);
    rd_rdv_member m;
    memset(&m, 0, sizeof(m));
    if (rd_rdv_record_parse((const char *)data, size, &m) == 0 &&
        (strlen(m.addr) == 0 || strlen(m.addr) >= RD_ADDR_MAX))
        abort();

    if (!lengths_bounded(data, size))
        return 0;
    redisReader *r = redisReaderCreate();
    if (r == NULL)
        return 0;
    if (redisReaderFeed(r, (const char *)data, size) == REDIS_OK) {
        void *reply = NULL;
        while (redisReaderGetReply(r, &reply) == REDIS_OK && reply != NULL) {
            check_reply(reply);
            freeReplyObject(reply);
            reply = NULL;
        }
    }
    redisReaderFree(r);
    return 0;
}
