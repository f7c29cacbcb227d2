/* ringctl and ringd-bench against a real ringd: status text and JSON with clients attached, exit
 * codes scripts rely on, and a short bench sweep whose results are checked. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "ringd.h"

static th_daemon daemon_;

static void start(void)
{
    cr_assert_eq(th_daemon_start(&daemon_, NULL), 0, "ringd did not start");
}

static void stop(void)
{
    th_daemon_teardown(&daemon_);
}

/* Runs a shell command line; returns its exit status and its stdout in out (malloc'd). */
static int run(const char *cmd, char **out)
{
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while ((n = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += n;
        if (cap - len < 1024)
            buf = realloc(buf, cap *= 2);
    }
    buf[len] = '\0';
    int ws = pclose(p);
    *out = buf;
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

TestSuite(ringctl, .init = start, .fini = stop, .timeout = 120);

Test(ringctl, status_lists_jobs_and_clients_as_text_and_json)
{
    ringd_options_t o = RINGD_OPTIONS_INIT;
    ringd_t *r = NULL;
    o.socket_path = daemon_.sock;
    o.job = "status-job";
    o.arena_size = 1 << 20;
    cr_assert_eq(ringd_open(&o, &r), RINGD_OK, "%s", ringd_errmsg(r));
    float *x = ringd_alloc(r, 64);
    cr_assert_eq(ringd_allreduce(r, "x", x, x, 16, RINGD_F32, RINGD_SUM), RINGD_OK);

    char cmd[512], *out;
    snprintf(cmd, sizeof(cmd), "%s --socket %s status", getenv("RINGCTL_BIN"), daemon_.sock);
    cr_assert_eq(run(cmd, &out), 0);
    cr_expect(strstr(out, "ringd 0.") != NULL, "%s", out);
    cr_expect(strstr(out, "status-job") != NULL, "%s", out);
    char pid[32];
    snprintf(pid, sizeof(pid), " %d ", (int)getpid());
    cr_expect(strstr(out, pid) != NULL, "client pid missing: %s", out);
    free(out);

    snprintf(cmd, sizeof(cmd),
             "%s --socket %s status --json | python3 -c 'import json,sys; d=json.load(sys.stdin); "
             "c=d[\"clients\"][0]; j=d[\"jobs\"][0]; "
             "print(c[\"pid\"], c[\"local_rank\"], c[\"ops_completed\"], j[\"name\"], "
             "j[\"generation\"], d[\"ops\"][\"completed\"])'",
             getenv("RINGCTL_BIN"), daemon_.sock);
    cr_assert_eq(run(cmd, &out), 0, "ringctl --json did not print valid JSON");
    char want[128];
    snprintf(want, sizeof(want), "%d 0 1 status-job 1 1\n", (int)getpid());
    cr_expect_str_eq(out, want);
    free(out);
    ringd_close(r);
    th_daemon_finish(&daemon_);
}

Test(ringctl, exit_codes_tell_scripts_what_happened)
{
    char cmd[512], *out;
    snprintf(cmd, sizeof(cmd), "%s --socket %s/nowhere.sock status 2>/dev/null",
             getenv("RINGCTL_BIN"), daemon_.dir);
    cr_expect_eq(run(cmd, &out), 1, "an unreachable daemon must exit 1");
    free(out);
    snprintf(cmd, sizeof(cmd), "%s --socket %s frobnicate 2>/dev/null", getenv("RINGCTL_BIN"),
             daemon_.sock);
    cr_expect_eq(run(cmd, &out), 2, "an unknown command must exit 2");
    free(out);
    th_daemon_finish(&daemon_);
}

Test(ringctl, ringd_bench_sweeps_and_checks_its_results)
{
    const char *ops[] = {"--op allreduce --dtype f32 --redop sum",
                         "--op allreduce --dtype bf16 --redop avg",
                         "--op allreduce --dtype i64 --redop max",
                         "--op broadcast --dtype f16 --root 1", "--op allgather --dtype u8"};
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        char cmd[512], *out;
        snprintf(cmd, sizeof(cmd), "%s --socket %s --procs 3 -b 4 -e 1M -f 16 -n 3 -w 1 %s",
                 getenv("RINGD_BENCH_BIN"), daemon_.sock, ops[i]);
        cr_expect_eq(run(cmd, &out), 0, "%s:\n%s", ops[i], out);
        cr_expect(strstr(out, "#wrong") != NULL, "%s", out);
        /* 4 B .. 1 MiB by 16: 5 rows (4 B to 256 KiB), each ending in a #wrong of 0 */
        int rows = 0;
        for (char *line = strtok(out, "\n"); line != NULL; line = strtok(NULL, "\n"))
            if (line[0] != '#')
                rows += strlen(line) > 2 && strcmp(line + strlen(line) - 2, " 0") == 0;
        cr_expect_eq(rows, 5, "%s: %d good rows", ops[i], rows);
        free(out);
    }
    th_daemon_finish(&daemon_);
}
