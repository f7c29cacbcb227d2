/* Unit tests for the device transport's agreement in daemon/engine/devplan.c, on the CPU: the
 * nodes of a ring run the protocol against each other through an in-memory network that can
 * lose, delay and replay messages. Every member of every generation receives the same NCCL id
 * (a new one per generation), nothing from an older generation is accepted, a node that never
 * confirms is named for setting aside (as a node the ring cannot reach), and the plan falls back
 * to the TCP ring, naming why, when a node cannot run NCCL. */
#include <criterion/criterion.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devplan.h"

#define NODES_MAX 8
#define QUEUE_MAX 256
#define TIMEOUT_MS 1000

/* A message on the way, deep-copied. */
typedef struct {
    int from, to;
    rd_schedmsg m;
    uint8_t id[RD_SCHEDMSG_ID_MAX];
    char why[RD_SCHEDMSG_MESSAGE_MAX + 1];
    char gpu[RD_SCHEDMSG_GPU_MAX + 1];
} wire;

/* One node as its owner sees it. */
typedef struct {
    rd_devplan *d;
    int position;
    int settled; /* 0, RD_DEVPLAN_NCCL or RD_DEVPLAN_TCP */
    char settled_why[1100];
    int failed;
    char failed_why[1100];
    int aside[NODES_MAX], naside;
    int joins; /* join calls */
    uint8_t id[RD_SCHEDMSG_ID_MAX];
    size_t id_len;
    int nranks, rank;
    int join_fails; /* its next join fails */
    int mute;       /* what it sends is lost */
} node;

static node nodes[NODES_MAX];
static int nnodes;
static wire queue[QUEUE_MAX];
static int nqueue;
static uint8_t next_id = 1; /* each id made differs from the last */
static int ids_made;

static void on_send(void *arg, int to, const rd_schedmsg *m)
{
    node *n = arg;
    if (n->mute)
        return;
    for (int k = 0; k < nnodes; k++) {
        if ((to >= 0 && k != to) || k == n->position)
            continue;
        cr_assert_lt(nqueue, QUEUE_MAX);
        wire *w = &queue[nqueue++];
        w->from = n->position;
        w->to = k;
        w->m = *m;
        if (m->dev.id_len > 0)
            memcpy(w->id, m->dev.id, m->dev.id_len);
        w->m.dev.id = w->id;
        snprintf(w->why, sizeof(w->why), "%s", m->dev.why != NULL ? m->dev.why : "");
        w->m.dev.why = w->why;
        snprintf(w->gpu, sizeof(w->gpu), "%s", m->dev.gpu != NULL ? m->dev.gpu : "");
        w->m.dev.gpu = w->gpu;
    }
}

static int on_make_id(void *arg, uint8_t *id, size_t *len, char *err, size_t errlen)
{
    (void)arg;
    (void)err;
    (void)errlen;
    memset(id, next_id++, RD_SCHEDMSG_ID_MAX);
    *len = RD_SCHEDMSG_ID_MAX;
    ids_made++;
    return 0;
}

static int on_join(void *arg, const uint8_t *id, size_t len, int nranks, int rank, char *err,
                   size_t errlen)
{
    node *n = arg;
    n->joins++;
    if (n->join_fails) {
        snprintf(err, errlen, "no GPU %d here", rank);
        return -1;
    }
    memcpy(n->id, id, len);
    n->id_len = len;
    n->nranks = nranks;
    n->rank = rank;
    return 0;
}

static void on_settled(void *arg, rd_devplan_state st, const char *why)
{
    node *n = arg;
    n->settled = (int)st;
    snprintf(n->settled_why, sizeof(n->settled_why), "%s", why);
}

static int last_nccl_fault;

static void on_failed(void *arg, const char *why, const int *aside, int naside, int nccl)
{
    last_nccl_fault = nccl;
    node *n = arg;
    n->failed++;
    snprintf(n->failed_why, sizeof(n->failed_why), "%s", why);
    n->naside = naside;
    if (naside > 0)
        memcpy(n->aside, aside, (size_t)naside * sizeof(*aside));
}

