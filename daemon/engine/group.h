/* Groups of ops (ringd_group_start/end): ops a rank submitted as one unit run together or fail
 * together, on every rank. This is the groups' bookkeeping: a job's groups, their places, how
 * far their members have come and why they failed. What a group's progress does to its members
 * is its callers': held back until every member has all its local ranks' submissions, then
 * announced (or, on one node, run) together (ops.c); kept from the ring until every member is
 * negotiated alike on every node, then handed to the coordinator's order together (ops.c);
 * failed together at a member's first failure (optab.c); failed as stalled when a member never
 * comes (stall.c). Loop thread only. */
#ifndef RD_GROUP_H
#define RD_GROUP_H

#include <stdint.h>

#include "internal.h"

typedef struct rd_group {
    char *name;    /* the group's (its first op's) */
    uint32_t size; /* its members */
    rd_op **ops;   /* by place; NULL: not submitted here yet, or ended */
    uint8_t *seen; /* by place: its member was here (a place is filled once) */
    uint32_t seen_n, ended, ready, agreed;
    int released;     /* its members went on together */
    int busy;         /* a loop over its members runs: it stays until rd_group_unhold */
    rd_status status; /* RINGD_OK, or the first failure of a member */
    char *message;
    int64_t since_ms; /* its first member */
    struct rd_group *next;
} rd_group;

/* Makes o, a new op submitted as place index of size ops of group name, a member of the oldest
 * group of that name with that place free (a new one when none has). Returns 1, or 0 when the
 * group failed already (o is its member: the caller fails it with rd_group_why), or -1 out of
 * memory or when the job has 4096 groups under way (o is no member). */
int rd_group_join(rd_op *o, const char *name, uint32_t size, uint32_t index);

/* Every local rank submitted o, a member. Returns 1 when that made its group whole and it is
 * released now: its members go on together, in their order; else 0. */
int rd_group_ready(rd_op *o);

/* Every node negotiated o, a member, to go to the ring. Returns -1 when its group failed (the
 * caller fails o with rd_group_why), 0 while other members are still negotiating, 1 when every
 * member is now: they go to the coordinator's order together (the count starts over). */
int rd_group_agreed(rd_op *o);

/* o, a member, failed with status and message: returns 1 when that fails its group now (its
 * other members are the caller's to end), 0 when the group had failed already. */
int rd_group_fail(rd_op *o, rd_status status, const char *message);

/* The message the members of a failed group fail with (owned by the group). */
const char *rd_group_why(const rd_op *o, rd_status *status);

/* A loop over g's members starts / ends: g stays until it ends (and goes then if its every
 * place was filled and has ended). */
void rd_group_hold(rd_group *g);
void rd_group_unhold(rd_job *j, rd_group *g);

/* o is freed: it leaves its group, which goes once its every place has been filled and ended. */
void rd_group_leave(rd_op *o);

/* A failed group long past --stall-abort (places never filled stay empty; a minute at least),
 * none of its members left, is forgotten. Returns 1 when g went. */
int rd_group_expire(rd_job *j, rd_group *g, int64_t now_ms);

/* A ring's negotiation starts over (a graceful change): members negotiated and waiting are not
 * any more; they are announced again on the next ring. */
void rd_group_renegotiate(rd_job *j);

/* The job changed generation, or goes: every group is forgotten (its members that remain are
 * ops of their own). */
void rd_group_drop_all(rd_job *j);

#endif
