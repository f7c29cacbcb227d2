/* Collectives of two steps: the ranks learn each other's counts with one daemon op (an
 * allgather), then move the data with a second under the same name: an allgatherv into a buffer
 * the caller gives once it knows them, or an alltoall of the whole matrix of counts. The caller
 * holds one request (the outer one, never sent); each step is an ordinary request of the
 * session whose completion, handled in whichever call reads it, starts the next step or ends the
 * outer request. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "session.h"

/* A request's two steps: every rank's counts and layout, then the data. */
typedef struct rd_learn {
    int op; /* the data step: OP_ALLGATHERV or OP_ALLTOALL */
    char name[RD_NAME_MAX + 1];
    const void *send;
    size_t sendcount; /* allgatherv: this rank's count; alltoall: its row's sum */
    ringd_dtype_t dtype;
    ringd_recv_fn recv; /* NULL: recvbuf, of want[] */
    void *ctx;
    void *recvbuf;                /* alltoallv with receive counts given */
    const size_t *want;           /* those receive counts (the caller's) */
    size_t *recvcounts;           /* the caller's, or NULL: what this rank receives from each */
    int size;                     /* the job's size at the call: the first step gathers that many */
    int per;                      /* values per rank in the first step: counts, then the layout */
    int step;                     /* 1: gathering the counts; 2: moving the data */
    uint64_t *mine;               /* this rank's per values (in this allocation, as the rest) */
    uint64_t *table;              /* every rank's, size x per */
    size_t *counts;               /* the data step's: allgatherv size, alltoall size x size */
    size_t *column;               /* what this rank receives from each rank */
    struct rd_learn_group *group; /* made inside ringd_group_start/end, or NULL */
    ringd_request_t *outer;       /* the request this is the state of */
    char *refused;                /* its rank joined during its first step: why it fails */
} rd_learn;

/* The collectives of two steps of one group (ringd_group_start/end). Their first steps went in
 * that group, which the daemons run or fail as one; their data steps go as one group of their
 * own once every first step has ended (failed alike: all of them fail with it), so that all of
 * them run or none does, on every rank. */
typedef struct rd_learn_group {
    ringd_t *r;
    rd_learn **members; /* in the order they were made; NULL once freed */
    size_t n, cap;
    size_t waiting;        /* first steps not ended yet */
    int closed;            /* 1: its group has ended (no more members); 2: its data steps went */
    int busy;              /* group_go runs: a member freed meanwhile leaves g in place */
    ringd_result_t status; /* the first steps' first failure */
    char *message;
} rd_learn_group;

static void group_free(rd_learn_group *g)
{
    if (g->r->learn_group == g)
        g->r->learn_group = NULL;
    free(g->members);
    free(g->message);
    free(g);
}

/* 1 when no member of g is left. */
static int group_empty(const rd_learn_group *g)
{
    for (size_t i = 0; i < g->n; i++)
        if (g->members[i] != NULL)
            return 0;
    return 1;
}

void rd_learn_free(rd_learn *l)
{
    if (l == NULL)
        return;
    rd_learn_group *g = l->group;
    if (g != NULL) {
        for (size_t i = 0; i < g->n; i++)
            if (g->members[i] == l)
                g->members[i] = NULL;
        if (!g->busy && group_empty(g))
            group_free(g);
    }
    free(l->refused);
    free(l);
}

/* Ends q with status and message. An outer request its caller gave up on goes now: no Complete
 * will come for it. */
static void finish(ringd_request_t *q, ringd_result_t status, const char *message)
{
    if (q->abandoned) {
        rd_lib_req_unlink(q);
        rd_lib_req_free(q);
        return;
    }
    rd_lib_req_complete(q, status, message);
}

/* Fills the data step's counts and this rank's column from the table; checks the layouts (every
 * rank has the same table: every one fails here alike, and none goes on). Returns RINGD_OK, or
 * RINGD_E_MISMATCH with errmsg set. */
