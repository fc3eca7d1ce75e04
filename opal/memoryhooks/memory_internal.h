/*
 * Inside the memory hooks: the registry (memory_hooks.c) and the intercepts
 * (memory_intercepts.c, memory_alloc_intercepts.c) that feed it.
 */
#ifndef OPAL_MEMORYHOOKS_MEMORY_INTERNAL_H
#define OPAL_MEMORYHOOKS_MEMORY_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "opal/memoryhooks/memory.h"

/* Set up the registry (opal_init_util); tear everything down (last finalize). */
int opal_mem_hooks_init(void);
void opal_mem_hooks_finalize(void);

/* The page size, read once at init (no sysconf on the hook path). */
extern uintptr_t opal_mem_hooks_page_size;

/*
 * Deliver [start, end) (rounded out to pages) to every registered callback.
 * Allocation free, lock free, signal safe.
 */
void opal_mem_hooks_dispatch(uintptr_t start, uintptr_t end, bool from_alloc);

/* Install the intercepts with the selected patcher; all or nothing. */
int opal_mem_hooks_install_intercepts(void);
/* Restore every patch.  Chain targets stay valid for threads still inside. */
void opal_mem_hooks_uninstall_intercepts(void);

/* The allocator entry points, for mechanisms blind to libc-internal calls. */
int opal_mem_hooks_install_alloc_intercepts(void);
void opal_mem_hooks_uninstall_alloc_intercepts(void);
/* What installing them changed in the allocator's behaviour, or NULL. */
const char *opal_mem_hooks_alloc_tradeoff(void);

#endif
