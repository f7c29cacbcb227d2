/* Pods as test hosts (issue 5): deploy/k8s rendered with kustomize (tests/k8s/render.mjs), and the
 * pods of its ringd DaemonSet, its Redis Deployment and its example training Job started as a
 * kubelet would start them, on three "nodes" that are network namespaces behind a bridge whose own
 * namespace runs the Redis pod (as test_netfault does). What the pods run comes from the rendered
 * objects, not retyped here: init containers, command, args and env (downward API, $(VAR)
 * expansion, service links, the Job's completion index), the security context (user, groups,
 * fsGroup, capabilities, no_new_privs, through setpriv), volume mounts, the readiness and
 * liveness probes, the preStop hook, the termination grace period and the restart policy. What a
 * cluster provides is mapped, and nothing else: a node's name and IP; a directory per volume
 * (hostPath per node, emptyDir and Secrets per pod, the Secrets' files generated, owned and moded
 * as the kubelet does), values that start with a mount path (and mount paths in a shell script)
 * pointing into it; the Redis Service's name to the Redis pod's IP (cluster DNS); the image's
 * programs to the build's. One ringd pod is deleted (preStop, SIGTERM) and recreated under the
 * running Job, whose pod on that node fails and is restarted (OnFailure): training must go on with
 * identical parameters on every rank. Needs root, iproute2, setpriv, redis-server and redis-cli,
 * node and kubectl with tests/k8s/node_modules (tests/k8s/run.sh installs them): what this
 * machine lacks is skipped, saying why. Not emulated: read-only mounts and root file systems,
 * seccomp, resources, tcpSocket probes, scheduling (pod k of the Job runs on node k). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "ringd.h"

#define NNODES 3
#define NET "10.98.0."
#define REDIS_IP NET "254" /* the bridge's namespace: where the Redis Service's pod runs */
#define MAX_ARGS 64
#define MAX_ENV 128
#define MAX_MOUNTS 16
#define MAX_INIT 4
#define MAX_LINES 8192
#define READY_MS 30000 /* a ringd pod's readiness probe must pass within this */
#define INIT_MS 30000  /* an init container must be done within this */
#define WARM_STEPS 5   /* steps every rank prints at size 3 before the pod is deleted */
#define AWAY_STEPS 5   /* steps the other ranks print at size 2 before it comes back */

typedef struct {
    char name[8]; /* spec.nodeName: n0, n1, n2 */
    char ns[32];  /* its network namespace */
    char ip[16];  /* status.hostIP */
    char dir[160];
    /* its file system: a hostPath volume P is dir/P */
} k8s_node;

typedef struct {
    char path[256]; /* mountPath in the container */
    char dir[256];  /* where it is on the test machine */
} k8s_mount;

typedef struct k8s_pod k8s_pod;

/* A container as the kubelet runs it here. The JSON is borrowed from the render. */
typedef struct {
    const k8s_pod *pod;
    json_object *ctr;
    char what[96]; /* "pod ringd-n1, container ringd": for messages */
    k8s_mount mounts[MAX_MOUNTS];
    int nmounts;
    /* the kubelet's view of the environment: service links, then the container's env expanded,
     * in order (a later definition of a name wins); values unmapped */
    char *vname[MAX_ENV], *vval[MAX_ENV];
    int nvars;
    char *env[MAX_ENV + 8]; /* the process's whole environment, mapped ("NAME=value") */
    int nenv;
    /* setpriv and its options (the security context), then command and args, expanded, mapped */
    char *argv[MAX_ARGS + 1];
    int nargs, nwrap;
} k8s_ctr;

struct k8s_pod {
    char name[64];
    const k8s_node *node;
    const char *ns;    /* metadata.namespace */
    json_object *spec; /* the pod spec */
    int index;         /* the Job's completion index, or -1 */
    k8s_ctr init[MAX_INIT];
    int ninit;
    k8s_ctr main;
    char log[256]; /* every container's stdout and stderr, appended */
    pid_t pid;     /* the main container's; 0 when it does not run */
    int runs;      /* main containers started: 1 + restarts */
    int status;    /* the wait status of the last one that ended */
};

static struct {
    char root[64]; /* temporary: the nodes' file systems, the Secrets, the logs */
    char br_ns[32];
    int made[NNODES + 1]; /* namespaces to delete: the nodes', then the bridge's */
    k8s_node node[NNODES];
    json_object *base, *train; /* the rendered objects */
    json_object *ds, *job;     /* the DaemonSet ringd and the Job ringd-train, borrowed */
    char secrets[96];          /* a directory per Secret, a file per key */
    char password[64];         /* the Secret ringd-redis's password: Redis's requirepass */
    char bin[96];              /* the image's /usr/local/bin: the build's programs */
    long image_uid, image_gid; /* the Dockerfile's USER */
    int as_root;               /* 1: the build is out of reach of the pods' users */
    int redis_port;            /* the port in ringd's Redis URL (the Service's port) */
    json_object *redis_dep;    /* the Deployment behind it, borrowed */
    const char *redis_ctr;     /* its container with the port */
    k8s_node redis_node;       /* where its pod runs: the bridge's namespace, REDIS_IP */
    k8s_pod redis, ringd[NNODES], trainer[NNODES];
    int64_t t0;
} k_;

static void ctr_clear(k8s_ctr *c)
{
    for (int i = 0; i < c->nvars; i++) {
        free(c->vname[i]);
        free(c->vval[i]);
    }
    for (int i = 0; i < c->nenv; i++)
        free(c->env[i]);
    for (int i = 0; i < c->nargs; i++)
        free(c->argv[i]);
    memset(c, 0, sizeof(*c));
}

static void pod_clear(k8s_pod *p)
{
    if (p->pid > 0) {
        kill(p->pid, SIGKILL);
        waitpid(p->pid, NULL, 0);
    }
    for (int i = 0; i < p->ninit; i++)
        ctr_clear(&p->init[i]);
    ctr_clear(&p->main);
    memset(p, 0, sizeof(*p));
}

static void teardown(void)
{
    for (int k = 0; k < NNODES; k++) {
        pod_clear(&k_.trainer[k]);
        pod_clear(&k_.ringd[k]);
    }
    pod_clear(&k_.redis);
    for (int k = 0; k < NNODES; k++)
        if (k_.made[k])
            th_sh("ip netns del %s 2>/dev/null", k_.node[k].ns);
    if (k_.made[NNODES])
        th_sh("ip netns del %s 2>/dev/null", k_.br_ns); /* its veth ends and the bridge go along */
    json_object_put(k_.base);
    json_object_put(k_.train);
    th_rm_rf(k_.root);
    memset(&k_, 0, sizeof(k_));
}

TestSuite(k8s_pods, .fini = teardown);

/* cr_skip leaves out the fixture's teardown: this skips after it. */
#define SKIP(...)                                                                                  \
    do {                                                                                           \
        teardown();                                                                                \
        cr_skip(__VA_ARGS__);                                                                      \
    } while (0)

/* Prints the end of a file, labelled. */
static void print_tail(const char *label, const char *path, size_t tail)
{
    char *text = th_file_text(path);
    if (text == NULL)
        return;
    size_t len = strlen(text);
    fprintf(stderr, "---- %s (%s), its end ----\n%s\n----\n", label, path,
            text + (len > tail ? len - tail : 0));
    free(text);
}

static void evidence(void)
{
    for (int k = 0; k < NNODES; k++)
        if (k_.ringd[k].log[0] != '\0')
            print_tail(k_.ringd[k].name, k_.ringd[k].log, 8000);
    for (int k = 0; k < NNODES; k++)
        if (k_.trainer[k].log[0] != '\0')
            print_tail(k_.trainer[k].name, k_.trainer[k].log, 4000);
    if (k_.redis.log[0] != '\0')
        print_tail(k_.redis.name, k_.redis.log, 3000);
}

#define MUST(cond, ...) TH_MUST(evidence, cond, __VA_ARGS__)

/* ---- JSON ---- */

/* The member at a dotted path ("spec.template.spec"), or NULL. */
static json_object *jget(json_object *o, const char *path)
{
    char key[64];
    while (o != NULL && *path != '\0') {
        size_t n = strcspn(path, ".");
        snprintf(key, sizeof(key), "%.*s", (int)n, path);
        if (!json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, key, &o))
            return NULL;
        path += n + (path[n] == '.');
    }
    return o;
}