static ringd_result_t read_table(ringd_t *r, rd_learn *l, size_t *total)
{
    int n = l->size, per = l->per;
    *total = 0;
    for (int k = 0; k < n; k++) {
        uint64_t layout = l->table[(size_t)k * per + per - 1];
        if (layout != l->table[per - 1]) {
            snprintf(r->errmsg, sizeof(r->errmsg),
                     "tensor '%s' mismatch (layout): rank 0 passed layout %" PRIu64
                     ", rank %d layout %" PRIu64 " (of rows of differing shapes?)",
                     l->name, l->table[per - 1], k, layout);
            return RINGD_E_MISMATCH;
        }
        if (l->op == RINGD__OP_TYPE__OP_ALLGATHERV) {
            l->counts[k] = l->column[k] = (size_t)l->table[(size_t)k * per];
        } else {
            for (int j = 0; j < n; j++)
                l->counts[(size_t)k * n + j] = (size_t)l->table[(size_t)k * per + j];
            l->column[k] = l->counts[(size_t)k * n + r->rank];
        }
        *total += l->column[k];
    }
    return RINGD_OK;
}

/* The data step of q: every rank's counts are in the table. Returns RINGD_OK, or the failure
 * (told to the daemon, so that every rank fails alike) with errmsg set. */
static ringd_result_t move_data(ringd_request_t *q)
{
    ringd_t *r = q->r;
    rd_learn *l = q->learn;
    submit_args a = {l->op,     l->name, l->send, NULL, l->sendcount, l->dtype,
                     RINGD_SUM, 0,       1.0,     1.0,  l->counts,    0};
    size_t total = 0;
    if (q->abandoned) { /* its caller is gone: nothing of its memory may be touched */
        snprintf(r->errmsg, sizeof(r->errmsg),
                 "tensor '%s': rank %d gave up waiting for it (op_timeout_ms)", l->name, r->rank);
        return rd_lib_refuse(r, &a, l->name, RINGD_E_TIMEOUT);
    }
    if (r->size != l->size) { /* the counts are for the old size */
        snprintf(r->errmsg, sizeof(r->errmsg),
                 "tensor '%s': the job changed from %d to %d ranks between its two steps: "
                 "restore the last committed state and broadcast it from rank 0",
                 l->name, l->size, r->size);
        return rd_lib_refuse(r, &a, l->name, RINGD_E_MEMBERSHIP);
    }
    ringd_result_t rc = read_table(r, l, &total);
    if (rc != RINGD_OK)
        return rc;
    if (l->recvcounts != NULL)
        memcpy(l->recvcounts, l->column, (size_t)l->size * sizeof(size_t));
    if (l->recv == NULL) {
        for (int k = 0; k < l->size; k++)
            if (l->want[k] != l->column[k]) {
                snprintf(r->errmsg, sizeof(r->errmsg),
                         "tensor '%s' mismatch (counts): rank %d expects %zu elements from rank "
                         "%d, which sends it %zu",
                         l->name, r->rank, l->want[k], k, l->column[k]);
                return rd_lib_refuse(r, &a, l->name, RINGD_E_MISMATCH);
            }
        a.recv = l->recvbuf;
    } else {
        a.recv = l->recv(l->ctx, l->column, l->size, total);
    }
    if (a.recv == NULL && total > 0) {
        snprintf(r->errmsg, sizeof(r->errmsg),
                 "tensor '%s': rank %d had no buffer for the %zu elements it receives", l->name,
                 r->rank, total);
        return rd_lib_refuse(r, &a, l->name, RINGD_E_NOMEM);
    }
    ringd_request_t *step;
    rc = rd_lib_submit(r, &a, &step);
    if (rc == RINGD_OK)
        step->outer = q;
    return rc;
}

/* Every first step of g has ended and no group is being made: the data steps go as one group,
 * or every member fails as the first steps did. */
