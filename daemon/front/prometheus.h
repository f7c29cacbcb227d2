/* Prometheus metrics: the text exposition of the daemon's counters, its jobs' series and their
 * rings' links, served at /metrics over HTTP on --metrics-listen (libevent's evhttp) and to
 * `ringctl metrics` over the socket. Loop thread only. */
#ifndef RD_PROMETHEUS_H
#define RD_PROMETHEUS_H

#include <stddef.h>

#include "frame.h"

struct evbuffer;
struct rd_front;
struct rd_session;

typedef struct rd_prom_http rd_prom_http;

/* Serves f's metrics on listen ("HOST:PORT", "[V6]:PORT"; port 0 picks a free one) on f's loop,
 * and writes the bound address into f->metrics_address. Returns the server (the caller's,
 * rd_prom_http_free), or NULL with err set ("metrics listen 0.0.0.0:80: Permission denied"). */
rd_prom_http *rd_prom_http_new(struct rd_front *f, const char *listen, char *err, size_t errlen);

/* Stops serving; requests under way are dropped. NULL is a no-op. */
void rd_prom_http_free(rd_prom_http *h);

/* Appends f's metrics in the Prometheus text format (version 0.0.4) to out. Returns 0, or -1
 * when out of memory (out then holds part of it). */
int rd_prom_text(struct rd_front *f, struct evbuffer *out);

/* The MetricsRequest handler: answers MetricsReply{text} (ringctl metrics). Loop thread. */
void rd_prom_request(struct rd_session *s, const rd_msg *req);

#endif
