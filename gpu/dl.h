/* Libraries a backend opens at run time (the CUDA driver, NCCL): never linked, so a machine
 * without them loses only what needs them. */
#ifndef RD_DL_H
#define RD_DL_H

#include <stddef.h>

/* One entry point: its name, and where its address goes in the caller's table of function
 * pointers. */
typedef struct {
    const char *name;
    size_t offset;
} rd_dl_symbol;

/* Opens lib (RTLD_NOW | RTLD_LOCAL) and stores the address of each of syms[0..n) at its offset
 * in table (size bytes). Returns the handle, which the caller keeps open while it uses the
 * functions. NULL when lib cannot be opened (*missing NULL, why says what dlopen said) or lacks
 * a symbol (*missing names it, lib closed); table is then all zeroes. Any thread. */
void *rd_dl_open(const char *lib, const rd_dl_symbol *syms, size_t n, void *table, size_t size,
                 const char **missing, char *why, size_t whylen);

#endif
