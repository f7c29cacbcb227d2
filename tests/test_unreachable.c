/* A registered member that nobody can reach: its lease is alive in Redis, but its advertised
 * address refuses connections, accepts them and never answers, or answers without the ring key.
 * The other nodes name it, its address and what failed (in ringctl status and in what waiting
 * clients hear), set it aside after --peer-timeout so that a job whose min_size is still met forms
 * without it, and take it back once it is reachable. Real redis-server and ringd daemons on
 * loopback; clients in forked processes. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "ringd.h"
#include "th_ring.h"

#define PEER_TIMEOUT "2000"

typedef enum {
    BAD_REFUSED,  /* nothing listens at the advertised address */
    BAD_SILENT,   /* something accepts there and never says a word */
    BAD_REJECTED, /* a ringd of another ring key listens there */
} bad_address;

/* What the clients tell the test, in memory they share with it. */
typedef struct {
    volatile int opened[3]; /* 1: ringd_open returned with the size checked; -1: failed */
    volatile int grew;      /* the clients of n0 and n1 saw the job at 3 ranks */
    volatile int stop;      /* the test is done with them */
    char aside_msg[512];    /* what n2's client heard when its open failed */
} shared;

static th_ring ring_;
static th_daemon other_; /* BAD_REJECTED: the ringd of another key */
static char job_[64];
static shared *sh_;
static int silent_fd_ = -1;
static pid_t kids_[4];

static void stop(void)
{
    for (int k = 0; k < 4; k++)
        if (kids_[k] > 0) {
            kill(kids_[k], SIGKILL);
            waitpid(kids_[k], NULL, 0);
            kids_[k] = 0;
        }
    th_daemon_teardown(&other_);
    th_ring_teardown(&ring_);
    if (silent_fd_ >= 0)
        close(silent_fd_);
    silent_fd_ = -1;
    if (sh_ != NULL)
        munmap(sh_, sizeof(*sh_));
    sh_ = NULL;
}

TestSuite(unreachable, .fini = stop, .timeout = 120);

/* A loopback port: listening (and never accepting) when keep, else closed again. */
static int loopback_port(int keep, int *fd_out)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0 || (keep && listen(fd, 16) != 0))
        return -1;
    if (keep)
        *fd_out = fd;
    else
        close(fd);
    return ntohs(a.sin_port);
}

/* Opens job_ on node k: world 3, one client per node, min_size 2. */
static ringd_t *open_on(int k, int open_timeout_ms, ringd_result_t *rc)
{
    ringd_options_t o = RINGD_OPTIONS_INIT;
    o.socket_path = ring_.d[k].sock;
    o.job = job_;
    o.world_size = 3;
    o.local_size = 1;
    o.min_size = 2;
    o.open_timeout_ms = open_timeout_ms;
    o.op_timeout_ms = 20000;
    o.arena_size = 1u << 20;
    ringd_t *r = NULL;
    *rc = ringd_open(&o, &r);
    return r;
}

/* Sums ones over the job until it succeeds (a membership change fails one call); returns the
 * sum, or -1. Every rank names its calls by generation and a count within it, so that a
 * newcomer's first call meets everyone else's first call of that generation. */
static int sum_of_ones(ringd_t *r, int32_t *one)
{
    static uint64_t gen;
    static int seq;
    char name[64];
    for (int tries = 0; tries < 50; tries++) {
        if (ringd_generation(r) != gen) {
            gen = ringd_generation(r);
            seq = 0;
        }
        snprintf(name, sizeof(name), "ones.g%llu.%d", (unsigned long long)gen, seq);
        *one = 1;
        ringd_result_t rc = ringd_allreduce(r, name, one, one, 1, RINGD_I32, RINGD_SUM);
        if (rc == RINGD_OK) {
            seq++;
            return *one;
        }
        if (rc != RINGD_E_MEMBERSHIP) {
            fprintf(stderr, "allreduce %s: %s: %s\n", name, ringd_strerror(rc), ringd_errmsg(r));
            return -1;
        }
    }
    return -1;
}

/* A client of n0 or n1: opens at 2 ranks once n2 is set aside, sums, and (grow) goes on until
 * the job has 3 ranks again. */
