/* Scheduling decisions without I/O: whether two submissions match, how an ordered batch fuses,
 * and the negotiation table that says when every node has announced an op and how it ends. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "frame.h"
#include "negotiate.h"
#include "schedule.h"

static rd_op_params allreduce(rd_dtype dt, uint64_t count)
{
    return (rd_op_params){RD_COLL_ALLREDUCE, dt, RD_OP_SUM, 0, count, 1.0, 1.0, 0, 0, 0, 0};
}

Test(schedule, submissions_that_agree_match)
{
    rd_op_params a = allreduce(RD_DT_F32, 8), b = a;
    char fields[96] = "junk";
    cr_assert(rd_op_params_compare(&a, &b, fields, sizeof(fields)));
    cr_assert_str_eq(fields, "");
}

Test(schedule, a_mismatch_names_every_field_that_differs)
{
    rd_op_params a = allreduce(RD_DT_F32, 8), b = allreduce(RD_DT_F64, 9);
    b.postscale = 0.5;
    char fields[96];
    cr_assert_not(rd_op_params_compare(&a, &b, fields, sizeof(fields)));
    cr_assert_str_eq(fields, "dtype, count, postscale");
    rd_op_params c = a;
    c.coll = RD_COLL_BROADCAST;
    c.root = 3;
    cr_assert_not(rd_op_params_compare(&a, &c, fields, sizeof(fields)));
    cr_assert_str_eq(fields, "op, root");
    rd_op_params d = a;
    d.device = 1; /* one node passes it in device memory, another in host memory */
    cr_assert_not(rd_op_params_compare(&a, &d, fields, sizeof(fields)));
    cr_assert_str_eq(fields, "memory");
    char buf[160];
    rd_op_params_describe(buf, sizeof(buf), &d);
    cr_assert_str_eq(buf, "allreduce f32 count 8 op sum prescale 1 postscale 1 in device memory");
}

/* An alltoall or allgatherv that moves data crosses nodes on the TCP ring from host or device
 * memory alike; one of nothing, and the other collectives, must be passed alike. */
Test(schedule, only_alltoall_and_allgatherv_with_data_take_either_memory)
{
    char fields[96];
    static const rd_coll either[] = {RD_COLL_ALLTOALL, RD_COLL_ALLGATHERV};
    static const rd_coll alike[] = {RD_COLL_REDUCESCATTER, RD_COLL_ALLGATHER, RD_COLL_ALLREDUCE,
                                    RD_COLL_BROADCAST};
    for (size_t i = 0; i < 2; i++) {
        rd_op_params a = allreduce(RD_DT_I32, 12), d;
        a.coll = either[i];
        d = a;
        d.device = 1;
        cr_assert(rd_op_params_compare(&a, &d, fields, sizeof(fields)), "%s", fields);
        a.count = d.count = 0;
        cr_assert_not(rd_op_params_compare(&a, &d, fields, sizeof(fields)));
        cr_assert_str_eq(fields, "memory");
    }
    for (size_t i = 0; i < 4; i++) {
        rd_op_params a = allreduce(RD_DT_I32, 12), d;
        a.coll = alike[i];
        d = a;
        d.device = 1;
        cr_assert_not(rd_op_params_compare(&a, &d, fields, sizeof(fields)));
        cr_assert_str_eq(fields, "memory");
    }
}

Test(schedule, params_are_described_in_the_words_of_the_api)
{
    char buf[160];
    rd_op_params a = allreduce(RD_DT_BF16, 4);
    a.prescale = 0.25;
    rd_op_params_describe(buf, sizeof(buf), &a);
    cr_assert_str_eq(buf, "allreduce bf16 count 4 op sum prescale 0.25 postscale 1");
    rd_op_params b = {RD_COLL_BROADCAST, RD_DT_U8, RD_OP_SUM, 7, 16, 1.0, 1.0, 0, 0, 0, 0};
    rd_op_params_describe(buf, sizeof(buf), &b);
    cr_assert_str_eq(buf, "broadcast u8 count 16 root 7");
}

