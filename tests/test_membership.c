/* Membership decisions without I/O: what a new rendezvous view does to a running ring. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "membership.h"

/* A view of up to 4 members named "n<i>", incarnation 100+i, local size sizes[i]. */
typedef struct {
    rd_rdv_view v;
    rd_rdv_member m[4];
} view;

static void view_make(view *x, uint64_t generation, const char *const *names, const uint32_t *sizes,
                      size_t n)
{
    memset(x, 0, sizeof(*x));
    for (size_t i = 0; i < n; i++) {
        snprintf(x->m[i].node, sizeof(x->m[i].node), "%s", names[i]);
        snprintf(x->m[i].addr, sizeof(x->m[i].addr), "10.0.0.%zu:7070", i + 1);
        x->m[i].local_size = sizes[i];
        x->m[i].world_size = 8;
        x->m[i].incarnation = 100 + (uint64_t)names[i][1];
    }
    x->v.generation = generation;
    x->v.nmembers = n;
    x->v.members = x->m;
}

static const char *const abc[] = {"n1", "n2", "n3"};
static const char *const ab[] = {"n1", "n2"};
static const char *const ac[] = {"n1", "n3"};
static const uint32_t twos[] = {2, 2, 2};

Test(membership, a_node_that_said_it_leaves_is_a_graceful_change)
{
    view cur, next;
    view_make(&cur, 5, abc, twos, 3);
    view_make(&next, 6, ac, twos, 2);
    rd_member_news news[3] = {{0, 0, 0}, {1, 1, 1}, {0, 0, 1}};
    char why[256];
    cr_assert_eq(rd_membership_assess(&cur.v, 3, news, &next.v, why, sizeof(why)),
                 RD_CHANGE_GRACEFUL);
    cr_assert_str_eq(why, "node n2 left");
}

Test(membership, a_node_gone_while_its_link_stands_is_looked_at_again)
{
    view cur, next;
    view_make(&cur, 5, abc, twos, 3);
    view_make(&next, 6, ac, twos, 2);
    rd_member_news news[3] = {{0, 0, 0}, {0, 0, 1}, {0, 0, 1}};
    char why[256];
    cr_assert_eq(rd_membership_assess(&cur.v, 3, news, &next.v, why, sizeof(why)), RD_CHANGE_DEFER);
    cr_assert_str_eq(why, "node n2 is gone");
}

Test(membership, a_node_gone_with_its_link_down_breaks_the_ring)
{
    view cur, next;
    view_make(&cur, 5, abc, twos, 3);
    view_make(&next, 6, ac, twos, 2);
    rd_member_news news[3] = {{0, 0, 0}, {0, 0, 0}, {0, 0, 1}};
    char why[256];
    cr_assert_eq(rd_membership_assess(&cur.v, 3, news, &next.v, why, sizeof(why)), RD_CHANGE_BREAK);
}

Test(membership, a_sealed_node_that_did_not_say_it_leaves_breaks_the_ring)
{
    view cur, next;
    view_make(&cur, 5, abc, twos, 3);
    view_make(&next, 6, ac, twos, 2);
    rd_member_news news[3] = {{0, 0, 0}, {0, 1, 1}, {0, 0, 1}};
    char why[256];
    cr_assert_eq(rd_membership_assess(&cur.v, 3, news, &next.v, why, sizeof(why)), RD_CHANGE_BREAK);
}

Test(membership, a_newcomer_breaks_the_ring_even_when_another_leaves_gracefully)
{
    view cur, next;
    const char *const bcd[] = {"n2", "n3", "n4"};
    view_make(&cur, 5, abc, twos, 3);
    view_make(&next, 6, bcd, twos, 3);
    rd_member_news news[3] = {{1, 1, 1}, {0, 0, 0}, {0, 0, 1}};
    char why[256];
    cr_assert_eq(rd_membership_assess(&cur.v, 3, news, &next.v, why, sizeof(why)), RD_CHANGE_BREAK);
    cr_assert_str_eq(why, "node n1 left, node n4 joined");
}

Test(membership, a_node_with_another_local_size_breaks_the_ring)
{
    view cur, next;
    const uint32_t other[] = {2, 3};
    view_make(&cur, 5, ab, twos, 2);
    view_make(&next, 6, ab, other, 2);
    rd_member_news news[2] = {{0, 0, 0}, {0, 0, 1}};
    char why[256];
    cr_assert_eq(rd_membership_assess(&cur.v, 2, news, &next.v, why, sizeof(why)), RD_CHANGE_BREAK);
    cr_assert_str_eq(why, "node n2 now has other ranks");
}

Test(membership, the_same_members_at_a_new_generation_is_a_broken_ring_re_forming)
{
    view cur, next;
    view_make(&cur, 5, ab, twos, 2);
    view_make(&next, 6, ab, twos, 2);
    rd_member_news news[2] = {{0, 0, 0}, {0, 0, 1}};
    char why[256];
    cr_assert_eq(rd_membership_assess(&cur.v, 2, news, &next.v, why, sizeof(why)), RD_CHANGE_BREAK);
    cr_assert_str_eq(why, "the ring broke and re-forms");
}

