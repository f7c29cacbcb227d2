/* The control tree of a ring: bounded links per node, and one way between any two nodes. */
#include <criterion/criterion.h>

#include "ctrltree.h"
#include "xfer.h"

static const int fanouts[] = {1, 2, 3, RD_CTRL_FANOUT};

/* The hops from a to b, following rd_ctrltree_toward; -1 past n hops (a loop). */
static int hops(int a, int b, int n, int k)
{
    int h = 0;
    while (a != b && h <= n) {
        int next = rd_ctrltree_toward(a, b, k);
        if (!rd_ctrltree_linked(a, next, n, k))
            return -1;
        a = next;
        h++;
    }
    return a == b ? h : -1;
}

/* The depth of position i (the root's is 0). */
static int depth(int i, int k)
{
    int d = 0;
    for (; i > 0; i = rd_ctrltree_parent(i, k))
        d++;
    return d;
}

Test(ctrltree, every_node_but_the_root_has_one_parent_before_it_and_at_most_fanout_children)
{
    for (size_t f = 0; f < sizeof(fanouts) / sizeof(fanouts[0]); f++) {
        int k = fanouts[f];
        for (int n = 1; n <= RD_RING_NODES_MAX; n++) {
            for (int i = 0; i < n; i++) {
                int p = rd_ctrltree_parent(i, k), links = 0;
                cr_assert(i == 0 ? p == -1 : p >= 0 && p < i, "k %d: parent of %d is %d", k, i, p);

                for (int j = 0; j < n; j++)
                    links += rd_ctrltree_linked(i, j, n, k);
                cr_assert(links <= k + 1 && (n == 1 || links >= 1),
                          "k %d, %d nodes: node %d has %d links", k, n, i, links);
            }
        }
    }
}

Test(ctrltree, links_go_both_ways_and_only_between_members)
{
    for (int i = -1; i <= 20; i++)
        for (int j = -1; j <= 20; j++)
            cr_assert_eq(rd_ctrltree_linked(i, j, 20, 3), rd_ctrltree_linked(j, i, 20, 3));
    cr_assert_not(rd_ctrltree_linked(0, 1, 1, 8), "node 1 is no member of a ring of 1");
    cr_assert_not(rd_ctrltree_linked(3, 3, 8, 8));
    cr_assert_not(rd_ctrltree_linked(-1, 0, 8, 8));
}

Test(ctrltree, the_way_between_two_nodes_goes_up_to_their_common_ancestor_and_down)
{
    for (size_t f = 0; f < sizeof(fanouts) / sizeof(fanouts[0]); f++) {
        int k = fanouts[f], n = k == 1 ? 40 : RD_RING_NODES_MAX;
        for (int a = 0; a < n; a++) {
            for (int b = 0; b < n; b++) {
                int h = hops(a, b, n, k);
                /* up from a and from b to the deepest node both pass */
                int x = a, y = b;
                while (x != y) {
                    if (x > y)
                        x = rd_ctrltree_parent(x, k);
                    else
                        y = rd_ctrltree_parent(y, k);
                }
                int want = depth(a, k) + depth(b, k) - 2 * depth(x, k);
                cr_assert_eq(h, want, "k %d: %d to %d takes %d hops, want %d", k, a, b, h, want);
            }
        }
    }
}

Test(ctrltree, at_most_two_hops_between_any_two_of_nine_nodes_and_six_of_256)
{
    int most9 = 0, most256 = 0;
    for (int a = 0; a < RD_RING_NODES_MAX; a++) {
        for (int b = 0; b < RD_RING_NODES_MAX; b++) {
            int h = hops(a, b, RD_RING_NODES_MAX, RD_CTRL_FANOUT);
            if (a < 9 && b < 9 && h > most9)
                most9 = h;
            if (h > most256)
                most256 = h;
        }
    }
    cr_assert_eq(most9, 2);
    cr_assert_eq(most256, 6);
}

Test(ctrltree, the_children_of_a_node_are_the_fanout_positions_from_its_first_child)
{
    for (size_t f = 0; f < sizeof(fanouts) / sizeof(fanouts[0]); f++) {
        int k = fanouts[f];
        for (int i = 0; i < RD_RING_NODES_MAX; i++) {
            int first = rd_ctrltree_first_child(i, k);
            for (int j = 0; j < RD_RING_NODES_MAX; j++) {
                int child = j >= first && j < first + k;
                cr_assert_eq(rd_ctrltree_parent(j, k) == i, child, "k %d: %d is %sa child of %d", k,
                             j, child ? "not " : "", i);
            }
        }
    }
}

Test(ctrltree, a_node_is_below_itself_and_each_of_its_ancestors_and_no_other)
{
    for (size_t f = 0; f < sizeof(fanouts) / sizeof(fanouts[0]); f++) {
        int k = fanouts[f];
        for (int t = 0; t < RD_RING_NODES_MAX; t++) {
            int above = 0;
            for (int self = 0; self < RD_RING_NODES_MAX; self++) {
                int below = rd_ctrltree_below(self, t, k), up = t;
                /* below self: self is on the way from t up to the root */
                while (up > self)
                    up = rd_ctrltree_parent(up, k);
                cr_assert_eq(below, up == self, "k %d: %d below %d is %d", k, t, self, below);
                above += below;
            }
            cr_assert_eq(above, depth(t, k) + 1, "k %d: %d is below %d nodes", k, t, above);
        }
    }
}
