/* NCCL as a whole-collective transport (gpu/nccl.c): one communicator per job and ring
 * generation, behind backend.h's rd_transport_ops. Built with CUDA; the library itself is
 * loaded at run time. */
#ifndef RD_NCCL_TRANSPORT_H
#define RD_NCCL_TRANSPORT_H

#include "backend.h"

/* The transport's table: static storage. Without libnccl.so.2 (or with one older than 2.28)
 * make_id and init fail saying so. */
extern const rd_transport_ops rd_nccl_ops;

#endif