static int healthy_client(int k, int grow)
{
    ringd_result_t rc;
    ringd_t *r = open_on(k, 30000, &rc);
    if (rc != RINGD_OK) {
        fprintf(stderr, "n%d: open: %s: %s\n", k, ringd_strerror(rc), ringd_errmsg(r));
        sh_->opened[k] = -1;
        return 10;
    }
    int32_t *one = ringd_alloc(r, sizeof(int32_t));
    int sum = sum_of_ones(r, one);
    if (ringd_size(r) != 2 || sum != 2) {
        fprintf(stderr, "n%d: size %d, sum %d; want 2 and 2\n", k, ringd_size(r), sum);
        sh_->opened[k] = -1;
        return 11;
    }
    sh_->opened[k] = 1;
    for (int step = 0; grow && step < 600; step++) {
        sum = sum_of_ones(r, one);
        if (sum < 0)
            return 12;
        if (sum == 3 && ringd_size(r) == 3) {
            __sync_fetch_and_add(&sh_->grew, 1);
            break;
        }
        th_sleep_ms(50);
    }
    for (int more = 0; grow && more < 3; more++) /* the three ranks go on together */
        if (sum_of_ones(r, one) != 3)
            return 13;
    while (!sh_->stop)
        th_sleep_ms(20);
    ringd_close(r);
    return 0;
}

/* The client of n2 while n2 cannot be reached: its open fails, saying why. */
static int aside_client(void)
{
    ringd_result_t rc;
    ringd_t *r = open_on(2, 8000, &rc);
    snprintf(sh_->aside_msg, sizeof(sh_->aside_msg), "%s", ringd_errmsg(r));
    ringd_close(r);
    if (rc != RINGD_E_TIMEOUT) {
        fprintf(stderr, "n2: open: %s: %s; want a timeout\n", ringd_strerror(rc), sh_->aside_msg);
        sh_->opened[2] = -1;
        return 20;
    }
    return 0;
}

/* n2 back at a good address: joins the job, which then has 3 ranks. */
static int returning_client(void)
{
    ringd_result_t rc;
    ringd_t *r = open_on(2, 20000, &rc);
    if (rc != RINGD_OK) {
        fprintf(stderr, "n2 again: open: %s: %s\n", ringd_strerror(rc), ringd_errmsg(r));
        return 30;
    }
    int32_t *one = ringd_alloc(r, sizeof(int32_t));
    if (sum_of_ones(r, one) != 3 || ringd_size(r) != 3) {
        fprintf(stderr, "n2 again: size %d\n", ringd_size(r));
        return 31;
    }
    for (int more = 0; more < 3; more++)
        if (sum_of_ones(r, one) != 3)
            return 32;
    while (!sh_->stop)
        th_sleep_ms(20);
    ringd_close(r);
    return 0;
}

static pid_t fork_client(int which, int grow)
{
    pid_t pid = fork();
    if (pid == 0) {
        int rc = which < 2    ? healthy_client(which, grow)
                 : which == 2 ? aside_client()
                              : returning_client();
        _exit(rc);
    }
    return pid;
}

/* The status of nodes n0 and n1 together. */
static char *status_of_healthy(void)
{
    static char both[65536];
    both[0] = '\0';
    for (int k = 0; k < 2; k++) {
        char *out = NULL;
        if (th_ringctl(ring_.d[k].sock, &out, 5000, "status", NULL) == 0 && out != NULL)
            strncat(both, out, sizeof(both) - strlen(both) - 1);
        free(out);
    }
    return both;
}

