/* Process sets: collectives among a subset of a job's ranks. A set is a job of its own, named
 * after its job, a serial and the job's generation, whose members each open a session of it on
 * their daemon (the members on one node are contiguous in the job's ranks, so each member knows
 * how many share its node); the daemons form its ring among the members' nodes alone, and every
 * collective takes the set's session as it takes the job's. Made by every rank of the job
 * together (an allgather of the set's digest first: ranks that pass different sets fail alike);
 * ended for good once the job changed generation. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "session.h"

/* FNV-1a over the ranks and their number. */
static uint64_t set_digest(const int *ranks, int n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i <= n; i++) {
        uint64_t v = i < n ? (uint64_t)ranks[i] : (uint64_t)n;
        for (int b = 0; b < 8; b++) {
            h ^= (v >> (8 * b)) & 0xff;
            h *= 0x100000001b3ull;
        }
    }
    return h;
}

ringd_result_t rd_pset_current(ringd_t *r)
{
    if (r->parent == NULL || r->parent->generation == r->parent_generation)
        return RINGD_OK;
    snprintf(r->errmsg, sizeof(r->errmsg),
             "this process set was made at generation %" PRIu64 " of job '%s', which is now at "
             "generation %" PRIu64 ": close it and create it again",
             r->parent_generation, r->parent->job, r->parent->generation);
    return RINGD_E_MEMBERSHIP;
}

ringd_result_t ringd_process_set_create(ringd_t *r, const int *ranks, int n, ringd_t **ps)
{
    if (ps != NULL)
        *ps = NULL;
    if (r == NULL || ps == NULL)
        return RINGD_E_INVALID;
    char name[RD_NAME_MAX + 1], job[RD_NAME_MAX + 1];
    snprintf(name, sizeof(name), "~pset.%" PRIu64, r->psets++);
    int bad = ranks == NULL || n < 1 || n > r->size;
    for (int i = 0; !bad && i < n; i++)
        bad = ranks[i] < 0 || ranks[i] >= r->size || (i > 0 && ranks[i] <= ranks[i - 1]);
    if (bad) { /* every rank of the job fails it alike */
        snprintf(r->errmsg, sizeof(r->errmsg),
                 "ringd_process_set_create: %d ranks, which must be 1 to %d ranks of the job, "
                 "in increasing order",
                 n, r->size);
        ringd_refuse(r, name, RINGD_E_INVALID, r->errmsg);
        return RINGD_E_INVALID;
    }
    /* every rank agrees on the set: a digest of it, gathered (a rank with another fails all) */
    uint64_t mine = set_digest(ranks, n), *all = calloc((size_t)r->size, sizeof(*all));
    if (all == NULL) {
        ringd_refuse(r, name, RINGD_E_NOMEM, "out of memory");
        return RINGD_E_NOMEM;
    }
    uint64_t generation = r->generation;
    ringd_result_t rc = ringd_allgather(r, name, &mine, all, 1, RINGD_I64);
    for (int k = 0; rc == RINGD_OK && k < r->size; k++)
        if (all[k] != mine) {
            snprintf(r->errmsg, sizeof(r->errmsg),
                     "process set %s mismatch: rank %d passed other ranks than rank %d", name, k,
                     r->rank);
            rc = RINGD_E_MISMATCH;
        }
    free(all);
    if (rc != RINGD_OK)
        return rc;
    int me = -1, first = r->rank - r->local_rank, here = 0, index = 0;
    for (int i = 0; i < n; i++) {
        if (ranks[i] == r->rank)
            me = i;
        if (ranks[i] >= first && ranks[i] < first + r->local_size) {
            index += ranks[i] < r->rank;
            here++;
        }
    }
    if (me < 0) /* not a member: nothing more */
        return RINGD_OK;
    if (snprintf(job, sizeof(job), "%.200s~%s.g%" PRIu64, r->job, name + 1, generation) >=
        (int)sizeof(job))
        return RINGD_E_INVALID;
    ringd_options_t o;
    ringd_options_init(&o, sizeof(o));
    o.socket_path = r->socket_path;
    o.job = job;
    o.world_size = n;
    o.local_size = here;
    o.min_size = n;
    o.ask_local_rank = 1;
    o.local_rank = index;
    o.open_timeout_ms = r->open_timeout_ms;
    o.op_timeout_ms = r->op_timeout_ms;
    o.arena_size = r->arena_asked;
    o.poll_us = r->poll_us;
    ringd_t *s = NULL;
    rc = ringd_open(&o, &s);
    if (rc != RINGD_OK) {
        snprintf(r->errmsg, sizeof(r->errmsg), "process set %s: %s", name,
                 s != NULL ? ringd_errmsg(s) : "out of memory");
        ringd_close(s);
        return rc;
    }
    s->parent = r;
    s->parent_generation = generation;
    *ps = s;
    return RINGD_OK;
}
