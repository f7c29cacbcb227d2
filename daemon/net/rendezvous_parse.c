/* What the rendezvous writes to Redis and reads back from it, as pure functions: member records,
 * stream ids, script replies (views), and the Redis URL. What Redis returns is untrusted (any
 * client of the Redis may have written it); the fuzz harnesses in tests/fuzz drive these. */
#define _GNU_SOURCE
#include "rendezvous.h"

#include "log.h"

#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SUBSYS "rendezvous"

#define RDV_MEMBERS_MAX 65536

/* Parses a decimal unsigned number of exactly len bytes, at most max; 0 or -1. */
static int parse_u64(const char *s, size_t len, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    if (len == 0 || len > 20)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    if (v > max)
        return -1;
    *out = v;
    return 0;
}

/* 1 when addr is 1..RD_ADDR_MAX-1 printable, non-blank bytes. */
static int addr_valid(const char *s, size_t len)
{
    if (len == 0 || len >= RD_ADDR_MAX)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (s[i] <= 0x20 || s[i] > 0x7e)
            return 0;
    return 1;
}

/* See rendezvous.h: "3 <incarnation> <local_size> <world_size> <min_size> <since> <addr>". */
void rd_rdv_record_format(const rd_rdv_member *m, char *buf, size_t len)
{
    snprintf(buf, len, "3 %" PRIu64 " %" PRIu32 " %" PRIu32 " %" PRIu32 " %" PRIu64 " %s",
             m->incarnation, m->local_size, m->world_size, m->min_size, m->since, m->addr);
}

/* See rendezvous.h: a record read from Redis (untrusted), version 3 as written by
 * rd_rdv_record_format or an older daemon's 2 (without since, read as 0) or 1 (without min_size
 * either). */
rd_status rd_rdv_record_parse(const char *s, size_t len, rd_rdv_member *m)
{
    const char *tok[7];
    size_t tlen[7];
    size_t n = 0, i = 0, want;
    uint64_t v;
    if (len < 2 || len > RD_RDV_RECORD_MAX || memchr(s, '\0', len) != NULL || s[1] != ' ')
        return RINGD_E_PROTOCOL;
    if (s[0] == '1')
        want = 5;
    else if (s[0] == '2')
        want = 6;
    else if (s[0] == '3')
        want = 7;
    else
        return RINGD_E_PROTOCOL;
    while (i < len && n < want) {
        size_t start = i;
        if (n < want - 1) {
            while (i < len && s[i] != ' ')
                i++;
        } else {
            i = len; /* the address is the rest */
        }
        tok[n] = s + start;
        tlen[n] = i - start;
        n++;
        if (i < len)
            i++; /* one space */
    }
    if (n != want || tlen[0] != 1)
        return RINGD_E_PROTOCOL;
    if (parse_u64(tok[1], tlen[1], UINT64_MAX, &m->incarnation) != 0)
        return RINGD_E_PROTOCOL;
    if (parse_u64(tok[2], tlen[2], UINT32_MAX, &v) != 0)
        return RINGD_E_PROTOCOL;
    m->local_size = (uint32_t)v;
    if (parse_u64(tok[3], tlen[3], UINT32_MAX, &v) != 0)
        return RINGD_E_PROTOCOL;
    m->world_size = (uint32_t)v;
    m->min_size = 0;
    m->since = 0;
    if (want >= 6) {
        if (parse_u64(tok[4], tlen[4], UINT32_MAX, &v) != 0)
            return RINGD_E_PROTOCOL;
        m->min_size = (uint32_t)v;
    }
    if (want == 7 && parse_u64(tok[5], tlen[5], UINT64_MAX, &m->since) != 0)
        return RINGD_E_PROTOCOL;
    if (!addr_valid(tok[want - 1], tlen[want - 1]))
        return RINGD_E_PROTOCOL;
    memcpy(m->addr, tok[want - 1], tlen[want - 1]);
    m->addr[tlen[want - 1]] = '\0';
    return RINGD_OK;
}

/* Splits a stream id "ms-seq" into its numbers; 0, or -1 when it is not one. */
static int id_parse(const char *s, size_t len, uint64_t *ms, uint64_t *seq)
{
    const char *dash = memchr(s, '-', len);
    if (len >= RD_RDV_ID_MAX || dash == NULL)
        return -1;
    size_t a = (size_t)(dash - s);
    if (parse_u64(s, a, UINT64_MAX, ms) != 0 ||
        parse_u64(dash + 1, len - a - 1, UINT64_MAX, seq) != 0)
        return -1;
    return 0;
}

