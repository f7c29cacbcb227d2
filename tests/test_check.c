/* The engine's checks of what a client sends (daemon/engine/check.c), on their own: a Hello, a
 * Submit, and a Submit against the first one of its op. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <string.h>

#include "check.h"
#include "frame.h"
#include "ctlq.h"

#define ARENA (1u << 20)
#define DATA RD_CTRL_BYTES /* the host arena's data area starts here */

static rd_arena host = {.size = ARENA};
static rd_arena device = {.size = ARENA};

static rd_check_session session(void)
{
    host.backend = rd_backend_cpu();
    return (rd_check_session){.node = "n0", .size = 4, .arena = &host, .device = -1};
}

/* An allreduce of 16 floats, input and output apart in the data area. */
static rd_submit allreduce(void)
{
    return (rd_submit){.request_id = 1,
                       .op = RD_COLL_ALLREDUCE,
                       .name = "grad",
                       .dtype = RD_DT_F32,
                       .count = 16,
                       .in_offset = DATA,
                       .out_offset = DATA + 4096,
                       .redop = RD_OP_SUM,
                       .prescale = 1.0,
                       .postscale = 1.0};
}

static rd_status check(const rd_submit *m, char *err, size_t len)
{
    rd_check_session s = session();
    err[0] = '\0';
    return rd_check_submit(&s, m, err, len);
}

Test(check, a_valid_allreduce_passes)
{
    char err[512];
    rd_submit m = allreduce();
    cr_assert_eq(check(&m, err, sizeof(err)), RINGD_OK, "%s", err);
    m.out_offset = m.in_offset; /* in place */
    cr_assert_eq(check(&m, err, sizeof(err)), RINGD_OK, "%s", err);
}

/* One bad field of a Submit, and a word the refusal must contain. */
/* (Strings inline: Criterion runs each parameter in a process of its own, where the pointers of
 * another would not hold.) */
typedef struct {
    char what[48];
    int field;
    int64_t value;
    char says[48];
} bad_submit;

enum { F_OP, F_DTYPE, F_REDOP, F_COUNT, F_IN, F_OUT, F_ROOT, F_BCAST_ROOT, F_KIND };

static bad_submit bad[] = {
    {"unknown op", F_OP, 99, "unknown op 99"},
    {"negative op", F_OP, -1, "unknown op -1"},
    {"unknown dtype", F_DTYPE, 77, "unknown dtype 77"},
    {"unknown reduce op", F_REDOP, 55, "unknown reduce op 55"},
    {"count past the arena", F_COUNT, ARENA, "does not fit"},
    {"input in the control area", F_IN, 0, "outside the arena's data area"},
    {"output past the end", F_OUT, ARENA - 8, "outside the arena's data area"},
    {"misaligned input", F_IN, DATA + 2, "not a multiple"},
    {"overlap", F_OUT, DATA + 4, "overlap without being in place"},
    {"broadcast root beyond the job", F_BCAST_ROOT, 4, "root 4 is not a rank"},
    {"unknown memory kind", F_KIND, 9, "unknown memory"},
};

ParameterizedTestParameters(check, a_bad_submit_is_refused_saying_why)
{
    return cr_make_param_array(bad_submit, bad, sizeof(bad) / sizeof(bad[0]));
}

ParameterizedTest(bad_submit *b, check, a_bad_submit_is_refused_saying_why)
{
    char err[512];
    rd_submit m = allreduce();
    switch (b->field) {
    case F_OP: m.op = (int)b->value; break;
    case F_DTYPE: m.dtype = (int)b->value; break;
    case F_REDOP: m.redop = (int)b->value; break;
    case F_COUNT: m.count = (uint64_t)b->value; break;
    case F_IN: m.in_offset = (uint64_t)b->value; break;
    case F_OUT: m.out_offset = (uint64_t)b->value; break;
    case F_BCAST_ROOT:
        m.op = RD_COLL_BROADCAST;
        m.root = (uint32_t)b->value;
        break;
    case F_KIND: m.input = m.output = (rd_tensor_ref){.present = 1, .kind = (int)b->value}; break;
    }
    cr_assert_eq(check(&m, err, sizeof(err)), RINGD_E_INVALID, "%s: accepted", b->what);
    cr_assert(strstr(err, b->says) != NULL, "%s: '%s' does not say '%s'", b->what, err, b->says);
    cr_assert(strstr(err, "grad") != NULL, "%s: '%s' does not name the tensor", b->what, err);
}

