/* Libraries opened at run time, their entry points into a caller's table (dl.h). */
#include "dl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

void *rd_dl_open(const char *lib, const rd_dl_symbol *syms, size_t n, void *table, size_t size,
                 const char **missing, char *why, size_t whylen)
{
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    *missing = NULL;
    memset(table, 0, size);
    if (h == NULL) {
        const char *e = dlerror();
        snprintf(why, whylen, "%s", e != NULL ? e : lib);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        void *fn = dlsym(h, syms[i].name);
        if (fn == NULL) {
            *missing = syms[i].name;
            snprintf(why, whylen, "%s lacks %s", lib, syms[i].name);
            memset(table, 0, size);
            dlclose(h);
            return NULL;
        }
        memcpy((char *)table + syms[i].offset, &fn, sizeof(fn));
    }
    return h;
}