Test(schedule, small_allreduces_that_agree_fuse_in_order_of_their_first_op)
{
    rd_op_params p[] = {
        allreduce(RD_DT_F32, 100), /* 400 B */
        allreduce(RD_DT_F64, 10),  /* another dtype: its own group */
        allreduce(RD_DT_F32, 200), /* joins group 0 */
        {RD_COLL_BROADCAST, RD_DT_F32, RD_OP_SUM, 0, 4, 1.0, 1.0, 0, 0, 0, 0}, /* never fuses */
        allreduce(RD_DT_F64, 20),                                              /* joins group 1 */
    };
    size_t group[5];
    cr_assert_eq(rd_sched_group(p, 5, 4096, group), 2);
    cr_assert_eq(group[0], 0);
    cr_assert_eq(group[1], 1);
    cr_assert_eq(group[2], 0);
    cr_assert_eq(group[3], SIZE_MAX);
    cr_assert_eq(group[4], 1);
}

Test(schedule, a_group_holds_at_most_the_threshold)
{
    rd_op_params p[] = {allreduce(RD_DT_F32, 500), allreduce(RD_DT_F32, 500),
                        allreduce(RD_DT_F32, 500), allreduce(RD_DT_F32, 24)};
    size_t group[4];
    /* 2000 + 2000 fill 4096 but a third 2000 would not fit; 96 more bytes still do. */
    cr_assert_eq(rd_sched_group(p, 4, 4096, group), 2);
    cr_assert_eq(group[0], 0);
    cr_assert_eq(group[1], 0);
    cr_assert_eq(group[2], 1);
    cr_assert_eq(group[3], 0);
}

Test(schedule, an_allreduce_as_large_as_the_threshold_runs_alone)
{
    rd_op_params p[] = {allreduce(RD_DT_F32, 1024), allreduce(RD_DT_F32, 1)};
    size_t group[2];
    cr_assert_eq(rd_sched_group(p, 2, 4096, group), 1);
    cr_assert_eq(group[0], SIZE_MAX);
    cr_assert_eq(group[1], 0);
}

Test(schedule, ops_with_other_ops_or_scales_do_not_fuse)
{
    rd_op_params p[] = {allreduce(RD_DT_F32, 1), allreduce(RD_DT_F32, 1), allreduce(RD_DT_F32, 1)};
    p[1].redop = RD_OP_MAX;
    p[2].prescale = 0.5;
    size_t group[3];
    cr_assert_eq(rd_sched_group(p, 3, 1 << 20, group), 3);
    cr_assert_eq(group[0], 0);
    cr_assert_eq(group[1], 1);
    cr_assert_eq(group[2], 2);
}

Test(schedule, ops_in_device_memory_never_fuse)
{
    rd_op_params p[] = {allreduce(RD_DT_F32, 1), allreduce(RD_DT_F32, 1), allreduce(RD_DT_F32, 1),
                        allreduce(RD_DT_F32, 1)};
    p[1].device = p[2].device = 1;
    size_t group[4];
    cr_assert_eq(rd_sched_group(p, 4, 1 << 20, group), 1);
    cr_assert_eq(group[0], 0);
    cr_assert_eq(group[1], SIZE_MAX);
    cr_assert_eq(group[2], SIZE_MAX);
    cr_assert_eq(group[3], 0);
}

Test(schedule, an_empty_batch_has_no_groups)
{
    size_t group[1];
    cr_assert_eq(rd_sched_group(NULL, 0, 4096, group), 0);
}

/* --- the negotiation table --- */

static const rd_ring_node nodes3[] = {{"n1", 0, 2}, {"n2", 2, 2}, {"n3", 4, 1}};

static rd_op_spec spec_of(const char *name, const rd_op_params *p)
{
    return (rd_op_spec){.name = name, .p = *p, .message = ""};
}

Test(schedule, an_op_is_done_negotiating_once_every_node_announced_it)
{
    rd_neg *n = rd_neg_new(3, nodes3, 1, 0, NULL);
    cr_assert_not_null(n);
    rd_op_params p = allreduce(RD_DT_F32, 1 << 20);
    rd_op_spec s = spec_of("grad", &p);
    char err[256];
    int own;
    rd_neg_done *done;
    cr_assert_eq(rd_neg_ready(n, 0, &s, NULL, err, sizeof(err)), 0);
    cr_assert_eq(rd_neg_ready(n, 1, &s, &own, err, sizeof(err)), 0);
    cr_assert_eq(rd_neg_pending(n), 1);
    char missing[128];
    rd_neg_missing(n, "grad", &own, missing, sizeof(missing));
    cr_assert_str_eq(missing, "rank 4 (node n3)");
    cr_assert_eq(rd_neg_take(n, &done), 0);
    cr_assert_eq(rd_neg_ready(n, 2, &s, NULL, err, sizeof(err)), 0);
    cr_assert_eq(rd_neg_take(n, &done), 1);
    cr_assert_eq(done[0].own, &own);
    cr_assert_eq(done[0].e.status, RINGD_OK);
    cr_assert_not(done[0].e.direct, "an op above max_data goes on the ring");
    rd_neg_done_free(done, 1);
    cr_assert_eq(rd_neg_pending(n), 0);
    rd_neg_free(n);
}

