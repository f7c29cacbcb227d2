/* The control tree of a ring: which nodes keep control links with which, and the way from one
 * node to another along them. Node i's parent is (i - 1) / fanout, its children fanout * i + 1
 * up to fanout * i + fanout; the coordinator (position 0) is the root. Pure functions; any
 * thread. */
#ifndef RD_CTRLTREE_H
#define RD_CTRLTREE_H

/* Children of a node in a ring's control tree: depth 2 at 64 nodes, 3 at 256. */
#define RD_CTRL_FANOUT 8

/* The parent of position i (-1 for the root, and for any i below 1). */
int rd_ctrltree_parent(int i, int fanout);
/* The first child of position i: its children are the positions from it up to fanout - 1 more
 * that are in the ring. */
int rd_ctrltree_first_child(int i, int fanout);
/* 1 when positions a and b, both below n, are parent and child either way. */
int rd_ctrltree_linked(int a, int b, int n, int fanout);
/* The neighbour of position self through which it reaches position t (t != self, both at least
 * 0): the child whose subtree holds t, or else the parent. */
int rd_ctrltree_toward(int self, int t, int fanout);

/* 1 when position t is self or in self's subtree: its messages up to the root pass self. */
int rd_ctrltree_below(int self, int t, int fanout);

#endif
