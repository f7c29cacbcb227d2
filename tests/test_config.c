/* Unit tests for daemon option parsing (defaults, RINGD_* environment, flags) in daemon/config.c.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "ringd_build.h"

#define MAX_ARGS 8

/* Runs rd_config_parse over a NULL-terminated argument list (argv[0] is added) and environment.
 * What it prints is returned in *printed (caller frees) when printed is not NULL. */
static rd_config_result parse(rd_config *cfg, const char *const *args, const char *const *env,
                              char *err, size_t errlen, char **printed)
{
    char *argv[MAX_ARGS + 2];
    char *envp[MAX_ARGS + 1];
    int argc = 0, e = 0;
    char *buf = NULL;
    size_t buflen = 0;

    argv[argc++] = (char *)"ringd";
    for (; args != NULL && args[argc - 1] != NULL; argc++) {
        cr_assert_lt(argc, MAX_ARGS + 1);
        argv[argc] = (char *)args[argc - 1];
    }
    argv[argc] = NULL;
    for (; env != NULL && env[e] != NULL; e++) {
        cr_assert_lt(e, MAX_ARGS);
        envp[e] = (char *)env[e];
    }
    envp[e] = NULL;

    FILE *out = open_memstream(&buf, &buflen);
    cr_assert_not_null(out);
    err[0] = '\0';
    rd_config_result r = rd_config_parse(cfg, argc, argv, envp, out, err, errlen);
    cr_assert_eq(fclose(out), 0);
    if (printed != NULL)
        *printed = buf;
    else
        free(buf);
    return r;
}

/* The value of the option called name in cfg, as text. */
static void field_text(const rd_config *c, const char *name, char *buf, size_t len)
{
    if (strcmp(name, "socket") == 0)
        snprintf(buf, len, "%s", c->socket_path);
    else if (strcmp(name, "arena-size") == 0)
        snprintf(buf, len, "%" PRIu64, c->arena_size);
    else if (strcmp(name, "arena-max") == 0)
        snprintf(buf, len, "%" PRIu64, c->arena_max);
    else if (strcmp(name, "device-arena-max") == 0)
        snprintf(buf, len, "%" PRIu64, c->device_arena_max);
    else if (strcmp(name, "max-frame") == 0)
        snprintf(buf, len, "%" PRIu64, c->max_frame);
    else if (strcmp(name, "inline-bytes") == 0)
        snprintf(buf, len, "%" PRIu64, c->inline_bytes);
    else if (strcmp(name, "threads") == 0)
        snprintf(buf, len, "%" PRId64, c->threads);
    else if (strcmp(name, "log-level") == 0)
        snprintf(buf, len, "%" PRId64, c->log_level);
    else if (strcmp(name, "max-clients") == 0)
        snprintf(buf, len, "%" PRId64, c->max_clients);
    else if (strcmp(name, "gpu-transport") == 0)
        snprintf(buf, len, "%" PRId64, c->gpu_transport);
    else
        cr_assert_fail("no option %s", name);
}

static int64_t expected_default_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 8 ? 8 : n;
}

/* ------------------------------------------------------------------------------------------ */
/* Defaults, environment, flags                                                               */
/* ------------------------------------------------------------------------------------------ */

Test(config, starts_from_the_documented_defaults)
{
    rd_config cfg;
    char err[256];

    cr_assert_eq(parse(&cfg, NULL, NULL, err, sizeof(err), NULL), RD_CONFIG_RUN, "%s", err);
    cr_assert_str_eq(cfg.socket_path, "/run/ringd/ringd.sock");
    cr_assert_eq(cfg.arena_size, UINT64_C(1) << 30);
    cr_assert_eq(cfg.arena_max, UINT64_C(16) << 30);
    cr_assert_eq(cfg.max_frame, UINT64_C(1) << 20);
    cr_assert_eq(cfg.inline_bytes, UINT64_C(1) << 20);
    cr_assert_eq(cfg.poll_us, 100);
    cr_assert_eq(cfg.max_clients, 1024);
    cr_assert_eq(cfg.log_level, 1, "default log level is info");
    cr_assert_geq(cfg.threads, 1);
    cr_assert_leq(cfg.threads, 8);
    cr_assert_eq(cfg.threads, expected_default_threads());
}