Test(check, a_count_of_0_passes_with_its_offsets_unchecked)
{
    char err[512];
    rd_submit m = allreduce();
    m.count = 0;
    m.in_offset = 0; /* the control area: no bytes lie there */
    m.out_offset = ARENA + 3;
    cr_assert_eq(check(&m, err, sizeof(err)), RINGD_OK, "%s", err);
}

/* Every rank's counts of a job of 4 ranks, as reducescatterv and allgatherv take them. */
static const uint64_t counts4[4] = {3, 0, 5, 2};

/* A reducescatter (counts: per rank; NULL: equal, 4 each) of rank `rank` of 4. */
static rd_submit reducescatter(const uint64_t *counts, uint32_t rank)
{
    rd_submit m = allreduce();
    m.op = RD_COLL_REDUCESCATTER;
    m.count = counts != NULL ? counts[rank] : 4;
    m.counts = counts;
    m.ncounts = counts != NULL ? 4 : 0;
    return m;
}

static rd_status check_as(const rd_submit *m, uint32_t rank, char *err, size_t len)
{
    rd_check_session s = session();
    s.rank = rank;
    err[0] = '\0';
    return rd_check_submit(&s, m, err, len);
}

Test(check, a_reducescatter_takes_equal_or_per_rank_counts_and_both_in_place_forms)
{
    char err[512];
    rd_submit m = reducescatter(NULL, 1);
    cr_assert_eq(check_as(&m, 1, err, sizeof(err)), RINGD_OK, "%s", err);
    m.out_offset = m.in_offset; /* MPI's in place: the block lands at the start */
    cr_assert_eq(check_as(&m, 1, err, sizeof(err)), RINGD_OK, "%s", err);
    m.out_offset = m.in_offset + 4 * 4; /* NCCL's: rank 1's block of 4 floats */
    cr_assert_eq(check_as(&m, 1, err, sizeof(err)), RINGD_OK, "%s", err);
    m.out_offset = m.in_offset + 4 * 4 + 4; /* inside the input, but not its block */
    cr_assert_eq(check_as(&m, 1, err, sizeof(err)), RINGD_E_INVALID);
    m = reducescatter(counts4, 2);
    cr_assert_eq(check_as(&m, 2, err, sizeof(err)), RINGD_OK, "%s", err);
    m.out_offset = m.in_offset + (3 + 0) * 4;
    cr_assert_eq(check_as(&m, 2, err, sizeof(err)), RINGD_OK, "%s", err);
    m = reducescatter(counts4, 1); /* a rank with nothing to receive */
    cr_assert_eq(check_as(&m, 1, err, sizeof(err)), RINGD_OK, "%s", err);
    rd_op_params p = rd_check_params(&m, 4);
    cr_assert_eq(p.count, 10, "the params count the whole input");
    cr_assert_neq(p.counts_digest, 0);
    rd_submit e = reducescatter(NULL, 0);
    cr_assert_eq(rd_check_params(&e, 4).count, 16);
    cr_assert_eq(rd_check_params(&e, 4).counts_digest, 0);
}

Test(check, an_allgatherv_takes_every_count_and_mpis_in_place_form)
{
    char err[512];
    rd_submit m = reducescatter(counts4, 3);
    m.op = RD_COLL_ALLGATHERV;
    cr_assert_eq(check_as(&m, 3, err, sizeof(err)), RINGD_OK, "%s", err);
    m.in_offset = m.out_offset + (3 + 0 + 5) * 4; /* its own block of the output */
    cr_assert_eq(check_as(&m, 3, err, sizeof(err)), RINGD_OK, "%s", err);
    m.in_offset = m.out_offset; /* the start: not its block */
    cr_assert_eq(check_as(&m, 3, err, sizeof(err)), RINGD_E_INVALID);
    cr_assert(strstr(err, "overlap") != NULL, "%s", err);
    m = reducescatter(NULL, 0);
    m.op = RD_COLL_ALLGATHERV; /* no counts: an allgatherv needs them */
    cr_assert_eq(check_as(&m, 0, err, sizeof(err)), RINGD_E_INVALID);
    cr_assert(strstr(err, "0 entries") != NULL, "%s", err);
}

