/* Unit tests for the first-fit arena allocator in client/alloc.c. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"

/* Deterministic 64-bit generator (splitmix64). */
static uint64_t next_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* What a request of bytes reserves, computed independently of the allocator. */
static uint64_t reserved(uint64_t bytes)
{
    if (bytes == 0)
        return RD_ALLOC_ALIGN;
    return (bytes / RD_ALLOC_ALIGN + (bytes % RD_ALLOC_ALIGN != 0)) * RD_ALLOC_ALIGN;
}

/* ------------------------------------------------------------------------------------------ */
/* Alignment, sizes, documented edge cases                                                    */
/* ------------------------------------------------------------------------------------------ */

ParameterizedTestParameters(alloc, aligns_every_offset_to_64_bytes)
{
    static uint64_t sizes[] = {0, 1, 7, 63, 64, 65, 100, 127, 128, 129, 1000, 4095, 4096, 4097};
    return cr_make_param_array(uint64_t, sizes, sizeof(sizes) / sizeof(sizes[0]));
}

ParameterizedTest(uint64_t *bytes, alloc, aligns_every_offset_to_64_bytes)
{
    rd_alloc a;
    uint64_t off, expect_used = 0, prev_end = 0;
    int n = 0;

    cr_assert_eq(rd_alloc_init(&a, 1 << 20), 0);
    /* Mix the size under test with an odd one, so offsets after it are not trivially aligned. */
    for (int i = 0; i < 64; i++) {
        uint64_t req = (i & 1) ? 3 : *bytes;
        if (rd_alloc_get(&a, req, &off) != 0)
            break;
        cr_assert_eq(off % RD_ALLOC_ALIGN, 0, "offset %llu of a %llu-byte request",
                     (unsigned long long)off, (unsigned long long)req);
        cr_assert_eq(off, prev_end, "first fit in an empty arena packs blocks");
        prev_end = off + reserved(req);
        cr_assert_leq(prev_end, a.size);
        expect_used += reserved(req);
        cr_assert_eq(rd_alloc_used(&a), expect_used);
        n++;
    }
    cr_assert_eq(n, 64);
    rd_alloc_destroy(&a);
}

Test(alloc, reserves_one_alignment_unit_for_zero_bytes)
{
    rd_alloc a;
    uint64_t o1, o2;

    cr_assert_eq(rd_alloc_init(&a, 4096), 0);
    cr_assert_eq(rd_alloc_get(&a, 0, &o1), 0);
    cr_assert_eq(rd_alloc_get(&a, 0, &o2), 0);
    cr_assert_neq(o1, o2, "two zero-byte reservations share an offset");
    cr_assert_eq(rd_alloc_used(&a), 2 * RD_ALLOC_ALIGN);
    cr_assert_eq(rd_alloc_put(&a, o1), 0);
    cr_assert_eq(rd_alloc_put(&a, o2), 0);
    cr_assert_eq(rd_alloc_used(&a), 0);
    rd_alloc_destroy(&a);
}

Test(alloc, refuses_sizes_that_cannot_be_rounded_up)
{
    rd_alloc a;
    uint64_t off = 777;

    cr_assert_eq(rd_alloc_init(&a, UINT64_MAX), 0);
    cr_assert_eq(rd_alloc_get(&a, UINT64_MAX, &off), -1);
    cr_assert_eq(rd_alloc_get(&a, UINT64_MAX - RD_ALLOC_ALIGN + 2, &off), -1);
    cr_assert_eq(off, 777, "off written on failure");
    cr_assert_eq(rd_alloc_used(&a), 0);

    /* The largest request that rounds without overflow fits an arena of UINT64_MAX bytes. */
    cr_assert_eq(rd_alloc_get(&a, UINT64_MAX - RD_ALLOC_ALIGN, &off), 0);
    cr_assert_eq(off, 0);
    cr_assert_eq(rd_alloc_used(&a), UINT64_MAX - RD_ALLOC_ALIGN + 1);
    /* The 63 bytes left cannot hold even a zero-byte reservation. */
    cr_assert_eq(rd_alloc_get(&a, 0, &off), -1);
    cr_assert_eq(rd_alloc_put(&a, 0), 0);
    cr_assert_eq(rd_alloc_used(&a), 0);
    rd_alloc_destroy(&a);
}

Test(alloc, refuses_a_request_larger_than_the_arena)
{
    rd_alloc a;
    uint64_t off;

    cr_assert_eq(rd_alloc_init(&a, 4096), 0);
    cr_assert_eq(rd_alloc_get(&a, 4097, &off), -1);
    cr_assert_eq(rd_alloc_get(&a, UINT64_MAX, &off), -1);
    cr_assert_eq(rd_alloc_get(&a, 4096, &off), 0);
    cr_assert_eq(off, 0);
    rd_alloc_destroy(&a);
}