/* The string at a dotted path, or NULL when there is none or it is not a string. */
static const char *jstr(json_object *o, const char *path)
{
    json_object *v = jget(o, path);
    return json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

/* The integer at a dotted path, or def. */
static long jint(json_object *o, const char *path, long def)
{
    json_object *v = jget(o, path);
    return json_object_is_type(v, json_type_int) ? (long)json_object_get_int64(v) : def;
}

/* The boolean at a dotted path: 1, 0, or def when absent. */
static int jbool(json_object *o, const char *path, int def)
{
    json_object *v = jget(o, path);
    return json_object_is_type(v, json_type_boolean) ? json_object_get_boolean(v) : def;
}

static size_t jlen(json_object *a)
{
    return json_object_is_type(a, json_type_array) ? json_object_array_length(a) : 0;
}

static json_object *jat(json_object *a, size_t i)
{
    return json_object_array_get_idx(a, i);
}

/* The element of an array of objects whose "name" is name, or NULL. */
static json_object *jnamed(json_object *a, const char *name)
{
    for (size_t i = 0; i < jlen(a); i++) {
        const char *n = jstr(jat(a, i), "name");
        if (n != NULL && strcmp(n, name) == 0)
            return jat(a, i);
    }
    return NULL;
}

/* The object of kind named name (in namespace ns unless NULL) in a rendered array, or NULL. */
static json_object *jobject(json_object *objs, const char *kind, const char *ns, const char *name)
{
    for (size_t i = 0; i < jlen(objs); i++) {
        json_object *o = jat(objs, i);
        const char *k = jstr(o, "kind"), *n = jstr(o, "metadata.name");
        const char *s = jstr(o, "metadata.namespace");
        if (k != NULL && n != NULL && strcmp(k, kind) == 0 && strcmp(n, name) == 0 &&
            (ns == NULL || (s != NULL && strcmp(s, ns) == 0)))
            return o;
    }
    return NULL;
}

/* Renders the kustomize directory dir (relative to the source root src) with
 * tests/k8s/render.mjs. Returns the array of objects (the caller puts it), or NULL after writing
 * why into err. */
static json_object *render(const char *src, const char *dir, char *err, size_t errlen)
{
    char out[160], errs[160];
    snprintf(out, sizeof(out), "%s/render.json", k_.root);
    snprintf(errs, sizeof(errs), "%s/render.err", k_.root);
    int rc = th_sh("cd '%s' && timeout 60 node tests/k8s/render.mjs '%s' >'%s' 2>'%s'", src, dir,
                   out, errs);
    char *text = th_file_text(rc == 0 ? out : errs);
    json_object *o = rc == 0 && text != NULL ? json_tokener_parse(text) : NULL;
    if (rc != 0)
        snprintf(err, errlen, "node tests/k8s/render.mjs %s exited %d: %s", dir, rc,
                 text != NULL ? text : "");
    else if (!json_object_is_type(o, json_type_array))
        snprintf(err, errlen, "node tests/k8s/render.mjs %s did not print a JSON array", dir);
    free(text);
    unlink(out);
    unlink(errs);
    if (rc != 0 || !json_object_is_type(o, json_type_array)) {
        json_object_put(o);
        return NULL;
    }
    return o;
}

/* ---- files ---- */

/* mkdir -p, mode for what it makes. Returns 0 or -1. */
static int mkdirs(const char *path, mode_t mode)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, mode) != 0 && errno != EEXIST)
                return -1;
            if (c == '\0')
                return 0;
            *p = c;
        }
    }
}

static int write_file(const char *path, const char *data, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    size_t len = strlen(data);
    int ok = fd >= 0 && write(fd, data, len) == (ssize_t)len;
    if (fd >= 0)
        close(fd);
    return ok ? 0 : -1;
}

static void append_line(const char *path, const char *line)
{
    FILE *f = fopen(path, "a");
    if (f != NULL) {
        fprintf(f, "%s\n", line);
        fclose(f);
    }
}

/* The Secrets an operator creates before applying the base (deploy/k8s/README.md), and their
 * keys. */
static const struct {
    const char *secret, *key;
} secret_keys[] = {{"ringd-key", "ring.key"}, {"ringd-redis", "password"}};
#define NSECRET_KEYS (sizeof(secret_keys) / sizeof(secret_keys[0]))

/* Writes the Secrets: the ring key, 32 random bytes in base64 as `head -c 32 /dev/urandom |
 * base64` writes them, and the Redis password. Fills k_.secrets and k_.password. Returns 0 or
 * -1. */
static int make_secrets(void)
{
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    unsigned char raw[33] = {0}, pw[16];
    char key[64] = "", path[192];
    if (getrandom(raw, 32, 0) != 32 || getrandom(pw, sizeof(pw), 0) != (ssize_t)sizeof(pw))
        return -1;
    size_t n = 0;
    for (size_t i = 0; i < 32; i += 3) {
        unsigned v = (unsigned)raw[i] << 16 | (unsigned)raw[i + 1] << 8 | raw[i + 2];
        key[n++] = b64[v >> 18 & 63];
        key[n++] = b64[v >> 12 & 63];
        key[n++] = i + 1 < 32 ? b64[v >> 6 & 63] : '=';
        key[n++] = i + 2 < 32 ? b64[v & 63] : '=';
    }
    key[n++] = '\n';
    key[n] = '\0';
    for (size_t i = 0; i < sizeof(pw); i++)
        snprintf(k_.password + 2 * i, 3, "%02x", pw[i]);
    snprintf(k_.secrets, sizeof(k_.secrets), "%s/secrets", k_.root);
    for (size_t i = 0; i < NSECRET_KEYS; i++) {
        snprintf(path, sizeof(path), "%s/%s", k_.secrets, secret_keys[i].secret);
        if (mkdirs(path, 0700) != 0)
            return -1;
        snprintf(path, sizeof(path), "%s/%s/%s", k_.secrets, secret_keys[i].secret,
                 secret_keys[i].key);
        if (write_file(path, strcmp(secret_keys[i].key, "ring.key") == 0 ? key : k_.password,
                       0600) != 0)
            return -1;
    }
    return 0;
}

/* The programs of the image (Dockerfile), and the variables naming the build's. */
static const struct {
    const char *name, *var;
} image_progs[] = {{"ringd", "RINGD_BIN"},
                   {"ringctl", "RINGCTL_BIN"},
                   {"ringd-train", "RINGD_TRAIN_BIN"},
                   {"ringd-bench", "RINGD_BENCH_BIN"}};

/* The image: its /usr/local/bin (links to the build's programs, for shell scripts that find them
 * in PATH) and its USER, from the Dockerfile. Returns 0 or -1. */
static int make_image(const char *src)
{
    char path[192], line[256];
    snprintf(k_.bin, sizeof(k_.bin), "%s/image/usr/local/bin", k_.root);
    if (mkdirs(k_.bin, 0755) != 0)
        return -1;
    for (size_t i = 0; i < sizeof(image_progs) / sizeof(image_progs[0]); i++) {
        const char *bin = getenv(image_progs[i].var);
        snprintf(path, sizeof(path), "%s/%s", k_.bin, image_progs[i].name);
        if (bin != NULL && symlink(bin, path) != 0)
            return -1;
    }
    snprintf(path, sizeof(path), "%s/Dockerfile", src);
    FILE *f = fopen(path, "r");
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        long uid, gid = 0;
        if (sscanf(line, "USER %ld:%ld", &uid, &gid) >= 1) {
            k_.image_uid = uid;
            k_.image_gid = gid;
        }
    }
    if (f != NULL)
        fclose(f);
    return 0;
}

/* ---- the kubelet ---- */

/* Kubernetes' $(VAR) expansion (third_party/forked/golang/expansion): $(NAME) becomes the value
 * of the last of the n variables so named, and stays as it is when there is none; $$ is $.
 * Returns a malloc'd string. */
static char *expand(const char *in, char *const *names, char *const *values, int n)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f == NULL)
        return NULL;
    for (const char *p = in; *p != '\0';) {
        if (p[0] != '$' || p[1] == '\0') {
            fputc(*p++, f);
        } else if (p[1] == '$') {
            fputc('$', f);
            p += 2;
        } else if (p[1] != '(' || strchr(p + 2, ')') == NULL) {
            fputc('$', f);
            fputc(p[1], f);
            p += 2;
        } else {
            const char *name = p + 2, *close = strchr(name, ')'), *v = NULL;
            size_t nlen = (size_t)(close - name);
            for (int i = n - 1; i >= 0 && v == NULL; i--)
                if (strlen(names[i]) == nlen && strncmp(names[i], name, nlen) == 0)
                    v = values[i];
            if (v != NULL)
                fputs(v, f);
            else
                fwrite(p, 1, nlen + 3, f);
            p = close + 1;
        }
    }
    fclose(f);
    return buf;
}

/* The Service a host name names from namespace ns as cluster DNS resolves it ("svc", "svc.ns",
 * "svc.ns.svc", "svc.ns.svc.cluster.local"), or NULL. */
static json_object *resolve_service(const char *host, const char *ns)
{
    char name[128], space[128];
    const char *dot = strchr(host, '.');
    if (dot == NULL)
        return jobject(k_.base, "Service", ns, host);
    snprintf(name, sizeof(name), "%.*s", (int)(dot - host), host);
    const char *rest = dot + 1, *dot2 = strchr(rest, '.');
    snprintf(space, sizeof(space), "%.*s", (int)(dot2 != NULL ? dot2 - rest : (long)strlen(rest)),
             rest);
    if (dot2 != NULL && strcmp(dot2, ".svc") != 0 && strcmp(dot2, ".svc.cluster.local") != 0)
        return NULL;
    return jobject(k_.base, "Service", space, name);
}

/* 1 when every label of the Service's selector is on the pod template tmpl. */
static int selects(json_object *svc, json_object *tmpl)
{
    json_object *sel = jget(svc, "spec.selector"), *labels = jget(tmpl, "metadata.labels");
    if (!json_object_is_type(sel, json_type_object) || json_object_object_length(sel) == 0)
        return 0;
    json_object_object_foreach(sel, key, val)
    {
        json_object *l = NULL;
        if (!json_object_is_type(labels, json_type_object) ||
            !json_object_object_get_ex(labels, key, &l) ||
            strcmp(json_object_get_string(l), json_object_get_string(val)) != 0)
            return 0;
    }
    return 1;
}

/* "redis://HOST:PORT..." with HOST, the name of the Redis Service, replaced by REDIS_IP: cluster
 * DNS, the only value this test rewrites. Checks what a cluster would need for the name to lead
 * to a Redis with ringd's password: a pod on the host network resolves Service names only with
 * dnsPolicy ClusterFirstWithHostNet; the Service has the port and selects a pod template that
 * uses the Secret ringd-redis. Records the port for the test's redis-server. Returns a malloc'd
 * string, or NULL after writing why into err. */