/* A graceful change (a drain) renumbers the ranks without failing anything: an op whose counts
 * and blocks the client placed by the ranks of an older generation fails with
 * RINGD_E_MEMBERSHIP (submit it again), never as a bad call, whatever its layout now looks like. */
Test(check, counts_and_blocks_of_another_generation_are_a_membership_change_not_a_bad_call)
{
    char err[512];
    rd_check_session s = session();
    s.rank = 3;
    s.generation = 7;
    rd_submit m = reducescatter(counts4, 3);
    m.op = RD_COLL_ALLGATHERV;
    m.in_offset = m.out_offset + (3 + 0 + 5) * 4; /* rank 3's block, MPI's in place */
    m.generation = 7;
    cr_assert_eq(rd_check_submit(&s, &m, err, sizeof(err)), RINGD_OK, "%s", err);
    s.rank = 1; /* ranks renumbered at generation 8; the client has not heard */
    s.generation = 8;
    cr_assert_eq(rd_check_submit(&s, &m, err, sizeof(err)), RINGD_E_MEMBERSHIP, "%s", err);
    cr_assert(strstr(err, "generation 7") && strstr(err, "generation 8"), "%s", err);
    m.op = RD_COLL_REDUCESCATTER;
    m.out_offset = m.in_offset;
    cr_assert_eq(rd_check_submit(&s, &m, err, sizeof(err)), RINGD_E_MEMBERSHIP, "%s", err);
    m.generation = 0; /* "any": a client that does not say is checked as it is */
    cr_assert_eq(rd_check_submit(&s, &m, err, sizeof(err)), RINGD_E_INVALID, "%s", err);
    s.rank = 3;
    cr_assert_eq(rd_check_submit(&s, &m, err, sizeof(err)), RINGD_OK, "%s", err);
    rd_submit a = allreduce(); /* no per-rank layout: the generation is not this check's */
    a.generation = 7;
    cr_assert_eq(rd_check_submit(&s, &a, err, sizeof(err)), RINGD_OK, "%s", err);
}

Test(check, counts_that_do_not_describe_the_job_are_refused_saying_why)
{
    char err[512];
    uint64_t three[3] = {1, 2, 3}, huge[4] = {1, UINT64_MAX / 2, UINT64_MAX / 2, 4};
    rd_submit m = reducescatter(counts4, 0);
    m.count = 4; /* its entry says 3 */
    cr_assert_eq(check_as(&m, 0, err, sizeof(err)), RINGD_E_INVALID);
    cr_assert(strstr(err, "rank 0's entry of recvcounts is 3") != NULL, "%s", err);
    m = reducescatter(counts4, 0);
    m.counts = three;
    m.ncounts = 3;
    m.count = 1;
    cr_assert_eq(check_as(&m, 0, err, sizeof(err)), RINGD_E_INVALID);
    cr_assert(strstr(err, "3 entries; the job has 4 ranks") != NULL, "%s", err);
    m = reducescatter(huge, 0);
    cr_assert_eq(check_as(&m, 0, err, sizeof(err)), RINGD_E_INVALID);
    cr_assert(strstr(err, "add up to more") != NULL, "%s", err);
    m = allreduce();
    m.counts = counts4;
    m.ncounts = 4;
    cr_assert_eq(check_as(&m, 0, err, sizeof(err)), RINGD_E_INVALID);
    cr_assert(strstr(err, "takes no per-rank counts") != NULL, "%s", err);
}

Test(check, counts_all_alike_are_equal_counts_and_a_rank_beyond_the_job_is_refused)
{
    char err[512];
    uint64_t four[4] = {4, 4, 4, 4};
    rd_submit a = reducescatter(NULL, 2), b = reducescatter(four, 2);
    rd_op_params pa = rd_check_params(&a, 4), pb = rd_check_params(&b, 4);
    char fields[96];
    cr_assert(rd_op_params_compare(&pa, &pb, fields, sizeof(fields)), "differ in %s", fields);
    cr_assert_eq(pb.counts_digest, 0);
    /* the node renumbers its ranks: the counts cannot be placed until the next ring */
    cr_assert_eq(check_as(&b, 4, err, sizeof(err)), RINGD_E_MEMBERSHIP);
    cr_assert(strstr(err, "ranks are changing") != NULL, "%s", err);
}

