/* Test helper: starts, restarts and stops a real redis-server; raw RESP commands without hiredis.
 */
#define _GNU_SOURCE
#include "harness.h"
#include "th_redis.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A port the kernel just handed out for 127.0.0.1, or -1. */
static int free_port(void)
{
    struct sockaddr_in sin;
    socklen_t len = sizeof(sin);
    int port = -1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sin, &len) == 0)
        port = ntohs(sin.sin_port);
    close(fd);
    return port;
}

/* Connects to 127.0.0.1:port with a non-blocking connect bounded by timeout_ms; fd or -1. */
static int connect_port(int port, int timeout_ms)
{
    struct sockaddr_in sin;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_port = htons((uint16_t)port);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
        struct pollfd p = {fd, POLLOUT, 0};
        int soerr = 0;
        socklen_t sl = sizeof(soerr);
        if (errno != EINPROGRESS || poll(&p, 1, timeout_ms) != 1 ||
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr != 0) {
            close(fd);
            return -1;
        }
    }
    return fd;
}

/* Writes all of buf before deadline; 0 or -1. */
static int write_all(int fd, const char *buf, size_t len, int64_t deadline)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n > 0) {
            buf += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            return -1;
        struct pollfd p = {fd, POLLOUT, 0};
        int64_t left = deadline - th_now_ms();
        if (left <= 0 || poll(&p, 1, (int)left) < 0)
            return -1;
    }
    return 0;
}

/* Reads until buf holds want bytes; 0 or -1 (EOF, error, deadline). */
static int read_until(int fd, char *buf, size_t cap, size_t *have, size_t want, int64_t deadline)
{
    if (want > cap)
        return -1;
    while (*have < want) {
        ssize_t n = read(fd, buf + *have, cap - *have);
        if (n > 0) {
            *have += (size_t)n;
            continue;
        }
        if (n == 0 || (errno != EAGAIN && errno != EINTR))
            return -1;
        struct pollfd p = {fd, POLLIN, 0};
        int64_t left = deadline - th_now_ms();
        if (left <= 0 || poll(&p, 1, (int)left) < 0)
            return -1;
    }
    return 0;
}

/* Reads one reply and renders it as th_redis_cmd describes. */
static int read_reply(int fd, char *out, size_t outlen, int64_t deadline)
{
    char buf[8192];
    size_t have = 0;
    char *eol = NULL;
    while ((eol = memmem(buf, have, "\r\n", 2)) == NULL) {
        if (read_until(fd, buf, sizeof(buf) - 1, &have, have + 1, deadline) != 0)
            return -1;
    }
    *eol = '\0';
    size_t head = (size_t)(eol - buf) + 2;
    if (buf[0] == '$') {
        long len = strtol(buf + 1, NULL, 10);
        if (len < 0) {
            snprintf(out, outlen, "(nil)");
            return 0;
        }
        if (read_until(fd, buf, sizeof(buf) - 1, &have, head + (size_t)len + 2, deadline) != 0)
            return -1;
        snprintf(out, outlen, "%.*s", (int)len, buf + head);
        return 0;
    }
    snprintf(out, outlen, "%s", buf);
    return 0;
}

/* Formats one command in RESP into a malloc'd buffer; NULL when out of memory. */
static char *format_cmd(int argc, const char *const *argv, size_t *len)
{
    size_t cap = 32;
    for (int i = 0; i < argc; i++)
        cap += strlen(argv[i]) + 32;
    char *buf = malloc(cap);
    if (buf == NULL)
        return NULL;
    size_t n = (size_t)snprintf(buf, cap, "*%d\r\n", argc);
    for (int i = 0; i < argc; i++) {
        size_t alen = strlen(argv[i]);
        n += (size_t)snprintf(buf + n, cap - n, "$%zu\r\n", alen);
        memcpy(buf + n, argv[i], alen);
        memcpy(buf + n + alen, "\r\n", 2);
        n += alen + 2;
    }
    *len = n;
    return buf;
}

