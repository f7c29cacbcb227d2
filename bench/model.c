/* Model-shaped gradient sets: built-in networks generated from their architecture, and model
 * files. */
#include "model.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char rb_model_builtins[] = "resnet50|bert-base";

/* Appends one tensor; returns 0, or -1 when out of memory. */
static int add(rb_model *m, size_t *cap, size_t count, const char *fmt, ...)
{
    if (m->n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 256;
        char **names = realloc(m->names, ncap * sizeof(*names));
        if (names == NULL)
            return -1;
        m->names = names;
        size_t *counts = realloc(m->counts, ncap * sizeof(*counts));
        if (counts == NULL)
            return -1;
        m->counts = counts;
        *cap = ncap;
    }
    char buf[RB_MODEL_MAX_NAME + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if ((m->names[m->n] = strdup(buf)) == NULL)
        return -1;
    m->counts[m->n++] = count;
    m->elems += count;
    return 0;
}

/* torchvision.models.resnet50(): bottleneck blocks [3, 4, 6, 3], batch norms with weight and bias
 * (their running statistics are buffers, not gradients), a 1000-way classifier. */
static int build_resnet50(rb_model *m, size_t *cap)
{
    static const int blocks[4] = {3, 4, 6, 3}, planes[4] = {64, 128, 256, 512};
    int rc = add(m, cap, 64 * 3 * 7 * 7, "conv1.weight");
    rc |= add(m, cap, 64, "bn1.weight");
    rc |= add(m, cap, 64, "bn1.bias");
    size_t inplanes = 64;
    for (int l = 0; l < 4; l++) {
        size_t p = (size_t)planes[l], out = 4 * p;
        for (int b = 0; b < blocks[l]; b++) {
            size_t in = b == 0 ? inplanes : out;
            const size_t conv[3] = {in * p, p * p * 9, p * out}, bn[3] = {p, p, out};
            for (int c = 0; c < 3; c++) {
                rc |= add(m, cap, conv[c], "layer%d.%d.conv%d.weight", l + 1, b, c + 1);
                rc |= add(m, cap, bn[c], "layer%d.%d.bn%d.weight", l + 1, b, c + 1);
                rc |= add(m, cap, bn[c], "layer%d.%d.bn%d.bias", l + 1, b, c + 1);
            }
            if (b == 0) {
                rc |= add(m, cap, in * out, "layer%d.0.downsample.0.weight", l + 1);
                rc |= add(m, cap, out, "layer%d.0.downsample.1.weight", l + 1);
                rc |= add(m, cap, out, "layer%d.0.downsample.1.bias", l + 1);
            }
        }
        inplanes = out;
    }
    rc |= add(m, cap, 1000 * 2048, "fc.weight");
    rc |= add(m, cap, 1000, "fc.bias");
    return rc;
}

/* BERT-base uncased (Hugging Face BertModel's parameter names): vocabulary 30522, 512 positions,
 * 2 token types, hidden 768, 12 layers, feed-forward 3072, and the pooler. */
static int build_bert_base(rb_model *m, size_t *cap)
{
    const size_t h = 768, ff = 3072;
    int rc = add(m, cap, 30522 * h, "embeddings.word_embeddings.weight");
    rc |= add(m, cap, 512 * h, "embeddings.position_embeddings.weight");
    rc |= add(m, cap, 2 * h, "embeddings.token_type_embeddings.weight");
    rc |= add(m, cap, h, "embeddings.LayerNorm.weight");
    rc |= add(m, cap, h, "embeddings.LayerNorm.bias");
    static const char *const qkv[3] = {"query", "key", "value"};
    for (int l = 0; l < 12; l++) {
        for (int i = 0; i < 3; i++) {
            rc |= add(m, cap, h * h, "encoder.layer.%d.attention.self.%s.weight", l, qkv[i]);
            rc |= add(m, cap, h, "encoder.layer.%d.attention.self.%s.bias", l, qkv[i]);
        }
        rc |= add(m, cap, h * h, "encoder.layer.%d.attention.output.dense.weight", l);
        rc |= add(m, cap, h, "encoder.layer.%d.attention.output.dense.bias", l);
        rc |= add(m, cap, h, "encoder.layer.%d.attention.output.LayerNorm.weight", l);
        rc |= add(m, cap, h, "encoder.layer.%d.attention.output.LayerNorm.bias", l);
        rc |= add(m, cap, ff * h, "encoder.layer.%d.intermediate.dense.weight", l);
        rc |= add(m, cap, ff, "encoder.layer.%d.intermediate.dense.bias", l);
        rc |= add(m, cap, h * ff, "encoder.layer.%d.output.dense.weight", l);
        rc |= add(m, cap, h, "encoder.layer.%d.output.dense.bias", l);
        rc |= add(m, cap, h, "encoder.layer.%d.output.LayerNorm.weight", l);
        rc |= add(m, cap, h, "encoder.layer.%d.output.LayerNorm.bias", l);
    }
    rc |= add(m, cap, h * h, "pooler.dense.weight");
    rc |= add(m, cap, h, "pooler.dense.bias");
    return rc;
}

/* Reads "name count" lines from path. Returns 0, or -1 with err set. */
static int read_file(rb_model *m, size_t *cap, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(err, errlen, "%s: %s (the built-in models are %s)", path, strerror(errno),
                 rb_model_builtins);
        return -1;
    }
    char line[512];
    int lineno = 0, rc = 0;
    while (rc == 0 && fgets(line, sizeof(line), f) != NULL) {
        lineno++;
        if (strchr(line, '\n') == NULL && !feof(f)) {
            snprintf(err, errlen, "%s:%d: line longer than %zu bytes", path, lineno,
                     sizeof(line) - 2);
            rc = -1;
            break;
        }
        char *hash = strchr(line, '#');
        if (hash != NULL)
            *hash = '\0';
        /* one byte more than a name may have, so a longer one shows */
        char name[RB_MODEL_MAX_NAME + 2], count[32], extra[2];
        _Static_assert(RB_MODEL_MAX_NAME == 200, "the sscanf width below is RB_MODEL_MAX_NAME + 1");
        int fields = sscanf(line, "%201s %31s %1s", name, count, extra);
        if (fields <= 0)
            continue;
        char *end = NULL;
        errno = 0;
        unsigned long long v = fields >= 2 ? strtoull(count, &end, 10) : 0;
        if (strlen(name) > RB_MODEL_MAX_NAME) {
            snprintf(err, errlen, "%s:%d: tensor name longer than %d bytes", path, lineno,
                     RB_MODEL_MAX_NAME);
            rc = -1;
        } else if (fields != 2 || count[0] == '-' || errno != 0 || *end != '\0' || v == 0 ||
                   v > (1ull << 40)) {
            snprintf(err, errlen, "%s:%d: expected \"name count\" with 1 <= count <= 2^40", path,
                     lineno);
            rc = -1;
        } else if (m->n == RB_MODEL_MAX_TENSORS) {
            snprintf(err, errlen, "%s:%d: more than %d tensors", path, lineno,
                     RB_MODEL_MAX_TENSORS);
            rc = -1;
        } else if (add(m, cap, (size_t)v, "%s", name) != 0) {
            snprintf(err, errlen, "%s: out of memory", path);
            rc = -1;
        }
    }
    if (rc == 0 && ferror(f)) {
        snprintf(err, errlen, "%s: read error", path);
        rc = -1;
    }
    fclose(f);
    if (rc == 0 && m->n == 0) {
        snprintf(err, errlen, "%s: no tensors (one \"name count\" per line)", path);
        rc = -1;
    }
    return rc;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Returns 0 when the names are unique, else -1 with err naming a repeated one. */
static int check_unique(const rb_model *m, char *err, size_t errlen)
{
    char **sorted = malloc(m->n * sizeof(*sorted));
    if (sorted == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    memcpy(sorted, m->names, m->n * sizeof(*sorted));
    qsort(sorted, m->n, sizeof(*sorted), cmp_name);
    int rc = 0;
    for (size_t i = 1; i < m->n && rc == 0; i++) {
        if (strcmp(sorted[i - 1], sorted[i]) == 0) {
            snprintf(err, errlen, "%s: tensor %s is listed twice", m->name, sorted[i]);
            rc = -1;
        }
    }
    free(sorted);
    return rc;
}

int rb_model_load(const char *spec, rb_model *m, char *err, size_t errlen)
{
    size_t cap = 0;
    int rc;
    memset(m, 0, sizeof(*m));
    if (strcmp(spec, "resnet50") == 0 || strcmp(spec, "bert-base") == 0) {
        snprintf(m->name, sizeof(m->name), "%s", spec);
        rc = spec[0] == 'r' ? build_resnet50(m, &cap) : build_bert_base(m, &cap);
        if (rc != 0)
            snprintf(err, errlen, "%s: out of memory", spec);
    } else {
        const char *base = strrchr(spec, '/');
        snprintf(m->name, sizeof(m->name), "%s", base != NULL ? base + 1 : spec);
        rc = read_file(m, &cap, spec, err, errlen);
    }
    if (rc == 0)
        rc = check_unique(m, err, errlen);
    if (rc != 0)
        rb_model_free(m);
    return rc;
}

void rb_model_free(rb_model *m)
{
    for (size_t i = 0; i < m->n; i++)
        free(m->names[i]);
    free(m->names);
    free(m->counts);
    memset(m, 0, sizeof(*m));
}

void rb_model_print_summary(const rb_model *m, uint64_t bytes, double step_ms, double passes,
                            double ops_per_pass)
{
    char p[32] = "-", o[32] = "-";
    if (passes >= 0) {
        snprintf(p, sizeof(p), "%.3g", passes);
        if (passes > 0)
            snprintf(o, sizeof(o), "%.1f", ops_per_pass);
    }
    printf("# model %s: tensors %zu bytes %llu step_ms %.2f ring_passes %s ops_per_pass %s\n",
           m->name, m->n, (unsigned long long)bytes, step_ms, p, o);
    fflush(stdout);
}
