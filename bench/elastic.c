/* Shared by ringd-train and ringd-soak: seeded hashing, integer options, agreeing on a step. */
#include "elastic.h"

#include <errno.h>
#include <time.h>

#include "common.h"
#include "units.h"

/* Ranks take the low bits of the value rb_agree_step reduces, the step the rest. */
#define RANK_BITS 20

static uint64_t splitmix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t rb_mix64(uint64_t a, uint64_t b, uint64_t c)
{
    return splitmix(splitmix(splitmix(a) ^ b) ^ c);
}

int rb_parse_u64(const char *arg, uint64_t lo, uint64_t hi, uint64_t *out)
{
    uint64_t v;
    if (rd_units_parse_size(arg, &v) != 0 || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int64_t rb_elastic_now_ms(void)
{
    return (int64_t)(rb_now_s() * 1000.0);
}

ringd_result_t rb_agree_step(ringd_t *r, const char *name, uint64_t step, uint64_t *max_step,
                             int *root)
{
    /* MAX of (step, complement of the rank) picks the largest step, then the lowest rank. */
    const int64_t rank_mask = (1 << RANK_BITS) - 1;
    int64_t v = (int64_t)(step << RANK_BITS) | (rank_mask - ringd_rank(r));
    ringd_result_t rc = ringd_allreduce(r, name, &v, &v, 1, RINGD_I64, RINGD_MAX);
    if (rc == RINGD_OK) {
        *max_step = (uint64_t)v >> RANK_BITS;
        *root = (int)(rank_mask - (v & rank_mask));
    }
    return rc;
}
