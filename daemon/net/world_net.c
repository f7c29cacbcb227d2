/* The daemon-wide network context of multi-node jobs: the ring key, the peer listener and
 * dialler, the rendezvous, and the address peers dial; views and peers' connections are handed
 * to the job's world they name. */
#define _GNU_SOURCE
#include "world_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

/* The rendezvous' new view of a job: kept as the latest, applied when the ring can change. */
static void on_view(void *arg, const char *job, const rd_rdv_view *v)
{
    rd_net *net = arg;
    rd_world *w = world_of(net, job);
    if (w == NULL || w->state == W_IDLE)
        return;
    if (world_view_copy(&w->latest, v) != 0) {
        rd_log(RD_LOG_ERROR, "world", "job '%s': out of memory", job);
        return;
    }
    world_apply_view(w);
}

/* Reads the first line of a file (a password). */
static int read_secret(const char *path, char *buf, size_t len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (fgets(buf, (int)len, f) == NULL)
        buf[0] = '\0';
    fclose(f);
    buf[strcspn(buf, "\r\n")] = '\0';
    return 0;
}

rd_net *rd_net_new(struct event_base *base, const rd_config *cfg, rd_counters *counters, char *err,
                   size_t errlen)
{
    rd_net *net = calloc(1, sizeof(*net));
    char password[512] = "";
    if (net == NULL || rd_auth_init() != 0) {
        snprintf(err, errlen, "cannot initialise the crypto library");
        free(net);
        return NULL;
    }
    net->base = base;
    net->cfg = cfg;
    net->counters = counters;
    if (cfg->insecure) {
        rd_auth_insecure(&net->key);
        rd_log(RD_LOG_WARN, "world", "--insecure: peers are not authenticated");
    } else if (rd_auth_load(&net->key, cfg->key_file, err, errlen) != 0) {
        goto fail;
    }
    if (cfg->redis_password_file[0] != '\0' &&
        read_secret(cfg->redis_password_file, password, sizeof(password), err, errlen) != 0)
        goto fail;
    if (getrandom(&net->incarnation, sizeof(net->incarnation), 0) != sizeof(net->incarnation))
        net->incarnation = (uint64_t)getpid() << 32 ^ (uint64_t)time(NULL);
    net->peers = rd_peer_net_new(base, cfg->listen, &net->key, (int)cfg->encrypt, cfg->handshake_ms,
                                 world_on_peer, net, err, errlen);
    if (net->peers == NULL)
        goto fail;
    const char *adv = cfg->advertise[0] != '\0' ? cfg->advertise : rd_peer_net_address(net->peers);
    snprintf(net->address, sizeof(net->address), "%s", adv);
    rd_rdv_options o = {
        .url = cfg->redis_url,
        .password = password[0] != '\0' ? password : NULL,
        .lease_ms = cfg->lease_ttl,
        .on_view = on_view,
        .arg = net,
    };
    net->rdv = rd_rdv_new(base, &o, err, errlen);
    memset(password, 0, sizeof(password));
    if (net->rdv == NULL)
        goto fail;
    rd_log(RD_LOG_INFO, "world", "node %s: peers connect to %s (listening on %s); rendezvous %s",
           cfg->node, net->address, rd_peer_net_address(net->peers), cfg->redis_url);
    return net;
fail:
    rd_net_free(net);
    return NULL;
}

void rd_net_free(rd_net *net)
{
    if (net == NULL)
        return;
    while (net->worlds != NULL) /* left, still passing messages on: the daemon ends */
        world_destroy(net->worlds);
    rd_rdv_free(net->rdv);
    rd_peer_net_free(net->peers);
    free(net);
}

int rd_net_leaving(const rd_net *net)
{
    int n = 0;
    for (const rd_world *w = net != NULL ? net->worlds : NULL; w != NULL; w = w->next)
        n += w->state == W_LEAVING;
    return n;
}

const char *rd_net_address(const rd_net *net)
{
    return net != NULL ? net->address : "";
}

int rd_net_interface(const rd_net *net, char *buf, size_t len)
{
    char host[128];
    unsigned char want[16], have[16];
    struct ifaddrs *ifs, *i;
    int found = -1;
    if (net == NULL)
        return -1;
    /* "10.0.0.3:7070" or "[fd00::3]:7070": the host part, without brackets */
    const char *a = net->address, *colon = strrchr(a, ':');
    if (colon == NULL || (size_t)(colon - a) >= sizeof(host))
        return -1;
    int bracket = a[0] == '[';
    snprintf(host, sizeof(host), "%.*s", (int)(colon - a) - 2 * bracket, a + bracket);
    int family = inet_pton(AF_INET, host, want) == 1    ? AF_INET
                 : inet_pton(AF_INET6, host, want) == 1 ? AF_INET6
                                                        : 0;
    if (family == 0 || getifaddrs(&ifs) != 0)
        return -1; /* a name: the interface is not known here */
    for (i = ifs; i != NULL && found != 0; i = i->ifa_next) {
        if (i->ifa_addr == NULL || i->ifa_addr->sa_family != family)
            continue;
        size_t n = family == AF_INET ? 4 : 16;
        memcpy(have,
               family == AF_INET ? (void *)&((struct sockaddr_in *)i->ifa_addr)->sin_addr
                                 : (void *)&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr,
               n);
        if (memcmp(have, want, n) == 0) {
            snprintf(buf, len, "%s", i->ifa_name);
            found = 0;
        }
    }
    freeifaddrs(ifs);
    return found;
}

int rd_net_redis_connected(const rd_net *net)
{
    return net != NULL && net->rdv != NULL && rd_rdv_connected(net->rdv);
}

int64_t rd_net_redis_rtt_us(const rd_net *net)
{
    return net != NULL ? rd_rdv_rtt_us(net->rdv) : -1;
}