/* See rendezvous.h. */
int rd_rdv_id_after(const char *a, const char *b)
{
    uint64_t ams, aseq, bms, bseq;
    if (id_parse(a, strlen(a), &ams, &aseq) != 0 || id_parse(b, strlen(b), &bms, &bseq) != 0)
        return 1;
    return ams > bms || (ams == bms && aseq > bseq);
}

/* See rendezvous.h. */
void rd_rdv_view_free(rd_rdv_view *v)
{
    if (v == NULL)
        return;
    free(v->members);
    free(v);
}

/* The ring order: the members the job started with by node name, then those that joined the
 * running job in the order they joined. So members already there keep the lowest ranks and
 * rank 0 is a node that holds the job's state when another joins. */
static int member_cmp(const void *a, const void *b, void *arg)
{
    const rd_rdv_member *x = a, *y = b;
    uint64_t at = *(const uint64_t *)arg;
    uint64_t kx = x->since > at ? x->since : 0, ky = y->since > at ? y->since : 0;
    if (kx != ky)
        return kx < ky ? -1 : 1;
    return strcmp(x->node, y->node);
}

/* See rendezvous.h: a script reply {status, generation, last stream id, {node, record, ...},
 * started, soonest}, malformed members logged at debug. */
rd_rdv_view *rd_rdv_view_parse(const redisReply *rep, const char *job, char *status,
                               size_t statuslen, char *id, int64_t *soonest, size_t *nbad,
                               int *same)
{
    const char *why = NULL;
    rd_rdv_view *v = NULL;
    if (rep->type == REDIS_REPLY_ERROR) {
        rd_log(RD_LOG_WARN, SUBSYS, "job %s: script failed: %s", job, rep->str);
        return NULL;
    }
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 6) {
        why = "not a 6-element array";
        goto bad;
    }
    const redisReply *st = rep->element[0], *gen = rep->element[1], *last = rep->element[2],
                     *hash = rep->element[3], *started = rep->element[4], *pttl = rep->element[5];
    uint64_t ms, seq;
    if (st->type != REDIS_REPLY_STRING || st->len >= statuslen) {
        why = "bad status";
        goto bad;
    }
    if (gen->type != REDIS_REPLY_INTEGER || gen->integer < 0) {
        why = "bad generation";
        goto bad;
    }
    if (last->type != REDIS_REPLY_STRING || id_parse(last->str, last->len, &ms, &seq) != 0) {
        why = "bad stream id";
        goto bad;
    }
    *same = hash->type == REDIS_REPLY_NIL;
    if (!*same && (hash->type != REDIS_REPLY_ARRAY || hash->elements % 2 != 0 ||
                   hash->elements / 2 > RDV_MEMBERS_MAX)) {
        why = "bad member list";
        goto bad;
    }
    uint64_t started_at = 0;
    if ((started->type != REDIS_REPLY_NIL && started->type != REDIS_REPLY_STRING) ||
        (started->type == REDIS_REPLY_STRING &&
         parse_u64(started->str, started->len, UINT64_MAX, &started_at) != 0)) {
        why = "bad started flag";
        goto bad;
    }
    if (pttl->type != REDIS_REPLY_INTEGER || pttl->integer < -1) {
        why = "bad lease time";
        goto bad;
    }
    memcpy(status, st->str, st->len);
    status[st->len] = '\0';
    memcpy(id, last->str, last->len);
    id[last->len] = '\0';
    v = calloc(1, sizeof(*v));
    if (v == NULL)
        goto oom;
    v->generation = (uint64_t)gen->integer;
    v->started = started->type == REDIS_REPLY_STRING;
    v->started_at = started_at;
    *soonest = pttl->integer;
    if (*same)
        return v;
    if (hash->elements > 0) {
        v->members = calloc(hash->elements / 2, sizeof(*v->members));
        if (v->members == NULL)
            goto oom;
    }
    for (size_t i = 0; i + 1 < hash->elements; i += 2) {
        const redisReply *k = hash->element[i], *val = hash->element[i + 1];
        rd_rdv_member *m = &v->members[v->nmembers];
        if (k->type != REDIS_REPLY_STRING || val->type != REDIS_REPLY_STRING ||
            k->len > RD_NAME_MAX || memchr(k->str, '\0', k->len) != NULL) {
            rd_log(RD_LOG_DEBUG, SUBSYS, "job %s: member entry %zu is malformed; ignored", job,
                   i / 2);
            (*nbad)++;
            continue;
        }
        memcpy(m->node, k->str, k->len);
        m->node[k->len] = '\0';
        if (!rd_name_valid(m->node) || rd_rdv_record_parse(val->str, val->len, m) != 0) {
            rd_log(RD_LOG_DEBUG, SUBSYS, "job %s: member record %zu is malformed; ignored", job,
                   i / 2);
            memset(m, 0, sizeof(*m));
            (*nbad)++;
            continue;
        }
        v->nmembers++;
    }
    if (v->nmembers > 1)
        qsort_r(v->members, v->nmembers, sizeof(*v->members), member_cmp, &started_at);
    return v;
