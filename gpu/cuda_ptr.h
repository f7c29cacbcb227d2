/* Telling CUDA device memory from host memory, for libringd: a pointer the library would copy
 * as host memory must not be device memory (the copy would fault). */
#ifndef RD_CUDA_PTR_H
#define RD_CUDA_PTR_H

/* 1 when p is CUDA device memory that the host cannot read (cuPointerGetAttributes: device
 * memory, not managed), 0 otherwise. In a process that has not loaded the CUDA driver no such
 * memory exists: 0 at once, without loading it. Thread-safe. */
int rd_cuda_ptr_is_device(const void *p);

#endif