static char *map_redis_url(const k8s_ctr *c, const char *url, char *err, size_t errlen)
{
    char host[256];
    const char *h = url + strlen("redis://");
    if (strchr(h, '@') != NULL)
        h = strchr(h, '@') + 1;
    size_t hlen = strcspn(h, ":/");
    snprintf(host, sizeof(host), "%.*s", (int)hlen, h);
    int port = h[hlen] == ':' ? atoi(h + hlen + 1) : 6379;
    struct in_addr a;
    if (inet_pton(AF_INET, host, &a) == 1) {
        snprintf(err, errlen, "%s: %s names an IP address, not the Redis Service", c->what, url);
        return NULL;
    }
    const char *dns = jstr(c->pod->spec, "dnsPolicy");
    if (jbool(c->pod->spec, "hostNetwork", 0) &&
        (dns == NULL || strcmp(dns, "ClusterFirstWithHostNet") != 0)) {
        snprintf(err, errlen,
                 "%s: on the host network with dnsPolicy %s, %s does not resolve (cluster DNS "
                 "needs ClusterFirstWithHostNet)",
                 c->what, dns != NULL ? dns : "ClusterFirst (the default)", host);
        return NULL;
    }
    json_object *svc = resolve_service(host, c->pod->ns);
    if (svc == NULL) {
        snprintf(err, errlen, "%s: %s: no Service in the rendered base is named %s", c->what, url,
                 host);
        return NULL;
    }
    json_object *sport = NULL, *ports = jget(svc, "spec.ports");
    for (size_t i = 0; i < jlen(ports); i++)
        if (jint(jat(ports, i), "port", -1) == port)
            sport = jat(ports, i);
    if (sport == NULL) {
        snprintf(err, errlen, "%s: %s: Service %s has no port %d", c->what, url, host, port);
        return NULL;
    }
    json_object *backend = NULL;
    for (size_t i = 0; i < jlen(k_.base) && backend == NULL; i++) {
        json_object *o = jat(k_.base, i);
        const char *kind = jstr(o, "kind"), *ns = jstr(o, "metadata.namespace");
        const char *sns = jstr(svc, "metadata.namespace");
        if (kind != NULL && strcmp(kind, "Deployment") == 0 && ns != NULL && sns != NULL &&
            strcmp(ns, sns) == 0 && selects(svc, jget(o, "spec.template")))
            backend = o;
    }
    if (backend == NULL) {
        snprintf(err, errlen, "%s: Service %s selects no Deployment's pods: Redis has no endpoint",
                 c->what, host);
        return NULL;
    }
    /* the container port the Service's targetPort names (by name or number) */
    json_object *target = jget(sport, "targetPort"),
                *ctrs = jget(backend, "spec.template.spec.containers");
    k_.redis_ctr = NULL;
    for (size_t i = 0; i < jlen(ctrs) && k_.redis_ctr == NULL; i++) {
        json_object *cports = jget(jat(ctrs, i), "ports");
        for (size_t j = 0; j < jlen(cports); j++) {
            json_object *cp = jat(cports, j);
            const char *pname = jstr(cp, "name");
            int hit = json_object_is_type(target, json_type_string)
                          ? pname != NULL && strcmp(pname, json_object_get_string(target)) == 0
                          : jint(cp, "containerPort", -1) ==
                                (target != NULL ? json_object_get_int(target) : port);
            if (hit && jint(cp, "containerPort", -1) != port) {
                snprintf(err, errlen,
                         "%s: Service %s port %d leads to container port %ld: port translation "
                         "is not emulated",
                         c->what, host, port, jint(cp, "containerPort", -1));
                return NULL;
            }
            if (hit)
                k_.redis_ctr = jstr(jat(ctrs, i), "name");
        }
    }
    if (k_.redis_ctr == NULL) {
        snprintf(err, errlen, "%s: Service %s's targetPort names no port of its pods' containers",
                 c->what, host);
        return NULL;
    }
    k_.redis_dep = backend;
    k_.redis_port = port;
    char *out = NULL;
    if (asprintf(&out, "redis://%.*s" REDIS_IP "%s", (int)(h - url - strlen("redis://")),
                 url + strlen("redis://"), h + hlen) < 0)
        return NULL;
    return out;
}

/* The mount whose path v starts with (the longest), or NULL. */
static const k8s_mount *mount_of(const k8s_ctr *c, const char *v)
{
    const k8s_mount *best = NULL;
    for (int i = 0; i < c->nmounts; i++) {
        size_t n = strlen(c->mounts[i].path);
        if (strncmp(v, c->mounts[i].path, n) == 0 && (v[n] == '\0' || v[n] == '/') &&
            (best == NULL || n > strlen(best->path)))
            best = &c->mounts[i];
    }
    return best;
}

/* A value of the container's as this test runs it: one that starts with a mount path points into
 * the volume's directory, a Redis URL at the test's Redis; others stay. Returns a malloc'd
 * string, or NULL after writing why into err. */
static char *map_value(const k8s_ctr *c, const char *v, char *err, size_t errlen)
{
    if (strncmp(v, "redis://", strlen("redis://")) == 0)
        return map_redis_url(c, v, err, errlen);
    const k8s_mount *m = mount_of(c, v);
    char *out = NULL;
    if (m == NULL)
        return strdup(v);
    if (asprintf(&out, "%s%s", m->dir, v + strlen(m->path)) < 0)
        return NULL;
    return out;
}

#define PATH_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/"

/* A shell script with the mount paths in it (where a word begins) mapped like values. Returns a
 * malloc'd string. */
static char *map_script(const k8s_ctr *c, const char *s)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f == NULL)
        return NULL;
    for (const char *p = s; *p != '\0';) {
        const k8s_mount *m = NULL;
        if (p == s || strchr(PATH_CHARS, p[-1]) == NULL) {
            char *word = strndup(p, strspn(p, PATH_CHARS));
            m = word != NULL ? mount_of(c, word) : NULL;
            free(word);
        }
        if (m != NULL) {
            fputs(m->dir, f);
            p += strlen(m->path);
        } else {
            fputc(*p++, f);
        }
    }
    fclose(f);
    return buf;
}

/* The build's binary for a program of the image, the shell itself for "sh", or NULL after writing
 * why into err. */
static const char *map_program(const char *prog, char *err, size_t errlen)
{
    const char *base = strrchr(prog, '/') != NULL ? strrchr(prog, '/') + 1 : prog;
    if (strcmp(base, "sh") == 0 || strcmp(base, "bash") == 0)
        return "/bin/sh"; /* debian:12-slim's, as the test machine's */
    for (size_t i = 0; i < sizeof(image_progs) / sizeof(image_progs[0]); i++) {
        if (strcmp(base, image_progs[i].name) != 0)
            continue;
        const char *bin = getenv(image_progs[i].var);
        if (bin == NULL)
            snprintf(err, errlen, "%s is not built (%s unset)", base, image_progs[i].var);
        return bin;
    }
    snprintf(err, errlen, "%s is not a program of the image this test knows", prog);
    return NULL;
}

/* The pod's fsGroup, or -1. */
static long fs_group(const k8s_pod *p)
{
    return jint(p->spec, "securityContext.fsGroup", -1);
}

/* The directory a volume is at on the test machine for the container, made as the kubelet makes
 * it: a hostPath directory root's 0755 (DirectoryOrCreate), a Secret's files with their mode (or
 * defaultMode) and, under an fsGroup, that group and its read bits; dir gets it. Returns 0, or -1
 * after writing why into err. */
