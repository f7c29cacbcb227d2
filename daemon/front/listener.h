/* The Unix socket clients connect to: one daemon per socket, guarded by a lock file. */
#ifndef RD_LISTENER_H
#define RD_LISTENER_H

#include <stddef.h>

struct event_base;
typedef struct rd_listener rd_listener;

/* Called on the loop with each accepted connection (non-blocking, close-on-exec). */
typedef void (*rd_accept_fn)(int fd, void *arg);

/* Creates the socket's directory, takes PATH.lock (refusing when a live daemon holds it),
 * replaces a stale socket file, binds with mode 0660 and listens. Returns NULL with err set. */
rd_listener *rd_listener_new(struct event_base *base, const char *path, rd_accept_fn fn, void *arg,
                             char *err, size_t errlen);

/* Stops listening and removes the socket and lock files. rd_listener_free(NULL) is a no-op. */
void rd_listener_free(rd_listener *l);

#endif