static void group_go(rd_learn_group *g)
{
    ringd_t *r = g->r;
    g->closed = 2; /* gone: nothing comes back to it */
    g->busy = 1;   /* its members end (and may be freed) as this goes: it stays till the end */
    ringd_result_t status = g->status;
    char *message = g->message != NULL ? strdup(g->message) : NULL;
    /* every rank has the same tables: a layout that differs fails the whole group alike */
    for (size_t i = 0; status == RINGD_OK && i < g->n; i++) {
        size_t total;
        if (g->members[i] != NULL && read_table(r, g->members[i], &total) != RINGD_OK) {
            status = RINGD_E_MISMATCH;
            message = strdup(r->errmsg);
        }
    }
    if (status != RINGD_OK) {
        for (size_t i = 0; i < g->n; i++)
            if (g->members[i] != NULL)
                finish(g->members[i]->outer, status,
                       message != NULL ? message : ringd_strerror(status));
    } else {
        rd_group_aside caller; /* a group the caller is making now is not this one */
        rd_lib_group_aside(r, &caller);
        ringd_group_start(r);
        for (size_t i = 0; i < g->n; i++) {
            if (g->members[i] == NULL)
                continue;
            ringd_request_t *q = g->members[i]->outer;
            q->learn->step = 2;
            ringd_result_t rc = move_data(q); /* refused inside the group: all of it fails */
            if (rc != RINGD_OK && !q->done)
                finish(q, rc, r->errmsg);
        }
        ringd_group_end(r);
        rd_lib_group_restore(r, &caller);
    }
    free(message);
    g->busy = 0;
    if (group_empty(g))
        group_free(g);
}

void rd_learn_group_end(ringd_t *r)
{
    rd_learn_group *g = r->learn_group;
    if (g == NULL)
        return;
    r->learn_group = NULL;
    g->closed = 1;
    for (size_t i = 0; i < g->n; i++)
        if (g->members[i] != NULL)
            g->members[i]->outer->held = 0;
    if (g->waiting == 0)
        group_go(g);
}

/* inner, the first step of a member of group g, has ended with status (message: the daemon's
 * detail, taken). */
static void group_step_ended(rd_learn_group *g, ringd_result_t status, char *message)
{
    if (status != RINGD_OK && g->status == RINGD_OK) {
        g->status = status;
        g->message = message;
        message = NULL;
    }
    free(message);
    if (--g->waiting == 0 && g->closed == 1)
        group_go(g);
}

void rd_learn_advance(ringd_request_t *inner)
{
    ringd_request_t *q = inner->outer;
    ringd_result_t status = inner->status;
    char *message = inner->message;
    inner->message = NULL;
    rd_lib_req_unlink(inner);
    rd_lib_req_free(inner);
    rd_learn *l = q->learn;
    if (l->refused != NULL && l->step == 1 && status == RINGD_OK) { /* its rank joined */
        free(message);
        message = strdup(l->refused);
        status = RINGD_E_INVALID;
    }
    if (l->group != NULL && l->step == 1 && l->group->closed != 2) {
        group_step_ended(l->group, status, message);
        return;
    }
    if (status == RINGD_OK && l->step == 1) {
        rd_group_aside caller; /* a group the caller is making now is not this one's */
        rd_lib_group_aside(q->r, &caller);
        l->step = 2;
        status = move_data(q);
        rd_lib_group_restore(q->r, &caller);
        free(message);
        if (status == RINGD_OK || q->done) /* going on; or the session broke, ending q */
            return;
        message = strdup(q->r->errmsg);
    }
    finish(q, status, message);
    free(message);
}

void rd_learn_refuse_all(ringd_t *r, const char *why)
{
    for (ringd_request_t *q = r->reqs; q != NULL; q = q->next) {
        rd_learn *l = q->learn;
        if (l == NULL || q->done || l->step != 1 || l->refused != NULL)
            continue;
        char msg[sizeof(r->errmsg)];
        snprintf(msg, sizeof(msg), "tensor '%s': %s", l->name, why);
        l->refused = strdup(msg);
        /* its data step, which the others submit once the first has run, fails for them */
        ringd_refuse(r, l->name, RINGD_E_INVALID, msg);
    }
}

/* What a collective of two steps is given. */
typedef struct {
    int op;
    const char *name;
    const void *send;
    size_t sendcount;         /* allgatherv */
    const size_t *sendcounts; /* alltoall: this rank's row */
    uint64_t layout;
    ringd_dtype_t dtype;
    ringd_recv_fn recv;
    void *ctx;
    void *recvbuf;
    const size_t *want;
    size_t *recvcounts;
} learn_args;

/* Makes l a member of the group being made. Returns 0, or -1 out of memory. */
static int group_add(ringd_t *r, rd_learn *l)
{
    rd_learn_group *g = r->learn_group;
    if (g == NULL) {
        if ((g = calloc(1, sizeof(*g))) == NULL)
            return -1;
        g->r = r;
        r->learn_group = g;
    }
    if (g->n == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 8;
        rd_learn **m = realloc(g->members, cap * sizeof(*m));
        if (m == NULL) {
            if (g->n == 0)
                group_free(g);
            return -1;
        }
        g->members = m;
        g->cap = cap;
    }
    g->members[g->n++] = l;
    g->waiting++;
    l->group = g;
    return 0;
}