Test(check, two_ranks_with_different_counts_do_not_match)
{
    char msg[512];
    uint64_t other[4] = {3, 1, 4, 2};
    rd_submit a = reducescatter(counts4, 0), b = reducescatter(other, 1);
    b.count = 1;
    rd_op_params p = rd_check_params(&a, 4);
    rd_check_first f = {"grad", &p, 0, 0, 0, "n0", 4};
    cr_assert_not(rd_check_match(&f, &b, 1, msg, sizeof(msg)));
    cr_assert(strstr(msg, "mismatch (counts)") != NULL, "%s", msg);
    b = reducescatter(counts4, 1);
    cr_assert(rd_check_match(&f, &b, 1, msg, sizeof(msg)), "%s", msg);
}

Test(check, scales_must_be_finite_and_need_a_floating_dtype)
{
    char err[512];
    rd_submit m = allreduce();
    m.prescale = NAN;
    cr_assert_eq(check(&m, err, sizeof(err)), RINGD_E_INVALID);
    cr_assert(strstr(err, "finite") != NULL, "%s", err);
    m = allreduce();
    m.dtype = RD_DT_I32;
    m.postscale = 0.5;
    cr_assert_eq(check(&m, err, sizeof(err)), RINGD_E_INVALID);
    cr_assert(strstr(err, "floating dtype") != NULL, "%s", err);
}

Test(check, an_allgather_output_holds_every_rank_and_its_input_may_be_a_slot_of_it)
{
    char err[512];
    rd_submit m = allreduce();
    m.op = RD_COLL_ALLGATHER;
    m.out_offset = DATA + 4096;
    m.in_offset = m.out_offset + 2 * 64; /* rank 2's slot of 4 x 16 floats */
    cr_assert_eq(check(&m, err, sizeof(err)), RINGD_OK, "%s", err);
    m.in_offset = m.out_offset + 32; /* inside a slot */
    cr_assert_eq(check(&m, err, sizeof(err)), RINGD_E_INVALID);
    m.in_offset = DATA;
    m.count = ARENA / 4 / 4 + 1; /* 4 of them do not fit the arena */
    cr_assert_eq(check(&m, err, sizeof(err)), RINGD_E_INVALID);
    cr_assert(strstr(err, "gathering 4 x") != NULL, "%s", err);
}

Test(check, a_join_is_an_allgather_of_one_int64_under_its_own_name_alone)
{
    char err[512];
    rd_submit m = allreduce();
    m.op = RD_COLL_ALLGATHER;
    m.name = RD_JOIN_NAME;
    m.dtype = RD_DT_I64;
    m.count = 1;
    m.join = 1;
    cr_assert_eq(check(&m, err, sizeof(err)), RINGD_OK, "%s", err);
    m.dtype = RD_DT_F32; /* not the join's shape */
    cr_assert_eq(check(&m, err, sizeof(err)), RINGD_E_INVALID);
    cr_assert(strstr(err, "a join is an allgather") != NULL, "%s", err);
    m.dtype = RD_DT_I64;
    m.name = "grad"; /* a join under another name */
    cr_assert_eq(check(&m, err, sizeof(err)), RINGD_E_INVALID);
    m.group = "g"; /* in a group */
    m.group_size = 2;
    m.name = RD_JOIN_NAME;
    cr_assert_eq(check(&m, err, sizeof(err)), RINGD_E_INVALID);
    rd_submit other = allreduce(); /* another op may not take the join's name */
    other.name = RD_JOIN_NAME;
    cr_assert_eq(check(&other, err, sizeof(err)), RINGD_E_INVALID);
    cr_assert(strstr(err, "ringd_join's") != NULL, "%s", err);
}