static void run(bad_address bad)
{
    static const char *const healthy[] = {"--peer-timeout", PEER_TIMEOUT, "--handshake-ms", "700",
                                          NULL};
    sh_ = mmap(NULL, sizeof(*sh_), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(sh_, MAP_FAILED);
    cr_assert_eq(th_ring_init(&ring_, 1), 0);
    snprintf(job_, sizeof(job_), "unreachable.%d", (int)getpid());
    char addr[64], why[64];
    int port;
    if (bad == BAD_REFUSED) {
        port = loopback_port(0, NULL);
        snprintf(why, sizeof(why), "Connection refused");
    } else if (bad == BAD_SILENT) {
        port = loopback_port(1, &silent_fd_);
        snprintf(why, sizeof(why), "handshake timed out");
    } else {
        port = loopback_port(0, NULL);
        char listen[64], key[256];
        snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
        snprintf(key, sizeof(key), "%s/other.key", ring_.dir);
        cr_assert_eq(th_sh("head -c 32 /dev/urandom | base64 > %s && chmod 600 %s", key, key), 0);
        const char *const args[] = {"--redis", ring_.redis.url, "--listen", listen, "--node",
                                    "other",   "--key-file",    key,        NULL};
        cr_assert_eq(th_daemon_start(&other_, args), 0, "the ringd of another key did not start");
        snprintf(why, sizeof(why), "handshake rejected");
    }
    cr_assert_gt(port, 0);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    const char *const unreachable[] = {
        "--peer-timeout", PEER_TIMEOUT, "--handshake-ms", "700", "--advertise", addr, NULL};
    cr_assert_eq(th_ring_start_node(&ring_, 0, healthy), 0);
    cr_assert_eq(th_ring_start_node(&ring_, 1, healthy), 0);
    cr_assert_eq(th_ring_start_node(&ring_, 2, unreachable), 0);
    ring_.n = 3;

    int grow = bad == BAD_REFUSED;
    for (int k = 0; k < 3; k++)
        kids_[k] = fork_client(k, grow);

    /* While the ring forms: a node that dials n2 names it, its address and what failed. */
    int64_t t0 = th_now_ms();
    int named = 0;
    while (!named && th_now_ms() - t0 < 20000) {
        char *st = status_of_healthy();
        named = strstr(st, "unreachable: ") != NULL && strstr(st, addr) != NULL &&
                strstr(st, why) != NULL;
        if (!named)
            th_sleep_ms(50);
    }
    cr_expect(named, "ringctl status of n0 and n1 never named n2 unreachable at %s with '%s':\n%s",
              addr, why, status_of_healthy());
    /* After --peer-timeout it is set aside: the others open and run at 2 ranks. */
    while ((sh_->opened[0] == 0 || sh_->opened[1] == 0) && th_now_ms() - t0 < 30000)
        th_sleep_ms(20);
    if (sh_->opened[0] != 1 || sh_->opened[1] != 1)
        th_ring_dump_logs(&ring_, 1 << 20);
    cr_assert(sh_->opened[0] == 1 && sh_->opened[1] == 1,
              "the clients of n0 and n1 did not open at 2 ranks without n2");
    char *st = status_of_healthy();
    cr_expect(strstr(st, "set aside: node n") != NULL && strstr(st, addr) != NULL &&
                  strstr(st, why) != NULL,
              "status does not show n2 set aside:\n%s", st);
    /* n2's own client hears that its node was set aside, and why. */
    cr_assert_eq(th_wait_pid(kids_[2], 20000), 0, "n2's client did not fail as expected");
    kids_[2] = 0;
    int told = strstr(sh_->aside_msg, "set aside") != NULL && strstr(sh_->aside_msg, "n2") != NULL;
    if (!told)
        th_ring_dump_logs(&ring_, 1 << 20);
    cr_expect(told, "n2's client heard: %s", sh_->aside_msg);
    if (grow) {
        /* Fixed (restarted with a reachable address), n2 joins the running job. */
        th_daemon_finish(&ring_.d[2]);
        static const char *const fixed[] = {"--peer-timeout", PEER_TIMEOUT, NULL};
        cr_assert_eq(th_ring_start_node(&ring_, 2, fixed), 0);
        kids_[3] = fork_client(3, 0);
        while (sh_->grew < 2 && th_now_ms() - t0 < 90000)
            th_sleep_ms(50);
        cr_expect_eq(sh_->grew, 2, "the clients of n0 and n1 never saw n2 back (3 ranks)");
    }
    sh_->stop = 1;
    for (int k = 0; k < 4; k++) {
        if (kids_[k] <= 0)
            continue;
        cr_expect_eq(th_wait_pid(kids_[k], 30000), 0, "client %d failed", k);
        kids_[k] = 0;
    }
    th_ring_finish(&ring_);
    if (bad == BAD_REJECTED)
        th_daemon_finish(&other_);
}

Test(unreachable, a_member_whose_address_refuses_is_named_set_aside_and_joins_once_fixed)
{
    run(BAD_REFUSED);
}

Test(unreachable, a_member_whose_address_never_answers_is_named_and_set_aside)
{
    run(BAD_SILENT);
}

Test(unreachable, a_member_whose_address_holds_another_ring_key_is_named_and_set_aside)
{
    run(BAD_REJECTED);
}