int th_redis_cmd(const th_redis *s, char *out, size_t outlen, int argc, const char *const *argv)
{
    int64_t deadline = th_now_ms() + 2000;
    int rc = -1;
    char tmp[256];
    size_t len = 0;
    char *cmd = NULL;
    int fd = connect_port(s->port, 2000);
    if (fd < 0)
        return -1;
    if (s->password[0] != '\0') {
        const char *auth[] = {"AUTH", s->password};
        cmd = format_cmd(2, auth, &len);
        if (cmd == NULL || write_all(fd, cmd, len, deadline) != 0 ||
            read_reply(fd, tmp, sizeof(tmp), deadline) != 0)
            goto out;
        free(cmd);
    }
    cmd = format_cmd(argc, argv, &len);
    if (cmd == NULL || write_all(fd, cmd, len, deadline) != 0 ||
        read_reply(fd, out, outlen, deadline) != 0)
        goto out;
    rc = 0;
out:
    free(cmd);
    close(fd);
    return rc;
}

int th_redis_do(const th_redis *s, ...)
{
    const char *argv[32];
    int argc = 0;
    char out[256];
    va_list ap;
    va_start(ap, s);
    for (const char *a; argc < 32 && (a = va_arg(ap, const char *)) != NULL;)
        argv[argc++] = a;
    va_end(ap);
    if (th_redis_cmd(s, out, sizeof(out), argc, argv) != 0)
        return -1;
    return out[0] == '-' ? -1 : 0;
}

/* Forks redis-server on s->port in s->dir, its output into s->dir/redis.log. */
static pid_t spawn_server(const th_redis *s)
{
    char port[16], log[192];
    snprintf(port, sizeof(port), "%d", s->port);
    snprintf(log, sizeof(log), "%s/redis.log", s->dir);
    const char *argv[20] = {
        "redis-server", "--port", port,    "--bind", "127.0.0.1",   "--save", "",
        "--appendonly", "no",     "--dir", s->dir,   "--daemonize", "no"};
    int n = 13;
    if (s->password[0] != '\0') {
        argv[n++] = "--requirepass";
        argv[n++] = s->password;
    }
    argv[n] = NULL;
    return th_spawn(log, argv);
}

/* Starts the server on s->port and waits for PING; 0, or -1 with nothing left running. */
static int up(th_redis *s)
{
    s->pid = spawn_server(s);
    if (s->pid < 0) {
        s->pid = 0;
        return -1;
    }
    int64_t end = th_now_ms() + 5000;
    while (th_now_ms() < end) {
        int ws;
        if (waitpid(s->pid, &ws, WNOHANG) == s->pid) {
            s->pid = 0;
            return -1;
        }
        char out[64];
        const char *ping[] = {"PING"};
        if (th_redis_cmd(s, out, sizeof(out), 1, ping) == 0 && strcmp(out, "+PONG") == 0)
            return 0;
        th_sleep_ms(10);
    }
    th_redis_kill(s);
    return -1;
}

int th_redis_start(th_redis *s, const char *password)
{
    memset(s, 0, sizeof(*s));
    snprintf(s->dir, sizeof(s->dir), "/tmp/ringd-redis.XXXXXX");
    if (mkdtemp(s->dir) == NULL) {
        s->dir[0] = '\0';
        return -1;
    }
    snprintf(s->password, sizeof(s->password), "%s", password != NULL ? password : "");
    for (int attempt = 0; attempt < 5; attempt++) {
        s->port = free_port();
        if (s->port <= 0)
            continue;
        snprintf(s->url, sizeof(s->url), "redis://127.0.0.1:%d", s->port);
        if (up(s) == 0)
            return 0;
    }
    th_redis_stop(s);
    return -1;
}

int th_redis_kill(th_redis *s)
{
    int rc = 0;
    if (s->pid <= 0)
        return 0;
    kill(s->pid, SIGTERM);
    if (th_wait_pid(s->pid, 5000) == -1) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
        rc = -1;
    }
    s->pid = 0;
    return rc;
}

int th_redis_restart(th_redis *s, const char *password)
{
    th_redis_kill(s);
    snprintf(s->password, sizeof(s->password), "%s", password != NULL ? password : "");
    /* The port was ours a moment ago; a stranger may take it, so a few tries. */
    for (int attempt = 0; attempt < 20; attempt++) {
        if (up(s) == 0)
            return 0;
        th_sleep_ms(50);
    }
    return -1;
}

/* nftw callback: removes one entry. */
static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void th_redis_stop(th_redis *s)
{
    th_redis_kill(s);
    if (s->dir[0] != '\0')
        nftw(s->dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    s->dir[0] = '\0';
}
