/*
 * Inside the memory hooks: the setup (memory_hooks.c) and the intercepts
 * (memory_intercepts.c, memory_alloc_intercepts.c) that feed the registry
 * (memory_registry.h).
 */
#ifndef OPAL_MEMORYHOOKS_MEMORY_INTERNAL_H
#define OPAL_MEMORYHOOKS_MEMORY_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "opal/memoryhooks/memory.h"
#include "opal/memoryhooks/memory_registry.h"

/* Set up the registry (opal_init_util); tear everything down (last finalize). */
int opal_mem_hooks_init(void);
void opal_mem_hooks_finalize(void);

/* Install the intercepts with the selected patcher; all or nothing. */
int opal_mem_hooks_install_intercepts(void);
/*
 * Put back jumps that another hooker wrote over since setup, chaining to its
 * code (cold).  An error means events are lost: the caller reports it.
 */
int opal_mem_hooks_check_intercepts(void);
/* Restore every patch.  Chain targets stay valid for threads still inside. */
void opal_mem_hooks_uninstall_intercepts(void);

/*
 * The copies of libc that dlmopen brings into other namespaces, for an
 * address-based patcher (memory_dl.c): each is patched with entry points
 * of its own (a variant), FIRST_COPY_VARIANT + its index.  glibc makes 15
 * namespaces besides the base one.
 */
#define OPAL_MEM_HOOKS_FIRST_COPY_VARIANT 2
#define OPAL_MEM_HOOKS_MAX_COPIES 15
/*
 * Patch one copy, its functions found by lookup (all or nothing): the
 * functions themselves by address, or for a GOT patcher the calls that
 * reach them and its allocator (memory_alloc_intercepts.c), each sent to
 * the variant's entry, which chains to the copy's own function.
 */
int opal_mem_hooks_patch_copy(int variant, uintptr_t (*lookup)(const char *name, void *arg), void *arg);
/* Whether every jump written into the copy is still there (the copy is mapped). */
bool opal_mem_hooks_copy_intact(int variant);
/* Undo the copy's patches, or with unloaded, drop them without writing. */
void opal_mem_hooks_unpatch_copy(int variant, bool unloaded);
/* The GOT patcher's allocator part of the two above. */
int opal_mem_hooks_patch_alloc_copy(int variant, uintptr_t (*lookup)(const char *name, void *arg), void *arg);
void opal_mem_hooks_unpatch_alloc_copy(int variant, bool unloaded);

/*
 * Watch dlopen, dlmopen and dlclose (dynamic process): after each, our
 * jumps are checked and the namespace copies of libc patched or forgotten.
 * An address-based patcher's watchers are ours; a GOT patcher watches the
 * loader itself and tells us.  Failing to watch is not fatal (said once).
 */
void opal_mem_hooks_install_dl_watch(void);
/* Bring the patched copies in line with the loaded ones (registry lock held). */
void opal_mem_hooks_sync_copies(void);
/* Forget every copy (before the restore of all patches; registry lock held). */
void opal_mem_hooks_forget_copies(void);
/* The loader added or removed objects: the work above, now or by the lock's holder. */
void opal_mem_hooks_objects_changed(void);

/* The allocator entry points, for mechanisms blind to libc-internal calls.
 * inspect looks at the allocator (with dlopen/dlsym) before any patch. */
void opal_mem_hooks_alloc_inspect(void);
int opal_mem_hooks_install_alloc_intercepts(void);
void opal_mem_hooks_uninstall_alloc_intercepts(void);
/* What installing them changed in the allocator's behaviour, or NULL. */
const char *opal_mem_hooks_alloc_tradeoff(void);

#endif