static const rd_devplan_events events = {
    .send = on_send,
    .make_id = on_make_id,
    .join = on_join,
    .settled = on_settled,
    .failed = on_failed,
};

static const char *const names[NODES_MAX] = {"a", "b", "c", "d", "e", "f", "g", "h"};

static void setup_nodes(int n)
{
    nnodes = n;
    nqueue = 0;
    for (int i = 0; i < n; i++) {
        memset(&nodes[i], 0, sizeof(nodes[i]));
        nodes[i].position = i;
        nodes[i].d = rd_devplan_new(&events, &nodes[i]);
        cr_assert_not_null(nodes[i].d);
    }
}

static void teardown_nodes(void)
{
    for (int i = 0; i < nnodes; i++)
        rd_devplan_free(nodes[i].d);
    nnodes = 0;
}

/* Every node's ring of generation forms; outcomes of the last one are forgotten. */
static void form(uint64_t generation)
{
    nqueue = 0;
    for (int i = 0; i < nnodes; i++) {
        node *n = &nodes[i];
        n->settled = n->failed = n->joins = n->naside = 0;
        n->id_len = 0;
        cr_assert_eq(rd_devplan_start(n->d, generation, nnodes, i, names, TIMEOUT_MS), 0);
    }
}

static const rd_devplan_offer ready_offer = {RD_DEV_WANT_AUTO, 1, 1, "", NULL};

static void offer(int i, const rd_devplan_offer *o, int64_t now)
{
    cr_assert_eq(rd_devplan_up(nodes[i].d, o, now), 0);
}

/* Delivers what is on the wire now, in order, dropping messages for which drop returns 1;
 * what they make nodes send waits for the next delivery. Every message must be taken. */
static void deliver(int64_t now, int (*drop)(const wire *))
{
    static wire now_on[QUEUE_MAX];
    int n = nqueue;
    memcpy(now_on, queue, (size_t)n * sizeof(*queue));
    nqueue = 0;
    for (int k = 0; k < n; k++) {
        wire w = now_on[k];
        w.m.dev.id = w.id;
        w.m.dev.why = w.why;
        w.m.dev.gpu = w.gpu;
        if (drop != NULL && drop(&w))
            continue;
        char err[256] = "";
        cr_assert_eq(rd_devplan_message(nodes[w.to].d, w.from, &w.m, now, err, sizeof(err)), 0,
                     "message %d from %d to %d refused: %s", (int)w.m.kind, w.from, w.to, err);
    }
}

/* Each node that joined reports its communicator formed; what that sends is delivered. */
static void all_form(int64_t now)
{
    for (int i = 0; i < nnodes; i++)
        if (rd_devplan_state_of(nodes[i].d) == RD_DEVPLAN_JOINING)
            rd_devplan_formed(nodes[i].d, 1, "");
    deliver(now, NULL);
}

TestSuite(devplan, .init = NULL, .fini = teardown_nodes);

Test(devplan, every_member_of_every_generation_receives_the_same_id)
{
    setup_nodes(4);
    uint8_t last[RD_SCHEDMSG_ID_MAX] = {0};
    for (uint64_t g = 1; g <= 5; g++) {
        form(g);
        /* nodes come up in an order of their own: the coordinator is not always first */
        for (int k = 0; k < nnodes; k++)
            offer((int)((k + g) % (uint64_t)nnodes), &ready_offer, 0);
        deliver(0, NULL);
        deliver(0, NULL); /* the plan, then the joins' confirmations */
        for (int i = 0; i < nnodes; i++) {
            cr_assert_eq(nodes[i].joins, 1, "node %d at generation %lu", i, (unsigned long)g);
            cr_assert_eq(nodes[i].id_len, RD_SCHEDMSG_ID_MAX);
            cr_assert_eq(memcmp(nodes[i].id, nodes[0].id, nodes[0].id_len), 0,
                         "node %d holds the coordinator's id", i);
            cr_assert_eq(nodes[i].nranks, 4);
            cr_assert_eq(nodes[i].rank, i, "rank = ring position");
            cr_assert_eq(nodes[i].settled, 0, "nothing settles before communicators form");
        }
        cr_assert_neq(memcmp(nodes[0].id, last, sizeof(last)), 0, "a new id per generation");
        memcpy(last, nodes[0].id, sizeof(last));
        all_form(0);
        for (int i = 0; i < nnodes; i++) {
            cr_assert_eq(nodes[i].settled, RD_DEVPLAN_NCCL, "node %d", i);
            cr_assert_eq(nodes[i].failed, 0);
            cr_assert_eq(rd_devplan_generation(nodes[i].d), g);
        }
    }
    cr_assert_eq(ids_made >= 5, 1);
}