Test(alloc, never_hands_out_the_unaligned_tail_of_an_odd_sized_arena)
{
    rd_alloc a;
    uint64_t off;

    cr_assert_eq(rd_alloc_init(&a, 100), 0);
    cr_assert_eq(rd_alloc_get(&a, 65, &off), -1, "128 bytes reserved in a 100-byte arena");
    cr_assert_eq(rd_alloc_get(&a, 1, &off), 0);
    cr_assert_eq(off, 0);
    cr_assert_eq(rd_alloc_get(&a, 1, &off), -1, "block at 64 would end past 100");
    rd_alloc_destroy(&a);
}

/* ------------------------------------------------------------------------------------------ */
/* Exhaustion, first fit, merging, bad frees                                                  */
/* ------------------------------------------------------------------------------------------ */

Test(alloc, fails_when_full_and_reuses_freed_space)
{
    rd_alloc a;
    uint64_t off[16], o;

    cr_assert_eq(rd_alloc_init(&a, 16 * 64), 0);
    for (int i = 0; i < 16; i++) {
        cr_assert_eq(rd_alloc_get(&a, 64, &off[i]), 0);
        cr_assert_eq(off[i], (uint64_t)i * 64);
    }
    cr_assert_eq(rd_alloc_used(&a), 16 * 64);
    cr_assert_eq(rd_alloc_get(&a, 1, &o), -1);
    cr_assert_eq(rd_alloc_get(&a, 0, &o), -1);

    /* Two non-adjacent holes of 64 bytes do not make room for 128. */
    cr_assert_eq(rd_alloc_put(&a, off[5]), 0);
    cr_assert_eq(rd_alloc_put(&a, off[9]), 0);
    cr_assert_eq(rd_alloc_get(&a, 128, &o), -1);
    /* First fit takes the lower hole, then the other. */
    cr_assert_eq(rd_alloc_get(&a, 64, &o), 0);
    cr_assert_eq(o, off[5]);
    cr_assert_eq(rd_alloc_get(&a, 64, &o), 0);
    cr_assert_eq(o, off[9]);
    cr_assert_eq(rd_alloc_get(&a, 64, &o), -1);
    rd_alloc_destroy(&a);
}

Test(alloc, merges_a_freed_block_with_both_free_neighbours)
{
    rd_alloc a;
    uint64_t off[5], o;

    cr_assert_eq(rd_alloc_init(&a, 5 * 64), 0);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(rd_alloc_get(&a, 64, &off[i]), 0);
    cr_assert_eq(rd_alloc_put(&a, off[1]), 0);
    cr_assert_eq(rd_alloc_put(&a, off[3]), 0);
    cr_assert_eq(rd_alloc_get(&a, 128, &o), -1);
    cr_assert_eq(rd_alloc_put(&a, off[2]), 0);
    cr_assert_eq(rd_alloc_get(&a, 192, &o), 0, "blocks 1..3 were not merged");
    cr_assert_eq(o, off[1]);
    rd_alloc_destroy(&a);
}

Test(alloc, refuses_to_free_an_unknown_offset_or_twice)
{
    rd_alloc a;
    uint64_t o1, o2;

    cr_assert_eq(rd_alloc_init(&a, 4096), 0);
    cr_assert_eq(rd_alloc_get(&a, 128, &o1), 0);
    cr_assert_eq(rd_alloc_get(&a, 64, &o2), 0);
    uint64_t used = rd_alloc_used(&a);

    cr_assert_eq(rd_alloc_put(&a, o1 + 1), -1, "middle of a reservation");
    cr_assert_eq(rd_alloc_put(&a, o1 + 64), -1, "aligned, but inside a reservation");
    cr_assert_eq(rd_alloc_put(&a, 1024), -1, "start of nothing, in the free tail");
    cr_assert_eq(rd_alloc_put(&a, 192), -1, "start of the free tail block");
    cr_assert_eq(rd_alloc_put(&a, 4096), -1, "one past the end");
    cr_assert_eq(rd_alloc_put(&a, UINT64_MAX), -1);
    cr_assert_eq(rd_alloc_used(&a), used);

    cr_assert_eq(rd_alloc_put(&a, o1), 0);
    cr_assert_eq(rd_alloc_put(&a, o1), -1, "double free");
    cr_assert_eq(rd_alloc_put(&a, o2), 0);
    cr_assert_eq(rd_alloc_put(&a, o2), -1, "double free after merging");
    cr_assert_eq(rd_alloc_put(&a, o1), -1);
    cr_assert_eq(rd_alloc_used(&a), 0);
    rd_alloc_destroy(&a);
}

Test(alloc, destroys_an_arena_with_live_reservations)
{
    rd_alloc a;
    uint64_t o;

    cr_assert_eq(rd_alloc_init(&a, 4096), 0);
    for (int i = 0; i < 10; i++)
        cr_assert_eq(rd_alloc_get(&a, 100, &o), 0);
    rd_alloc_destroy(&a); /* LeakSanitizer checks the blocks are freed */
}

