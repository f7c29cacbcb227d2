/* Host name lookups through evdns, answered on a later loop turn. */
#include "resolve.h"

#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rd_resolver {
    struct event_base *base;
    struct evdns_base *dns;
    int pending; /* lookups not yet finished (answered, or their cancellation back) */
    int freed;   /* rd_resolver_free was called: goes with the last lookup */
};

struct rd_lookup {
    rd_resolver *r;
    struct evdns_getaddrinfo_request *req; /* while evdns works on it */
    rd_resolve_fn fn;
    void *arg;
    int cancelled;
    struct event *ev; /* delivers the answer on a later turn; made up front, so it cannot fail */
    struct sockaddr_storage ss;
    socklen_t len; /* 0: failed, why says why */
    char why[128];
};

rd_resolver *rd_resolver_new(struct event_base *base)
{
    rd_resolver *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    r->base = base;
    r->dns = evdns_base_new(base, EVDNS_BASE_INITIALIZE_NAMESERVERS);
    if (r->dns == NULL) {
        free(r);
        return NULL;
    }
    return r;
}

static void resolver_maybe_free(rd_resolver *r)
{
    if (r->freed && r->pending == 0) {
        evdns_base_free(r->dns, 0);
        free(r);
    }
}

void rd_resolver_free(rd_resolver *r)
{
    if (r == NULL)
        return;
    r->freed = 1;
    resolver_maybe_free(r);
}

static void lookup_done(rd_lookup *l)
{
    rd_resolver *r = l->r;
    event_free(l->ev);
    free(l);
    r->pending--;
    resolver_maybe_free(r);
}

/* The answer's turn: the caller hears it unless it cancelled meanwhile. */
static void on_deliver(evutil_socket_t fd, short what, void *arg)
{
    rd_lookup *l = arg;
    (void)fd;
    (void)what;
    if (!l->cancelled)
        l->fn(l->arg, l->len > 0 ? (const struct sockaddr *)&l->ss : NULL, l->len, l->why);
    lookup_done(l);
}

static void on_evdns(int result, struct evutil_addrinfo *res, void *arg)
{
    rd_lookup *l = arg;
    l->req = NULL;
    if (result == EVUTIL_EAI_CANCEL) {
        lookup_done(l);
        return;
    }
    const struct evutil_addrinfo *pick = NULL;
    for (const struct evutil_addrinfo *a = res; a != NULL; a = a->ai_next)
        if ((a->ai_family == AF_INET || a->ai_family == AF_INET6) &&
            (pick == NULL || (pick->ai_family != AF_INET && a->ai_family == AF_INET)))
            pick = a;
    if (result == 0 && pick != NULL && pick->ai_addrlen <= sizeof(l->ss)) {
        memcpy(&l->ss, pick->ai_addr, pick->ai_addrlen);
        l->len = (socklen_t)pick->ai_addrlen;
    } else {
        snprintf(l->why, sizeof(l->why), "%s",
                 result != 0 ? evutil_gai_strerror(result) : "no IPv4 or IPv6 address");
    }
    if (res != NULL)
        evutil_freeaddrinfo(res);
    /* evdns may answer from within rd_resolve (hosts file): the caller hears it a turn later. */
    event_active(l->ev, EV_TIMEOUT, 0);
}

rd_lookup *rd_resolve(rd_resolver *r, const char *host, const char *port, rd_resolve_fn fn,
                      void *arg)
{
    rd_lookup *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return NULL;
    l->r = r;
    l->fn = fn;
    l->arg = arg;
    l->ev = evtimer_new(r->base, on_deliver, l);
    if (l->ev == NULL) {
        free(l);
        return NULL;
    }
    r->pending++;
    struct evutil_addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    /* NULL when answered at once: on_evdns has run and queued the answer. */
    l->req = evdns_getaddrinfo(r->dns, host, port, &hints, on_evdns, l);
    return l;
}

void rd_lookup_cancel(rd_lookup *l)
{
    if (l == NULL)
        return;
    l->cancelled = 1;
    if (l->req != NULL)
        evdns_getaddrinfo_cancel(l->req); /* its cancellation comes back later: on_evdns frees */
}