/* Node 1 of 4 in a tree where node 3 reaches the coordinator through it: what it holds goes up
 * once nodes 1 and 3 have an op, down once all four have, and both ways while a join waits. */
Test(schedule, the_news_say_when_the_nodes_below_have_all_announced_an_op_and_when_every_node_has)
{
    static const rd_ring_node nodes4[] = {{"n1", 0, 1}, {"n2", 1, 1}, {"n3", 2, 1}, {"n4", 3, 1}};
    const uint8_t below[] = {0, 1, 0, 1};
    rd_neg *n = rd_neg_new(4, nodes4, 1, 0, below);
    cr_assert_not_null(n);
    rd_op_params p = allreduce(RD_DT_F32, 4);
    rd_op_spec a = spec_of("a", &p), b = spec_of("b", &p), join = spec_of(RD_JOIN_NAME, &p);
    char err[256];
    int own;
    rd_neg_done *done;
    cr_assert_eq(rd_neg_ready(n, 0, &a, NULL, err, sizeof(err)), 0);
    cr_assert_eq(rd_neg_ready(n, 3, &a, NULL, err, sizeof(err)), 0);
    cr_assert_eq(rd_neg_news(n), 0, "node 1 has not announced it");
    cr_assert_eq(rd_neg_ready(n, 3, &b, NULL, err, sizeof(err)), 0);
    cr_assert_eq(rd_neg_ready(n, 1, &a, &own, err, sizeof(err)), 0);
    cr_assert_eq(rd_neg_news(n), RD_RELEASE_UP);
    cr_assert_eq(rd_neg_news(n), 0, "the news are cleared once read");
    cr_assert_eq(rd_neg_ready(n, 2, &a, NULL, err, sizeof(err)), 0);
    cr_assert_eq(rd_neg_news(n), RD_RELEASE_DOWN);
    cr_assert_eq(rd_neg_take(n, &done), 1);
    rd_neg_done_free(done, 1);
    /* a mismatch found here ends the op early on the nodes that have not announced it */
    rd_op_params q = allreduce(RD_DT_F64, 4);
    rd_op_spec c = spec_of("c", &p), c2 = spec_of("c", &q);
    cr_assert_eq(rd_neg_ready(n, 0, &c, NULL, err, sizeof(err)), 0);
    cr_assert_eq(rd_neg_news(n), 0);
    cr_assert_eq(rd_neg_ready(n, 2, &c2, NULL, err, sizeof(err)), 0);
    cr_assert_eq(rd_neg_news(n), RD_RELEASE_UP | RD_RELEASE_DOWN);
    cr_assert_eq(rd_neg_ready(n, 0, &join, NULL, err, sizeof(err)), 0);
    cr_assert_eq(rd_neg_news(n), RD_RELEASE_UP | RD_RELEASE_DOWN);
    rd_neg_free(n);

    /* Without a tree, the node is below itself alone. */
    n = rd_neg_new(4, nodes4, 1, 0, NULL);
    cr_assert_not_null(n);
    cr_assert_eq(rd_neg_ready(n, 1, &a, &own, err, sizeof(err)), 0);
    cr_assert_eq(rd_neg_news(n), RD_RELEASE_UP);
    rd_neg_free(n);
}

