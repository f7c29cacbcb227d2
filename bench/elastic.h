/* Shared by ringd-train and ringd-soak: seeded hashing, integer options, and agreeing on where
 * to go on after a membership change. */
#ifndef RB_ELASTIC_H
#define RB_ELASTIC_H

#include <stdint.h>

#include "ringd.h"

/* A well-mixed 64-bit hash of (a, b, c) (splitmix64 finalizer over the three): the same inputs
 * give the same bits in every process, which is what lets ranks generate data independently. */
uint64_t rb_mix64(uint64_t a, uint64_t b, uint64_t c);

/* Parses an integer option ("123", "64K", "2M": powers of 1024) into *out when it lies in
 * [lo, hi]. Returns 0, or -1 for anything else. */
int rb_parse_u64(const char *arg, uint64_t lo, uint64_t hi, uint64_t *out);

/* Monotonic milliseconds (comparable between processes of this machine). */
int64_t rb_elastic_now_ms(void);

/* One collective of the re-synchronisation after a membership change: an allreduce (i64 MAX)
 * named name that gives every rank the largest step any rank holds in *max_step and the lowest
 * rank holding it in *root. Step must be below 2^43. Returns the allreduce's result. */
ringd_result_t rb_agree_step(ringd_t *r, const char *name, uint64_t step, uint64_t *max_step,
                             int *root);

#endif