bad:
    rd_log(RD_LOG_WARN, SUBSYS, "job %s: malformed reply from Redis (%s); ignored", job, why);
    return NULL;
oom:
    rd_log(RD_LOG_ERROR, SUBSYS, "job %s: out of memory parsing a view", job);
    rd_rdv_view_free(v);
    return NULL;
}

/* See rendezvous.h. */
int rd_rdv_member_valid(const rd_rdv_member *m)
{
    return rd_name_valid(m->node) && addr_valid(m->addr, strnlen(m->addr, RD_ADDR_MAX));
}

/* See rendezvous.h: XREAD's {{key, {{id, {fields}}, ...}}, ...}, of which only the last id
 * matters. */
rd_status rd_rdv_stream_last_id(const redisReply *rep, const char **id, size_t *len)
{
    uint64_t ms, seq;
    *id = NULL;
    *len = 0;
    if (rep->type != REDIS_REPLY_ARRAY)
        return RINGD_E_PROTOCOL;
    for (size_t i = 0; i < rep->elements; i++) {
        const redisReply *s = rep->element[i];
        if (s->type != REDIS_REPLY_ARRAY || s->elements != 2 ||
            s->element[1]->type != REDIS_REPLY_ARRAY)
            continue;
        const redisReply *ents = s->element[1];
        for (size_t k = 0; k < ents->elements; k++) {
            const redisReply *e = ents->element[k];
            if (e->type == REDIS_REPLY_ARRAY && e->elements >= 1 &&
                e->element[0]->type == REDIS_REPLY_STRING &&
                id_parse(e->element[0]->str, e->element[0]->len, &ms, &seq) == 0) {
                *id = e->element[0]->str;
                *len = e->element[0]->len;
            }
        }
    }
    return *id != NULL ? 0 : -1;
}

/* See rendezvous.h. */
rd_status rd_rdv_url_parse(const char *url, char *host, size_t hostlen, int *port, int *db,
                           char *err, size_t errlen)
{
    const char *p, *h, *hend, *portp;
    uint64_t v;
    if (url == NULL || strncmp(url, "redis://", 8) != 0) {
        snprintf(err, errlen, "redis URL %s: expected redis://HOST:PORT[/DB]",
                 url != NULL ? url : "(none)");
        return RINGD_E_INVALID;
    }
    p = url + 8;
    if (*p == '[') {
        h = p + 1;
        hend = strchr(h, ']');
        if (hend == NULL) {
            snprintf(err, errlen, "redis URL %s: unterminated [", url);
            return RINGD_E_INVALID;
        }
        p = hend + 1;
    } else {
        h = p;
        p += strcspn(p, ":/@");
        hend = p;
        if (*p == '@') {
            snprintf(err, errlen,
                     "redis URL %s: credentials do not go in the URL; use the "
                     "password option",
                     url);
            return RINGD_E_INVALID;
        }
    }
    if (hend == h || (size_t)(hend - h) >= hostlen) {
        snprintf(err, errlen, "redis URL %s: bad host", url);
        return RINGD_E_INVALID;
    }
    memcpy(host, h, (size_t)(hend - h));
    host[hend - h] = '\0';
    if (*p != ':') {
        snprintf(err, errlen, "redis URL %s: missing :PORT", url);
        return RINGD_E_INVALID;
    }
    portp = ++p;
    p += strspn(p, "0123456789");
    if (parse_u64(portp, (size_t)(p - portp), 65535, &v) != 0 || v == 0) {
        snprintf(err, errlen, "redis URL %s: bad port", url);
        return RINGD_E_INVALID;
    }
    *port = (int)v;
    *db = 0;
    if (*p == '/' && p[1] != '\0') {
        const char *dbp = ++p;
        p += strspn(p, "0123456789");
        if (parse_u64(dbp, (size_t)(p - dbp), 1000000, &v) != 0) {
            snprintf(err, errlen, "redis URL %s: bad database number", url);
            return RINGD_E_INVALID;
        }
        *db = (int)v;
    } else if (*p == '/') {
        p++;
    }
    if (*p != '\0') {
        snprintf(err, errlen, "redis URL %s: unexpected '%s'", url, p);
        return RINGD_E_INVALID;
    }
    return RINGD_OK;
}