static int volume_dir(const k8s_ctr *c, json_object *vol, char *dir, size_t dirlen, char *err,
                      size_t errlen)
{
    const k8s_pod *p = c->pod;
    const char *name = jstr(vol, "name"), *path = jstr(vol, "hostPath.path");
    const char *secret = jstr(vol, "secret.secretName");
    long fsg = fs_group(p);
    struct stat st;
    if (path != NULL) {
        const char *type = jstr(vol, "hostPath.type");
        snprintf(dir, dirlen, "%s%s", p->node->dir, path);
        if (type == NULL || type[0] == '\0' || strcmp(type, "DirectoryOrCreate") == 0)
            return mkdirs(dir, 0755); /* the runtime makes a missing one, too */
        if (strcmp(type, "Directory") == 0 && stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
            return 0;
        if (strcmp(type, "Socket") == 0 && stat(dir, &st) == 0 && S_ISSOCK(st.st_mode))
            return 0;
        snprintf(err, errlen,
                 "%s: hostPath %s (type %s) is not there on %s: the pod would not start "
                 "(FailedMount)",
                 c->what, path, type, p->node->name);
        return -1;
    }
    if (secret != NULL) {
        char from[256], to[512], src_dir[160];
        snprintf(src_dir, sizeof(src_dir), "%s/%s", k_.secrets, secret);
        if (stat(src_dir, &st) != 0) {
            snprintf(err, errlen,
                     "%s: volume %s: Secret %s is none of those the operator creates (ringd-key, "
                     "ringd-redis)",
                     c->what, name, secret);
            return -1;
        }
        snprintf(dir, dirlen, "%s/pods/%s/volumes/%s", k_.root, p->name, name);
        if (mkdirs(dir, 0755) != 0 || (fsg >= 0 && chown(dir, (uid_t)-1, (gid_t)fsg) != 0))
            return -1;
        json_object *items = jget(vol, "secret.items");
        long def_mode = jint(vol, "secret.defaultMode", 0644);
        for (size_t i = 0; i < (jlen(items) > 0 ? jlen(items) : NSECRET_KEYS); i++) {
            /* the listed keys at their paths, or every key of the Secret under its name */
            json_object *it = jlen(items) > 0 ? jat(items, i) : NULL;
            if (it == NULL && strcmp(secret_keys[i].secret, secret) != 0)
                continue;
            const char *key = it != NULL ? jstr(it, "key") : secret_keys[i].key;
            const char *to_path = it != NULL ? jstr(it, "path") : key;
            long mode = it != NULL ? jint(it, "mode", def_mode) : def_mode;
            snprintf(from, sizeof(from), "%s/%s", src_dir, key ? key : "");
            snprintf(to, sizeof(to), "%s/%s", dir, to_path ? to_path : "");
            char *text = th_file_text(from);
            int rc = text != NULL ? write_file(to, text, 0600) : -1;
            free(text);
            if (rc != 0) {
                snprintf(err, errlen, "%s: volume %s: Secret %s has no key %s", c->what, name,
                         secret, key ? key : "(none)");
                return -1;
            }
            /* the kubelet's SetVolumeOwnership on a read-only volume: group fsGroup, mode | 0440 */
            if (fsg >= 0) {
                if (chown(to, (uid_t)-1, (gid_t)fsg) != 0)
                    return -1;
                mode |= 0440;
            }
            if (chmod(to, (mode_t)mode) != 0)
                return -1;
        }
        return 0;
    }
    if (jget(vol, "emptyDir") != NULL) {
        snprintf(dir, dirlen, "%s/pods/%s/volumes/%s", k_.root, p->name, name);
        if (mkdirs(dir, 0777) != 0 || chmod(dir, 0777) != 0)
            return -1;
        return fsg >= 0 ? chown(dir, (uid_t)-1, (gid_t)fsg) : 0;
    }
    snprintf(err, errlen, "%s: volume %s is of a kind this test does not provide", c->what, name);
    return -1;
}

static int add_var(k8s_ctr *c, const char *name, char *value)
{
    if (c->nvars == MAX_ENV || value == NULL) {
        free(value);
        return -1;
    }
    c->vname[c->nvars] = strdup(name);
    c->vval[c->nvars++] = value;
    return 0;
}

static char *upper_env_name(char *s)
{
    for (char *p = s; *p != '\0'; p++)
        *p = *p == '-' ? '_' : (char)(*p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : *p);
    return s;
}

/* The kubelet's service links (enableServiceLinks, on by default): for every Service in the
 * pod's namespace with a cluster IP, and the API server's Service "kubernetes", FOO_SERVICE_HOST,
 * FOO_SERVICE_PORT[_NAME], FOO_PORT and FOO_PORT_<port>_<PROTO>[_PROTO|_PORT|_ADDR]. The Redis
 * Service's IP is REDIS_IP (no other Service has a backend here). */
static void add_service_links(k8s_ctr *c)
{
    static const char kubernetes[] =
        "{\"metadata\":{\"name\":\"kubernetes\"},\"spec\":{\"clusterIP\":\"10.96.0.1\","
        "\"ports\":[{\"name\":\"https\",\"port\":443}]}}";
    json_object *api = json_tokener_parse(kubernetes);
    for (size_t i = 0; i <= jlen(k_.base); i++) {
        json_object *svc = i < jlen(k_.base) ? jat(k_.base, i) : api;
        const char *kind = jstr(svc, "kind"), *ns = jstr(svc, "metadata.namespace");
        const char *ip = jstr(svc, "spec.clusterIP");
        if (svc != api && (kind == NULL || strcmp(kind, "Service") != 0 || ns == NULL ||
                           strcmp(ns, c->pod->ns) != 0))
            continue;
        if (ip != NULL && (strcmp(ip, "None") == 0 || ip[0] == '\0'))
            continue; /* headless */
        if (svc != api)
            ip = REDIS_IP;
        char pre[128], name[192], *v;
        snprintf(pre, sizeof(pre), "%s", jstr(svc, "metadata.name"));
        upper_env_name(pre);
        json_object *ports = jget(svc, "spec.ports");
        snprintf(name, sizeof(name), "%s_SERVICE_HOST", pre);
        add_var(c, name, strdup(ip));
        for (size_t j = 0; j < jlen(ports); j++) {
            json_object *sp = jat(ports, j);
            const char *pname = jstr(sp, "name"), *proto = jstr(sp, "protocol");
            int port = (int)jint(sp, "port", 0);
            char lproto[16], uproto[16];
            snprintf(uproto, sizeof(uproto), "%s", proto != NULL ? proto : "TCP");
            for (size_t k = 0; k <= strlen(uproto); k++)
                lproto[k] =
                    (char)(uproto[k] >= 'A' && uproto[k] <= 'Z' ? uproto[k] + 32 : uproto[k]);
            if (j == 0) {
                snprintf(name, sizeof(name), "%s_SERVICE_PORT", pre);
                add_var(c, name, asprintf(&v, "%d", port) < 0 ? NULL : v);
            }
            if (pname != NULL && pname[0] != '\0') {
                snprintf(name, sizeof(name), "%s_SERVICE_PORT_%s", pre, pname);
                add_var(c, upper_env_name(name), asprintf(&v, "%d", port) < 0 ? NULL : v);
            }
            if (j == 0) {
                snprintf(name, sizeof(name), "%s_PORT", pre);
                add_var(c, name, asprintf(&v, "%s://%s:%d", lproto, ip, port) < 0 ? NULL : v);
            }
            snprintf(name, sizeof(name), "%s_PORT_%d_%s", pre, port, uproto);
            add_var(c, name, asprintf(&v, "%s://%s:%d", lproto, ip, port) < 0 ? NULL : v);
            snprintf(name, sizeof(name), "%s_PORT_%d_%s_PROTO", pre, port, uproto);
            add_var(c, name, strdup(lproto));
            snprintf(name, sizeof(name), "%s_PORT_%d_%s_PORT", pre, port, uproto);
            add_var(c, name, asprintf(&v, "%d", port) < 0 ? NULL : v);
            snprintf(name, sizeof(name), "%s_PORT_%d_%s_ADDR", pre, port, uproto);
            add_var(c, name, strdup(ip));
        }
    }
    json_object_put(api);
}

/* The value of an env entry's valueFrom, as the kubelet and the Job controller fill it in.
 * Returns a malloc'd string, or NULL after writing why into err. */
static char *value_from(const k8s_ctr *c, json_object *e, char *err, size_t errlen)
{
    const k8s_pod *p = c->pod;
    const char *name = jstr(e, "name"), *field = jstr(e, "valueFrom.fieldRef.fieldPath");
    const char *sname = jstr(e, "valueFrom.secretKeyRef.name");
    char *v = NULL;
    if (field != NULL) {
        const char *sa = jstr(p->spec, "serviceAccountName");
        if (strcmp(field, "spec.nodeName") == 0)
            return strdup(p->node->name);
        if (strcmp(field, "status.hostIP") == 0 || strcmp(field, "status.podIP") == 0)
            return strdup(p->node->ip); /* a pod on the pod network would get an IP of its own */
        if (strcmp(field, "metadata.name") == 0)
            return strdup(p->name);
        if (strcmp(field, "metadata.namespace") == 0)
            return strdup(p->ns);
        if (strcmp(field, "spec.serviceAccountName") == 0)
            return strdup(sa != NULL ? sa : "default");
        if (p->index >= 0 &&
            (strcmp(field, "metadata.annotations['batch.kubernetes.io/job-completion-index']") ==
                 0 ||
             strcmp(field, "metadata.labels['batch.kubernetes.io/job-completion-index']") == 0))
            return asprintf(&v, "%d", p->index) < 0 ? NULL : v;
        snprintf(err, errlen, "%s: env %s: fieldRef %s is not emulated", c->what, name, field);
        return NULL;
    }
    if (sname != NULL) {
        char path[256];
        const char *key = jstr(e, "valueFrom.secretKeyRef.key");
        snprintf(path, sizeof(path), "%s/%s/%s", k_.secrets, sname, key ? key : "");
        if ((v = th_file_text(path)) == NULL)
            snprintf(err, errlen, "%s: env %s: Secret %s has no key %s", c->what, name, sname,
                     key ? key : "(none)");
        return v;
    }
    snprintf(err, errlen, "%s: env %s: this kind of valueFrom is not emulated", c->what, name);
    return NULL;
}

/* Sets NAME=value in the process environment, replacing an earlier NAME. */
static int set_env(k8s_ctr *c, const char *name, const char *value)
{
    char *kv = NULL;
    if (asprintf(&kv, "%s=%s", name, value) < 0)
        return -1;
    size_t n = strlen(name) + 1;
    for (int i = 0; i < c->nenv; i++) {
        if (strncmp(c->env[i], kv, n) == 0) {
            free(c->env[i]);
            c->env[i] = kv;
            return 0;
        }
    }
    if (c->nenv == MAX_ENV + 7) {
        free(kv);
        return -1;
    }
    c->env[c->nenv++] = kv;
    return 0;
}

static int add_arg(k8s_ctr *c, char *a)
{
    if (a == NULL || c->nargs == MAX_ARGS) {
        free(a);
        return -1;
    }
    c->argv[c->nargs++] = a;
    return 0;
}

/* The capabilities a container runtime (containerd, Docker) grants by default. */
static const char *const default_caps[] = {
    "CHOWN",  "DAC_OVERRIDE", "FSETID",  "FOWNER", "MKNOD",      "NET_RAW",     "SETGID",
    "SETUID", "SETFCAP",      "SETPCAP", "KILL",   "SYS_CHROOT", "AUDIT_WRITE", "NET_BIND_SERVICE"};

static int in_list(json_object *a, const char *s)
{
    for (size_t i = 0; i < jlen(a); i++)
        if (strcasecmp(json_object_get_string(jat(a, i)), s) == 0)
            return 1;
    return 0;
}

/* The security context as setpriv options, the start of the container's command line: user and
 * group (the container's, else the pod's, else the image's USER), supplementary groups
 * (supplementalGroups and fsGroup), no_new_privs (allowPrivilegeEscalation false) and the
 * capability bounding set (the runtime's defaults, less drop, plus add). Refuses what the kubelet
 * refuses: runAsNonRoot with uid 0. Returns 0, or -1 after writing why into err. */
static int add_security(k8s_ctr *c, char *err, size_t errlen)
{
    json_object *ps = jget(c->pod->spec, "securityContext"), *cs = jget(c->ctr, "securityContext");
    long uid = jint(cs, "runAsUser", jint(ps, "runAsUser", k_.image_uid));
    long gid =
        jint(cs, "runAsGroup", jint(ps, "runAsGroup", uid == k_.image_uid ? k_.image_gid : 0));
    int non_root = jbool(cs, "runAsNonRoot", jbool(ps, "runAsNonRoot", 0));
    char buf[512], *a;
    if (non_root && uid == 0) {
        snprintf(err, errlen,
                 "%s: runAsNonRoot with user 0: the kubelet refuses to start it "
                 "(CreateContainerConfigError)",
                 c->what);
        return -1;
    }
    if (k_.as_root)
        return 0;
    size_t n = 0;
    json_object *sup = jget(ps, "supplementalGroups");
    for (size_t i = 0; i < jlen(sup); i++)
        n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s%ld", n ? "," : "",
                              (long)json_object_get_int64(jat(sup, i)));
    if (fs_group(c->pod) >= 0)
        n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s%ld", n ? "," : "", fs_group(c->pod));
    add_arg(c, strdup("setpriv"));
    add_arg(c, asprintf(&a, "--reuid=%ld", uid) < 0 ? NULL : a);
    add_arg(c, asprintf(&a, "--regid=%ld", gid) < 0 ? NULL : a);
    add_arg(c, n > 0 && asprintf(&a, "--groups=%s", buf) >= 0 ? a : strdup("--clear-groups"));
    if (!jbool(cs, "allowPrivilegeEscalation", 1))
        add_arg(c, strdup("--no-new-privs"));
    json_object *drop = jget(cs, "capabilities.drop"), *add = jget(cs, "capabilities.add");
    n = (size_t)snprintf(buf, sizeof(buf), "--bounding-set=-all");
    for (size_t i = 0; i < sizeof(default_caps) / sizeof(default_caps[0]); i++)
        if (!in_list(drop, "ALL") && !in_list(drop, default_caps[i]))
            n += (size_t)snprintf(buf + n, sizeof(buf) - n, ",+%s", default_caps[i]);
    for (size_t i = 0; i < jlen(add); i++) {
        const char *cap = json_object_get_string(jat(add, i));
        n += (size_t)snprintf(buf + n, sizeof(buf) - n, ",+%s",
                              strncasecmp(cap, "CAP_", 4) == 0 ? cap + 4 : cap);
    }
    for (char *p = buf; *p != '\0'; p++)
        *p = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
    add_arg(c, strdup(buf));
    add_arg(c, strdup("--inh-caps=-all"));
    /* changing the user clears th_spawn's parent-death signal: the pods die with the test */
    add_arg(c, strdup("--pdeathsig=KILL"));
    return add_arg(c, strdup("--"));
}

