/* The device seam with its CPU implementation: memory import and release, copies, and the
 * asynchronous operations that report on the event loop. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <event2/event.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend.h"

Test(backend, an_arena_memfd_imports_as_a_shared_mapping)
{
    const rd_backend *b = rd_backend_cpu();
    int fd = memfd_create("t", MFD_CLOEXEC);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, 1 << 16), 0);
    rd_mem m1, m2;
    char err[256];
    cr_assert_eq(b->import(RD_MEM_ARENA, 0, fd, 1 << 16, &m1, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(b->import(RD_MEM_ARENA, 0, fd, 1 << 16, &m2, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(m1.kind, RD_MEM_ARENA);
    cr_assert_eq(m1.size, 1 << 16);
    m1.base[4095] = 0x5a;
    cr_assert_eq(m2.base[4095], 0x5a, "both mappings see the same memory");
    b->release(&m1);
    cr_assert_null(m1.base);
    b->release(&m1); /* released twice: a no-op */
    b->release(&m2);
    close(fd);
}

Test(backend, device_memory_is_refused_by_the_cpu_backend_with_a_reason)
{
    const rd_backend *b = rd_backend_cpu();
    rd_mem m;
    char err[256] = "";
    cr_assert_neq(b->import(RD_MEM_DEVICE, 0, 0, 4096, &m, err, sizeof(err)), 0);
    cr_assert(strstr(err, "CUDA") != NULL, "%s", err);
    cr_assert_null(m.base);
    cr_assert_null(b->transport, "no whole-collective transport without NCCL");
}

Test(backend, a_bad_descriptor_is_refused)
{
    const rd_backend *b = rd_backend_cpu();
    rd_mem m;
    char err[256] = "";
    cr_assert_neq(b->import(RD_MEM_ARENA, 0, -1, 4096, &m, err, sizeof(err)), 0);
    cr_assert(strstr(err, "mmap") != NULL, "%s", err);
    cr_assert_neq(b->import(RD_MEM_ARENA, 0, 0, 0, &m, err, sizeof(err)), 0);
}

Test(backend, copies_may_overlap)
{
    uint8_t buf[16];
    for (int i = 0; i < 16; i++)
        buf[i] = (uint8_t)i;
    rd_backend_cpu()->copy(buf + 2, buf, 8);
    for (int i = 0; i < 8; i++)
        cr_assert_eq(buf[i + 2], i);
    rd_backend_cpu()->copy(buf, buf, 16); /* in place */
}

typedef struct {
    int calls, status;
    int inside; /* set while the async call runs: done must not come from within it */
    int reentered;
} report;

static void on_done(void *arg, int status, const char *why)
{
    report *r = arg;
    (void)why;
    r->reentered |= r->inside;
    r->calls++;
    r->status = status;
}

Test(backend, asynchronous_work_reports_on_the_next_loop_turn)
{
    const rd_backend *b = rd_backend_cpu();
    struct event_base *base = event_base_new();
    cr_assert_not_null(base);
    float x[4] = {1, 2, 3, 4}, y[4] = {10, 20, 30, 40}, out[4];
    const void *src[2] = {x, y};
    rd_reduce_args args = RD_REDUCE_ARGS_INIT;
    args.divisor = 2;
    report r1 = {0}, r2 = {0};
    r1.inside = 1;
    cr_assert_eq(b->reduce_async(base, RD_DT_F32, RD_OP_SUM, out, src, 2, 4, &args, on_done, &r1),
                 0);
    r1.inside = 0;
    r2.inside = 1;
    uint8_t bytes[8] = {1, 2, 3, 4, 5, 6, 7, 8}, copy[8] = {0};
    cr_assert_eq(b->copy_async(base, copy, bytes, sizeof(bytes), on_done, &r2), 0);
    r2.inside = 0;
    cr_assert_eq(r1.calls + r2.calls, 0, "nothing is reported before the loop runs");
    event_base_loop(base, EVLOOP_NONBLOCK);
    cr_assert_eq(r1.calls, 1);
    cr_assert_eq(r2.calls, 1);
    cr_assert_not(r1.reentered || r2.reentered);
    cr_assert_eq(r1.status, 0);
    for (int i = 0; i < 4; i++)
        cr_assert_float_eq(out[i], (x[i] + y[i]) / 2, 0);
    cr_assert_arr_eq(copy, bytes, sizeof(bytes));
    event_base_free(base);
}

/* The CUDA backend (in a build with CUDA) on a machine that may have no driver or NCCL: its
 * transport makes an NCCL id or says why not; without a driver its device calls fail naming
 * the device and the reason, and sharing refuses kinds it does not share. */
Test(backend, the_cuda_backend_says_why_it_cannot_where_it_cannot)
{
    const rd_backend *b = rd_backend_cuda();
    if (b == NULL)
        cr_skip_test("built without CUDA");
    cr_assert_str_eq(b->name, "cuda");
    cr_assert_eq(b->device_memory, 1);
    cr_assert_not_null(b->transport);
    uint8_t id[RD_TRANSPORT_ID_MAX];
    size_t len = 0;
    char err[512] = "";
    if (b->transport->make_id(id, &len, err, sizeof(err)) == 0)
        cr_assert_eq(len, 128, "an NCCL unique id is 128 bytes, got %zu", len);
    else
        cr_assert(strstr(err, "NCCL") != NULL, "make_id failed without naming NCCL: '%s'", err);
    rd_mem m;
    int fd = -1;
    err[0] = '\0';
    cr_assert_eq(b->share(RD_MEM_ARENA, 0, 4096, &fd, &m, err, sizeof(err)), -1);
    cr_assert(strstr(err, "device memory only") != NULL, "%s", err);
    if (b->bind(0) != 0)
        cr_assert(strstr(b->error(), "CUDA") != NULL, "bind failed without saying why: '%s'",
                  b->error());
}