Test(schedule, the_ops_other_nodes_announced_and_this_one_not_are_listed_in_order)
{
    rd_neg *n = rd_neg_new(3, nodes3, 1, 0, NULL); /* this node is n2 */
    cr_assert_not_null(n);
    rd_op_params small = allreduce(RD_DT_F32, 4), big = allreduce(RD_DT_F32, 1 << 20);
    rd_op_spec a1 = spec_of("grad", &small), a2 = spec_of("grad", &big), b = spec_of("w", &big);
    char err[256];
    int own;
    cr_assert_eq(rd_neg_unannounced(n, NULL, 0), 0);
    cr_assert_eq(rd_neg_ready(n, 0, &a1, NULL, err, sizeof(err)), 0);
    cr_assert_eq(rd_neg_ready(n, 0, &a2, NULL, err, sizeof(err)), 0);
    cr_assert_eq(rd_neg_ready(n, 2, &b, NULL, err, sizeof(err)), 0);
    cr_assert_eq(rd_neg_ready(n, 1, &b, &own, err, sizeof(err)),
                 0); /* announced here: not listed */
    rd_op_spec failed = spec_of("bad", &small);
    failed.status = RINGD_E_INVALID; /* listed with its failure */
    failed.message = "refused on n1";
    cr_assert_eq(rd_neg_ready(n, 0, &failed, NULL, err, sizeof(err)), 0);
    rd_neg_unheard u[4];
    cr_assert_eq(rd_neg_unannounced(n, u, 1), 3, "more than max: how many there are");
    cr_assert_eq(rd_neg_unannounced(n, u, 4), 3);
    int grad = -1, bad = -1;
    for (int i = 0; i < 3; i++) {
        if (strcmp(u[i].name, "grad") == 0 && grad < 0)
            grad = i;
        if (strcmp(u[i].name, "bad") == 0)
            bad = i;
    }
    cr_assert(grad >= 0 && bad >= 0);
    cr_assert_eq(u[grad].p.count, 4, "the name's first announcement first");
    cr_assert_eq(u[grad + 1].p.count, 1 << 20);
    cr_assert_eq(u[bad].status, RINGD_E_INVALID);
    cr_assert_str_eq(u[bad].message, "refused on n1");
    rd_neg_free(n);
}

Test(schedule, what_a_node_announces_after_its_join_is_not_listed)
{
    rd_neg *n = rd_neg_new(3, nodes3, 1, 0, NULL); /* this node is n2; n1 and n3 still at work */
    cr_assert_not_null(n);
    rd_op_params p = allreduce(RD_DT_F32, 4),
                 j = {RD_COLL_ALLGATHER, RD_DT_I64, RD_OP_SUM, 0, 1, 1.0, 1.0, 0, 0, 0, 0};
    rd_op_spec before = spec_of("x", &p), join = spec_of(RD_JOIN_NAME, &j),
               after = spec_of("y", &p);
    char err[256];
    int own;
    cr_assert_eq(rd_neg_ready(n, 1, &join, &own, err, sizeof(err)), 0); /* this node joined */
    cr_assert_eq(rd_neg_ready(n, 0, &before, NULL, err, sizeof(err)), 0);
    cr_assert_eq(rd_neg_ready(n, 0, &join, NULL, err, sizeof(err)), 0);
    /* n1's next op, after its join: the join has not ended here (n3 is missing) */
    cr_assert_eq(rd_neg_ready(n, 0, &after, NULL, err, sizeof(err)), 0);
    rd_neg_unheard u[4];
    cr_assert_eq(rd_neg_unannounced(n, u, 4), 1);
    cr_assert_str_eq(u[0].name, "x");
    /* the same op announced by a node still at work (n3) is one that node's ranks submitted */
    cr_assert_eq(rd_neg_ready(n, 2, &after, NULL, err, sizeof(err)), 0);
    cr_assert_eq(rd_neg_unannounced(n, u, 4), 2);
    rd_neg_free(n);
}

Test(schedule, announcements_that_disagree_fail_the_op_naming_both_sides)
{
    rd_neg *n = rd_neg_new(3, nodes3, 0, 0, NULL);
    rd_op_params p = allreduce(RD_DT_F32, 8), q = allreduce(RD_DT_F32, 9);
    rd_op_spec a = spec_of("w", &p), b = spec_of("w", &q);
    char err[256], *name = NULL;
    int own;
    rd_neg_done *done;
    cr_assert_eq(rd_neg_ready(n, 0, &a, &own, err, sizeof(err)), 0);
    cr_assert_eq(rd_neg_ready(n, 2, &b, NULL, err, sizeof(err)), 0);
    uint32_t status;
    rd_op_params first;
    const char *why = rd_neg_failed(n, "w", &status, &first);
    cr_assert_null(why, "this node announced the op: it learns the outcome with the others");
    cr_assert_eq(rd_neg_ready(n, 1, &a, NULL, err, sizeof(err)), 0);
    cr_assert_eq(rd_neg_take(n, &done), 1);
    cr_assert_eq(done[0].e.status, RINGD_E_MISMATCH);
    name = done[0].e.message;
    cr_assert(strstr(name, "count") != NULL, "%s", name);
    cr_assert(strstr(name, "ranks 0-1 (node n1)") != NULL, "%s", name);
    cr_assert(strstr(name, "rank 4 (node n3)") != NULL, "%s", name);
    rd_neg_done_free(done, 1);
    rd_neg_free(n);
}