/* Appends to argv (from *n, up to max entries with the terminating NULL) the words of the
 * nparts arrays in parts, each expanded from the nv variables names/values: the first word mapped
 * to the build's program, a shell's script (the word after -c) with its mount paths mapped, the
 * others mapped as values. Returns 0, or -1 after writing why into err (argv then holds what was
 * appended so far, NULL-terminated, for the caller to free). */
static int add_words(const k8s_ctr *c, json_object *const *parts, int nparts, char *const *names,
                     char *const *values, int nv, char **argv, int *n, int max, char *err,
                     size_t errlen)
{
    int first = *n, shell = 0, rc = 0;
    for (int k = 0; k < nparts && rc == 0; k++) {
        for (size_t i = 0; i < jlen(parts[k]) && rc == 0; i++) {
            const char *a = json_object_get_string(jat(parts[k], i));
            char *x = expand(a, names, values, nv);
            char *v = x == NULL    ? NULL
                      : shell == 2 ? map_script(c, x)
                                   : map_value(c, x, err, errlen);
            free(x);
            if (*n == first) {
                const char *bin = v != NULL ? map_program(v, err, errlen) : NULL;
                shell = bin != NULL && strcmp(bin, "/bin/sh") == 0;
                free(v);
                v = bin != NULL ? strdup(bin) : NULL;
            } else if (shell == 1 && a[0] == '-' && strchr(a, 'c') != NULL) {
                shell = 2; /* -c, -ec: the script comes next */
            } else if (shell == 2) {
                shell = 3; /* the script's own arguments: values again */
            }
            if (v == NULL || *n == max - 1) {
                if (v != NULL)
                    snprintf(err, errlen, "%s: more than %d words", c->what, max - 1);
                free(v);
                rc = -1;
            } else {
                argv[(*n)++] = v;
            }
        }
    }
    argv[*n] = NULL;
    return rc;
}

/* Prepares container ctr of pod p: its volumes, environment and command line. Returns 0, or -1
 * after writing why into err. */
static int ctr_make(k8s_ctr *c, const k8s_pod *p, json_object *ctr, char *err, size_t errlen)
{
    memset(c, 0, sizeof(*c));
    c->pod = p;
    c->ctr = ctr;
    snprintf(c->what, sizeof(c->what), "pod %s, container %s", p->name, jstr(ctr, "name"));
    if (jget(ctr, "envFrom") != NULL) {
        snprintf(err, errlen, "%s: envFrom is not emulated", c->what);
        return -1;
    }
    json_object *vms = jget(ctr, "volumeMounts");
    for (size_t i = 0; i < jlen(vms) && i < MAX_MOUNTS; i++) {
        json_object *vm = jat(vms, i);
        const char *vname = jstr(vm, "name"), *mpath = jstr(vm, "mountPath");
        const char *sub = jstr(vm, "subPath");
        json_object *vol = jnamed(jget(p->spec, "volumes"), vname ? vname : "");
        k8s_mount *m = &c->mounts[c->nmounts++];
        if (vol == NULL || mpath == NULL) {
            snprintf(err, errlen, "%s: volumeMount %s names no volume of the pod", c->what,
                     vname ? vname : "(unnamed)");
            return -1;
        }
        snprintf(m->path, sizeof(m->path), "%s", mpath);
        if (volume_dir(c, vol, m->dir, sizeof(m->dir), err, errlen) != 0)
            return -1;
        if (sub != NULL && sub[0] != '\0') {
            size_t n = strlen(m->dir);
            snprintf(m->dir + n, sizeof(m->dir) - n, "/%s", sub);
        }
    }

    /* the environment: the image's (PATH, and the sanitizers' settings of this build), then the
     * service links, then the container's env in order, each value expanded from those before */
    char path[512];
    snprintf(path, sizeof(path), "%s:%s", k_.bin, getenv("PATH") ? getenv("PATH") : "/usr/bin");
    if (set_env(c, "PATH", path) != 0)
        return -1;
    static const char *const image_env[] = {"ASAN_OPTIONS", "LSAN_OPTIONS", "UBSAN_OPTIONS",
                                            "LD_LIBRARY_PATH"};
    for (size_t i = 0; i < sizeof(image_env) / sizeof(image_env[0]); i++)
        if (getenv(image_env[i]) != NULL && set_env(c, image_env[i], getenv(image_env[i])) != 0)
            return -1;
    if (jbool(p->spec, "enableServiceLinks", 1))
        add_service_links(c);
    int first_own = c->nvars;
    json_object *env = jget(ctr, "env");
    for (size_t i = 0; i < jlen(env); i++) {
        json_object *e = jat(env, i);
        const char *ename = jstr(e, "name"), *value = jstr(e, "value");
        char *v = value != NULL                  ? expand(value, c->vname, c->vval, c->nvars)
                  : jget(e, "valueFrom") != NULL ? value_from(c, e, err, errlen)
                                                 : strdup("");
        if (v == NULL)
            return -1;
        if (ename == NULL || add_var(c, ename, v) != 0) {
            snprintf(err, errlen, "%s: env entry %zu", c->what, i);
            return -1;
        }
    }
    /* the Job controller appends it to the container's env (so earlier entries cannot use it) */
    if (p->index >= 0 && jnamed(env, "JOB_COMPLETION_INDEX") == NULL) {
        char *v = NULL;
        if (asprintf(&v, "%d", p->index) < 0 || add_var(c, "JOB_COMPLETION_INDEX", v) != 0)
            return -1;
    }
    for (int i = 0; i < c->nvars; i++) {
        char *v = i >= first_own ? map_value(c, c->vval[i], err, errlen) : strdup(c->vval[i]);
        int rc = v != NULL ? set_env(c, c->vname[i], v) : -1;
        free(v);
        if (rc != 0)
            return -1;
    }
    c->env[c->nenv] = NULL;

    /* the command line: setpriv, then command and args, expanded from the whole environment and
     * mapped, the program to the build's; a shell's script (after -c) has its mount paths mapped
     * and finds the programs in the image's PATH */
    if (add_security(c, err, errlen) != 0)
        return -1;
    c->nwrap = c->nargs;
    json_object *parts[2] = {jget(ctr, "command"), jget(ctr, "args")};
    if (jlen(parts[0]) == 0) {
        snprintf(err, errlen, "%s: no command: the image's entrypoint is not emulated", c->what);
        return -1;
    }
    if (add_words(c, parts, 2, c->vname, c->vval, c->nvars, c->argv, &c->nargs, MAX_ARGS + 1, err,
                  errlen) != 0)
        return -1;
    return 0;
}

/* Prepares pod p: container cname (NULL: the only one) of the pod template tmpl in namespace
 * ns, on node, with the Job's completion index (-1: none), and its init containers. Returns 0, or
 * -1 after writing why into err. */
static int pod_make(k8s_pod *p, const char *name, const k8s_node *node, const char *ns,
                    json_object *tmpl, const char *cname, int index, char *err, size_t errlen)
{
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "%s", name);
    snprintf(p->log, sizeof(p->log), "%s/logs/%s.log", k_.root, name);
    p->node = node;
    p->ns = ns;
    p->index = index;
    p->spec = jget(tmpl, "spec");
    json_object *ctrs = jget(p->spec, "containers"), *inits = jget(p->spec, "initContainers");
    json_object *ctr = cname != NULL ? jnamed(ctrs, cname) : jlen(ctrs) == 1 ? jat(ctrs, 0) : NULL;
    if (ctr == NULL) {
        snprintf(err, errlen, "pod %s: no container %s", name,
                 cname != NULL ? cname : "(want exactly one)");
        return -1;
    }
    if (jlen(inits) > MAX_INIT) {
        snprintf(err, errlen, "pod %s: more than %d init containers", name, MAX_INIT);
        return -1;
    }
    for (size_t i = 0; i < jlen(inits); i++)
        if (ctr_make(&p->init[p->ninit++], p, jat(inits, i), err, errlen) != 0)
            return -1;
    return ctr_make(&p->main, p, ctr, err, errlen);
}

/* The exec command of a probe or lifecycle hook (handler: its object) of container c, after its
 * setpriv options, mapped like the container's values. The kubelet expands a probe's $(VAR) from
 * the env's literal values only (ExpandContainerCommandOnlyStatic), a hook's not at all. Fills
 * argv (max entries with the terminating NULL; the caller frees the strings). Returns 0, or -1
 * after writing why. */