Test(check, device_memory_needs_a_device_arena_described_exactly)
{
    char err[512];
    rd_submit m = allreduce();
    m.in_offset = 0;
    m.out_offset = 4096;
    m.input = (rd_tensor_ref){.present = 1, .kind = RD_MEM_DEVICE, .device = 0, .handle = 1};
    m.output = m.input;
    m.output.offset = 4096;
    cr_assert_eq(check(&m, err, sizeof(err)), RINGD_E_INVALID);
    cr_assert(strstr(err, "no device arena on node n0") != NULL, "%s", err);
    rd_check_session s = session();
    s.device_arena = &device;
    s.device = 0;
    cr_assert_eq(rd_check_submit(&s, &m, err, sizeof(err)), RINGD_OK, "%s", err);
    cr_assert(rd_check_on_device(&m));
    m.output.handle = 2;
    cr_assert_eq(rd_check_submit(&s, &m, err, sizeof(err)), RINGD_E_INVALID);
    cr_assert(strstr(err, "does not describe offset") != NULL, "%s", err);
    m.output = (rd_tensor_ref){.present = 1, .kind = RD_MEM_ARENA, .offset = 4096};
    cr_assert_eq(rd_check_submit(&s, &m, err, sizeof(err)), RINGD_E_INVALID);
    cr_assert(strstr(err, "different kinds of memory") != NULL, "%s", err);
}

/* A reducescatter in the device arena of a session of rank 1 of 4 with counts (of elements):
 * input at 0, output at out. */
static rd_submit device_reducescatter(const uint64_t *counts, uint64_t out)
{
    rd_submit m = allreduce();
    m.op = RD_COLL_REDUCESCATTER;
    m.count = counts[1];
    m.counts = counts;
    m.ncounts = 4;
    m.in_offset = 0;
    m.out_offset = out;
    m.input = (rd_tensor_ref){.present = 1, .kind = RD_MEM_DEVICE, .device = 0, .handle = 1};
    m.output = m.input;
    m.output.offset = out;
    return m;
}

Test(check, counted_ops_run_in_a_device_arena_of_its_size_but_never_over_themselves)
{
    char err[512];
    rd_check_session s = session();
    s.device_arena = &device;
    s.device = 0;
    s.rank = 1;
    /* rank 1's block starts at element 16: 16 elements in MPI's place (the start) are apart
     * from it, 17 would be written over themselves by a kernel */
    uint64_t fits[4] = {16, 16, 0, 8}, over[4] = {16, 17, 0, 8};
    rd_submit m = device_reducescatter(fits, 0);
    cr_assert_eq(rd_check_submit(&s, &m, err, sizeof(err)), RINGD_OK, "%s", err);
    m = device_reducescatter(over, 16 * 4); /* where its block lies (NCCL's place) */
    cr_assert_eq(rd_check_submit(&s, &m, err, sizeof(err)), RINGD_OK, "%s", err);
    m = device_reducescatter(over, 4096); /* apart */
    cr_assert_eq(rd_check_submit(&s, &m, err, sizeof(err)), RINGD_OK, "%s", err);
    m = device_reducescatter(over, 0);
    cr_assert_eq(rd_check_submit(&s, &m, err, sizeof(err)), RINGD_E_INVALID);
    cr_assert(strstr(err, "rank 1's block of 17 elements would be written over itself") != NULL,
              "%s", err);
    m.input.kind = m.output.kind = RD_MEM_ARENA; /* host memory: one pass in order takes it */
    m.input.handle = m.output.handle = 0;
    m.in_offset = m.out_offset = m.input.offset = m.output.offset = DATA;
    cr_assert_eq(rd_check_submit(&s, &m, err, sizeof(err)), RINGD_OK, "%s", err);
    /* counts are checked against the arena the op is in: here a device arena larger than the
     * host's */
    rd_arena big = {.size = 4 * ARENA};
    s.device_arena = &big;
    uint64_t large[4] = {ARENA / 4, ARENA / 4, ARENA / 4, 0};
    m = device_reducescatter(large, 3 * ARENA);
    cr_assert_eq(rd_check_submit(&s, &m, err, sizeof(err)), RINGD_OK, "%s", err);
}

Test(check, params_keep_only_what_the_op_uses)
{
    rd_submit m = allreduce();
    m.op = RD_COLL_BARRIER;
    rd_op_params p = rd_check_params(&m, 4);
    cr_assert_eq(p.count, 0);
    cr_assert_eq(p.dtype, RD_DT_U8);
    m = allreduce();
    m.op = RD_COLL_BROADCAST;
    m.root = 3;
    m.redop = RD_OP_MAX;
    m.prescale = 2.0;
    p = rd_check_params(&m, 4);
    cr_assert_eq(p.root, 3);
    cr_assert_eq(p.redop, RD_OP_SUM);
    cr_assert_eq(p.prescale, 1.0);
}

