/* NCCL's unique ids and their roots, with the real libnccl.so.2 (no GPU needed: ids are made on
 * the host), as the daemon makes them through the transport:
 *   - set-up at start chooses NCCL's socket interface: the root of every id made afterwards
 *     listens on it (the id's address is 127.0.0.1 for "lo"), and an operator's
 *     NCCL_SOCKET_IFNAME is left as it is;
 *   - an id's root (a thread and a listening socket in the process that makes it) lives in a
 *     helper process: making ids adds no thread or file to this one, at most 64 are held at
 *     once (one more is refused, saying why), and an id whose communicator never forms lets its
 *     helper go when the communicator fails to start or is aborted.
 * Without libnccl.so.2 it prints one line saying why and exits 77 (meson's skip). */
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "backend.h"
#include "cuda_dev.h"
#include "nccl_transport.h"

#define ROOTS 64 /* held at most */

static int failed;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            printf("FAIL: " __VA_ARGS__);                                                          \
            printf("\n");                                                                          \
            failed = 1;                                                                            \
        }                                                                                          \
    } while (0)

static int entries(const char *dir)
{
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    if (d != NULL)
        closedir(d);
    return n;
}

/* The first len - 1 bytes of /proc/<pid>/<what> into buf, 0-terminated; how many. */
static size_t proc_read(int pid, const char *what, char *buf, size_t len)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/%s", pid, what);
    FILE *f = fopen(path, "r");
    size_t got = f != NULL ? fread(buf, 1, len - 1, f) : 0;
    if (f != NULL)
        fclose(f);
    buf[got] = '\0';
    return got;
}

/* This process's children, their pids into pids[0..max). */
static int children(int *pids, int max)
{
    int n = 0;
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        char buf[512];
        int pid = atoi(e->d_name), ppid = 0;
        if (pid <= 0 || proc_read(pid, "stat", buf, sizeof(buf)) == 0)
            continue;
        const char *close_paren = strrchr(buf, ')');
        if (close_paren != NULL && sscanf(close_paren + 2, "%*c %d", &ppid) == 1 &&
            ppid == getpid() && n < max)
            pids[n++] = pid;
    }
    if (d != NULL)
        closedir(d);
    return n;
}

/* The value of name in process pid's environment, into buf ("" when absent). */
static void env_of(int pid, const char *name, char *buf, size_t len)
{
    static char all[65536];
    size_t got = proc_read(pid, "environ", all, sizeof(all)), nl = strlen(name);
    buf[0] = '\0';
    for (size_t i = 0; i < got; i += strlen(all + i) + 1)
        if (strncmp(all + i, name, nl) == 0 && all[i + nl] == '=')
            snprintf(buf, len, "%s", all + i + nl + 1);
}

