/* gpu/devices: --devices parsing, which device each client gets, and resolving against the
 * driver (on this machine: whatever it has; without a driver, none and why). */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "cuda_ptr.h"
#include "devices.h"

TestSuite(devices, .timeout = 30);

Test(devices, all_none_and_lists_parse)
{
    int all, idx[RD_MAX_DEVICES], n;
    char err[256];
    cr_assert_eq(rd_devices_parse("all", &all, idx, &n, err, sizeof(err)), 0);
    cr_assert(all && n == 0);
    cr_assert_eq(rd_devices_parse("none", &all, idx, &n, err, sizeof(err)), 0);
    cr_assert(!all && n == 0);
    cr_assert_eq(rd_devices_parse("0,2,7", &all, idx, &n, err, sizeof(err)), 0);
    cr_assert(!all && n == 3 && idx[0] == 0 && idx[1] == 2 && idx[2] == 7);
    cr_assert_eq(rd_devices_parse("5", &all, idx, &n, err, sizeof(err)), 0);
    cr_assert(n == 1 && idx[0] == 5);
}

Test(devices, malformed_lists_are_refused_saying_what_is_wanted)
{
    static const char *const bad[] = {"",    "x",    "0,", ",0",  "0,,1", "-1",
                                      "+1",  " 1",   "1 ", "0x1", "1024", "99999999999999999999",
                                      "0;1", "all,0"};
    int all, idx[RD_MAX_DEVICES], n;
    char err[256];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        cr_expect_eq(rd_devices_parse(bad[i], &all, idx, &n, err, sizeof(err)), -1, "'%s'", bad[i]);
        cr_expect(strstr(err, "--devices") != NULL, "'%s': %s", bad[i], err);
    }
    cr_assert_eq(rd_devices_parse("1,0,1", &all, idx, &n, err, sizeof(err)), -1);
    cr_assert(strstr(err, "device 1 is named twice") != NULL, "%s", err);
}

Test(devices, a_list_longer_than_the_most_devices_is_refused)
{
    char spec[1024] = "", err[256];
    int all, idx[RD_MAX_DEVICES], n;
    for (int i = 0; i <= RD_MAX_DEVICES; i++)
        snprintf(spec + strlen(spec), sizeof(spec) - strlen(spec), "%s%d", i ? "," : "", i);
    cr_assert_eq(rd_devices_parse(spec, &all, idx, &n, err, sizeof(err)), -1);
    cr_assert(strstr(err, "more than 64") != NULL, "%s", err);
}

static rd_devices served(int n, const int *index)
{
    rd_devices d;
    memset(&d, 0, sizeof(d));
    d.n = n;
    for (int i = 0; i < n; i++)
        d.dev[i].index = index[i];
    return d;
}

Test(devices, clients_get_their_local_rank_s_share_or_the_device_they_ask_for)
{
    const int idx[] = {1, 4, 6};
    rd_devices d = served(3, idx);
    char err[256];
    int dev = -2;
    for (uint32_t lr = 0; lr < 7; lr++) {
        cr_assert_eq(rd_devices_pick(&d, -1, lr, &dev, err, sizeof(err)), 0);
        cr_assert_eq(dev, idx[lr % 3], "local rank %u got %d", lr, dev);
    }
    cr_assert_eq(rd_devices_pick(&d, 4, 0, &dev, err, sizeof(err)), 0);
    cr_assert_eq(dev, 4);
    cr_assert_eq(rd_devices_pick(&d, 2, 0, &dev, err, sizeof(err)), -1);
    cr_assert(strstr(err, "asked for CUDA device 2") != NULL, "%s", err);
    cr_assert_not_null(rd_devices_find(&d, 6));
    cr_assert_null(rd_devices_find(&d, 0));
}

Test(devices, without_devices_clients_get_none_and_asking_says_why)
{
    rd_devices d = served(0, NULL);
    char err[256];
    int dev = 7;
    snprintf(d.why, sizeof(d.why), "no CUDA driver: test");
    cr_assert_eq(rd_devices_pick(&d, -1, 3, &dev, err, sizeof(err)), 0);
    cr_assert_eq(dev, -1);
    cr_assert_eq(rd_devices_pick(&d, 0, 0, &dev, err, sizeof(err)), -1);
    cr_assert(strstr(err, "serves no GPU (no CUDA driver: test)") != NULL, "%s", err);
}

Test(devices, none_serves_nothing_and_all_serves_what_the_driver_has)
{
    rd_devices d, all;
    char err[256];
    cr_assert_eq(rd_devices_open(&d, "none", err, sizeof(err)), 0);
    cr_assert_eq(d.n, 0);
    cr_assert_str_eq(d.why, "--devices none");
    cr_assert_eq(rd_devices_open(&all, "all", err, sizeof(err)), 0, "%s", err);
    if (all.n == 0) {
        /* no driver or no device here: "all" says why, a list naming one cannot be met */
        cr_assert(all.why[0] != '\0');
        cr_assert_eq(rd_devices_open(&d, "0", err, sizeof(err)), -1);
        cr_assert(strstr(err, "--devices 0") != NULL, "%s", err);
    } else {
        cr_assert_eq(rd_devices_open(&d, "0", err, sizeof(err)), 0, "%s", err);
        cr_assert(d.n == 1 && d.dev[0].index == 0 && d.dev[0].name[0] != '\0');
        cr_assert_gt(d.dev[0].memory, 0);
    }
    cr_assert_eq(rd_devices_open(&d, "63", err, sizeof(err)), -1);
    cr_assert_eq(rd_devices_open(&d, "bad", err, sizeof(err)), -1);
}

Test(devices, host_memory_is_never_device_memory_and_the_check_loads_no_driver)
{
    int on_stack = 0;
    void *heap = malloc(64);
    int loaded = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) != NULL;
    cr_assert_eq(rd_cuda_ptr_is_device(&on_stack), 0);
    cr_assert_eq(rd_cuda_ptr_is_device(heap), 0);
    cr_assert_eq(rd_cuda_ptr_is_device(NULL), 0);
    /* a process that had not loaded the driver still has not */
    cr_assert_eq(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) != NULL, loaded);
    free(heap);
}
