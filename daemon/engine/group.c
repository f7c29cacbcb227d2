/* Groups of ops: their bookkeeping (group.h). */
#include "group.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

#define RD_GROUP_EXPIRE_MS 60000 /* a failed group's empty places wait at least this long */
#define RD_GROUPS_MAX 4096       /* groups a job has under way */

static void group_free(rd_group *g)
{
    free(g->ops);
    free(g->seen);
    free(g->message);
    free(g->name);
    free(g);
}

/* Takes g off its job's list and frees it; its members that remain become ops of their own. */
static void group_drop(rd_job *j, rd_group *g)
{
    for (rd_group **pp = &j->groups; *pp != NULL; pp = &(*pp)->next)
        if (*pp == g) {
            *pp = g->next;
            break;
        }
    for (uint32_t i = 0; i < g->size; i++)
        if (g->ops[i] != NULL)
            g->ops[i]->grp = NULL;
    group_free(g);
}

int rd_group_join(rd_op *o, const char *name, uint32_t size, uint32_t index)
{
    rd_job *j = o->job;
    rd_group *g = NULL, **tail = &j->groups;
    size_t n = 0;
    for (rd_group *x = j->groups; x != NULL; tail = &x->next, x = x->next, n++)
        if (g == NULL && x->size == size && !x->seen[index] && strcmp(x->name, name) == 0)
            g = x;
    if (g == NULL && n >= RD_GROUPS_MAX) /* a client making groups it never fills */
        return -1;
    if (g == NULL) {
        g = calloc(1, sizeof(*g));
        if (g == NULL || (g->name = strdup(name)) == NULL ||
            (g->ops = calloc(size, sizeof(*g->ops))) == NULL ||
            (g->seen = calloc(size, 1)) == NULL) {
            if (g != NULL)
                group_free(g);
            return -1;
        }
        g->size = size;
        g->since_ms = rd_now_ms();
        *tail = g; /* oldest first */
    }
    g->ops[index] = o;
    g->seen[index] = 1;
    g->seen_n++;
    o->grp = g;
    o->gindex = index;
    return g->status == RINGD_OK;
}

const char *rd_group_why(const rd_op *o, rd_status *status)
{
    *status = o->grp->status;
    return o->grp->message != NULL ? o->grp->message : "its group failed";
}

int rd_group_ready(rd_op *o)
{
    rd_group *g = o->grp;
    if (!o->gready) {
        o->gready = 1;
        g->ready++;
    }
    if (g->status != RINGD_OK || g->released || g->seen_n < g->size || g->ready < g->size)
        return 0;
    g->released = 1;
    return 1;
}

int rd_group_agreed(rd_op *o)
{
    rd_group *g = o->grp;
    if (g->status != RINGD_OK)
        return -1;
    if (!o->gagreed) {
        o->gagreed = 1;
        g->agreed++;
    }
    if (g->agreed < g->size - g->ended) /* members that ran (a graceful change split them) count */
        return 0;
    g->agreed = 0;
    for (uint32_t i = 0; i < g->size; i++)
        if (g->ops[i] != NULL)
            g->ops[i]->gagreed = 0;
    return 1;
}

int rd_group_fail(rd_op *o, rd_status status, const char *message)
{
    rd_group *g = o->grp;
    if (g->status != RINGD_OK)
        return 0;
    char msg[768];
    snprintf(msg, sizeof(msg), "tensor '%.100s' of its group '%.100s' (%u ops) failed: %.500s",
             o->name, g->name, g->size, message != NULL ? message : "");
    g->status = status;
    g->message = strdup(msg);
    rd_log(RD_LOG_INFO, "job", "job '%s': group '%s': %s", o->job->name, g->name, msg);
    return 1;
}

void rd_group_hold(rd_group *g)
{
    g->busy++;
}

void rd_group_unhold(rd_job *j, rd_group *g)
{
    if (--g->busy == 0 && g->seen_n == g->size && g->ended == g->size)
        group_drop(j, g);
}

void rd_group_leave(rd_op *o)
{
    rd_group *g = o->grp;
    if (g == NULL)
        return;
    g->ops[o->gindex] = NULL;
    g->ended++;
    o->grp = NULL;
    if (g->busy == 0 && g->seen_n == g->size && g->ended == g->size)
        group_drop(o->job, g);
}

int rd_group_expire(rd_job *j, rd_group *g, int64_t now_ms)
{
    int64_t after = 2 * j->e->cfg->stall_abort;
    if (after < RD_GROUP_EXPIRE_MS)
        after = RD_GROUP_EXPIRE_MS;
    if (g->status == RINGD_OK || g->busy || now_ms - g->since_ms < after)
        return 0;
    for (uint32_t i = 0; i < g->size; i++)
        if (g->ops[i] != NULL) /* a member still negotiating must fail with it everywhere */
            return 0;
    group_drop(j, g);
    return 1;
}

void rd_group_renegotiate(rd_job *j)
{
    for (rd_group *g = j->groups; g != NULL; g = g->next) {
        g->agreed = 0;
        for (uint32_t i = 0; i < g->size; i++)
            if (g->ops[i] != NULL)
                g->ops[i]->gagreed = 0;
    }
}

void rd_group_drop_all(rd_job *j)
{
    while (j->groups != NULL)
        group_drop(j, j->groups);
}
