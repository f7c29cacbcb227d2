/* Test helper: redis-server plus several ringd daemons on loopback, one key file. */
#include "th_ring.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int th_ring_start_node(th_ring *r, int i, const char *const *extra)
{
    char node[16], lease[16];
    snprintf(node, sizeof(node), "n%d", i);
    snprintf(lease, sizeof(lease), "%d", r->lease_ttl > 0 ? r->lease_ttl : 1000);
    const char *listen = r->listen[i][0] != '\0' ? r->listen[i] : "127.0.0.1:0";
    const char *args[64] = {"--redis", r->redis.url, "--listen", listen,        "--node",
                            node,      "--key-file", r->key,     "--lease-ttl", lease};
    int k = 10;
    for (int e = 0; extra != NULL && extra[e] != NULL && k < 63; e++)
        args[k++] = extra[e];
    args[k] = NULL;
    if (i >= r->n)
        r->n = i + 1; /* so that teardown stops it even if it does not come up */
    if (th_daemon_start(&r->d[i], args) != 0) {
        fprintf(stderr, "th_ring: daemon %d did not start\n", i);
        char *log = th_daemon_log(&r->d[i]);
        if (log != NULL)
            fprintf(stderr, "---- its log ----\n%s\n----\n", log);
        free(log);
        return -1;
    }
    return 0;
}

int th_ring_init(th_ring *r, int redis)
{
    memset(r, 0, sizeof(*r));
    snprintf(r->dir, sizeof(r->dir), "/tmp/ringd-ring.XXXXXX");
    if (mkdtemp(r->dir) == NULL) {
        r->dir[0] = '\0';
        return -1;
    }
    snprintf(r->key, sizeof(r->key), "%s/key", r->dir);
    int fd = open(r->key, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const char secret[] = "test ring key, 32 bytes of it...";
    if (fd < 0 || write(fd, secret, sizeof(secret) - 1) != (ssize_t)sizeof(secret) - 1) {
        if (fd >= 0)
            close(fd);
        th_ring_teardown(r);
        return -1;
    }
    close(fd);
    if (redis && th_redis_start(&r->redis, NULL) != 0) {
        fprintf(stderr, "th_ring: redis-server did not start\n");
        th_ring_teardown(r);
        return -1;
    }
    return 0;
}

int th_ring_start(th_ring *r, int n, const char *const *extra)
{
    if (th_ring_init(r, 1) != 0)
        return -1;
    for (int i = 0; i < n; i++) {
        if (th_ring_start_node(r, i, extra) != 0) {
            th_ring_teardown(r);
            return -1;
        }
    }
    return 0;
}

uint64_t th_ring_wait_up(const th_ring *r, const char *job, unsigned mask, int nmembers,
                         uint64_t after_gen, int timeout_ms)
{
    th_jobinfo info[TH_RING_MAX];
    int64_t end = th_now_ms() + timeout_ms;
    for (;;) {
        uint64_t gen = 0;
        int good = 1;
        for (int i = 0; i < r->n; i++) {
            if (!(mask & (1u << i)))
                continue;
            if (th_job_info(r->d[i].sock, job, &info[i]) != 0 || !info[i].has_ring ||
                strcmp(info[i].ring_state, "up") != 0 || info[i].nmembers != nmembers ||
                info[i].ring_generation <= after_gen ||
                (gen != 0 && info[i].ring_generation != gen))
                good = 0;
            gen = info[i].ring_generation;
        }
        if (good && gen != 0)
            return gen;
        if (th_now_ms() >= end)
            break;
        th_sleep_ms(100);
    }
    for (int i = 0; i < r->n; i++) {
        if (!(mask & (1u << i)))
            continue;
        fprintf(stderr,
                "th_ring_wait_up: n%d: job %s%s, ring %s with %d members [%s] at generation "
                "%" PRIu64 " (want up with %d at one generation above %" PRIu64 ")\n",
                i, job, info[i].found ? "" : " unknown",
                info[i].has_ring ? info[i].ring_state : "none", info[i].nmembers, info[i].members,
                info[i].ring_generation, nmembers, after_gen);
    }
    return 0;
}

void th_ring_dump_logs(const th_ring *r, size_t tail)
{
    char mine[32];
    snprintf(mine, sizeof(mine), " pid %d", (int)getpid());
    size_t mlen = strlen(mine);
    for (int k = 0; k < r->n; k++) {
        char *log = th_daemon_log(&r->d[k]);
        if (log == NULL)
            continue;
        /* keep the lines that are not about this process's sessions, then print their end */
        size_t len = 0;
        for (char *line = log, *next; *line != '\0'; line = next) {
            char *nl = strchr(line, '\n');
            next = nl != NULL ? nl + 1 : line + strlen(line);
            char *p = strstr(line, mine);
            int own = p != NULL && p < next && (p[mlen] == ':' || p[mlen] == ' ');
            if (!own) {
                memmove(log + len, line, (size_t)(next - line));
                len += (size_t)(next - line);
            }
        }
        log[len] = '\0';
        fprintf(stderr, "---- ringd n%d log (%s), its end ----\n%s\n----\n", k, r->d[k].log,
                log + (len > tail ? len - tail : 0));
        free(log);
    }
}

static void remove_ring_dir(th_ring *r)
{
    if (r->dir[0] != '\0') {
        unlink(r->key);
        rmdir(r->dir);
        r->dir[0] = '\0';
    }
}

void th_ring_finish(th_ring *r)
{
    for (int i = 0; i < r->n; i++) {
        if (r->d[i].pid > 0)
            th_daemon_finish(&r->d[i]);
        else
            th_daemon_teardown(&r->d[i]);
    }
    th_redis_stop(&r->redis);
    remove_ring_dir(r);
}

void th_ring_teardown(th_ring *r)
{
    for (int i = 0; i < r->n; i++)
        th_daemon_teardown(&r->d[i]);
    th_redis_stop(&r->redis);
    remove_ring_dir(r);
}
