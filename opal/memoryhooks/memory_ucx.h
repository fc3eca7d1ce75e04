/*
 * UCX's memory events as the source of ours (memory_source.h): with the
 * claim "ucx" (see mca_patcher_base_claim) we register a handler with
 * UCX's libucm and patch nothing ourselves.  It starts with
 * OPAL_ERR_NOT_SUPPORTED, saying why, when libucm cannot be found or
 * refuses the handler; when stop returns our handler is no longer called.
 */
#ifndef OPAL_MEMORYHOOKS_MEMORY_UCX_H
#define OPAL_MEMORYHOOKS_MEMORY_UCX_H

#include "opal/memoryhooks/memory_source.h"

#if OPAL_HAVE_UCX
extern const opal_mem_source_t opal_mem_ucx_source;
#    define OPAL_MEM_UCX_SOURCE (&opal_mem_ucx_source)
#else
#    define OPAL_MEM_UCX_SOURCE NULL /* built without UCX */
#endif

#endif
