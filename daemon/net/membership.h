/* Membership decisions that need no I/O: comparing the rendezvous' views of a job, and deciding
 * what a new view means for the ring that runs. Pure functions; any thread. */
#ifndef RD_MEMBERSHIP_H
#define RD_MEMBERSHIP_H

#include <stddef.h>
#include <stdint.h>

#include "rendezvous.h"

/* What a new view does to the ring. */
typedef enum {
    RD_CHANGE_GRACEFUL, /* only nodes that said they leave (Bye) are gone: ops carry over */
    RD_CHANGE_DEFER,    /* nodes are gone whose control links still stand: a Bye may be on its
                           way, look again shortly */
    RD_CHANGE_BREAK,    /* anything else: the ring breaks and its clients re-synchronise */
} rd_change;

/* What this node knows of a member of its ring, by ring position. */
typedef struct {
    uint8_t leaving; /* said Bye, leaving the job */
    uint8_t sealed;  /* said Bye (leaving or sealing for a graceful change) */
    uint8_t linked;  /* a control link with it stands (never for this node itself) */
} rd_member_news;

/* How view next changes the ring formed with cur (NULL: none yet) of nnodes members, news[i]
 * being what this node knows of member i. why gets what changed ("node n1 left, node n3
 * joined"), or "the ring broke and re-forms" when no member changed. */
rd_change rd_membership_assess(const rd_rdv_view *cur, int nnodes, const rd_member_news *news,
                               const rd_rdv_view *next, char *why, size_t len);

/* 1 when a and b have the same members in the same order: names, incarnations, addresses,
 * local sizes and job sizes. */
int rd_membership_same(const rd_rdv_view *a, const rd_rdv_view *b);

/* 1 when v has a member with the node name and incarnation of one of left[0..nleft). */
int rd_membership_has_any(const rd_rdv_view *v, const rd_rdv_member *left, size_t nleft);

/* 1 when next changes nothing from last (the members of the last ring that was up) but that
 * members of last that said they leave (left[0..nleft)) may be gone: the graceful change their
 * Byes began goes on. Every member of next must be in last with its local size unchanged; 0
 * when last has no members. */
int rd_membership_within_left(const rd_rdv_view *last, const rd_rdv_member *left, size_t nleft,
                              const rd_rdv_view *next);

/* What changed from members a to b, for messages: "node n1 is gone, node n3 joined"; "" when
 * nothing did. */
void rd_membership_describe(const rd_rdv_view *a, const rd_rdv_view *b, char *buf, size_t len);

#endif
