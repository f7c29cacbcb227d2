/* Chrome trace event files of ops' paths through a node. */
#include "chrome_trace.h"

#include <inttypes.h>
#include <stdarg.h>
#include <string.h>

#include "ringd.pb-c.h"

#define NODE_PID 1  /* the node's row: ring passes and membership changes */
#define OTHER_PID 2 /* the tensors past RD_CTRACE_ROWS different names share one row */

static const char *const kind_names[] = {"ALLREDUCE", "BROADCAST", "ALLGATHER", "BARRIER"};

static void out(rd_ctrace *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out(rd_ctrace *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (vfprintf(t->f, fmt, ap) < 0)
        t->failed = 1;
    va_end(ap);
}

/* s as the inside of a JSON string (names are printable ASCII; anything else is escaped). */
static void out_str(rd_ctrace *t, const char *s)
{
    for (; s != NULL && *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            out(t, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            out(t, "\\u%04x", c);
        else
            out(t, "%c", c);
    }
}

/* Opens the next event: a comma after the previous one. */
static void event(rd_ctrace *t)
{
    out(t, t->any ? ",\n" : "\n");
    t->any = 1;
}

/* The row (pid) of a tensor: a hash of its name, titled with the name when first used. */
static uint32_t row_of(rd_ctrace *t, const char *name)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const char *p = name; *p != '\0'; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    uint32_t pid = 3 + h % 1000000000u; /* never the node's or the shared one */
    for (uint32_t i = 0; i < RD_CTRACE_ROWS; i++) {
        uint32_t *slot = &t->rows[(h + i) % RD_CTRACE_ROWS];
        if (*slot == pid)
            return pid;
        if (*slot == 0) {
            *slot = pid;
            event(t);
            out(t,
                "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%" PRIu32 ",\"args\":{\"name\":\"",
                pid);
            out_str(t, name);
            out(t, "\"}}");
            return pid;
        }
    }
    if (!t->other_named) { /* the table is full */
        t->other_named = 1;
        event(t);
        out(t,
            "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":"
            "\"other tensors\"}}",
            OTHER_PID);
    }
    return OTHER_PID;
}

int rd_ctrace_open(rd_ctrace *t, FILE *f, const char *node)
{
    memset(t, 0, sizeof(*t));
    t->f = f;
    out(t, "[");
    event(t);
    out(t, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"node ",
        NODE_PID);
    out_str(t, node);
    out(t, "\"}}");
    event(t);
    out(t, "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"sort_index\":-1}}",
        NODE_PID);
    return t->failed ? -1 : 0;
}

/* A span of the op's row from a to b, when the op passed both. */
static void span(rd_ctrace *t, uint32_t pid, const char *name, int64_t a, int64_t b)
{
    if (a <= 0 || b < a)
        return;
    event(t);
    out(t,
        "{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%" PRIu32 ",\"tid\":0,\"ts\":%" PRId64
        ",\"dur\":%" PRId64 "}",
        name, pid, a, b - a);
}

void rd_ctrace_op(rd_ctrace *t, const Ringd__OpTrace *op)
{
    const char *name = op->name != NULL ? op->name : "";
    uint32_t pid = row_of(t, name);
    int64_t first = 0;
    for (size_t k = 0; k < op->n_submit_us; k++)
        if (op->submit_us[k] > 0 && (first == 0 || op->submit_us[k] < first))
            first = op->submit_us[k];
    if (first == 0)
        first = op->ready_us > 0 ? op->ready_us : op->end_us;
    const char *kind =
        op->kind < sizeof(kind_names) / sizeof(kind_names[0]) ? kind_names[op->kind] : "OP";
    /* The whole op, its phases nested under it. */
    if (first > 0 && op->end_us >= first) {
        event(t);
        out(t,
            "{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%" PRIu32 ",\"tid\":0,\"ts\":%" PRId64
            ",\"dur\":%" PRId64 ",\"args\":{\"seq\":%" PRIu64 ",\"status\":%" PRIu32
            ",\"bytes\":%" PRIu64 ",\"generation\":%" PRIu64 ",\"pass\":%" PRIu64
            ",\"fused_ops\":%" PRIu32 ",\"direct\":%s}}",
            kind, pid, first, op->end_us - first, op->seq, op->status, op->bytes, op->generation,
            op->pass, op->pass_ops, op->direct ? "true" : "false");
    }
    for (size_t k = 0; k < op->n_submit_us; k++) {
        if (op->submit_us[k] <= 0)
            continue;
        event(t);
        out(t,
            "{\"name\":\"SUBMIT rank %" PRIu64 "\",\"ph\":\"i\",\"s\":\"t\",\"pid\":%" PRIu32
            ",\"tid\":0,\"ts\":%" PRId64 ",\"args\":{\"local_rank\":%zu}}",
            (uint64_t)op->first_rank + k, pid, op->submit_us[k], k);
    }
    span(t, pid, "WAIT_FOR_RANKS", first, op->ready_us);
    span(t, pid, "NEGOTIATE", op->ready_us, op->negotiated_us);
    int64_t queued = op->negotiated_us > 0 ? op->negotiated_us : op->ready_us;
    span(t, pid, "QUEUE", queued, op->started_us);
    if (op->n_ring_us == 5) {
        const int64_t *r = op->ring_us;
        span(t, pid, "XFER_QUEUE", op->started_us, r[0]);
        span(t, pid, "LOCAL_REDUCE", r[0], r[1]);
        if (r[2] > 0) {
            span(t, pid, "REDUCE_SCATTER", r[1], r[2]);
            span(t, pid, "ALLGATHER", r[2], r[3]);
        } else {
            span(t, pid, "RING", r[1], r[3]);
        }
        span(t, pid, "WRITE_BACK", r[3], r[4]);
        span(t, pid, "COMPLETE", r[4], op->end_us);
        if (op->pass != 0 && op->pass != t->last_pass && r[0] > 0 && r[4] >= r[0]) {
            t->last_pass = op->pass;
            event(t);
            out(t,
                "{\"name\":\"PASS %" PRIu64 "\",\"ph\":\"X\",\"pid\":%d,\"tid\":1,\"ts\":%" PRId64
                ",\"dur\":%" PRId64 ",\"args\":{\"ops\":%" PRIu32 "}}",
                op->pass, NODE_PID, r[0], r[4] - r[0], op->pass_ops);
        }
    } else if (op->direct) { /* the result came with the negotiation */
        span(t, pid, "WRITE_BACK", op->negotiated_us, op->end_us);
    } else {
        span(t, pid, "LOCAL", op->started_us, op->end_us);
    }
}

void rd_ctrace_mark(rd_ctrace *t, int64_t t_us, uint64_t generation, const char *what)
{
    event(t);
    out(t,
        "{\"name\":\"MEMBERSHIP\",\"ph\":\"i\",\"s\":\"g\",\"pid\":%d,\"tid\":0,\"ts\":%" PRId64
        ",\"args\":{\"generation\":%" PRIu64 ",\"what\":\"",
        NODE_PID, t_us, generation);
    out_str(t, what);
    out(t, "\"}}");
}

int rd_ctrace_close(rd_ctrace *t)
{
    out(t, "\n]\n");
    if (fflush(t->f) != 0)
        t->failed = 1;
    return t->failed ? -1 : 0;
}