Test(schedule, a_failure_elsewhere_is_known_before_this_node_announces)
{
    rd_neg *n = rd_neg_new(3, nodes3, 2, 0, NULL);
    rd_op_params p = allreduce(RD_DT_F32, 8);
    rd_op_spec s = spec_of("g", &p);
    s.status = RINGD_E_INVALID;
    s.message = "rank 1 (node n1) could not run it: bad offset";
    char err[256];
    cr_assert_eq(rd_neg_ready(n, 0, &s, NULL, err, sizeof(err)), 0);
    uint32_t status;
    rd_op_params first;
    const char *why = rd_neg_failed(n, "g", &status, &first);
    cr_assert_not_null(why);
    cr_assert_eq(status, RINGD_E_INVALID);
    cr_assert_str_eq(why, "rank 1 (node n1) could not run it: bad offset");
    cr_assert_eq(first.count, 8);
    char **names;
    cr_assert_eq(rd_neg_failed_names(n, &names), 1);
    cr_assert_str_eq(names[0], "g");
    free(names[0]);
    free(names);
    rd_neg_free(n);
}

/* What a peer's message may hold at all is checked as it is decoded (test_schedmsg); the table
 * checks what depends on this node: its --direct-bytes. */
Test(schedule, a_node_that_sends_more_data_than_direct_bytes_is_refused)
{
    rd_neg *n = rd_neg_new(3, nodes3, 0, 16, NULL);
    rd_op_params p = allreduce(RD_DT_F32, 8);
    static const uint8_t data[32];
    rd_op_spec s = spec_of("big", &p);
    s.direct = 1;
    s.data = data;
    s.len = sizeof(data);
    char err[256] = "";
    cr_assert_neq(rd_neg_ready(n, 1, &s, NULL, err, sizeof(err)), 0);
    cr_assert(strstr(err, "node n2 sent 32 bytes of data for tensor 'big', over --direct-bytes") !=
                  NULL,
              "%s", err);
    cr_assert_eq(rd_neg_pending(n), 0, "nothing of a refused announcement stays");
    p = allreduce(RD_DT_F32, 4);
    s = spec_of("fits", &p);
    s.direct = 1;
    s.data = data;
    s.len = 16;
    cr_assert_eq(rd_neg_ready(n, 1, &s, NULL, err, sizeof(err)), 0, "%s", err);
    rd_neg_free(n);
}

Test(schedule, small_ops_travel_with_the_negotiation)
{
    static const rd_ring_node two[] = {{"a", 0, 1}, {"b", 1, 1}};
    rd_neg *n = rd_neg_new(2, two, 0, 1024, NULL);
    rd_op_params p = allreduce(RD_DT_F32, 2);
    float x[2] = {1.5f, 2.0f}, y[2] = {0.25f, -1.0f};
    rd_op_spec a = spec_of("s", &p), b = spec_of("s", &p);
    a.direct = b.direct = 1;
    a.data = (const uint8_t *)x;
    a.len = sizeof(x);
    b.data = (const uint8_t *)y;
    b.len = sizeof(y);
    char err[256];
    int own;
    rd_neg_done *done;
    cr_assert_eq(rd_neg_ready(n, 0, &a, &own, err, sizeof(err)), 0);
    cr_assert_eq(rd_neg_ready(n, 1, &b, NULL, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(rd_neg_take(n, &done), 1);
    cr_assert(done[0].e.direct);
    cr_assert_eq(done[0].e.len, sizeof(x));
    float r[2];
    memcpy(r, done[0].e.data, sizeof(r));
    cr_assert_float_eq(r[0], 1.75f, 0);
    cr_assert_float_eq(r[1], 1.0f, 0);
    rd_neg_done_free(done, 1);
    rd_neg_free(n);
}
