/* Collectives of two steps: the ranks learn each other's counts with one daemon op, then move
 * the data with a second into a buffer the caller gives once it knows them. The caller holds
 * one request (the outer one, never sent); each step is an ordinary request of the session
 * whose completion, handled in whichever call reads it, starts the next step or ends the outer
 * request. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "session.h"

/* A request's two steps: (count, layout) of every rank, then the data. */
typedef struct rd_learn {
    char name[RD_NAME_MAX + 1];
    const void *send;
    size_t sendcount;
    ringd_dtype_t dtype;
    ringd_recv_fn recv;
    void *ctx;
    size_t *recvcounts; /* the caller's, or NULL */
    int size;           /* the job's size at the call: the first step gathers that many */
    int step;           /* 1: gathering the counts; 2: moving the data */
    uint64_t mine[2];   /* this rank's count and layout */
    uint64_t *table;    /* every rank's, size pairs (in this allocation) */
    size_t *counts;     /* every rank's count, for the allgatherv (in this allocation) */
} rd_learn;

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

/* The data step of q: every rank's count is in the table. Returns RINGD_OK, or the failure
 * (told to the daemon, so that every rank fails alike) with errmsg set. */
static ringd_result_t move_data(ringd_request_t *q)
{
    ringd_t *r = q->r;
    rd_learn *l = q->learn;
    submit_args a = {RINGD__OP_TYPE__OP_ALLGATHERV,
                     l->name,
                     l->send,
                     NULL,
                     l->sendcount,
                     l->dtype,
                     RINGD_SUM,
                     0,
                     1.0,
                     1.0,
                     l->counts};
    size_t total = 0;
    if (r->size != l->size) { /* the counts are for the old size */
        snprintf(r->errmsg, sizeof(r->errmsg),
                 "tensor '%s': the job changed from %d to %d ranks between its two steps: "
                 "restore the last committed state and broadcast it from rank 0",
                 l->name, l->size, r->size);
        return rd_lib_refuse(r, &a, l->name, RINGD_E_MEMBERSHIP);
    }
    for (int k = 0; k < l->size; k++) {
        if (l->table[2 * k + 1] != l->table[1]) {
            /* every rank has the same table: every one fails here alike, and none goes on */
            snprintf(r->errmsg, sizeof(r->errmsg),
                     "tensor '%s' mismatch (layout): rank 0 passed layout %" PRIu64
                     ", rank %d layout %" PRIu64 " (of rows of differing shapes?)",
                     l->name, l->table[1], k, l->table[2 * k + 1]);
            return RINGD_E_MISMATCH;
        }
        l->counts[k] = (size_t)l->table[2 * k];
        total += l->counts[k];
    }
    if (l->recvcounts != NULL)
        memcpy(l->recvcounts, l->counts, (size_t)l->size * sizeof(size_t));
    if (q->abandoned) {
        snprintf(r->errmsg, sizeof(r->errmsg),
                 "tensor '%s': rank %d gave up waiting for it (op_timeout_ms)", l->name, r->rank);
        return rd_lib_refuse(r, &a, l->name, RINGD_E_TIMEOUT);
    }
    a.recv = l->recv(l->ctx, l->counts, l->size, total);
    if (a.recv == NULL && total > 0) {
        snprintf(r->errmsg, sizeof(r->errmsg),
                 "tensor '%s': rank %d had no buffer for the %zu elements it receives", l->name,
                 r->rank, total);
        return rd_lib_refuse(r, &a, l->name, RINGD_E_NOMEM);
    }
    ringd_request_t *step;
    ringd_result_t rc = rd_lib_submit(r, &a, &step);
    if (rc == RINGD_OK)
        step->outer = q;
    return rc;
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
    if (status == RINGD_OK && l->step == 1) {
        l->step = 2;
        status = move_data(q);
        if (status == RINGD_OK) {
            free(message);
            return;
        }
        free(message);
        message = strdup(q->r->errmsg);
    }
    finish(q, status, message);
    free(message);
}

ringd_result_t ringd_allgatherv_into_async(ringd_t *r, const char *name, const void *sendbuf,
                                           size_t sendcount, uint64_t layout, ringd_dtype_t dtype,
                                           ringd_recv_fn recv, void *ctx, size_t *recvcounts,
                                           ringd_request_t **req)
{
    if (r == NULL || req == NULL)
        return RINGD_E_INVALID;
    *req = NULL;
    submit_args a = {
        RINGD__OP_TYPE__OP_ALLGATHER, name, NULL, NULL, 2, RINGD_I64, RINGD_SUM, 0, 1.0, 1.0, NULL};
    if (name == NULL || !rd_name_valid(name) || recv == NULL) {
        snprintf(r->errmsg, sizeof(r->errmsg), "ringd_allgatherv_into: %s",
                 recv == NULL   ? "recv is NULL"
                 : name == NULL ? "it needs a name (its two steps "
                                  "go under it)"
                                : "an invalid name");
        return name != NULL && rd_name_valid(name) ? rd_lib_refuse(r, &a, name, RINGD_E_INVALID)
                                                   : RINGD_E_INVALID;
    }
    int n = r->size;
    ringd_request_t *q = calloc(1, sizeof(*q));
    rd_learn *l = calloc(1, sizeof(*l) + (size_t)n * (2 * sizeof(uint64_t) + sizeof(size_t)));
    if (q == NULL || l == NULL) {
        free(q);
        free(l);
        snprintf(r->errmsg, sizeof(r->errmsg), "out of memory");
        return rd_lib_refuse(r, &a, name, RINGD_E_NOMEM);
    }
    l->table = (uint64_t *)(l + 1);
    l->counts = (size_t *)(l->table + 2 * (size_t)n);
    snprintf(l->name, sizeof(l->name), "%s", name);
    l->send = sendbuf;
    l->sendcount = sendcount;
    l->dtype = dtype;
    l->recv = recv;
    l->ctx = ctx;
    l->recvcounts = recvcounts;
    l->size = n;
    l->step = 1;
    l->mine[0] = sendcount;
    l->mine[1] = layout;
    q->r = r;
    q->id = 0; /* never sent: no Complete matches it */
    q->stage = UINT64_MAX;
    q->learn = l;
    a.send = l->mine;
    a.recv = l->table;
    ringd_request_t *step;
    ringd_result_t rc = rd_lib_submit(r, &a, &step);
    if (rc != RINGD_OK) {
        free(l);
        free(q);
        return rc;
    }
    step->outer = q;
    rd_lib_req_link(r, q);
    *req = q;
    return RINGD_OK;
}

ringd_result_t ringd_allgatherv_into(ringd_t *r, const char *name, const void *sendbuf,
                                     size_t sendcount, uint64_t layout, ringd_dtype_t dtype,
                                     ringd_recv_fn recv, void *ctx, size_t *recvcounts)
{
    ringd_request_t *q;
    ringd_result_t rc = ringd_allgatherv_into_async(r, name, sendbuf, sendcount, layout, dtype,
                                                    recv, ctx, recvcounts, &q);
    return rc != RINGD_OK ? rc : rd_lib_wait(q);
}
