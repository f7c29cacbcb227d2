/* NCCL as a whole-collective transport (gpu/nccl.c): one communicator per job and ring
 * generation, behind backend.h's rd_transport_ops. Built with CUDA; the library itself is
 * loaded at run time. */
#ifndef RD_NCCL_TRANSPORT_H
#define RD_NCCL_TRANSPORT_H

#include "backend.h"

/* The transport's table: static storage. Without libnccl.so.2 (or with one older than 2.28)
 * make_id and init fail saying so; make_id also fails in a program whose main does not call
 * rd_nccl_root_main. */
extern const rd_transport_ops rd_nccl_ops;

/* First thing in main of a program that makes NCCL ids (ringd, through
 * rd_backend_helper_main): each id's root runs in this program started again as a helper.
 * Returns -1 when argv is an ordinary start (this program may make ids from now on); when argv
 * starts the helper, runs it and returns its exit status. */
int rd_nccl_root_main(int argc, char **argv);

/* How many ids' roots (helper processes) this process holds: those whose communicator has not
 * formed or ended yet. */
int rd_nccl_roots_held(void);

#endif