Test(membership, the_first_view_has_only_newcomers)
{
    view next;
    view_make(&next, 1, ab, twos, 2);
    char why[256];
    cr_assert_eq(rd_membership_assess(NULL, 0, NULL, &next.v, why, sizeof(why)), RD_CHANGE_BREAK);
    cr_assert_str_eq(why, "node n1 joined, node n2 joined");
}

Test(membership, a_restarted_node_is_another_member)
{
    view cur, next;
    view_make(&cur, 5, ab, twos, 2);
    view_make(&next, 6, ab, twos, 2);
    next.m[1].incarnation++;
    rd_member_news news[2] = {{0, 0, 0}, {0, 0, 0}};
    char why[256];
    cr_assert_eq(rd_membership_assess(&cur.v, 2, news, &next.v, why, sizeof(why)), RD_CHANGE_BREAK);
    cr_assert_str_eq(why, "node n2 is gone, node n2 joined");
    cr_assert_not(rd_membership_same(&cur.v, &next.v));
}

Test(membership, views_are_the_same_only_when_every_field_of_every_member_is)
{
    view a, b;
    view_make(&a, 5, ab, twos, 2);
    view_make(&b, 9, ab, twos, 2);
    cr_assert(rd_membership_same(&a.v, &b.v), "the generation is not a member's field");
    b.m[0].min_size = 2;
    cr_assert_not(rd_membership_same(&a.v, &b.v));
    view_make(&b, 9, ab, twos, 2);
    snprintf(b.m[1].addr, sizeof(b.m[1].addr), "10.0.0.9:7070");
    cr_assert_not(rd_membership_same(&a.v, &b.v));
    view_make(&b, 9, ab, twos, 1);
    cr_assert_not(rd_membership_same(&a.v, &b.v));
}

Test(membership, changes_are_described_for_messages)
{
    view a, b;
    const uint32_t sizes[] = {2, 4};
    view_make(&a, 5, abc, twos, 3);
    view_make(&b, 6, ac, sizes, 2);
    char buf[256];
    rd_membership_describe(&a.v, &b.v, buf, sizeof(buf));
    cr_assert_str_eq(buf, "node n2 is gone, node n3 has another number of ranks");
    rd_membership_describe(&a.v, &a.v, buf, sizeof(buf));
    cr_assert_str_eq(buf, "");
    char tiny[8];
    rd_membership_describe(&a.v, &b.v, tiny, sizeof(tiny));
    cr_assert_eq(strlen(tiny), sizeof(tiny) - 1, "truncated, still terminated");
}

/* After n2 said it leaves (Bye), the views that come while the next ring forms: one without
 * n2, or still with it, at any newer generation, keeps the change graceful; one where n3 is gone
 * too, or a newcomer came, or a size changed, or n3 restarted, does not. */
Test(membership, views_after_a_bye_keep_the_change_graceful_only_if_just_the_leavers_are_gone)
{
    view last, next;
    view_make(&last, 5, abc, twos, 3);
    const rd_rdv_member left = last.m[1]; /* n2 */
    cr_assert(rd_membership_has_any(&last.v, &left, 1));
    view_make(&next, 7, ac, twos, 2);
    cr_assert_not(rd_membership_has_any(&next.v, &left, 1));
    cr_assert(rd_membership_within_left(&last.v, &left, 1, &next.v));
    next.v.generation = 8; /* the same members again: still the same change */
    cr_assert(rd_membership_within_left(&last.v, &left, 1, &next.v));
    cr_assert(rd_membership_within_left(&last.v, &left, 1, &last.v), "n2 not gone yet");
    cr_assert_not(rd_membership_within_left(&last.v, &left, 0, &next.v), "nobody said Bye");
    static const char *const a[] = {"n1"};
    view_make(&next, 8, a, twos, 1); /* n3 gone without a word */
    cr_assert_not(rd_membership_within_left(&last.v, &left, 1, &next.v));
    static const char *const ad[] = {"n1", "n4"};
    view_make(&next, 8, ad, twos, 2); /* a newcomer */
    cr_assert_not(rd_membership_within_left(&last.v, &left, 1, &next.v));
    static const uint32_t sizes[] = {2, 1};
    view_make(&next, 8, ac, sizes, 2); /* n3 lost a rank */
    cr_assert_not(rd_membership_within_left(&last.v, &left, 1, &next.v));
    view_make(&next, 8, ac, twos, 2);
    next.m[1].incarnation++; /* n3 restarted */
    cr_assert_not(rd_membership_within_left(&last.v, &left, 1, &next.v));
    view empty;
    view_make(&empty, 0, abc, twos, 0); /* no ring was ever up */
    cr_assert_not(rd_membership_within_left(&empty.v, &left, 1, &next.v));
}
