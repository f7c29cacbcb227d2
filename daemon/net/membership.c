/* Membership decisions: view comparison and the assessment of a new view. */
#include "membership.h"

#include <stdio.h>
#include <string.h>

/* 1 when v has a member with m's node name and incarnation; *same_size says whether its local
 * size is unchanged too. */
static int view_has(const rd_rdv_view *v, const rd_rdv_member *m, int *same_size)
{
    for (size_t i = 0; i < v->nmembers; i++) {
        if (strcmp(v->members[i].node, m->node) == 0 &&
            v->members[i].incarnation == m->incarnation) {
            *same_size = v->members[i].local_size == m->local_size;
            return 1;
        }
    }
    return 0;
}

/* 1 when m is one of list[0..n) by node name and incarnation. */
static int member_in(const rd_rdv_member *m, const rd_rdv_member *list, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (strcmp(list[k].node, m->node) == 0 && list[k].incarnation == m->incarnation)
            return 1;
    return 0;
}

int rd_membership_has_any(const rd_rdv_view *v, const rd_rdv_member *left, size_t nleft)
{
    for (size_t i = 0; i < v->nmembers; i++)
        if (member_in(&v->members[i], left, nleft))
            return 1;
    return 0;
}

int rd_membership_within_left(const rd_rdv_view *last, const rd_rdv_member *left, size_t nleft,
                              const rd_rdv_view *next)
{
    int same;
    if (last->nmembers == 0)
        return 0;
    for (size_t i = 0; i < next->nmembers; i++)
        if (!view_has(last, &next->members[i], &same) || !same)
            return 0; /* a node joined, came back or changed its size */
    for (size_t i = 0; i < last->nmembers; i++)
        if (!view_has(next, &last->members[i], &same) && !member_in(&last->members[i], left, nleft))
            return 0; /* gone without a word: lost */
    return 1;
}

int rd_membership_same(const rd_rdv_view *a, const rd_rdv_view *b)
{
    if (a->nmembers != b->nmembers)
        return 0;
    for (size_t i = 0; i < a->nmembers; i++) {
        const rd_rdv_member *x = &a->members[i], *y = &b->members[i];
        if (strcmp(x->node, y->node) != 0 || strcmp(x->addr, y->addr) != 0 ||
            x->incarnation != y->incarnation || x->local_size != y->local_size ||
            x->world_size != y->world_size || x->min_size != y->min_size)
            return 0;
    }
    return 1;
}

void rd_membership_describe(const rd_rdv_view *a, const rd_rdv_view *b, char *buf, size_t len)
{
    size_t n = 0;
    int same;
    buf[0] = '\0';
    for (size_t i = 0; i < a->nmembers && n < len; i++) {
        const rd_rdv_member *m = &a->members[i];
        if (!view_has(b, m, &same))
            n += (size_t)snprintf(buf + n, len - n, "%snode %s is gone", n ? ", " : "", m->node);
        else if (!same)
            n += (size_t)snprintf(buf + n, len - n, "%snode %s has another number of ranks",
                                  n ? ", " : "", m->node);
    }
    for (size_t i = 0; i < b->nmembers && n < len; i++)
        if (!view_has(a, &b->members[i], &same))
            n += (size_t)snprintf(buf + n, len - n, "%snode %s joined", n ? ", " : "",
                                  b->members[i].node);
}

rd_change rd_membership_assess(const rd_rdv_view *cur, int nnodes, const rd_member_news *news,
                               const rd_rdv_view *next, char *why, size_t len)
{
    int graceful = 1, defer = 0, same;
    size_t n = 0;
    why[0] = '\0';
    for (int i = 0; cur != NULL && i < nnodes; i++) {
        const rd_rdv_member *m = &cur->members[i];
        if (view_has(next, m, &same) && same)
            continue;
        if (!view_has(next, m, &same)) {
            graceful &= news[i].leaving;
            defer |= !news[i].leaving && !news[i].sealed && news[i].linked;
            n += (size_t)snprintf(why + n, n < len ? len - n : 0, "%snode %s %s", n ? ", " : "",
                                  m->node, news[i].leaving ? "left" : "is gone");
        } else {
            graceful = 0;
            n += (size_t)snprintf(why + n, n < len ? len - n : 0, "%snode %s now has %s ranks",
                                  n ? ", " : "", m->node, "other");
        }
    }
    for (size_t i = 0; i < next->nmembers; i++) {
        const rd_rdv_member *m = &next->members[i];
        if (cur != NULL && nnodes > 0 && view_has(cur, m, &same))
            continue;
        graceful = 0;
        n += (size_t)snprintf(why + n, n < len ? len - n : 0, "%snode %s joined", n ? ", " : "",
                              m->node);
    }
    if (n == 0)
        snprintf(why, len, "the ring broke and re-forms");
    if (graceful && n > 0)
        return RD_CHANGE_GRACEFUL;
    return defer ? RD_CHANGE_DEFER : RD_CHANGE_BREAK;
}