static int exec_command(const k8s_ctr *c, json_object *handler, int probe, char **argv, int max,
                        char *err, size_t errlen)
{
    json_object *cmd = jget(handler, "exec.command"), *env = jget(c->ctr, "env");
    char *names[MAX_ENV] = {NULL}, *values[MAX_ENV] = {NULL};
    int nv = 0, n = 0;
    for (size_t i = 0; probe && i < jlen(env) && nv < MAX_ENV; i++) {
        json_object *e = jat(env, i);
        names[nv] = (char *)jstr(e, "name");
        values[nv] = (char *)(jstr(e, "value") != NULL ? jstr(e, "value") : "");
        nv += names[nv] != NULL;
    }
    if (jlen(cmd) == 0) {
        snprintf(err, errlen, "%s: not an exec handler with a command", c->what);
        return -1;
    }
    for (; n < c->nwrap && n < max - 1; n++)
        argv[n] = strdup(c->argv[n]);
    if (add_words(c, &cmd, 1, names, values, nv, argv, &n, max, err, errlen) != 0) {
        for (int i = 0; i < n; i++)
            free(argv[i]);
        argv[0] = NULL;
        return -1;
    }
    return 0;
}

typedef struct {
    const char *log;
    char *const *argv;
    char *const *envp;
    char **out;
    int timeout_ms;
    int rc;
} k8s_exec;

static int spawn_there(void *arg)
{
    k8s_exec *x = arg;
    x->rc = th_spawn_env(x->log, (const char *const *)x->argv, (const char *const *)x->envp);
    return x->rc > 0 ? 0 : -1;
}

static int command_there(void *arg)
{
    k8s_exec *x = arg;
    x->rc = th_command_env(x->out, x->timeout_ms, (const char *const *)x->argv,
                           (const char *const *)x->envp);
    return 0;
}

/* Runs a probe's or hook's exec command in container c (its node's network, its user, its
 * environment) for at most timeout_ms. Returns its exit code, or -1 (a signal, the deadline, or
 * no such command); *out gets what it printed (malloc'd) or why it did not run. */
static int ctr_exec(const k8s_ctr *c, json_object *handler, int probe, int timeout_ms, char **out)
{
    char *argv[MAX_ARGS + 1], err[512] = "";
    *out = NULL;
    if (exec_command(c, handler, probe, argv, MAX_ARGS + 1, err, sizeof(err)) != 0) {
        *out = strdup(err);
        return -1;
    }
    k8s_exec x = {.argv = argv, .envp = c->env, .out = out, .timeout_ms = timeout_ms, .rc = -1};
    th_in_netns(c->pod->node->ns, command_there, &x);
    for (int i = 0; argv[i] != NULL; i++)
        free(argv[i]);
    return x.rc;
}

/* Starts container c in its node's network namespace, its output appended to the pod's log.
 * Returns its pid, or -1. */
static pid_t ctr_spawn(const k8s_ctr *c, const char *log)
{
    char line[192];
    snprintf(line, sizeof(line), "---- test: %s starts at %+lld ms ----", c->what,
             (long long)(th_now_ms() - k_.t0));
    append_line(log, line);
    k8s_exec x = {.log = log, .argv = c->argv, .envp = c->env};
    fflush(NULL);
    return th_in_netns(c->pod->node->ns, spawn_there, &x) == 0 ? x.rc : -1;
}

static int exited_0(int ws)
{
    return ws >= 0 && WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
}

/* Starts the pod: its init containers one after the other, each to exit 0 within INIT_MS, then
 * its main container. Returns 0, or -1 after writing why into err. */
static int pod_start(k8s_pod *p, char *err, size_t errlen)
{
    for (int i = 0; i < p->ninit; i++) {
        pid_t pid = ctr_spawn(&p->init[i], p->log);
        int ws = pid > 0 ? th_wait_pid(pid, INIT_MS) : -2;
        if (ws == -1) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
        }
        if (!exited_0(ws)) {
            snprintf(err, errlen, "%s %s (wait status %d; its output is in the pod's log)",
                     p->init[i].what, ws == -1 ? "still ran after 30 s" : "failed", ws);
            return -1;
        }
    }
    p->pid = ctr_spawn(&p->main, p->log);
    if (p->pid <= 0) {
        p->pid = 0;
        snprintf(err, errlen, "%s: fork failed", p->main.what);
        return -1;
    }
    p->runs++;
    return 0;
}

/* Restarts the pod's main container (restartPolicy OnFailure: init containers do not run again).
 * Returns 0 or -1. */
static int pod_restart(k8s_pod *p)
{
    p->pid = ctr_spawn(&p->main, p->log);
    if (p->pid <= 0) {
        p->pid = 0;
        return -1;
    }
    p->runs++;
    return 0;
}

/* Waits up to timeout_ms for the pod's main container to exit; 1 when it did (p->status has its
 * wait status), 0 when it still runs. */
static int pod_wait(k8s_pod *p, int timeout_ms)
{
    if (p->pid <= 0)
        return 1;
    int ws = th_wait_pid(p->pid, timeout_ms);
    if (ws == -1)
        return 0;
    p->status = ws;
    p->pid = 0;
    return 1;
}

/* Runs the readiness probe until it passes, at most timeout_ms (more often than its
 * periodSeconds: only the waiting is shortened), each run bounded by its timeoutSeconds. Returns
 * how long it took in ms, or -1 (the container exited, or the deadline) after printing the last
 * probe's output. */
static int64_t pod_wait_ready(k8s_pod *p, int timeout_ms)
{
    json_object *probe = jget(p->main.ctr, "readinessProbe");
    int per_ms = (int)jint(probe, "timeoutSeconds", 1) * 1000;
    int64_t t = th_now_ms(), end = t + timeout_ms;
    char *out = NULL;
    for (;;) {
        free(out);
        if (pod_wait(p, 0)) {
            fprintf(stderr, "%s exited (wait status %d) before it was ready\n", p->main.what,
                    p->status);
            return -1;
        }
        if (ctr_exec(&p->main, probe, 1, per_ms, &out) == 0)
            break;
        if (th_now_ms() >= end) {
            fprintf(stderr, "%s: readiness probe still failing after %d ms: %s\n", p->main.what,
                    timeout_ms, out != NULL ? out : "");
            free(out);
            return -1;
        }
        th_sleep_ms(100);
    }
    free(out);
    return th_now_ms() - t;
}

/* Deletes the pod as Kubernetes does: its preStop hook, then SIGTERM, SIGKILL once its
 * terminationGracePeriodSeconds (counted from the start) are over. *hook_rc gets the hook's exit
 * code (-1: none ran to completion), *hook_out what it printed. Returns the milliseconds it took;
 * p->status has the container's wait status (-1: killed at the deadline). */
static int64_t pod_delete(k8s_pod *p, int *hook_rc, char **hook_out)
{
    int grace_ms = (int)jint(p->spec, "terminationGracePeriodSeconds", 30) * 1000;
    json_object *hook = jget(p->main.ctr, "lifecycle.preStop");
    int64_t t = th_now_ms();
    *hook_rc = -1;
    *hook_out = NULL;
    if (hook != NULL)
        *hook_rc = ctr_exec(&p->main, hook, 0, grace_ms, hook_out);
    if (p->pid > 0)
        kill(p->pid, SIGTERM);
    int left = (int)(t + grace_ms - th_now_ms());
    if (!pod_wait(p, left > 0 ? left : 0)) {
        kill(p->pid, SIGKILL);
        waitpid(p->pid, NULL, 0);
        p->pid = 0;
        p->status = -1;
    }
    return th_now_ms() - t;
}

/* Prints the container's command line and the environment variables named with one of the
 * prefixes (NULL-terminated). */
static void print_ctr(const k8s_ctr *c, const char *const *prefixes)
{
    fprintf(stderr, "k8s_pods: %s runs:", c->what);
    for (int i = 0; i < c->nargs; i++)
        fprintf(stderr, " %s", c->argv[i]);
    fprintf(stderr, "\n");
    int shown = 0;
    for (int i = 0; i < c->nenv; i++)
        for (const char *const *p = prefixes; *p != NULL; p++)
            if (strncmp(c->env[i], *p, strlen(*p)) == 0)
                fprintf(stderr, "%s %s", shown++ ? "" : "k8s_pods:   with", c->env[i]);
    if (shown > 0)
        fprintf(stderr, "\n");
}

/* ---- the nodes ---- */

/* The namespaces: a bridge in br_ns with REDIS_IP, and node k's "eth0" (NET k+1) plugged into it.
 * Skips the test where namespaces cannot be made. */
static void nodes_make(void)
{
    int id = (int)getpid() % 100000;
    snprintf(k_.br_ns, sizeof(k_.br_ns), "rdk%d-br", id);
    if (th_sh("ip netns add %s 2>/dev/null", k_.br_ns) != 0)
        SKIP("'ip netns add' does not work here (no CAP_SYS_ADMIN or no iproute2)");
    k_.made[NNODES] = 1;
    cr_assert_eq(th_sh("ip -n %s link set lo up && ip -n %s link add br0 type bridge && "
                       "ip -n %s addr add " REDIS_IP "/24 dev br0 && ip -n %s link set br0 up",
                       k_.br_ns, k_.br_ns, k_.br_ns, k_.br_ns),
                 0, "could not make the bridge");
    for (int k = 0; k < NNODES; k++) {
        k8s_node *n = &k_.node[k];
        snprintf(n->name, sizeof(n->name), "n%d", k);
        snprintf(n->ns, sizeof(n->ns), "rdk%d-%s", id, n->name);
        snprintf(n->ip, sizeof(n->ip), NET "%d", k + 1);
        snprintf(n->dir, sizeof(n->dir), "%s/%s", k_.root, n->name);
        cr_assert_eq(mkdirs(n->dir, 0755), 0);
        cr_assert_eq(th_sh("ip netns add %s", n->ns), 0);
        k_.made[k] = 1;
        cr_assert_eq(th_sh("ip -n %s link add v%d type veth peer name eth0 netns %s && "
                           "ip -n %s link set v%d master br0 && ip -n %s link set v%d up && "
                           "ip -n %s addr add %s/24 dev eth0 && "
                           "ip -n %s link set eth0 up && ip -n %s link set lo up",
                           k_.br_ns, k, n->ns, k_.br_ns, k, k_.br_ns, k, n->ns, n->ip, n->ns,
                           n->ns),
                     0, "could not plug node %s into the bridge", n->name);
    }
}

