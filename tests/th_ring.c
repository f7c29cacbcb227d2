/* Test helper: redis-server plus several ringd daemons on loopback, one key file. */
#include "th_ring.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int th_ring_start_node(th_ring *r, int i, const char *const *extra)
{
    char node[16];
    snprintf(node, sizeof(node), "n%d", i);
    const char *args[64] = {"--redis", r->redis.url, "--listen", "127.0.0.1:0", "--node",
                            node,      "--key-file", r->key,     "--lease-ttl", "1000"};
    int k = 10;
    for (int e = 0; extra != NULL && extra[e] != NULL && k < 63; e++)
        args[k++] = extra[e];
    args[k] = NULL;
    if (th_daemon_start(&r->d[i], args) != 0) {
        fprintf(stderr, "th_ring: daemon %d did not start\n", i);
        return -1;
    }
    if (i >= r->n)
        r->n = i + 1;
    return 0;
}

int th_ring_start(th_ring *r, int n, const char *const *extra)
{
    memset(r, 0, sizeof(*r));
    snprintf(r->dir, sizeof(r->dir), "/tmp/ringd-ring.XXXXXX");
    if (mkdtemp(r->dir) == NULL)
        return -1;
    snprintf(r->key, sizeof(r->key), "%s/key", r->dir);
    int fd = open(r->key, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const char secret[] = "test ring key, 32 bytes of it...";
    if (fd < 0 || write(fd, secret, sizeof(secret) - 1) != (ssize_t)sizeof(secret) - 1) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    if (th_redis_start(&r->redis, NULL) != 0) {
        fprintf(stderr, "th_ring: redis-server did not start\n");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        if (th_ring_start_node(r, i, extra) != 0) {
            th_ring_teardown(r);
            return -1;
        }
    }
    return 0;
}

void th_ring_finish(th_ring *r)
{
    for (int i = 0; i < r->n; i++)
        if (r->d[i].pid > 0)
            th_daemon_finish(&r->d[i]);
    th_redis_stop(&r->redis);
    if (r->dir[0] != '\0') {
        unlink(r->key);
        rmdir(r->dir);
        r->dir[0] = '\0';
    }
}

void th_ring_teardown(th_ring *r)
{
    for (int i = 0; i < r->n; i++)
        th_daemon_teardown(&r->d[i]);
    th_redis_stop(&r->redis);
    if (r->dir[0] != '\0') {
        unlink(r->key);
        rmdir(r->dir);
        r->dir[0] = '\0';
    }
}