/* Starts the first step of a collective of two steps: the outer request into *req. */
static ringd_result_t learn_start(ringd_t *r, const learn_args *g, ringd_request_t **req)
{
    if (req != NULL)
        *req = NULL;
    if (r == NULL || req == NULL || rd_lib_left_to_parent(r))
        return RINGD_E_INVALID;
    int n = r->size, per = g->op == RINGD__OP_TYPE__OP_ALLTOALL ? n + 1 : 2;
    submit_args a = {RINGD__OP_TYPE__OP_ALLGATHER,
                     g->name,
                     NULL,
                     NULL,
                     (size_t)per,
                     RINGD_I64,
                     RINGD_SUM,
                     0,
                     1.0,
                     1.0,
                     NULL,
                     0};
    const char *bad =
        g->name == NULL           ? "it needs a name (both its steps go under it)"
        : !rd_name_valid(g->name) ? "an invalid name"
        : g->recv == NULL && g->want == NULL
            ? (g->op == RINGD__OP_TYPE__OP_ALLTOALL ? "recvcounts is NULL" : "recv is NULL")
        : g->op == RINGD__OP_TYPE__OP_ALLTOALL && g->sendcounts == NULL ? "sendcounts is NULL"
                                                                        : NULL;
    if (bad != NULL) {
        snprintf(r->errmsg, sizeof(r->errmsg), "%s: %s",
                 g->op == RINGD__OP_TYPE__OP_ALLTOALL ? "ringd_alltoallv" : "ringd_allgatherv_into",
                 bad);
        return g->name != NULL && rd_name_valid(g->name)
                   ? rd_lib_refuse(r, &a, g->name, RINGD_E_INVALID)
                   : RINGD_E_INVALID;
    }
    size_t matrix = g->op == RINGD__OP_TYPE__OP_ALLTOALL ? (size_t)n * n : (size_t)n;
    ringd_request_t *q = calloc(1, sizeof(*q));
    rd_learn *l = calloc(1, sizeof(*l) + ((size_t)per * (n + 1)) * sizeof(uint64_t) +
                                (matrix + (size_t)n) * sizeof(size_t));
    if (q == NULL || l == NULL) {
        free(q);
        free(l);
        snprintf(r->errmsg, sizeof(r->errmsg), "out of memory");
        return rd_lib_refuse(r, &a, g->name, RINGD_E_NOMEM);
    }
    l->mine = (uint64_t *)(l + 1);
    l->table = l->mine + per;
    l->counts = (size_t *)(l->table + (size_t)per * n);
    l->column = l->counts + matrix;
    l->op = g->op;
    snprintf(l->name, sizeof(l->name), "%s", g->name);
    l->send = g->send;
    l->sendcount = g->sendcount;
    if (g->op == RINGD__OP_TYPE__OP_ALLTOALL) {
        l->sendcount = 0;
        for (int j = 0; j < n; j++) {
            l->mine[j] = g->sendcounts[j];
            l->sendcount += g->sendcounts[j];
        }
    } else {
        l->mine[0] = g->sendcount;
    }
    l->mine[per - 1] = g->layout;
    l->dtype = g->dtype;
    l->recv = g->recv;
    l->ctx = g->ctx;
    l->recvbuf = g->recvbuf;
    l->want = g->want;
    l->recvcounts = g->recvcounts;
    l->size = n;
    l->per = per;
    l->step = 1;
    l->outer = q;
    q->r = r;
    q->id = 0; /* never sent: no Complete matches it */
    q->stage = UINT64_MAX;
    q->learn = l;
    a.send = l->mine;
    a.recv = l->table;
    if (r->grouping && group_add(r, l) != 0) {
        free(l);
        free(q);
        snprintf(r->errmsg, sizeof(r->errmsg), "out of memory");
        return rd_lib_refuse(r, &a, g->name, RINGD_E_NOMEM);
    }
    ringd_request_t *step;
    ringd_result_t rc = rd_lib_submit(r, &a, &step);
    if (rc != RINGD_OK) { /* refused in the group too: the group fails, without this member */
        if (l->group != NULL) {
            l->group->waiting--;
            l->group->n--;
        }
        rd_learn_free(l);
        free(q);
        return rc;
    }
    step->outer = q;
    q->held = l->group != NULL; /* waited for only once its group has ended */
    rd_lib_req_link(r, q);
    *req = q;
    return RINGD_OK;
}