Test(config, resolves_threads_zero_to_the_cpu_count_from_any_source)
{
    rd_config cfg;
    char err[256];
    const char *env[] = {"RINGD_THREADS=0", NULL};
    const char *args[] = {"--threads", "0", NULL};

    cr_assert_eq(parse(&cfg, NULL, env, err, sizeof(err), NULL), RD_CONFIG_RUN, "%s", err);
    cr_assert_eq(cfg.threads, expected_default_threads());
    cr_assert_eq(parse(&cfg, args, NULL, err, sizeof(err), NULL), RD_CONFIG_RUN, "%s", err);
    cr_assert_eq(cfg.threads, expected_default_threads());
}

/* Strings are held inline: Criterion may run a test in a fresh process image where pointers
 * into the parent's static data are not valid. */
struct override_case {
    char name[24];       /* option */
    char env[40];        /* NAME=value */
    char env_expect[24]; /* field as text after the environment */
    char flag[16];       /* value given with --name */
    char flag_expect[24];
};

static struct override_case overrides[] = {
    {"socket", "RINGD_SOCKET=/tmp/x.sock", "/tmp/x.sock", "/tmp/y.sock", "/tmp/y.sock"},
    {"arena-size", "RINGD_ARENA_SIZE=2G", "2147483648", "64M", "67108864"},
    {"arena-max", "RINGD_ARENA_MAX=32G", "34359738368", "8G", "8589934592"},
    {"device-arena-max", "RINGD_DEVICE_ARENA_MAX=1G", "1073741824", "0", "0"},
    {"max-frame", "RINGD_MAX_FRAME=64K", "65536", "4096", "4096"},
    {"inline-bytes", "RINGD_INLINE_BYTES=0", "0", "1MiB", "1048576"},
    {"threads", "RINGD_THREADS=3", "3", "256", "256"},
    {"max-clients", "RINGD_MAX_CLIENTS=1", "1", "65536", "65536"},
    {"log-level", "RINGD_LOG_LEVEL=debug", "0", "error", "3"},
    {"gpu-transport", "RINGD_GPU_TRANSPORT=nccl", "1", "tcp", "2"},
};

ParameterizedTestParameters(config, lets_the_environment_override_a_default)
{
    return cr_make_param_array(struct override_case, overrides,
                               sizeof(overrides) / sizeof(overrides[0]));
}

ParameterizedTest(struct override_case *c, config, lets_the_environment_override_a_default)
{
    rd_config cfg;
    char err[256], got[128];
    const char *env[] = {"PATH=/usr/bin", c->env, "HOME=/root", NULL};

    cr_assert_eq(parse(&cfg, NULL, env, err, sizeof(err), NULL), RD_CONFIG_RUN, "%s", err);
    field_text(&cfg, c->name, got, sizeof(got));
    cr_assert_str_eq(got, c->env_expect, "%s", c->env);
}

ParameterizedTestParameters(config, lets_a_flag_override_the_environment)
{
    return cr_make_param_array(struct override_case, overrides,
                               sizeof(overrides) / sizeof(overrides[0]));
}

ParameterizedTest(struct override_case *c, config, lets_a_flag_override_the_environment)
{
    rd_config cfg;
    char err[256], got[128], flag[64], joined[128];
    const char *env[] = {c->env, NULL};

    snprintf(flag, sizeof(flag), "--%s", c->name);
    const char *args[] = {flag, c->flag, NULL};
    cr_assert_eq(parse(&cfg, args, env, err, sizeof(err), NULL), RD_CONFIG_RUN, "%s", err);
    field_text(&cfg, c->name, got, sizeof(got));
    cr_assert_str_eq(got, c->flag_expect, "%s over %s", flag, c->env);

    /* The --name=value spelling means the same. */
    snprintf(joined, sizeof(joined), "--%s=%s", c->name, c->flag);
    const char *args2[] = {joined, NULL};
    cr_assert_eq(parse(&cfg, args2, env, err, sizeof(err), NULL), RD_CONFIG_RUN, "%s", err);
    field_text(&cfg, c->name, got, sizeof(got));
    cr_assert_str_eq(got, c->flag_expect, "%s over %s", joined, c->env);
}

Test(config, lets_the_last_of_repeated_flags_win)
{
    rd_config cfg;
    char err[256];
    const char *args[] = {"--threads", "2", "--threads=5", NULL};

    cr_assert_eq(parse(&cfg, args, NULL, err, sizeof(err), NULL), RD_CONFIG_RUN, "%s", err);
    cr_assert_eq(cfg.threads, 5);
}