Test(devplan, the_coordinator_settles_only_once_every_node_formed)
{
    setup_nodes(3);
    form(1);
    for (int i = 0; i < 3; i++)
        offer(i, &ready_offer, 0);
    deliver(0, NULL);
    deliver(0, NULL);
    rd_devplan_formed(nodes[0].d, 1, "");
    rd_devplan_formed(nodes[1].d, 1, "");
    deliver(0, NULL);
    cr_assert_eq(nodes[1].settled, RD_DEVPLAN_NCCL, "a node settles with its own communicator");
    cr_assert_eq(nodes[0].settled, 0, "node c has not formed yet");
    cr_assert_eq(rd_devplan_state_of(nodes[0].d), RD_DEVPLAN_FORMED);
    rd_devplan_formed(nodes[2].d, 1, "");
    deliver(0, NULL);
    cr_assert_eq(nodes[0].settled, RD_DEVPLAN_NCCL);
}

/* Messages of generation 1, recorded to be replayed later. */
static wire old[QUEUE_MAX];
static int nold;

static int keep_old(const wire *w)
{
    old[nold++] = *w;
    return 1; /* lost now: they come back, late */
}

Test(devplan, nothing_from_an_older_generation_is_accepted)
{
    setup_nodes(3);
    form(1);
    for (int i = 0; i < 3; i++)
        offer(i, &ready_offer, 0);
    nold = 0;
    deliver(0, keep_old); /* the offers of generation 1 are delayed */
    /* generation 2 forms before they arrive */
    form(2);
    for (int i = 0; i < 3; i++)
        offer(i, &ready_offer, 0);
    /* the late offers of generation 1 reach the coordinator: ignored, not counted twice */
    for (int k = 0; k < nold; k++) {
        char err[128] = "";
        old[k].m.dev.id = old[k].id;
        old[k].m.dev.why = old[k].why;
        cr_assert_eq(
            rd_devplan_message(nodes[old[k].to].d, old[k].from, &old[k].m, 0, err, sizeof(err)), 0,
            "%s", err);
    }
    cr_assert_eq(nodes[0].joins, 0, "generation 1's offers did not complete generation 2's");
    deliver(0, NULL); /* generation 2's offers */
    cr_assert_eq(nodes[0].joins, 1);
    /* the plan of generation 2 is held back and replaced by one of generation 1 */
    wire plan = queue[0];
    cr_assert_eq(plan.m.kind, RD_SCHEDMSG_DEV_PLAN);
    wire stale = plan;
    stale.m.generation = 1;
    memset(stale.id, 0xee, sizeof(stale.id));
    stale.m.dev.id = stale.id;
    stale.m.dev.why = stale.why;
    char err[128] = "";
    cr_assert_eq(rd_devplan_message(nodes[1].d, 0, &stale.m, 0, err, sizeof(err)), 0);
    cr_assert_eq(nodes[1].joins, 0, "a plan of generation 1 starts nothing at generation 2");
    deliver(0, NULL);
    deliver(0, NULL);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(memcmp(nodes[i].id, nodes[0].id, RD_SCHEDMSG_ID_MAX), 0);
    /* a confirmation of generation 1 does not stand for generation 2's: node b's "formed"
     * comes only as generation 1's, node c's as its own */
    rd_devplan_formed(nodes[0].d, 1, "");
    rd_devplan_formed(nodes[1].d, 1, "");
    rd_devplan_formed(nodes[2].d, 1, "");
    cr_assert_eq(nqueue, 2);
    wire from_b = queue[0].from == 1 ? queue[0] : queue[1];
    wire from_c = queue[0].from == 2 ? queue[0] : queue[1];
    cr_assert_eq(from_b.m.kind, RD_SCHEDMSG_DEV_CONFIRM);
    nqueue = 0;
    from_c.m.dev.why = from_c.why;
    cr_assert_eq(rd_devplan_message(nodes[0].d, 2, &from_c.m, 0, err, sizeof(err)), 0, "%s", err);
    from_b.m.generation = 1;
    from_b.m.dev.why = from_b.why;
    cr_assert_eq(rd_devplan_message(nodes[0].d, 1, &from_b.m, 0, err, sizeof(err)), 0);
    cr_assert_eq(nodes[0].settled, 0, "node b's formed of generation 1 did not count");
    rd_devplan_tick(nodes[0].d, TIMEOUT_MS + 1);
    cr_assert_eq(nodes[0].failed, 1, "node b's communicator never confirmed at generation 2");
    from_b.m.generation = 2; /* the same message of the right generation would have settled it */
    cr_assert_eq(rd_devplan_state_of(nodes[0].d), RD_DEVPLAN_FAILED);
}