int main(int argc, char **argv)
{
    int rc = rd_nccl_root_main(argc, argv);
    if (rc >= 0)
        return rc; /* this program started as an id's root */
    const rd_transport_ops *ops = &rd_nccl_ops;
    char err[512] = "", value[128];
    if (ops->probe(err, sizeof(err)) != 0) {
        printf("SKIP tests/gpu/test_nccl_root: %s\n", err);
        return strstr(err, "no NCCL library") != NULL ? 77 : 1;
    }

    /* set-up: chooses the interface, or leaves the operator's */
    setenv("NCCL_SOCKET_IFNAME", "=eth9", 1);
    CHECK(ops->setup("lo", err, sizeof(err)) == 0, "setup overrode the operator's choice");
    CHECK(strcmp(getenv("NCCL_SOCKET_IFNAME"), "=eth9") == 0, "NCCL_SOCKET_IFNAME is now %s",
          getenv("NCCL_SOCKET_IFNAME"));
    unsetenv("NCCL_SOCKET_IFNAME");
    CHECK(ops->setup("lo", err, sizeof(err)) == 1, "setup did not choose lo: %s", err);
    CHECK(getenv("NCCL_SOCKET_IFNAME") != NULL && strcmp(getenv("NCCL_SOCKET_IFNAME"), "=lo") == 0,
          "NCCL_SOCKET_IFNAME is %s after setup", getenv("NCCL_SOCKET_IFNAME"));

    /* on a GPU, the driver's own threads and files come first */
    int gpu = rd_cuda_load(err, sizeof(err)) > 0 && rd_cuda_use(0, err, sizeof(err)) == 0;
    /* a file of this process that is not close-on-exec (a library's socket, say) */
    char marker[64];
    snprintf(marker, sizeof(marker), "/tmp/test_nccl_root.%d", (int)getpid());
    int marker_fd = open(marker, O_CREAT | O_RDWR, 0600);
    int threads = entries("/proc/self/task"), fds = entries("/proc/self/fd");
    uint8_t id[RD_TRANSPORT_ID_MAX];
    size_t len = 0;
    if (ops->make_id(id, &len, err, sizeof(err)) != 0) {
        printf("FAIL: make_id: %s\n", err);
        return 1;
    }
    /* the id: 8 bytes of magic, then the root's socket address (NCCL 2.28's layout) */
    struct sockaddr_in sa;
    memcpy(&sa, id + 8, sizeof(sa));
    char ip[64] = "?";
    inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof(ip));
    CHECK(len == 128, "an id of %zu bytes", len);
    CHECK(sa.sin_family == AF_INET && strcmp(ip, "127.0.0.1") == 0,
          "the id's root listens on family %d address %s, not lo's 127.0.0.1", sa.sin_family, ip);
    int pids[64], n = children(pids, 64);
    CHECK(n == 1 && rd_nccl_roots_held() == 1, "%d helpers, %d roots held after one id", n,
          rd_nccl_roots_held());
    if (n >= 1) {
        env_of(pids[0], "NCCL_SOCKET_IFNAME", value, sizeof(value));
        CHECK(strcmp(value, "=lo") == 0, "the root's NCCL_SOCKET_IFNAME is '%s'", value);
        char dir[64], path[400], target[300];
        snprintf(dir, sizeof(dir), "/proc/%d/fd", pids[0]);
        DIR *d = opendir(dir);
        struct dirent *e;
        while (d != NULL && (e = readdir(d)) != NULL) {
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            ssize_t tn = readlink(path, target, sizeof(target) - 1);
            target[tn > 0 ? tn : 0] = '\0';
            CHECK(strcmp(target, marker) != 0, "the root holds this process's file %s", marker);
        }
        if (d != NULL)
            closedir(d);
    }
    close(marker_fd);
    unlink(marker);
    fds--;

    /* ids whose communicators never form: no thread or file of this process holds them, at
     * most 64 are held (one more is refused, saying why), and each goes with its communicator */
    static uint8_t ids[ROOTS][RD_TRANSPORT_ID_MAX];
    memcpy(ids[0], id, len);
    for (int k = 1; k < ROOTS; k++)
        if (ops->make_id(ids[k], &len, err, sizeof(err)) != 0) {
            printf("FAIL: make_id %d: %s\n", k, err);
            return 1;
        }
    CHECK(entries("/proc/self/task") == threads, "%d threads after %d ids, %d before",
          entries("/proc/self/task"), ROOTS, threads);
    CHECK(entries("/proc/self/fd") <= fds + ROOTS,
          "%d files after %d ids, %d before (each "
          "helper's stdin at most)",
          entries("/proc/self/fd"), ROOTS, fds);
    n = children(pids, 2 * ROOTS);
    CHECK(n == ROOTS && rd_nccl_roots_held() == ROOTS, "%d helpers, %d roots held after %d ids", n,
          rd_nccl_roots_held(), ROOTS);
    uint8_t more[RD_TRANSPORT_ID_MAX];
    CHECK(ops->make_id(more, &len, err, sizeof(err)) != 0 && strstr(err, "64 NCCL ids") != NULL,
          "an id past %d: '%s'", ROOTS, err);
    int formed_none = 1;
    for (int k = 0; k < ROOTS; k++) { /* a communicator of 2 that never forms */
        rd_transport *t = ops->init(ids[k], 128, 2, 0, 0, 1000, err, sizeof(err));
        if (t != NULL) { /* on a GPU: it forms no further than rank 0 */
            formed_none &= ops->poll(t, err, sizeof(err)) != 0;
            ops->abort(t);
        }
    }
    CHECK(formed_none, "a communicator of 2 formed with one rank");
    n = children(pids, 2 * ROOTS);
    CHECK(n == 0 && rd_nccl_roots_held() == 0,
          "%d helpers, %d roots held once every "
          "communicator failed or was aborted",
          n, rd_nccl_roots_held());
    /* without a GPU no communicator started: nothing but the helpers' pipes was opened */
    CHECK(gpu || entries("/proc/self/fd") <= fds, "%d files after every id went, %d before",
          entries("/proc/self/fd"), fds);
    CHECK(ops->make_id(more, &len, err, sizeof(err)) == 0, "an id once they went: %s", err);
    ops->abort(ops->init(more, 128, 2, 0, 0, 1000, err, sizeof(err)));
    if (!failed)
        printf("NCCL ids: %d made, roots on lo in helpers, one more refused, none left "
               "(this process: %d threads, %d files)\n",
               ROOTS + 1, threads, fds);
    return failed;
}