/* ---- ringd-train's output ---- */

typedef th_train_line train_line;

/* Step lines of training pod k at size (0: any) printed after its first `after` step lines. */
static int steps_at(int k, int size, int after)
{
    static train_line lines[MAX_LINES];
    int n = th_train_log(k_.trainer[k].log, k, lines, MAX_LINES), count = 0;
    for (int i = after; i < n; i++)
        count += size == 0 || lines[i].size == size;
    return count;
}

/* The value of the last "--name value" in the container's command line, or def. */
static long last_flag(const k8s_ctr *c, const char *name, long def)
{
    for (int i = c->nargs - 2; i > c->nwrap; i--)
        if (strcmp(c->argv[i], name) == 0)
            return strtol(c->argv[i + 1], NULL, 10);
    return def;
}

/* 1 when the log has the text. */
static int log_has(const char *log, const char *text)
{
    char *all = th_file_text(log);
    int has = all != NULL && strstr(all, text) != NULL;
    free(all);
    return has;
}

/* Prints the log's lines that have one of two texts, labelled. */
static void print_lines(const char *label, const char *log, const char *a, const char *b)
{
    char *all = th_file_text(log);
    for (char *line = all, *next; line != NULL && *line != '\0'; line = next) {
        char *nl = strchr(line, '\n');
        next = nl != NULL ? nl + 1 : line + strlen(line);
        if (nl != NULL)
            *nl = '\0';
        if (strstr(line, a) != NULL || strstr(line, b) != NULL)
            fprintf(stderr, "k8s_pods: %s logged: %s\n", label, line);
    }
    free(all);
}

/* ---- the test ---- */

/* Skips, after cleaning up, unless this machine has what the test needs; returns the source
 * root. */
static const char *require_tools(void)
{
    const char *src = getenv("RINGD_SRC");
    if (src == NULL)
        SKIP("RINGD_SRC (the source root) is unset: run it through meson test");
    if (getenv("RINGD_TRAIN_BIN") == NULL)
        SKIP("bench/ringd-train is not built (RINGD_TRAIN_BIN unset in tests/meson.build)");
    if (th_sh("{ command -v node && command -v kubectl; } >/dev/null 2>&1") != 0)
        SKIP("needs node and kubectl (Debian: nodejs, kubernetes-client) to render deploy/k8s; "
             "scripts/deps.sh installs them");
    /* render.mjs's npm packages: run.sh installs them when they are missing or stale (under a
     * lock, as the k8s test does too), and returns at once when they are there */
    th_sh("timeout 180 bash '%s/tests/k8s/run.sh' --install-only >/dev/null 2>&1", src);
    if (th_sh("test -d '%s/tests/k8s/node_modules'", src) != 0)
        SKIP("tests/k8s/node_modules is missing and `tests/k8s/run.sh --install-only` (npm ci) "
             "could not install it: is the npm registry reachable?");
    if (th_sh("{ command -v redis-server && command -v redis-cli && command -v setpriv; } "
              ">/dev/null 2>&1") != 0)
        SKIP("needs redis-server, redis-cli (the Redis pod's program and probe) and setpriv "
             "(util-linux)");
    if (geteuid() != 0)
        SKIP("needs root to create network namespaces");
    return src;
}

/* Where the build is out of reach of uid (a checkout in a home directory of mode 0700, say), or
 * setpriv cannot drop capabilities here, the pods run as root instead, saying so: the rest still
 * holds. */
static void check_reach(long uid, long gid)
{
    if (th_sh("setpriv --reuid=%ld --regid=%ld --clear-groups --no-new-privs --bounding-set=-all "
              "--inh-caps=-all -- test -x '%s' -a -x '%s' -a -x '%s'",
              uid, gid, getenv("RINGD_BIN"), getenv("RINGCTL_BIN"), getenv("RINGD_TRAIN_BIN")) == 0)
        return;
    k_.as_root = 1;
    fprintf(stderr,
            "k8s_pods: NOTE: uid %ld cannot reach the build's binaries (or setpriv cannot drop "
            "capabilities here): the pods run as root, their securityContext (user, groups, "
            "capabilities) is not tested\n",
            uid);
}