Test(devplan, a_node_that_never_joins_is_named_for_setting_aside)
{
    setup_nodes(4);
    form(7);
    for (int i = 0; i < 4; i++)
        offer(i, &ready_offer, 100);
    deliver(100, NULL);
    nodes[2].mute = 1; /* node c joins, but nothing it says arrives */
    deliver(100, NULL);
    deliver(100, NULL);
    all_form(100);
    cr_assert_eq(nodes[0].settled, 0);
    rd_devplan_tick(nodes[0].d, 100 + TIMEOUT_MS - 1);
    cr_assert_eq(nodes[0].failed, 0, "not before the deadline");
    cr_assert_eq(rd_devplan_deadline(nodes[0].d), 100 + TIMEOUT_MS);
    rd_devplan_tick(nodes[0].d, 100 + TIMEOUT_MS);
    cr_assert_eq(nodes[0].failed, 1);
    cr_assert_eq(nodes[0].naside, 1);
    cr_assert_eq(nodes[0].aside[0], 2);
    cr_assert(strstr(nodes[0].failed_why, "node c did not join") != NULL, "%s",
              nodes[0].failed_why);
    cr_assert_eq(last_nccl_fault, 0, "a node that went quiet is not NCCL's fault");
    cr_assert_eq(rd_devplan_state_of(nodes[0].d), RD_DEVPLAN_FAILED);
    cr_assert_eq(rd_devplan_deadline(nodes[0].d), 0);
}

Test(devplan, a_node_that_never_offers_is_named_for_setting_aside)
{
    setup_nodes(3);
    form(2);
    offer(0, &ready_offer, 0);
    offer(1, &ready_offer, 0);
    deliver(0, NULL); /* node c's ring never came up */
    rd_devplan_tick(nodes[0].d, TIMEOUT_MS);
    cr_assert_eq(nodes[0].failed, 1);
    cr_assert_eq(nodes[0].naside, 1);
    cr_assert_eq(nodes[0].aside[0], 2);
    cr_assert(strstr(nodes[0].failed_why, "node c did not offer") != NULL, "%s",
              nodes[0].failed_why);
    rd_devplan_tick(nodes[1].d, 2 * TIMEOUT_MS);
    cr_assert_eq(nodes[1].failed, 1, "node b had no plan in time either");
    cr_assert(strstr(nodes[1].failed_why, "no plan from the coordinator a") != NULL);
}