ringd_result_t ringd_allgatherv_into_async(ringd_t *r, const char *name, const void *sendbuf,
                                           size_t sendcount, uint64_t layout, ringd_dtype_t dtype,
                                           ringd_recv_fn recv, void *ctx, size_t *recvcounts,
                                           ringd_request_t **req)
{
    learn_args g = {RINGD__OP_TYPE__OP_ALLGATHERV,
                    name,
                    sendbuf,
                    sendcount,
                    NULL,
                    layout,
                    dtype,
                    recv,
                    ctx,
                    NULL,
                    NULL,
                    recvcounts};
    return learn_start(r, &g, req);
}

ringd_result_t ringd_allgatherv_into(ringd_t *r, const char *name, const void *sendbuf,
                                     size_t sendcount, uint64_t layout, ringd_dtype_t dtype,
                                     ringd_recv_fn recv, void *ctx, size_t *recvcounts)
{
    ringd_request_t *q;
    if (rd_lib_sync_in_group(r, name))
        return RINGD_E_INVALID;
    ringd_result_t rc = ringd_allgatherv_into_async(r, name, sendbuf, sendcount, layout, dtype,
                                                    recv, ctx, recvcounts, &q);
    return rc != RINGD_OK ? rc : rd_lib_wait(q);
}

ringd_result_t ringd_alltoallv_async(ringd_t *r, const char *name, const void *sendbuf,
                                     const size_t *sendcounts, void *recvbuf,
                                     const size_t *recvcounts, ringd_dtype_t dtype,
                                     ringd_request_t **req)
{
    learn_args g = {RINGD__OP_TYPE__OP_ALLTOALL,
                    name,
                    sendbuf,
                    0,
                    sendcounts,
                    0,
                    dtype,
                    NULL,
                    NULL,
                    recvbuf,
                    recvcounts,
                    NULL};
    return learn_start(r, &g, req);
}

ringd_result_t ringd_alltoallv(ringd_t *r, const char *name, const void *sendbuf,
                               const size_t *sendcounts, void *recvbuf, const size_t *recvcounts,
                               ringd_dtype_t dtype)
{
    ringd_request_t *q;
    if (rd_lib_sync_in_group(r, name))
        return RINGD_E_INVALID;
    ringd_result_t rc =
        ringd_alltoallv_async(r, name, sendbuf, sendcounts, recvbuf, recvcounts, dtype, &q);
    return rc != RINGD_OK ? rc : rd_lib_wait(q);
}

ringd_result_t ringd_alltoallv_into_async(ringd_t *r, const char *name, const void *sendbuf,
                                          const size_t *sendcounts, uint64_t layout,
                                          ringd_dtype_t dtype, ringd_recv_fn recv, void *ctx,
                                          size_t *recvcounts, ringd_request_t **req)
{
    learn_args g = {RINGD__OP_TYPE__OP_ALLTOALL,
                    name,
                    sendbuf,
                    0,
                    sendcounts,
                    layout,
                    dtype,
                    recv,
                    ctx,
                    NULL,
                    NULL,
                    recvcounts};
    return learn_start(r, &g, req);
}

ringd_result_t ringd_alltoallv_into(ringd_t *r, const char *name, const void *sendbuf,
                                    const size_t *sendcounts, uint64_t layout, ringd_dtype_t dtype,
                                    ringd_recv_fn recv, void *ctx, size_t *recvcounts)
{
    ringd_request_t *q;
    if (rd_lib_sync_in_group(r, name))
        return RINGD_E_INVALID;
    ringd_result_t rc = ringd_alltoallv_into_async(r, name, sendbuf, sendcounts, layout, dtype,
                                                   recv, ctx, recvcounts, &q);
    return rc != RINGD_OK ? rc : rd_lib_wait(q);
}
