/* Host name lookups off the event loop, over libevent's evdns: the answer always comes on a later
 * loop turn, never from within the call, and a resolver freed while lookups are cancelled stays
 * alive until their cancellations have come back (evdns reports them a turn later). Loop thread
 * only. */
#ifndef RD_RESOLVE_H
#define RD_RESOLVE_H

#include <sys/socket.h>

struct event_base;

typedef struct rd_resolver rd_resolver;
typedef struct rd_lookup rd_lookup;

/* The answer to one lookup: sa (len bytes; an IPv4 address when there is one) or, with sa NULL,
 * why not. */
typedef void (*rd_resolve_fn)(void *arg, const struct sockaddr *sa, socklen_t len, const char *why);

/* A resolver with the system's configuration (resolv.conf, hosts). Returns NULL when evdns
 * cannot start. */
rd_resolver *rd_resolver_new(struct event_base *base);

/* Cancels nothing itself (cancel the lookups first); the resolver goes once no lookup is left.
 * NULL is a no-op. */
void rd_resolver_free(rd_resolver *r);

/* Looks host up for port (a number, or NULL): fn(arg, ...) follows on a later loop turn unless
 * cancelled. Returns NULL when out of memory. */
rd_lookup *rd_resolve(rd_resolver *r, const char *host, const char *port, rd_resolve_fn fn,
                      void *arg);

/* fn will not be called. NULL is a no-op. */
void rd_lookup_cancel(rd_lookup *l);

#endif