Test(devplan, every_node_joined_but_nccl_never_formed)
{
    setup_nodes(2);
    form(3);
    offer(1, &ready_offer, 0);
    offer(0, &ready_offer, 0);
    deliver(0, NULL);
    deliver(0, NULL);
    deliver(0, NULL);
    rd_devplan_tick(nodes[0].d, TIMEOUT_MS);
    cr_assert_eq(nodes[0].failed, 1);
    cr_assert_eq(nodes[0].naside, 0, "no node to blame");
    cr_assert_eq(last_nccl_fault, 1);
    cr_assert(strstr(nodes[0].failed_why, "did not form within") != NULL);
    rd_devplan_tick(nodes[1].d, TIMEOUT_MS);
    cr_assert_eq(nodes[1].failed, 0, "a node waits twice as long: the coordinator acts first");
    rd_devplan_tick(nodes[1].d, 2 * TIMEOUT_MS);
    cr_assert_eq(nodes[1].failed, 1);
    cr_assert(strstr(nodes[1].failed_why, "node b: its NCCL communicator did not form") != NULL);
}

Test(devplan, a_communicator_that_fails_fails_the_generation_everywhere_it_is_heard)
{
    setup_nodes(3);
    form(4);
    for (int i = 0; i < 3; i++)
        offer(i, &ready_offer, 0);
    deliver(0, NULL);
    deliver(0, NULL);
    rd_devplan_formed(nodes[2].d, 0, "ncclCommInitRankConfig: remote process exited");
    cr_assert_eq(nodes[2].failed, 1);
    deliver(0, NULL);
    cr_assert_eq(nodes[0].failed, 1, "the coordinator hears it");
    cr_assert(strstr(nodes[0].failed_why, "node c: ") != NULL, "%s", nodes[0].failed_why);
    cr_assert(strstr(nodes[0].failed_why, "remote process exited") != NULL);
    /* what comes after the failure is ignored */
    rd_devplan_formed(nodes[1].d, 1, "");
    deliver(0, NULL);
    cr_assert_eq(nodes[0].settled, 0);
}

Test(devplan, a_join_that_cannot_start_fails_at_once)
{
    setup_nodes(2);
    form(5);
    nodes[1].join_fails = 1;
    offer(0, &ready_offer, 0);
    offer(1, &ready_offer, 0);
    deliver(0, NULL);
    deliver(0, NULL);
    cr_assert_eq(nodes[1].failed, 1);
    cr_assert(strstr(nodes[1].failed_why, "no GPU 1 here") != NULL);
    deliver(0, NULL);
    cr_assert_eq(nodes[0].failed, 1);
}

Test(devplan, tcp_when_a_node_cannot_and_nobody_waits)
{
    static const struct {
        rd_devplan_offer b;
        const char *says;
    } cases[] = {
        {{RD_DEV_WANT_AUTO, 1, 0, "no NCCL library: libnccl.so.2: cannot open", NULL},
         "node b: no NCCL library"},
        {{RD_DEV_WANT_AUTO, 0, 1, "", NULL}, "node b: its ranks pass host memory"},
        {{RD_DEV_WANT_TCP, 1, 1, "", NULL}, "node b: --gpu-transport tcp"},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        setup_nodes(3);
        form(1);
        offer(2, &ready_offer, 0);
        offer(1, &cases[k].b, 0);
        offer(0, &ready_offer, 0);
        deliver(0, NULL);
        deliver(0, NULL);
        for (int i = 0; i < 3; i++) {
            cr_assert_eq(nodes[i].settled, RD_DEVPLAN_TCP, "case %zu node %d", k, i);
            cr_assert_eq(nodes[i].joins, 0);
            cr_assert(strstr(nodes[i].settled_why, cases[k].says) != NULL, "case %zu: %s", k,
                      nodes[i].settled_why);
            cr_assert_eq(rd_devplan_required(nodes[i].d), 0);
            cr_assert_eq(rd_devplan_deadline(nodes[i].d), 0);
        }
        teardown_nodes();
    }
}

