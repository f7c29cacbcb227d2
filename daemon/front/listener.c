/* The Unix socket clients connect to: directory, lock file, stale-socket replacement, accept. */
#include "listener.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "config.h"
#include "log.h"

struct rd_listener {
    struct evconnlistener *ev;
    struct event *ev_resume; /* re-enables accepting after a failure */
    rd_accept_fn fn;
    void *arg;
    int lock_fd;
    char path[RD_PATH_MAX];
    char lock_path[RD_PATH_MAX + 8];
};

/* Creates every missing directory of path's parent with mode 0755. Returns 0 or -1 (errno). */
static int make_parent_dirs(const char *path)
{
    char dir[RD_PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL || slash == dir)
        return 0;
    *slash = '\0';
    for (char *p = dir + 1; *p != '\0'; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(dir, 0755) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return -1;
    return 0;
}

static void on_accept(struct evconnlistener *ev, evutil_socket_t fd, struct sockaddr *sa,
                      int socklen, void *arg)
{
    rd_listener *l = arg;
    (void)ev;
    (void)sa;
    (void)socklen;
    l->fn(fd, l->arg);
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
    rd_listener *l = arg;
    (void)fd;
    (void)what;
    evconnlistener_enable(l->ev);
}

/* EMFILE and friends: the pending connection stays readable, so accepting again at once would
 * spin. Pause for a while, then retry. */
static void on_accept_error(struct evconnlistener *ev, void *arg)
{
    rd_listener *l = arg;
    struct timeval pause = {0, 100 * 1000};
    rd_log(RD_LOG_ERROR, "listener", "accept on %s: %s; pausing 100 ms", l->path, strerror(errno));
    evconnlistener_disable(ev);
    evtimer_add(l->ev_resume, &pause);
}

rd_listener *rd_listener_new(struct event_base *base, const char *path, rd_accept_fn fn, void *arg,
                             char *err, size_t errlen)
{
    struct sockaddr_un sun;
    int fd = -1;
    rd_listener *l = calloc(1, sizeof(*l));
    if (l == NULL) {
        snprintf(err, errlen, "listener: out of memory");
        return NULL;
    }
    l->lock_fd = -1;
    l->fn = fn;
    l->arg = arg;
    if (strlen(path) >= sizeof(sun.sun_path)) {
        snprintf(err, errlen, "socket path %s is longer than %zu bytes", path,
                 sizeof(sun.sun_path) - 1);
        goto fail;
    }
    snprintf(l->path, sizeof(l->path), "%s", path);
    snprintf(l->lock_path, sizeof(l->lock_path), "%s.lock", path);

    if (make_parent_dirs(path) != 0) {
        snprintf(err, errlen, "mkdir for %s: %s", path, strerror(errno));
        goto fail;
    }
    l->lock_fd = open(l->lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (l->lock_fd < 0) {
        snprintf(err, errlen, "open %s: %s", l->lock_path, strerror(errno));
        goto fail;
    }
    if (flock(l->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        char owner[32] = "";
        ssize_t n = pread(l->lock_fd, owner, sizeof(owner) - 1, 0);
        owner[n > 0 ? n : 0] = '\0';
        owner[strcspn(owner, "\n")] = '\0';
        snprintf(err, errlen, "another ringd (pid %s) is already serving %s; stop it first",
                 owner[0] ? owner : "?", path);
        close(l->lock_fd);
        l->lock_fd = -1; /* the lock and socket are the other daemon's: leave them */
        l->path[0] = '\0';
        goto fail;
    }
    char pid[32];
    int plen = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
    if (ftruncate(l->lock_fd, 0) != 0 || pwrite(l->lock_fd, pid, (size_t)plen, 0) != plen)
        rd_log(RD_LOG_WARN, "listener", "cannot record pid in %s: %s", l->lock_path,
               strerror(errno));

    /* We hold the lock, so any socket file left here belongs to a daemon that died. */
    if (unlink(path) == 0)
        rd_log(RD_LOG_INFO, "listener", "replaced stale socket %s", path);

    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        goto fail;
    }
    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    memcpy(sun.sun_path, path, strlen(path) + 1);
    mode_t old = umask(0117);
    int brc = bind(fd, (struct sockaddr *)&sun, sizeof(sun));
    umask(old);
    if (brc != 0) {
        snprintf(err, errlen, "bind %s: %s", path, strerror(errno));
        goto fail;
    }
    if (chmod(path, 0660) != 0) {
        snprintf(err, errlen, "chmod 0660 %s: %s", path, strerror(errno));
        goto fail;
    }
    l->ev = evconnlistener_new(base, on_accept, l, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC,
                               128, fd);
    if (l->ev == NULL) {
        snprintf(err, errlen, "listen %s: %s", path, strerror(errno));
        goto fail;
    }
    evconnlistener_set_error_cb(l->ev, on_accept_error);
    l->ev_resume = evtimer_new(base, on_resume, l);
    if (l->ev_resume == NULL) {
        snprintf(err, errlen, "listener: out of memory");
        fd = -1; /* owned by the evconnlistener now */
        goto fail;
    }
    return l;

fail:
    if (fd >= 0)
        close(fd);
    rd_listener_free(l);
    return NULL;
}

void rd_listener_free(rd_listener *l)
{
    if (l == NULL)
        return;
    if (l->ev_resume != NULL)
        event_free(l->ev_resume);
    if (l->ev != NULL)
        evconnlistener_free(l->ev);
    if (l->lock_fd >= 0) {
        if (l->path[0] != '\0')
            unlink(l->path);
        unlink(l->lock_path);
        close(l->lock_fd);
    }
    free(l);
}
