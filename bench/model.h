/* Model-shaped gradient sets for the benchmarks: the parameter tensors of a network (names and
 * element counts, in the order the model declares them), built in or read from a file, and the
 * one summary line every model benchmark prints. */
#ifndef RB_MODEL_H
#define RB_MODEL_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    char name[64];  /* "resnet50", "bert-base", or the file's base name */
    size_t n;       /* tensors */
    char **names;   /* names[0..n), each unique */
    size_t *counts; /* elements of each, > 0 */
    uint64_t elems; /* their sum */
} rb_model;

/* Most tensors a model file may list, and the longest tensor name. */
#define RB_MODEL_MAX_TENSORS 100000
#define RB_MODEL_MAX_NAME 200

/* Loads spec into *m: "resnet50" (torchvision's ResNet-50, 161 tensors, 25,557,032 parameters),
 * "bert-base" (BERT-base uncased encoder with pooler, 199 tensors, 109,482,240 parameters), or a
 * file with one "name count" per line in declaration order ('#' starts a comment). Returns 0, or
 * -1 with err set naming the file and line. *m is owned by the caller: rb_model_free. */
int rb_model_load(const char *spec, rb_model *m, char *err, size_t errlen);

/* Frees what rb_model_load allocated; a zeroed *m is a no-op. */
void rb_model_free(rb_model *m);

/* The names of the built-in models, for usage text: "resnet50|bert-base". */
extern const char rb_model_builtins[];

/* Prints the line every model benchmark ends a run with (step_ms is the median step time;
 * passes < 0: not known to this tool, printed as "-"):
 * "# model resnet50: tensors 161 bytes 102228128 step_ms 41.2 ring_passes 3 ops_per_pass 53.7". */
void rb_model_print_summary(const rb_model *m, uint64_t bytes, double step_ms, double passes,
                            double ops_per_pass);

#endif
