/* rd_cuda_ptr_is_device: see cuda_ptr.h. Needs no CUDA at build time: the driver is looked
 * up in the process (dlopen RTLD_NOLOAD) and the few values below are cuda.h's, stable since
 * CUDA 7 (cuPointerGetAttributes). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dl_iterate_phdr */
#endif
#include "cuda_ptr.h"

#include <dlfcn.h>
#include <link.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#define RD_CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2 /* CUpointer_attribute */
#define RD_CU_POINTER_ATTRIBUTE_IS_MANAGED 8
#define RD_CU_MEMORYTYPE_DEVICE 2 /* CUmemorytype */

/* cuPointerGetAttributes: unlike cuPointerGetAttribute, it answers a pointer the driver does not
 * know (host memory) with zeros rather than an error, which tools such as compute-sanitizer
 * would report. */
typedef int (*get_attributes_fn)(unsigned int n, int *attributes, void **data,
                                 unsigned long long ptr);

/* cuPointerGetAttributes, once the process has loaded the driver (it stays loaded). */
static _Atomic(get_attributes_fn) get_attributes;
/* The loader's count of libraries loaded when the driver was last found missing: dlopen, even
 * with RTLD_NOLOAD, searches the library path (system calls), so it runs again only once
 * another library was loaded. */
static _Atomic(unsigned long long) missing_at = ~0ull;

/* dl_iterate_phdr's callback: the loader's count of libraries loaded so far. */
static int loads(struct dl_phdr_info *info, size_t size, void *data)
{
    if (size < offsetof(struct dl_phdr_info, dlpi_adds) + sizeof(info->dlpi_adds))
        return -1;
    *(unsigned long long *)data = info->dlpi_adds;
    return 1;
}

int rd_cuda_ptr_is_device(const void *p)
{
    get_attributes_fn fn = atomic_load_explicit(&get_attributes, memory_order_acquire);
    unsigned int type = 0, managed = 0;
    int attributes[2] = {RD_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, RD_CU_POINTER_ATTRIBUTE_IS_MANAGED};
    void *data[2] = {&type, &managed};

    if (fn == NULL) {
        unsigned long long adds = 0;
        if (dl_iterate_phdr(loads, &adds) == 1 &&
            adds == atomic_load_explicit(&missing_at, memory_order_relaxed))
            return 0; /* nothing loaded since the driver was found missing */
        void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
        if (lib == NULL) {
            atomic_store_explicit(&missing_at, adds, memory_order_relaxed);
            return 0; /* not loaded: nothing in this process is device memory */
        }
        void *sym = dlsym(lib, "cuPointerGetAttributes");
        if (sym == NULL) {
            dlclose(lib);
            return 0;
        }
        memcpy(&fn, &sym, sizeof(fn)); /* ISO C has no cast from object to function pointer */
        /* the handle is kept: the driver stays loaded, and fn with it */
        atomic_store_explicit(&get_attributes, fn, memory_order_release);
    }
    /* memory the driver does not know is host memory (type 0); managed memory the host reads */
    if (fn(2, attributes, data, (unsigned long long)(uintptr_t)p) != 0)
        return 0;
    return type == RD_CU_MEMORYTYPE_DEVICE && !managed;
}