Test(k8s_pods,
     a_ringd_pod_deleted_and_recreated_under_the_example_job_leaves_every_rank_training_alike,
     .timeout = 240)
{
    const char *src = require_tools();
    char err[1024] = "";
    k_.t0 = th_now_ms();
    snprintf(k_.root, sizeof(k_.root), "/tmp/ringd-k8s.XXXXXX");
    cr_assert_not_null(mkdtemp(k_.root));
    cr_assert_eq(chmod(k_.root, 0755), 0); /* the pods' users walk through it, as through / */
    char logs[96];
    snprintf(logs, sizeof(logs), "%s/logs", k_.root);
    cr_assert_eq(mkdirs(logs, 0755), 0);
    cr_assert_eq(make_image(src), 0, "could not make the image's bin directory");

    /* the manifests, as kustomize renders them */
    k_.base = render(src, "deploy/k8s/base", err, sizeof(err));
    cr_assert_not_null(k_.base, "%s", err);
    k_.train = render(src, "deploy/k8s/examples/train", err, sizeof(err));
    cr_assert_not_null(k_.train, "%s", err);
    k_.ds = jobject(k_.base, "DaemonSet", "ringd", "ringd");
    cr_assert_not_null(k_.ds, "deploy/k8s/base renders no DaemonSet ringd in namespace ringd");
    k_.job = jobject(k_.train, "Job", NULL, "ringd-train");
    cr_assert_not_null(k_.job, "deploy/k8s/examples/train renders no Job ringd-train");
    json_object *ds_tmpl = jget(k_.ds, "spec.template"), *job_tmpl = jget(k_.job, "spec.template");
    cr_assert(jbool(ds_tmpl, "spec.hostNetwork", 0),
              "the DaemonSet's pods are not on the host network: peers could not reach "
              "$(HOST_IP):7070 (and this test runs ringd in the node's network namespace)");
    const char *mode = jstr(k_.job, "spec.completionMode");
    const char *restart = jstr(job_tmpl, "spec.restartPolicy");
    long completions = jint(k_.job, "spec.completions", 1);
    long parallelism = jint(k_.job, "spec.parallelism", 1);
    cr_assert(mode != NULL && strcmp(mode, "Indexed") == 0 && completions == NNODES &&
                  parallelism >= NNODES,
              "the Job is not Indexed with %d completions run at once (completionMode %s, "
              "completions %ld, parallelism %ld)",
              NNODES, mode ? mode : "NonIndexed", completions, parallelism);
    cr_assert(restart != NULL && strcmp(restart, "OnFailure") == 0,
              "the Job's pods have restartPolicy %s, this test follows OnFailure",
              restart ? restart : "(none)");
    cr_assert(jint(k_.job, "spec.backoffLimit", 6) >= 1,
              "the Job's backoffLimit 0 fails the whole Job when one node's ringd is replaced");

    /* the cluster: nodes, the operator's Secrets, the pods' users */
    nodes_make();
    cr_assert_eq(make_secrets(), 0, "could not write the Secrets");
    check_reach(jint(ds_tmpl, "spec.securityContext.runAsUser", k_.image_uid),
                jint(ds_tmpl, "spec.securityContext.runAsGroup", k_.image_gid));
    const char *ds_ns = jstr(k_.ds, "metadata.namespace");
    const char *job_ns = jstr(k_.job, "metadata.namespace");
    for (int k = 0; k < NNODES; k++) {
        char name[64];
        snprintf(name, sizeof(name), "ringd-%s", k_.node[k].name);
        cr_assert_eq(pod_make(&k_.ringd[k], name, &k_.node[k], ds_ns, ds_tmpl, "ringd", -1, err,
                              sizeof(err)),
                     0, "the DaemonSet's pod on %s: %s", k_.node[k].name, err);
    }
    cr_assert(k_.redis_port > 0, "ringd's environment and arguments name no redis:// URL");

    /* the Redis Deployment's pod, in the bridge's namespace (REDIS_IP is its pod's IP and the
     * Service's), ready as its readiness probe says */
    k8s_node *rn = &k_.redis_node;
    snprintf(rn->name, sizeof(rn->name), "nr");
    snprintf(rn->ns, sizeof(rn->ns), "%s", k_.br_ns);
    snprintf(rn->ip, sizeof(rn->ip), REDIS_IP);
    snprintf(rn->dir, sizeof(rn->dir), "%s/%s", k_.root, rn->name);
    cr_assert_eq(pod_make(&k_.redis, "ringd-redis-0", rn, jstr(k_.redis_dep, "metadata.namespace"),
                          jget(k_.redis_dep, "spec.template"), k_.redis_ctr, -1, err, sizeof(err)),
                 0, "the Redis Deployment's pod: %s", err);
    static const char *const shown[] = {"RINGD_", "NODE_", "HOST_", "JOB_", NULL};
    print_ctr(&k_.redis.main, shown);
    MUST(pod_start(&k_.redis, err, sizeof(err)) == 0, "%s", err);
    MUST(pod_wait_ready(&k_.redis, READY_MS) >= 0, "%s did not become ready", k_.redis.name);
    for (int i = 0; i < k_.ringd[1].ninit; i++)
        print_ctr(&k_.ringd[1].init[i], shown);
    print_ctr(&k_.ringd[1].main, shown);

    /* the DaemonSet: a ringd pod per node, ready as its readiness probe says, alive as its
     * liveness probe says */
    for (int k = 0; k < NNODES; k++)
        MUST(pod_start(&k_.ringd[k], err, sizeof(err)) == 0, "%s", err);
    for (int k = 0; k < NNODES; k++) {
        k8s_pod *p = &k_.ringd[k];
        int64_t took = pod_wait_ready(p, READY_MS);
        MUST(took >= 0, "%s did not become ready", p->name);
        fprintf(stderr, "k8s_pods: %s ready %lld ms after the test began\n", p->name,
                (long long)(th_now_ms() - k_.t0));
        json_object *live = jget(p->main.ctr, "livenessProbe");
        char *out = NULL;
        int rc = ctr_exec(&p->main, live, 1, (int)jint(live, "timeoutSeconds", 1) * 1000, &out);
        MUST(rc == 0, "%s: the liveness probe exited %d: %s", p->name, rc, out ? out : "");
        free(out);
    }

    /* the Job: pod k (completion index k) on node k */
    for (int k = 0; k < NNODES; k++) {
        char name[64];
        snprintf(name, sizeof(name), "ringd-train-%d", k);
        cr_assert_eq(pod_make(&k_.trainer[k], name, &k_.node[k], job_ns ? job_ns : "default",
                              job_tmpl, NULL, k, err, sizeof(err)),
                     0, "the Job's pod %d: %s", k, err);
    }
    for (int i = 0; i < k_.trainer[1].ninit; i++)
        print_ctr(&k_.trainer[1].init[i], shown);
    print_ctr(&k_.trainer[1].main, shown);
    long steps = last_flag(&k_.trainer[0].main, "--steps", 100);
    int64_t t_train = th_now_ms();
    for (int k = 0; k < NNODES; k++)
        MUST(pod_start(&k_.trainer[k], err, sizeof(err)) == 0, "%s", err);
    for (int k = 0; k < NNODES; k++)
        MUST(TH_WAIT_EVERY(steps_at(k, NNODES, 0) >= WARM_STEPS || pod_wait(&k_.trainer[k], 0),
                           60000, 20),
             "%s: not %d steps at size %d within 60 s of the Job's start", k_.trainer[k].name,
             WARM_STEPS, NNODES);
    for (int k = 0; k < NNODES; k++)
        MUST(k_.trainer[k].pid > 0, "%s exited (wait status %d) before the ringd pod was deleted",
             k_.trainer[k].name, k_.trainer[k].status);
    fprintf(stderr, "k8s_pods: every rank at step %d or later %lld ms after the Job's start\n",
            WARM_STEPS, (long long)(th_now_ms() - t_train));

    /* kubectl delete pod ringd-n1: preStop (ringctl drain), SIGTERM, within the grace period */
    k8s_pod *victim = &k_.ringd[1], *orphan = &k_.trainer[1];
    int before[NNODES];
    for (int k = 0; k < NNODES; k++)
        before[k] = steps_at(k, 0, 0);
    int hook_rc;
    char *hook_out;
    int64_t t_delete = th_now_ms(), took = pod_delete(victim, &hook_rc, &hook_out);
    long grace = jint(victim->spec, "terminationGracePeriodSeconds", 30);
    fprintf(stderr, "k8s_pods: %s deleted in %lld ms (grace %ld s); preStop exited %d: %s",
            victim->name, (long long)took, grace, hook_rc, hook_out ? hook_out : "\n");
    MUST(hook_rc == 0, "%s: the preStop hook exited %d: %s", victim->name, hook_rc,
         hook_out ? hook_out : "");
    free(hook_out);
    MUST(victim->status != -1, "%s did not exit within its grace period of %ld s after SIGTERM",
         victim->name, grace);
    MUST(exited_0(victim->status), "%s exited with wait status %d after SIGTERM, want 0",
         victim->name, victim->status);
    /* its node's training pod loses its session and fails */
    MUST(pod_wait(orphan, 30000), "%s still runs 30 s after its node's ringd left", orphan->name);
    MUST(!exited_0(orphan->status), "%s exited 0 with its node's ringd gone", orphan->name);
    MUST(log_has(orphan->log, ringd_strerror(RINGD_E_CLOSED)),
         "%s did not fail with RINGD_E_CLOSED (\"%s\")", orphan->name,
         ringd_strerror(RINGD_E_CLOSED));
    fprintf(stderr, "k8s_pods: %s failed (wait status %d) with RINGD_E_CLOSED\n", orphan->name,
            orphan->status);
    /* the others train on at size 2 */
    for (int k = 0; k < NNODES; k += 2)
        MUST(TH_WAIT_EVERY(steps_at(k, NNODES - 1, before[k]) >= AWAY_STEPS ||
                               pod_wait(&k_.trainer[k], 0),
                           30000, 20),
             "%s: not %d steps at size %d within 30 s of %s's deletion", k_.trainer[k].name,
             AWAY_STEPS, NNODES - 1, victim->name);
    for (int k = 0; k < NNODES; k += 2)
        MUST(k_.trainer[k].pid > 0,
             "%s finished (wait status %d) while %s was away: the Job's --steps leave no time "
             "to see the node come back",
             k_.trainer[k].name, k_.trainer[k].status, victim->name);

    /* the DaemonSet's new pod on n1 (init containers, then ringd with the same command and env,
     * a new process); once it is ready, the Job's pod restarts its container (OnFailure) */
    int64_t t_back = th_now_ms();
    MUST(pod_start(victim, err, sizeof(err)) == 0, "the new %s: %s", victim->name, err);
    MUST(pod_wait_ready(victim, READY_MS) >= 0, "the new %s did not become ready", victim->name);
    MUST(pod_restart(orphan) == 0, "could not restart %s", orphan->name);
    fprintf(stderr,
            "k8s_pods: the new %s ready %lld ms after it was created (%lld ms after the delete "
            "began); %s restarted\n",
            victim->name, (long long)(th_now_ms() - t_back), (long long)(th_now_ms() - t_delete),
            orphan->name);

    /* every training pod completes */
    for (int k = 0; k < NNODES; k++) {
        MUST(pod_wait(&k_.trainer[k], 120000), "%s still runs after 120 s", k_.trainer[k].name);
        MUST(exited_0(k_.trainer[k].status), "%s exited with wait status %d, want 0",
             k_.trainer[k].name, k_.trainer[k].status);
    }
    fprintf(stderr, "k8s_pods: the Job completed %lld ms after its start\n",
            (long long)(th_now_ms() - t_train));

    /* every step: one checksum on every rank that printed it, whatever the generation; every
     * (generation, step): one size, printed by at most that many ranks; the last step: all three
     * ranks at size 3 in one generation; some steps at size 2 */
    static train_line all[NNODES * MAX_LINES];
    int n = 0, size2 = 0, last = 0;
    for (int k = 0; k < NNODES; k++) {
        int got = th_train_log(k_.trainer[k].log, k, all + n, MAX_LINES);
        MUST(got > 0, "%s printed no step line (or a malformed one)", k_.trainer[k].name);
        n += got;
    }
    uint64_t gmin = UINT64_MAX, gmax = 0, last_gen = 0;
    const char *last_sum = "";
    unsigned last_ranks = 0;
    for (int i = 0; i < n; i++) {
        const train_line *a = &all[i];
        int count = 0;
        gmin = a->gen < gmin ? a->gen : gmin;
        gmax = a->gen > gmax ? a->gen : gmax;
        for (int j = 0; j < n; j++) {
            const train_line *b = &all[j];
            if (b->step != a->step)
                continue;
            MUST(strcmp(a->checksum, b->checksum) == 0,
                 "step %d: rank %d (pod %d, generation %" PRIu64 ") has checksum %s, rank %d "
                 "(pod %d, generation %" PRIu64 ") %s",
                 a->step, a->rank, a->pod, a->gen, a->checksum, b->rank, b->pod, b->gen,
                 b->checksum);
            if (b->gen != a->gen)
                continue;
            MUST(b->size == a->size,
                 "generation %" PRIu64 " step %d: rank %d has size %d, rank %d size %d", a->gen,
                 a->step, a->rank, a->size, b->rank, b->size);
            count++;
        }
        MUST(count <= a->size, "generation %" PRIu64 " step %d printed %d times at size %d", a->gen,
             a->step, count, a->size);
        size2 += a->size == NNODES - 1;
        if (a->step == steps) {
            MUST(a->size == NNODES && (last == 0 || a->gen == last_gen),
                 "the last step %ld: rank %d (pod %d) at size %d, generation %" PRIu64, steps,
                 a->rank, a->pod, a->size, a->gen);
            last++;
            last_gen = a->gen;
            last_sum = a->checksum;
            last_ranks |= 1u << a->rank;
        }
    }
    MUST(last == NNODES && last_ranks == (1u << NNODES) - 1,
         "the last step %ld was printed %d times (ranks mask %#x), want once by each of %d ranks",
         steps, last, last_ranks, NNODES);
    MUST(size2 > 0, "no step ran at size %d while %s was away", NNODES - 1, victim->name);
    fprintf(stderr,
            "k8s_pods: %d step lines, %d at size %d, generations %" PRIu64 "..%" PRIu64
            ", the last step %ld on all %d ranks at size %d with checksum %s\n",
            n, size2, NNODES - 1, gmin, gmax, steps, NNODES, NNODES, last_sum);

    /* kubectl delete -k deploy/k8s/base: every ringd pod drains and exits 0 */
    for (int k = 0; k < NNODES; k++) {
        took = pod_delete(&k_.ringd[k], &hook_rc, &hook_out);
        MUST(hook_rc == 0 && exited_0(k_.ringd[k].status),
             "%s: preStop exited %d (%s), the container's wait status %d after %lld ms",
             k_.ringd[k].name, hook_rc, hook_out ? hook_out : "", k_.ringd[k].status,
             (long long)took);
        free(hook_out);
    }
    int64_t t_stop = th_now_ms();
    took = pod_delete(&k_.redis, &hook_rc, &hook_out);
    MUST(exited_0(k_.redis.status), "%s: wait status %d after SIGTERM (%lld ms)", k_.redis.name,
         k_.redis.status, (long long)(th_now_ms() - t_stop));
    free(hook_out);
    /* what an operator would see in kubectl logs */
    for (int k = 0; k < NNODES; k++)
        print_lines(k_.ringd[k].name, k_.ringd[k].log, "] warn ", "] error");
    fprintf(stderr, "k8s_pods: done in %lld ms\n", (long long)(th_now_ms() - k_.t0));
}