/* ------------------------------------------------------------------------------------------ */
/* Random sequences against a model                                                           */
/* ------------------------------------------------------------------------------------------ */

struct live {
    uint64_t off, len;
};

static int by_offset(const void *x, const void *y)
{
    const struct live *a = x, *b = y;
    return a->off < b->off ? -1 : a->off > b->off;
}

/* Sorts the live blocks, checks they are disjoint and inside [0, size), and returns the offset
 * first fit must choose for need bytes, or UINT64_MAX when no gap is large enough. */
static uint64_t check_and_first_fit(struct live *l, size_t n, uint64_t size, uint64_t need)
{
    uint64_t end = 0, fit = UINT64_MAX;

    qsort(l, n, sizeof(*l), by_offset);
    for (size_t i = 0; i < n; i++) {
        cr_assert_geq(l[i].off, end, "block at %llu overlaps the one before (ends %llu)",
                      (unsigned long long)l[i].off, (unsigned long long)end);
        if (fit == UINT64_MAX && l[i].off - end >= need)
            fit = end;
        end = l[i].off + l[i].len;
        cr_assert_leq(end, size);
    }
    if (fit == UINT64_MAX && size - end >= need)
        fit = end;
    return fit;
}

struct random_case {
    uint64_t size;
    uint64_t seed;
    uint64_t max_request;
    int steps;
};

ParameterizedTestParameters(alloc, matches_a_first_fit_model_over_random_sequences)
{
    static struct random_case cases[] = {
        {64 * 1024, 1, 3000, 20000},
        {100003, 2, 9000, 20000}, /* size not a multiple of the alignment */
        {4096, 3, 300, 20000},    /* nearly always full */
        {1 << 20, 4, 1 << 16, 5000},
    };
    return cr_make_param_array(struct random_case, cases, sizeof(cases) / sizeof(cases[0]));
}

ParameterizedTest(struct random_case *c, alloc, matches_a_first_fit_model_over_random_sequences)
{
    size_t cap = (size_t)(c->size / RD_ALLOC_ALIGN) + 1, n = 0;
    struct live *l = calloc(cap, sizeof(*l));
    uint64_t s = c->seed, used = 0;
    int gets = 0, fails = 0;
    rd_alloc a;

    cr_assert_not_null(l);
    cr_assert_eq(rd_alloc_init(&a, c->size), 0);
    for (int step = 0; step < c->steps; step++) {
        if (n > 0 && next_rand(&s) % 100 < 45) {
            size_t k = (size_t)(next_rand(&s) % n);
            cr_assert_eq(rd_alloc_put(&a, l[k].off), 0, "step %d: put %llu", step,
                         (unsigned long long)l[k].off);
            used -= l[k].len;
            l[k] = l[--n];
        } else {
            uint64_t bytes = next_rand(&s) % (c->max_request + 1), off = 0;
            uint64_t need = reserved(bytes);
            uint64_t fit = check_and_first_fit(l, n, c->size, need);
            int rc = rd_alloc_get(&a, bytes, &off);
            gets++;
            if (fit == UINT64_MAX) {
                cr_assert_eq(rc, -1, "step %d: %llu bytes granted at %llu with no gap for them",
                             step, (unsigned long long)bytes, (unsigned long long)off);
                fails++;
            } else {
                cr_assert_eq(rc, 0, "step %d: %llu bytes refused, gap at %llu", step,
                             (unsigned long long)bytes, (unsigned long long)fit);
                cr_assert_eq(off, fit, "step %d: not first fit", step);
                cr_assert_eq(off % RD_ALLOC_ALIGN, 0);
                l[n++] = (struct live){off, need};
                used += need;
            }
        }
        cr_assert_eq(rd_alloc_used(&a), used, "step %d", step);
    }
    check_and_first_fit(l, n, c->size, 1);
    cr_assert_gt(fails, 0, "sequence never filled the arena");
    cr_assert_gt(gets - fails, 0);

    /* Free what is left in random order: everything must merge back into one block. */
    while (n > 0) {
        size_t k = (size_t)(next_rand(&s) % n);
        cr_assert_eq(rd_alloc_put(&a, l[k].off), 0);
        l[k] = l[--n];
    }
    cr_assert_eq(rd_alloc_used(&a), 0);
    uint64_t whole = c->size & ~(uint64_t)(RD_ALLOC_ALIGN - 1), off = 1;
    cr_assert_eq(rd_alloc_get(&a, whole, &off), 0, "free space did not coalesce");
    cr_assert_eq(off, 0);
    cr_assert_eq(rd_alloc_get(&a, 0, &off), -1);
    cr_assert_eq(rd_alloc_put(&a, 0), 0);
    rd_alloc_destroy(&a);
    free(l);
}