Test(config, ignores_variables_that_only_share_a_prefix)
{
    rd_config cfg;
    char err[256];
    const char *env[] = {"RINGD_SOCKETX=/tmp/a", "RINGD_SOCKET", "XRINGD_THREADS=3",
                         "RINGD_THREADS_MAX=9", NULL};

    cr_assert_eq(parse(&cfg, NULL, env, err, sizeof(err), NULL), RD_CONFIG_RUN, "%s", err);
    cr_assert_str_eq(cfg.socket_path, "/run/ringd/ringd.sock");
    cr_assert_eq(cfg.threads, expected_default_threads());
}

Test(config, accepts_socket_paths_up_to_the_sun_path_limit)
{
    rd_config cfg;
    char err[256], path[RD_PATH_MAX + 1];
    const char *args[] = {"--socket", path, NULL};

    memset(path, 's', sizeof(path));
    path[0] = '/';
    path[RD_PATH_MAX - 1] = '\0'; /* 107 bytes: fits with its terminator */
    cr_assert_eq(parse(&cfg, args, NULL, err, sizeof(err), NULL), RD_CONFIG_RUN, "%s", err);
    cr_assert_str_eq(cfg.socket_path, path);

    path[RD_PATH_MAX - 1] = 's';
    path[RD_PATH_MAX] = '\0'; /* 108 bytes: does not */
    cr_assert_eq(parse(&cfg, args, NULL, err, sizeof(err), NULL), RD_CONFIG_ERROR);
    cr_assert_not_null(strstr(err, "socket"), "err '%s'", err);
}

/* Each call must parse its own argv; getopt's hidden state must not carry over. */
Test(config, parses_independently_when_called_twice_in_one_process)
{
    rd_config cfg;
    char err[256];
    char *printed = NULL;
    const char *first[] = {"-hV", NULL};
    const char *second[] = {"--threads", "2", NULL};

    cr_assert_eq(parse(&cfg, first, NULL, err, sizeof(err), &printed), RD_CONFIG_EXIT);
    cr_assert_not_null(strstr(printed, "usage:"));
    free(printed);
    printed = NULL;
    cr_assert_eq(parse(&cfg, second, NULL, err, sizeof(err), &printed), RD_CONFIG_RUN,
                 "second parse: err '%s', printed '%s'", err, printed);
    cr_assert_eq(cfg.threads, 2);
    free(printed);
}

Test(config, parses_independently_after_a_stray_argument)
{
    rd_config cfg;
    char err[256];
    const char *first[] = {"stray", "--threads", "3", NULL};
    const char *second[] = {"--threads", "2", NULL};

    cr_assert_eq(parse(&cfg, first, NULL, err, sizeof(err), NULL), RD_CONFIG_ERROR);
    cr_assert_eq(parse(&cfg, second, NULL, err, sizeof(err), NULL), RD_CONFIG_RUN, "%s", err);
    cr_assert_eq(cfg.threads, 2);
}

/* ------------------------------------------------------------------------------------------ */
/* --help and --version                                                                       */
/* ------------------------------------------------------------------------------------------ */

struct help_case {
    char arg[16];
};

ParameterizedTestParameters(config, prints_help_naming_every_option_and_its_variable)
{
    static struct help_case cases[] = {{"--help"}, {"-h"}};
    return cr_make_param_array(struct help_case, cases, sizeof(cases) / sizeof(cases[0]));
}

ParameterizedTest(struct help_case *c, config, prints_help_naming_every_option_and_its_variable)
{
    static const char *const names[][2] = {
        {"--socket", "RINGD_SOCKET"},
        {"--arena-size", "RINGD_ARENA_SIZE"},
        {"--arena-max", "RINGD_ARENA_MAX"},
        {"--max-frame", "RINGD_MAX_FRAME"},
        {"--inline-bytes", "RINGD_INLINE_BYTES"},
        {"--threads", "RINGD_THREADS"},
        {"--max-clients", "RINGD_MAX_CLIENTS"},
        {"--log-level", "RINGD_LOG_LEVEL"},
        {"--gpu-transport", "RINGD_GPU_TRANSPORT"},
    };
    rd_config cfg;
    char err[256];
    char *printed = NULL;
    const char *args[] = {c->arg, NULL};

    cr_assert_eq(parse(&cfg, args, NULL, err, sizeof(err), &printed), RD_CONFIG_EXIT);
    cr_assert_not_null(printed);
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        cr_assert_not_null(strstr(printed, names[i][0]), "help lacks %s", names[i][0]);
        cr_assert_not_null(strstr(printed, names[i][1]), "help lacks %s", names[i][1]);
    }
    cr_assert_not_null(strstr(printed, "--help"));
    cr_assert_not_null(strstr(printed, "--version"));
    cr_assert_not_null(strstr(printed, "/run/ringd/ringd.sock"), "help lacks the defaults");
    free(printed);
}

