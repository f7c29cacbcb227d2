/* Unit tests for proto/dtype.c: every element type, reduce op and collective has one name and
 * size, names parse back, and the wire's enums have no member the internal ones lack (the values
 * themselves are checked at compile time). */
#include <criterion/criterion.h>

#include <stdint.h>
#include <string.h>

#include "backend.h"
#include "dtype.h"
#include "ringd.pb-c.h"

Test(dtype, names_and_sizes_every_dtype)
{
    static const struct {
        rd_dtype dt;
        const char *name;
        size_t size;
        int is_float;
    } t[] = {
        {RD_DT_F32, "f32", 4, 1},   {RD_DT_F64, "f64", 8, 1}, {RD_DT_F16, "f16", 2, 1},
        {RD_DT_BF16, "bf16", 2, 1}, {RD_DT_I32, "i32", 4, 0}, {RD_DT_I64, "i64", 8, 0},
        {RD_DT_U8, "u8", 1, 0},
    };
    cr_assert_eq(sizeof(t) / sizeof(t[0]), RD_DT_COUNT);
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        cr_assert_str_eq(rd_dtype_name(t[i].dt), t[i].name);
        cr_assert_eq(rd_dtype_size(t[i].dt), t[i].size);
        cr_assert_eq(rd_dtype_is_float(t[i].dt), t[i].is_float);
        cr_assert(rd_dtype_valid((int)t[i].dt));
        cr_assert_eq(rd_dtype_parse(t[i].name), (int)t[i].dt);
    }
    cr_assert_str_eq(rd_dtype_name(RD_DT_COUNT), "invalid");
    cr_assert_str_eq(rd_dtype_name((rd_dtype)-1), "invalid");
    cr_assert_eq(rd_dtype_size(RD_DT_COUNT), 0);
    cr_assert_eq(rd_dtype_is_float(RD_DT_COUNT), 0);
}

Test(dtype, names_every_op)
{
    static const char *const names[RD_OP_COUNT] = {"sum", "avg", "min", "max", "prod"};
    for (int op = 0; op < RD_OP_COUNT; op++) {
        cr_assert_str_eq(rd_redop_name((rd_redop)op), names[op]);
        cr_assert_eq(rd_redop_parse(names[op]), op);
        cr_assert(rd_redop_valid(op));
    }
    cr_assert_str_eq(rd_redop_name(RD_OP_COUNT), "invalid");
}

Test(dtype, names_every_collective)
{
    static const char *const names[RD_COLL_COUNT] = {"allreduce", "broadcast",     "allgather",
                                                     "barrier",   "reducescatter", "allgatherv",
                                                     "alltoall"};
    for (int c = 0; c < RD_COLL_COUNT; c++) {
        cr_assert_str_eq(rd_coll_name((rd_coll)c), names[c]);
        cr_assert_eq(rd_coll_parse(names[c]), c);
        cr_assert(rd_coll_valid(c));
    }
    cr_assert_str_eq(rd_coll_name((rd_coll)RD_COLL_COUNT), "invalid");
}

Test(dtype, refuses_what_is_not_a_member)
{
    const int bad[] = {-1, INT32_MIN, INT32_MAX};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_assert_not(rd_dtype_valid(bad[i]));
        cr_assert_not(rd_redop_valid(bad[i]));
        cr_assert_not(rd_coll_valid(bad[i]));
    }
    cr_assert_not(rd_dtype_valid(RD_DT_COUNT));
    cr_assert_not(rd_redop_valid(RD_OP_COUNT));
    cr_assert_not(rd_coll_valid(RD_COLL_COUNT));
    const char *words[] = {NULL, "", "F32", "f32 ", "float32", "bfloat16", "Sum", "reduce"};
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
        cr_assert_eq(rd_dtype_parse(words[i]), -1);
        cr_assert_eq(rd_redop_parse(words[i]), -1);
        cr_assert_eq(rd_coll_parse(words[i]), -1);
    }
}

/* protobuf-c's enums carry no count, so a member added to ringd.proto alone would compile. */
Test(dtype, the_wire_has_no_member_we_lack)
{
    cr_assert_eq(ringd__data_type__descriptor.n_values, RD_DT_COUNT);
    cr_assert_eq(ringd__reduce_op__descriptor.n_values, RD_OP_COUNT);
    cr_assert_eq(ringd__op_type__descriptor.n_values, RD_COLL_COUNT);
}

/* Stored values are those the kernels compute with: halves round to nearest even, integers wrap. */
Test(dtype, stores_each_dtype_as_the_kernels_round)
{
    uint8_t buf[16];
    memset(buf, 0, sizeof(buf));
    rd_dtype_store(RD_DT_F16, buf, 1, 1.0 + 0x1p-11); /* halfway: to even, 1.0 */
    cr_assert_eq(((uint16_t *)buf)[1], 0x3c00);
    rd_dtype_store(RD_DT_BF16, buf, 0, -2.0);
    cr_assert_eq(((uint16_t *)buf)[0], 0xc000);
    cr_assert_eq(rd_bf16_to_f32(((uint16_t *)buf)[0]), -2.0f);
    rd_dtype_store(RD_DT_U8, buf, 3, 257.0);
    cr_assert_eq(buf[3], 1);
    rd_dtype_store(RD_DT_I32, buf, 2, -3.0);
    cr_assert_eq(((int32_t *)buf)[2], -3);
    rd_dtype_store(RD_DT_F64, buf, 1, 0.1);
    cr_assert_eq(((double *)buf)[1], 0.1);
}