Test(check, a_mismatch_names_both_ranks_and_the_fields)
{
    char msg[512];
    rd_submit first = allreduce(), m = allreduce();
    rd_op_params p = rd_check_params(&first, 4);
    rd_check_first f = {"grad", &p, 0, 0, 0, "n0", 4};
    cr_assert(rd_check_match(&f, &m, 1, msg, sizeof(msg)));
    m.count = 17;
    m.redop = RD_OP_MAX;
    cr_assert_not(rd_check_match(&f, &m, 1, msg, sizeof(msg)));
    cr_assert(strstr(msg, "tensor 'grad' mismatch") != NULL, "%s", msg);
    cr_assert(strstr(msg, "local rank 0") != NULL && strstr(msg, "local rank 1") != NULL, "%s",
              msg);
    f.multinode = 1;
    f.base_rank = 8;
    cr_assert_not(rd_check_match(&f, &m, 3, msg, sizeof(msg)));
    cr_assert(strstr(msg, "rank 8 (node n0)") != NULL && strstr(msg, "rank 11 (node n0)") != NULL,
              "%s", msg);
}

Test(check, tensors_of_one_count_but_other_shapes_are_a_mismatch_naming_both_shapes)
{
    char msg[512];
    rd_submit first = allreduce(), m = allreduce();
    first.shape = (2ull << 60) | (17ull << 20) | 1311;           /* (17, 1311) */
    m.shape = (3ull << 60) | (17ull << 40) | (23ull << 20) | 57; /* (17, 23, 57) */
    rd_op_params p = rd_check_params(&first, 4);
    rd_check_first f = {"grad", &p, 0, 0, 0, "n0", 4};
    cr_assert_not(rd_check_match(&f, &m, 1, msg, sizeof(msg)));
    cr_assert(strstr(msg, "mismatch (shape)") != NULL, "%s", msg);
    cr_assert(strstr(msg, "shape (17, 1311)") != NULL && strstr(msg, "shape (17, 23, 57)") != NULL,
              "%s", msg);
    m.shape = first.shape;
    cr_assert(rd_check_match(&f, &m, 1, msg, sizeof(msg)), "%s", msg);
    m.shape = 0; /* none against one: every rank gives one, or none does */
    cr_assert_not(rd_check_match(&f, &m, 1, msg, sizeof(msg)));
    cr_assert(strstr(msg, "mismatch (shape)") != NULL, "%s", msg);
    m.shape = (5ull << 60) | 1; /* not a packing: named by its value */
    cr_assert_not(rd_check_match(&f, &m, 1, msg, sizeof(msg)));
    cr_assert(strstr(msg, "shape #5000000000000001") != NULL, "%s", msg);
    m.shape = (1ull << 63) | 12345; /* hashed: named by its hash */
    cr_assert_not(rd_check_match(&f, &m, 1, msg, sizeof(msg)));
    cr_assert(strstr(msg, "shape #8000000000003039") != NULL, "%s", msg);
}

/* A backend standing for a GPU's: device memory, at most 2 sources per reduce. */
static rd_backend gpu_like(void)
{
    rd_backend b = *rd_backend_cpu();
    b.device_memory = 1;
    b.max_sources = 2;
    return b;
}

Test(check, every_local_rank_passes_the_same_kind_of_memory)
{
    char msg[512];
    rd_backend gpu = gpu_like();
    const rd_backend *backends[3] = {rd_backend_cpu(), NULL, rd_backend_cpu()};
    cr_assert(rd_check_memory("grad", "n0", backends, 3, 2, msg, sizeof(msg)));
    backends[2] = &gpu;
    gpu.max_sources = 0;
    cr_assert_not(rd_check_memory("grad", "n0", backends, 3, 2, msg, sizeof(msg)));
    cr_assert(strstr(msg, "mismatch (memory): local rank 0 on node n0 passed it in host memory") !=
                  NULL,
              "%s", msg);
}

Test(check, no_more_ranks_than_a_device_reduces_at_once)
{
    char msg[512];
    rd_backend gpu = gpu_like();
    const rd_backend *backends[3] = {&gpu, &gpu, &gpu};
    cr_assert_not(rd_check_memory("grad", "n0", backends, 3, 0, msg, sizeof(msg)));
    cr_assert(strstr(msg, "at most 2 on one device") != NULL, "%s", msg);
    cr_assert(rd_check_memory("grad", "n0", backends, 2, 0, msg, sizeof(msg)), "%s", msg);
}

