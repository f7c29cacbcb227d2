/* The subscribers of a ring's control channel without I/O: who hears what, in which order. */
#include <criterion/criterion.h>
#include <string.h>

#include "ringchan.h"

/* What the subscribers heard, in order: one letter per call ("A" forming, "a" ended, "1" a
 * message, "!" flush) after the subscriber's name. */
static char heard[64];

static void note(const char *who, const char *what)
{
    strcat(heard, who);
    strcat(heard, what);
}

/* A subscriber named by its arg; "fails" in its name makes forming fail. */
static rd_status on_forming(void *arg, uint64_t generation, int nnodes, int position,
                            const rd_ring_node *nodes)
{
    cr_assert_eq(generation, 7);
    cr_assert_eq(nnodes, 2);
    cr_assert_eq(position, 1);
    cr_assert_str_eq(nodes[1].node, "n2");
    note(arg, "A");
    return strstr(arg, "fails") != NULL ? RINGD_E_NOMEM : RINGD_OK;
}

static void on_ended(void *arg)
{
    note(arg, "a");
}

static void on_message(void *arg, int from, const rd_schedmsg *m)
{
    cr_assert_eq(from, 0);
    note(arg, m->kind == RD_SCHEDMSG_GO ? "g" : "1");
}

static void on_flush(void *arg)
{
    note(arg, "!");
}

#define KIND(k) (1u << (k))
static const rd_ring_channel sched = {KIND(RD_SCHEDMSG_READY) | KIND(RD_SCHEDMSG_GO), on_forming,
                                      on_ended, on_message, on_flush};
static const rd_ring_channel dev = {KIND(RD_SCHEDMSG_DEV_OFFER) | KIND(RD_SCHEDMSG_DEV_PLAN) |
                                        KIND(RD_SCHEDMSG_DEV_CONFIRM),
                                    on_forming, on_ended, on_message, NULL};
static const rd_ring_node nodes[] = {{"n1", 0, 2}, {"n2", 2, 2}};

static void reset(void)
{
    heard[0] = '\0';
}

TestSuite(ringchan, .init = reset);

Test(ringchan, forming_goes_in_subscription_order_and_ended_in_reverse)
{
    rd_ringchan t = {0};
    cr_assert_eq(rd_ringchan_subscribe(&t, &sched, "s"), 0);
    cr_assert_eq(rd_ringchan_subscribe(&t, &dev, "d"), 1);
    cr_assert_eq(rd_ringchan_forming(&t, 7, 2, 1, nodes), RINGD_OK);
    rd_ringchan_ended(&t);
    cr_assert_str_eq(heard, "sAdAdasa");
}

Test(ringchan, a_failed_forming_stops_there_and_says_so)
{
    rd_ringchan t = {0};
    rd_ringchan_subscribe(&t, &sched, "s");
    rd_ringchan_subscribe(&t, &sched, "fails");
    rd_ringchan_subscribe(&t, &dev, "d");
    cr_assert_eq(rd_ringchan_forming(&t, 7, 2, 1, nodes), RINGD_E_NOMEM);
    cr_assert_str_eq(heard, "sAfailsA");
}

Test(ringchan, a_message_goes_to_those_that_take_its_kind)
{
    rd_ringchan t = {0};
    rd_ringchan_subscribe(&t, &sched, "s");
    rd_ringchan_subscribe(&t, &dev, "d");
    rd_schedmsg go = {.kind = RD_SCHEDMSG_GO}, plan = {.kind = RD_SCHEDMSG_DEV_PLAN};
    cr_assert_eq(rd_ringchan_message(&t, 0, &go), 1);
    cr_assert_eq(rd_ringchan_message(&t, 0, &plan), 1);
    cr_assert_str_eq(heard, "sgd1");
}

Test(ringchan, a_kind_nobody_takes_is_taken_by_none)
{
    rd_ringchan t = {0};
    rd_ringchan_subscribe(&t, &sched, "s");
    rd_schedmsg offer = {.kind = RD_SCHEDMSG_DEV_OFFER};
    cr_assert_eq(rd_ringchan_message(&t, 0, &offer), 0);
    cr_assert_str_eq(heard, "");
}

Test(ringchan, flush_skips_subscribers_without_one)
{
    rd_ringchan t = {0};
    rd_ringchan_subscribe(&t, &dev, "d");
    rd_ringchan_subscribe(&t, &sched, "s");
    rd_ringchan_flush(&t);
    cr_assert_str_eq(heard, "s!");
}

Test(ringchan, the_table_is_small_and_fixed)
{
    rd_ringchan t = {0};
    for (int i = 0; i < RD_RINGCHAN_MAX; i++)
        cr_assert_eq(rd_ringchan_subscribe(&t, &sched, "s"), i);
    cr_assert_eq(rd_ringchan_subscribe(&t, &sched, "s"), -1);
}

Test(ringchan, unsubscribing_keeps_the_others_order_and_handles_are_not_reused)
{
    rd_ringchan t = {0};
    int a = rd_ringchan_subscribe(&t, &sched, "a");
    int b = rd_ringchan_subscribe(&t, &sched, "b");
    rd_ringchan_subscribe(&t, &sched, "c");
    rd_ringchan_unsubscribe(&t, b);
    rd_ringchan_unsubscribe(&t, b); /* once is enough */
    rd_ringchan_unsubscribe(&t, -1);
    int d = rd_ringchan_subscribe(&t, &sched, "d");
    cr_assert_neq(d, b);
    cr_assert_neq(d, a);
    rd_ringchan_flush(&t);
    cr_assert_str_eq(heard, "a!c!d!");
    rd_ringchan_ended(&t);
    cr_assert_str_eq(heard, "a!c!d!dacaaa");
}
