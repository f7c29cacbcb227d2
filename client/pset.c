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

/* Opens this member's session of the set of ranks (valid, increasing, r->rank among them) as
 * job "<job>~<set>.g<generation>": its local size and index are the members on this node, which
 * are contiguous in the job's ranks. */
static ringd_result_t set_session(ringd_t *r, const char *set, uint64_t generation,
                                  const int *ranks, int n, ringd_t **ps)
{
    char job[RD_NAME_MAX + 1];
    int first = r->rank - r->local_rank, here = 0, index = 0;
    for (int i = 0; i < n; i++)
        if (ranks[i] >= first && ranks[i] < first + r->local_size) {
            index += ranks[i] < r->rank;
            here++;
        }
    if (snprintf(job, sizeof(job), "%.200s~%s.g%" PRIu64, r->job, set, generation) >=
        (int)sizeof(job)) {
        snprintf(r->errmsg, sizeof(r->errmsg),
                 "process set '%s': the set's job name '%.200s~%s.g%" PRIu64
                 "' is over %d bytes: use a shorter job or set name",
                 set, r->job, set, generation, RD_NAME_MAX);
        return RINGD_E_INVALID;
    }
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
    ringd_result_t rc = rd_lib_open(&o, 0, &s);
    if (rc != RINGD_OK) {
        snprintf(r->errmsg, sizeof(r->errmsg), "process set %s: %s", set,
                 s != NULL ? ringd_errmsg(s) : "out of memory");
        ringd_close(s);
        return rc;
    }
    s->parent = r;
    s->parent_generation = generation;
    *ps = s;
    return RINGD_OK;
}

/* 0 and the reason in r->errmsg when ranks are not 1 to r->size ranks of the job, increasing. */
static int ranks_valid(ringd_t *r, const char *what, const int *ranks, int n)
{
    int bad = ranks == NULL || n < 1 || n > r->size;
    for (int i = 0; !bad && i < n; i++)
        bad = ranks[i] < 0 || ranks[i] >= r->size || (i > 0 && ranks[i] <= ranks[i - 1]);
    if (bad)
        snprintf(r->errmsg, sizeof(r->errmsg),
                 "%s: %d ranks, which must be 1 to %d ranks of the job, in increasing order", what,
                 n, r->size);
    return !bad;
}

ringd_result_t ringd_process_set_create(ringd_t *r, const int *ranks, int n, ringd_t **ps)
{
    if (ps != NULL)
        *ps = NULL;
    if (r == NULL || ps == NULL || rd_lib_left_to_parent(r))
        return RINGD_E_INVALID;
    char name[RD_NAME_MAX + 1];
    snprintf(name, sizeof(name), "~pset.%" PRIu64, r->psets++);
    if (!ranks_valid(r, "ringd_process_set_create", ranks, n)) { /* every rank fails it alike */
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
    for (int i = 0; i < n; i++)
        if (ranks[i] == r->rank)
            return set_session(r, name + 1, generation, ranks, n, ps);
    return RINGD_OK; /* not a member: nothing more */
}

ringd_result_t ringd_process_set_open(ringd_t *r, const char *name, const int *ranks, int n,
                                      ringd_t **ps)
{
    if (ps != NULL)
        *ps = NULL;
    if (r == NULL || ps == NULL || rd_lib_left_to_parent(r))
        return RINGD_E_INVALID;
    char set[RD_NAME_MAX + 1];
    if (name == NULL || name[0] == '\0' ||
        snprintf(set, sizeof(set), "set.%s", name) >= (int)sizeof(set) || !rd_name_valid(set)) {
        snprintf(r->errmsg, sizeof(r->errmsg),
                 "ringd_process_set_open: a set's name is 1 to %d printable ASCII bytes",
                 RD_NAME_MAX - 4);
        return RINGD_E_INVALID;
    }
    if (!ranks_valid(r, "ringd_process_set_open", ranks, n))
        return RINGD_E_INVALID;
    int member = 0;
    for (int i = 0; i < n; i++)
        member |= ranks[i] == r->rank;
    if (!member) {
        snprintf(r->errmsg, sizeof(r->errmsg),
                 "ringd_process_set_open: rank %d is not among the set's %d ranks: only members "
                 "open a set by name",
                 r->rank, n);
        return RINGD_E_INVALID;
    }
    ringd_result_t rc = set_session(r, set, r->generation, ranks, n, ps);
    if (rc != RINGD_OK)
        return rc;
    /* the members agree on the set: a digest of it, gathered among them */
    uint64_t mine = set_digest(ranks, n), *all = calloc((size_t)n, sizeof(*all));
    rc = all == NULL ? RINGD_E_NOMEM : ringd_allgather(*ps, "~set", &mine, all, 1, RINGD_I64);
    if (rc != RINGD_OK)
        snprintf(r->errmsg, sizeof(r->errmsg), "process set '%s': %s", name,
                 all == NULL ? "out of memory" : ringd_errmsg(*ps));
    for (int k = 0; rc == RINGD_OK && k < n; k++)
        if (all[k] != mine) {
            snprintf(r->errmsg, sizeof(r->errmsg),
                     "process set '%s' mismatch: its rank %d (job rank %d) passed other ranks "
                     "than job rank %d",
                     name, k, ranks[k], r->rank);
            rc = RINGD_E_MISMATCH;
        }
    free(all);
    if (rc != RINGD_OK) {
        ringd_close(*ps);
        *ps = NULL;
    }
    return rc;
}
