/* Unit tests for daemon/core/units.c: byte counts with binary suffixes, and what is refused. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <inttypes.h>
#include <stdint.h>

#include "units.h"

struct size_case {
    char text[32];
    uint64_t value;
};

ParameterizedTestParameters(units, parses_sizes_with_binary_suffixes)
{
    static struct size_case cases[] = {
        {"0", 0},
        {"4096", 4096},
        {"007", 7},
        {"64K", UINT64_C(64) << 10},
        {"64k", UINT64_C(64) << 10},
        {"1M", UINT64_C(1) << 20},
        {"1m", UINT64_C(1) << 20},
        {"2G", UINT64_C(2) << 30},
        {"2g", UINT64_C(2) << 30},
        {"0K", 0},
        {"1KB", 1024},
        {"1KiB", 1024},
        {"3MiB", UINT64_C(3) << 20},
        {"3MB", UINT64_C(3) << 20},
        {"5GiB", UINT64_C(5) << 30},
        {"5GB", UINT64_C(5) << 30},
        {"18446744073709551615", UINT64_MAX},
        {"18014398509481983K", UINT64_MAX >> 10 << 10},
        {"17592186044415M", UINT64_MAX >> 20 << 20},
        {"17179869183G", UINT64_MAX >> 30 << 30},
    };
    return cr_make_param_array(struct size_case, cases, sizeof(cases) / sizeof(cases[0]));
}

ParameterizedTest(struct size_case *c, units, parses_sizes_with_binary_suffixes)
{
    uint64_t v = 12345;
    cr_assert_eq(rd_units_parse_size(c->text, &v), 0, "'%s' refused", c->text);
    cr_assert_eq(v, c->value, "'%s' gave %" PRIu64 ", want %" PRIu64, c->text, v, c->value);
}

struct bad_size_case {
    char text[32];
};

ParameterizedTestParameters(units, refuses_malformed_or_overflowing_sizes)
{
    static struct bad_size_case cases[] = {
        {""},
        {"-1"},
        {"-0"},
        {" -1"}, /* strtoull negates after skipping blanks */
        {" 1"},
        {"+1"},
        {"K"},
        {"KiB"},
        {"1T"},
        {"1P"},
        {"1B"},
        {"1iB"},
        {"1KIB"},
        {"1Kb"},
        {"1KBB"},
        {"1KiBB"},
        {"1K "},
        {"1 K"},
        {"1.5K"},
        {"0x10"},
        {"12Q"},
        {"18446744073709551616"},
        {"99999999999999999999999"},
        {"18446744073709551615K"},
        {"18014398509481984K"},
        {"17592186044416M"},
        {"17179869184G"},
    };
    return cr_make_param_array(struct bad_size_case, cases, sizeof(cases) / sizeof(cases[0]));
}

ParameterizedTest(struct bad_size_case *c, units, refuses_malformed_or_overflowing_sizes)
{
    uint64_t v = 12345;
    cr_assert_neq(rd_units_parse_size(c->text, &v), 0, "'%s' accepted as %" PRIu64, c->text, v);
}

Test(units, refuses_a_null_size)
{
    uint64_t v;
    cr_assert_neq(rd_units_parse_size(NULL, &v), 0);
}