Test(config, prints_help_even_after_other_flags)
{
    rd_config cfg;
    char err[256];
    char *printed = NULL;
    const char *args[] = {"--threads", "2", "--help", "--bogus", NULL};

    cr_assert_eq(parse(&cfg, args, NULL, err, sizeof(err), &printed), RD_CONFIG_EXIT, "%s", err);
    cr_assert_not_null(strstr(printed, "usage:"));
    free(printed);
}

Test(config, prints_the_version)
{
    rd_config cfg;
    char err[256];
    char *printed = NULL;
    const char *args[] = {"--version", NULL};

    cr_assert_eq(parse(&cfg, args, NULL, err, sizeof(err), &printed), RD_CONFIG_EXIT);
    cr_assert_str_eq(printed, "ringd " RINGD_VERSION "\n");
    free(printed);
}

/* ------------------------------------------------------------------------------------------ */
/* Errors                                                                                     */
/* ------------------------------------------------------------------------------------------ */

struct error_case {
    char args[4][32]; /* empty strings end the list */
    char env[32];     /* empty or NAME=value */
    char needle[24];  /* must appear in err */
};

ParameterizedTestParameters(config, refuses_bad_input_naming_the_culprit)
{
    static struct error_case cases[] = {
        {{"--bogus"}, "", "--bogus"},
        {{"-x"}, "", "-x"},
        {{"--socket"}, "", "--socket"},
        {{"--threads", "2", "--log-level"}, "", "--log-level"},
        {{"--socket="}, "", "socket"},
        {{"--arena-size", "12Q"}, "", "arena-size"},
        {{"--arena-size", "12Q"}, "", "12Q"},
        {{"--arena-size="}, "", "arena-size"},
        {{"--arena-size", "1K"}, "", "arena-size"},
        {{"--max-frame", "10"}, "", "max-frame"},
        {{"--max-frame", "4095"}, "", "max-frame"},
        {{"--max-frame", "2G"}, "", "max-frame"},
        {{"--threads", "-1"}, "", "threads"},
        {{"--threads=-1"}, "", "threads"},
        {{"--threads", "257"}, "", "threads"},
        {{"--threads", "3x"}, "", "threads"},
        {{"--threads="}, "", "threads"},
        {{"--threads", "99999999999999999999"}, "", "threads"},
        {{"--max-clients", "0"}, "", "max-clients"},
        {{"--max-clients", "65537"}, "", "max-clients"},
        {{"--log-level", "verbose"}, "", "log-level"},
        {{"--log-level", "INFO"}, "", "log-level"},
        {{"--gpu-transport", "gloo"}, "", "gloo"},
        {{""}, "RINGD_GPU_TRANSPORT=NCCL", "auto, nccl, tcp"},
        {{"stray"}, "", "stray"},
        {{"--threads", "2", "stray"}, "", "stray"},
        {{"--arena-size", "32G"}, "", "arena-max"},
        {{"--arena-size", "2G", "--arena-max", "1G"}, "", "arena-max"},
        {{""}, "RINGD_ARENA_SIZE=32G", "arena-max"},
        {{""}, "RINGD_MAX_FRAME=10", "RINGD_MAX_FRAME"},
        {{""}, "RINGD_THREADS=-1", "threads"},
        {{""}, "RINGD_LOG_LEVEL=loud", "RINGD_LOG_LEVEL"},
        {{""}, "RINGD_SOCKET=", "RINGD_SOCKET"},
    };
    return cr_make_param_array(struct error_case, cases, sizeof(cases) / sizeof(cases[0]));
}

ParameterizedTest(struct error_case *c, config, refuses_bad_input_naming_the_culprit)
{
    rd_config cfg;
    char err[256];
    char *printed = NULL;
    const char *env[] = {c->env[0] ? c->env : NULL, NULL};
    const char *args[5] = {NULL};

    for (int i = 0; i < 4 && c->args[i][0] != '\0'; i++)
        args[i] = c->args[i];
    cr_assert_eq(parse(&cfg, args, env, err, sizeof(err), &printed), RD_CONFIG_ERROR,
                 "args '%s %s %s', env '%s'", c->args[0], c->args[1], c->args[2], c->env);
    cr_assert_not_null(strstr(err, c->needle), "err '%s' does not name '%s'", err, c->needle);
    cr_assert_str_eq(printed, "", "errors go to err, not out");
    free(printed);
}