Test(devplan, nccl_wanted_but_impossible_is_required_everywhere)
{
    setup_nodes(2);
    form(1);
    rd_devplan_offer want = {RD_DEV_WANT_NCCL, 1, 1, "", NULL};
    rd_devplan_offer cannot = {RD_DEV_WANT_AUTO, 1, 0, "no GPU", NULL};
    offer(0, &want, 0);
    offer(1, &cannot, 0);
    deliver(0, NULL);
    deliver(0, NULL);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(nodes[i].settled, RD_DEVPLAN_TCP);
        cr_assert_eq(rd_devplan_required(nodes[i].d), 1, "node %d", i);
        cr_assert(strstr(rd_devplan_why(nodes[i].d), "node b: no GPU") != NULL);
    }
}

Test(devplan, a_ring_of_one_node_is_tcp_at_once)
{
    setup_nodes(1);
    form(1);
    offer(0, &ready_offer, 0);
    cr_assert_eq(nodes[0].settled, RD_DEVPLAN_TCP);
    cr_assert_eq(nodes[0].joins, 0);
    cr_assert_eq(ids_made, 0);
}

/* Feeds m from node from to node to; returns the error when refused, else NULL. */
static const char *refusal(int to, int from, const rd_schedmsg *m)
{
    static char err[256];
    err[0] = '\0';
    return rd_devplan_message(nodes[to].d, from, m, 0, err, sizeof(err)) != 0 ? err : NULL;
}

Test(devplan, what_no_node_could_send_is_refused)
{
    uint8_t id[8] = {1};
    rd_schedmsg offer_m = {.kind = RD_SCHEDMSG_DEV_OFFER, .generation = 1, .dev = {.why = ""}};
    rd_schedmsg plan_m = {.kind = RD_SCHEDMSG_DEV_PLAN,
                          .generation = 1,
                          .dev = {.transport = RD_DEV_NCCL, .id = id, .id_len = 8, .why = ""}};
    rd_schedmsg joined = {.kind = RD_SCHEDMSG_DEV_CONFIRM,
                          .generation = 1,
                          .dev = {.confirm = RD_DEV_JOINED, .why = ""}};
    rd_schedmsg formed = joined;
    formed.dev.confirm = RD_DEV_FORMED;

    setup_nodes(3);
    form(1);
    offer(0, &ready_offer, 0);
    offer(1, &ready_offer, 0);
    cr_assert_not_null(refusal(1, 2, &offer_m), "an offer to a node that does not coordinate");
    cr_assert_not_null(refusal(1, 2, &plan_m), "a plan from a node that does not coordinate");
    cr_assert_not_null(refusal(1, 0, &offer_m), "an offer from the coordinator");
    cr_assert_not_null(refusal(0, 5, &offer_m), "a position outside the ring");
    cr_assert_not_null(refusal(0, 0, &offer_m), "from itself");
    cr_assert_not_null(refusal(0, 2, &joined), "a confirmation before any plan");
    deliver(0, NULL);
    cr_assert_not_null(refusal(0, 1, &offer_m), "a second offer");
    offer(2, &ready_offer, 0);
    deliver(0, NULL); /* the offer completes the plan */
    deliver(0, NULL); /* every node joins */
    nqueue = 0;       /* their confirmations are lost */
    cr_assert_not_null(refusal(1, 0, &plan_m), "a second plan");
    cr_assert_not_null(refusal(0, 1, &formed), "formed before joined");
    cr_assert_null(refusal(0, 1, &joined));
    cr_assert_not_null(refusal(0, 1, &joined), "joined twice");
    cr_assert_null(refusal(0, 1, &formed));
    cr_assert_not_null(refusal(0, 1, &formed), "formed twice");
    teardown_nodes();

    /* under a TCP plan, nothing confirms */
    setup_nodes(2);
    form(1);
    rd_devplan_offer cannot = {RD_DEV_WANT_AUTO, 1, 0, "no NCCL", NULL};
    offer(0, &ready_offer, 0);
    offer(1, &cannot, 0);
    deliver(0, NULL);
    cr_assert_eq(nodes[0].settled, RD_DEVPLAN_TCP);
    cr_assert_not_null(refusal(0, 1, &joined));
}

