/* The control tree of a ring: parents, children and the way between two nodes. */
#include "ctrltree.h"

int rd_ctrltree_parent(int i, int fanout)
{
    return i > 0 ? (i - 1) / fanout : -1;
}

int rd_ctrltree_first_child(int i, int fanout)
{
    return fanout * i + 1;
}

int rd_ctrltree_linked(int a, int b, int n, int fanout)
{
    return a >= 0 && b >= 0 && a < n && b < n && a != b &&
           (rd_ctrltree_parent(a, fanout) == b || rd_ctrltree_parent(b, fanout) == a);
}

int rd_ctrltree_toward(int self, int t, int fanout)
{
    /* Positions shrink toward the root: t is below self when its ancestors reach it. */
    for (int up = t; up > self; up = rd_ctrltree_parent(up, fanout))
        if (rd_ctrltree_parent(up, fanout) == self)
            return up;
    return rd_ctrltree_parent(self, fanout);
}

int rd_ctrltree_below(int self, int t, int fanout)
{
    return self >= 0 && t >= 0 &&
           (t == self || rd_ctrltree_toward(self, t, fanout) != rd_ctrltree_parent(self, fanout));
}