static rd_hello hello(void)
{
    return (rd_hello){.protocol = RD_PROTOCOL_VERSION,
                      .job = "train",
                      .world_size = 4,
                      .local_size = 2,
                      .local_rank = -1,
                      .device = -1};
}

static const rd_check_daemon daemon_here = {"n0", 0, 1, 1u << 20, 1u << 30};

Test(check, a_hello_gets_the_defaults)
{
    char err[512];
    uint32_t min_size;
    uint64_t arena;
    rd_hello h = hello();
    cr_assert_eq(rd_check_hello(&h, &daemon_here, &min_size, &arena, err, sizeof(err)), RINGD_OK,
                 "%s", err);
    cr_assert_eq(min_size, 1);
    cr_assert_eq(arena, 1u << 20);
}

/* One bad Hello, what it is refused with, and a word of the refusal. */
typedef struct {
    char what[48];
    int field;
    int64_t value;
    rd_status rc;
    char says[48];
} bad_hello;

enum {
    H_PROTOCOL,
    H_JOB,
    H_RESERVED,
    H_LOCAL,
    H_WORLD,
    H_MIN,
    H_ARENA,
    H_RANK,
    H_ONE_NODE,
    H_DRAINING
};

static bad_hello bad_hellos[] = {
    {"old protocol", H_PROTOCOL, 0, RINGD_E_PROTOCOL, "protocol 0 is not supported"},
    {"empty job name", H_JOB, 0, RINGD_E_INVALID, "job names"},
    {"a job name of ringd's own", H_RESERVED, 0, RINGD_E_INVALID, "job '~self-probe': names that"},
    {"local_size 0", H_LOCAL, 0, RINGD_E_INVALID, "outside 1..1024"},
    {"local_size past the cap", H_LOCAL, 1025, RINGD_E_INVALID, "outside 1..1024"},
    {"world below local", H_WORLD, 1, RINGD_E_REFUSED, "differs from local_size"},
    {"min above world", H_MIN, 5, RINGD_E_INVALID, "min_size 5 is larger"},
    {"tiny arena", H_ARENA, 4096, RINGD_E_INVALID, "(--arena-max)"},
    {"huge arena", H_ARENA, (int64_t)1 << 31, RINGD_E_INVALID, "(--arena-max)"},
    {"local rank past local_size", H_RANK, 2, RINGD_E_INVALID, "not below local_size 2"},
    {"many nodes without redis", H_ONE_NODE, 0, RINGD_E_REFUSED, "without --redis"},
    {"draining", H_DRAINING, 0, RINGD_E_REFUSED, "node n0 is draining"},
};

ParameterizedTestParameters(check, a_bad_hello_is_refused_saying_why)
{
    return cr_make_param_array(bad_hello, bad_hellos, sizeof(bad_hellos) / sizeof(bad_hellos[0]));
}

ParameterizedTest(bad_hello *b, check, a_bad_hello_is_refused_saying_why)
{
    char err[512] = "";
    uint32_t min_size;
    uint64_t arena;
    rd_hello h = hello();
    rd_check_daemon d = daemon_here;
    switch (b->field) {
    case H_PROTOCOL: h.protocol = (uint32_t)b->value; break;
    case H_JOB: h.job = ""; break;
    case H_RESERVED: h.job = "~self-probe"; break;
    case H_LOCAL: h.local_size = (uint32_t)b->value; break;
    case H_WORLD: h.world_size = (uint32_t)b->value; break;
    case H_MIN: h.min_size = (uint32_t)b->value; break;
    case H_ARENA: h.arena_size = (uint64_t)b->value; break;
    case H_RANK: h.local_rank = b->value; break;
    case H_ONE_NODE: d.multinode = 0; break;
    case H_DRAINING: d.draining = 1; break;
    }
    cr_assert_eq(rd_check_hello(&h, &d, &min_size, &arena, err, sizeof(err)), b->rc, "%s: '%s'",
                 b->what, err);
    cr_assert(strstr(err, b->says) != NULL, "%s: '%s' does not say '%s'", b->what, err, b->says);
}
