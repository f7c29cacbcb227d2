/* The caches of announced ops: this node's slots fill in the order it announces, an op announced
 * again goes by its slot, and another node's slots are taken only in turn and as filled. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "opcache.h"

static rd_op_spec op(const char *name, uint64_t count, const void *data, size_t len)
{
    return (rd_op_spec){.name = name,
                        .p = {.coll = 0, .dtype = 0, .count = count, .prescale = 1, .postscale = 1},
                        .message = "",
                        .direct = data != NULL,
                        .data = data,
                        .len = len};
}

/* An op by slot k of its sender's cache, as decoded: only direct and data along. */
static rd_op_spec by_slot(uint32_t k, const void *data, size_t len)
{
    return (rd_op_spec){
        .name = "", .message = "", .direct = data != NULL, .data = data, .len = len, .cached = k};
}

Test(opcache, an_op_announced_again_with_the_same_name_and_parameters_goes_by_its_slot)
{
    rd_opcache *c = rd_opcache_new(3, 1);
    cr_assert_not_null(c);
    float x = 1;
    rd_op_spec a = op("a", 1, &x, 4), b = op("b", 1, &x, 4), a2 = op("a", 2, NULL, 0);
    rd_opcache_own(c, &a);
    cr_assert_eq(a.fill, 1);
    cr_assert_eq(a.cached, 0);
    rd_opcache_own(c, &b);
    cr_assert_eq(b.fill, 2);
    rd_opcache_own(c, &a2);
    cr_assert_eq(a2.fill, 3, "another count is another op");
    rd_op_spec again = op("a", 1, &x, 4);
    rd_opcache_own(c, &again);
    cr_assert_eq(again.cached, 1);
    cr_assert_eq(again.fill, 0);
    again = op("a", 1, NULL, 0);
    rd_opcache_own(c, &again);
    cr_assert_eq(again.fill, 4, "not direct is another op");
    again = op("b", 1, &x, 4);
    again.p.device = 1;
    rd_opcache_own(c, &again);
    cr_assert_eq(again.fill, 5, "in device memory is another op");
    again = op("b", 1, &x, 4);
    again.p.postscale = -0.0;
    rd_op_spec zero = again;
    zero.p.postscale = 0.0;
    rd_opcache_own(c, &again);
    rd_opcache_own(c, &zero);
    cr_assert_eq(zero.fill, again.fill + 1, "-0 and +0 are two ops: receivers take the slot's");
    rd_opcache_free(c);
}

Test(opcache, past_its_last_slot_an_op_goes_whole)
{
    rd_opcache *c = rd_opcache_new(2, 0);
    cr_assert_not_null(c);
    char name[32];
    for (uint32_t i = 1; i <= RD_SCHEDMSG_CACHE_MAX; i++) {
        snprintf(name, sizeof(name), "t.%u", i);
        rd_op_spec s = op(name, 1, NULL, 0);
        rd_opcache_own(c, &s);
        cr_assert_eq(s.fill, i);
    }
    rd_op_spec s = op("one.more", 1, NULL, 0);
    rd_opcache_own(c, &s);
    cr_assert_eq(s.fill, 0);
    cr_assert_eq(s.cached, 0);
    s = op("t.1024", 1, NULL, 0);
    rd_opcache_own(c, &s);
    cr_assert_eq(s.cached, RD_SCHEDMSG_CACHE_MAX);
    rd_opcache_free(c);
}

/* What node 2 sends, as node 0 hears it. */
Test(opcache, another_node_s_op_by_its_slot_gets_that_slot_s_name_and_parameters)
{
    rd_opcache *c = rd_opcache_new(3, 0);
    cr_assert_not_null(c);
    char err[256];
    float x = 3;
    rd_op_spec a = op("a", 1, &x, 4);
    a.fill = 1;
    cr_assert_eq(rd_opcache_heard(c, 2, &a, err, sizeof(err)), 0, "%s", err);
    rd_op_spec by = by_slot(1, &x, 4);
    cr_assert_eq(rd_opcache_heard(c, 2, &by, err, sizeof(err)), 0, "%s", err);
    cr_assert_str_eq(by.name, "a");
    cr_assert_eq(by.p.count, 1);
    cr_assert_eq(by.p.prescale, 1);
    cr_assert_eq(by.len, 4);
    /* node 1 filled nothing */
    by = by_slot(1, &x, 4);
    cr_assert_eq(rd_opcache_heard(c, 1, &by, err, sizeof(err)), -1);
    cr_assert(strstr(err, "slot 1 of its cache, of 0 filled") != NULL, "%s", err);
    rd_opcache_free(c);
}

Test(opcache, a_slot_filled_out_of_turn_or_data_unfit_for_the_slot_s_op_is_refused)
{
    rd_opcache *c = rd_opcache_new(2, 0);
    cr_assert_not_null(c);
    char err[256];
    double y = 1;
    rd_op_spec s = op("a", 1, &y, 4);
    s.fill = 2;
    cr_assert_eq(rd_opcache_heard(c, 1, &s, err, sizeof(err)), -1);
    cr_assert(strstr(err, "filling slot 2 of its cache where 1 comes next") != NULL, "%s", err);
    s.fill = 1;
    cr_assert_eq(rd_opcache_heard(c, 1, &s, err, sizeof(err)), 0, "%s", err);
    rd_op_spec by = by_slot(1, &y, 8);
    cr_assert_eq(rd_opcache_heard(c, 1, &by, err, sizeof(err)), -1, "8 bytes for one f32");
    cr_assert(strstr(err, "8 bytes of data") != NULL, "%s", err);
    by = by_slot(1, NULL, 0);
    cr_assert_eq(rd_opcache_heard(c, 1, &by, err, sizeof(err)), -1);
    cr_assert(strstr(err, "not direct now") != NULL, "%s", err);
    rd_opcache_free(c);
}