Test(devplan, messages_while_idle_or_after_the_end_are_ignored)
{
    rd_schedmsg plan_m = {
        .kind = RD_SCHEDMSG_DEV_PLAN, .generation = 1, .dev = {.transport = RD_DEV_TCP, .why = ""}};
    setup_nodes(2);
    cr_assert_null(refusal(1, 0, &plan_m), "idle: no ring to refuse it for");
    cr_assert_eq(nodes[1].settled, 0);
    form(1);
    offer(1, &ready_offer, 0);
    rd_devplan_end(nodes[1].d);
    cr_assert_null(refusal(1, 0, &plan_m));
    cr_assert_eq(nodes[1].settled, 0);
    cr_assert_eq(rd_devplan_state_of(nodes[1].d), RD_DEVPLAN_IDLE);
    rd_devplan_formed(nodes[1].d, 1, ""); /* a late communicator of an ended ring */
    cr_assert_eq(nodes[1].settled, 0);
}

Test(devplan, the_decision_names_the_first_node_in_the_way)
{
    rd_devplan_offer o[3] = {{RD_DEV_WANT_AUTO, 1, 1, "", NULL},
                             {RD_DEV_WANT_AUTO, 1, 0, "no GPU", NULL},
                             {RD_DEV_WANT_TCP, 1, 1, "", NULL}};
    char why[128];
    cr_assert_eq(rd_devplan_decide(o, names, 3, why, sizeof(why)), RD_DEV_TCP);
    cr_assert_str_eq(why, "node b: no GPU");
    o[1].can = 1;
    o[2].want = RD_DEV_WANT_NCCL;
    cr_assert_eq(rd_devplan_decide(o, names, 3, why, sizeof(why)), RD_DEV_NCCL);
    cr_assert_str_eq(why, "");
}

/* Daemons of one machine (a test, a demo) share its GPUs: NCCL refuses two ranks on one GPU, so
 * the ring crosses on TCP, naming both nodes and the GPU, instead of failing to form. */
Test(devplan, nodes_sharing_a_gpu_cross_on_tcp)
{
    static const rd_devplan_offer gpu[3] = {
        {RD_DEV_WANT_AUTO, 1, 1, "", "GPU-0000aaaa"},
        {RD_DEV_WANT_AUTO, 1, 1, "", "GPU-0000bbbb"},
        {RD_DEV_WANT_AUTO, 1, 1, "", "GPU-0000aaaa"},
    };
    setup_nodes(3);
    form(1);
    for (int i = 2; i >= 0; i--)
        offer(i, &gpu[i], 0);
    deliver(0, NULL);
    deliver(0, NULL);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(nodes[i].settled, RD_DEVPLAN_TCP, "node %d", i);
        cr_assert_eq(nodes[i].joins, 0);
        cr_assert_str_eq(nodes[i].settled_why,
                         "nodes a and c share GPU GPU-0000aaaa (NCCL takes one rank per GPU)");
    }
    cr_assert_eq(ids_made, 0, "no NCCL id is made for a ring that cannot use it");
    /* each on a GPU of its own: NCCL */
    rd_devplan_offer own[3] = {gpu[0], gpu[1], gpu[2]};
    own[2].gpu = "GPU-0000cccc";
    char why[128];
    cr_assert_eq(rd_devplan_decide(own, names, 3, why, sizeof(why)), RD_DEV_NCCL, "%s", why);
    own[1].gpu = NULL; /* a node that names none (an older ringd) */
    cr_assert_eq(rd_devplan_decide(own, names, 3, why, sizeof(why)), RD_DEV_NCCL, "%s", why);
}
