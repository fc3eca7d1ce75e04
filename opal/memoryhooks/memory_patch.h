/*
 * Our patches as an event source (middle floor, memory_source.h): the
 * table in memory_patch_source.c, over its parts, each calling only the
 * ones listed before it here and the registry below:
 *
 *   memory_variants.c           the variants of the intercepts: what each entry
 *                               point chains to, what it patched, which copy of
 *                               libc it serves (memory_variants.h)
 *   memory_extents.c            how far a release reaches where the kernel rounds
 *                               or looks further than the arguments (memory_extents.h)
 *   memory_file_extents.c       which addresses a truncation or a punched hole
 *                               releases: the file's mappings (memory_file_extents.h)
 *   memory_alloc_intercepts.c   the allocator entry points (for a GOT patcher)
 *   memory_intercepts.c         the intercepts of munmap & co., per definition and copy
 *   memory_namespaces.c         the dlmopen namespaces' copies of libc, followed
 *                               through the patcher's loader watch
 *   memory_patch_source.c       the source: select, install, check, uninstall
 *
 * What they share with the rest of the tree is at the end (the tools).
 */
#ifndef OPAL_MEMORYHOOKS_MEMORY_PATCH_H
#define OPAL_MEMORYHOOKS_MEMORY_PATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "opal/mca/patcher/base/base.h"
#include "opal/memoryhooks/memory_registry.h"
#include "opal/memoryhooks/memory_source.h"
#include "opal/memoryhooks/memory_variants.h"

/* The source: a patcher selected at start, the intercepts, the watch. */
extern const opal_mem_source_t opal_mem_patch_source;

/* memory_alloc_intercepts.c: the allocator entry points, for mechanisms
 * blind to libc-internal calls.  inspect looks at the allocator (with
 * dlopen/dlsym) before any patch. */
void opal_mem_hooks_alloc_inspect(void);
int opal_mem_hooks_install_alloc_intercepts(void);
void opal_mem_hooks_uninstall_alloc_intercepts(void);
/* A namespace's copy of the allocator, for a GOT patcher (opal_mem_hooks_patch_copy). */
int opal_mem_hooks_patch_alloc_copy(opal_mem_variant_t *variant,
                                    uintptr_t (*lookup)(const char *name, void *arg), void *arg);
void opal_mem_hooks_unpatch_alloc_copy(opal_mem_variant_t *variant, bool unloaded);
/* Whether patch sends calls to one of the variant's allocator entry points. */
bool opal_mem_hooks_alloc_patch_of(mca_patcher_base_patch_t *patch,
                                   const opal_mem_variant_t *variant);

/*
 * memory_intercepts.c.  Each function that branches on how the selected
 * patcher patches is told (mca_patcher_base_style(), asked at the start).
 * Install the intercepts with it; on failure the caller undoes what was
 * patched (all or nothing).
 */
int opal_mem_hooks_install_intercepts(mca_patcher_base_style_t style);
/*
 * Put back jumps that another hooker wrote over since setup, chaining to its
 * code (cold).  An error means events are lost: the caller reports it.
 */
int opal_mem_hooks_check_intercepts(mca_patcher_base_style_t style);
/* Restore every patch.  Chain targets stay valid for threads still inside. */
void opal_mem_hooks_uninstall_intercepts(void);
/*
 * Patch one copy, its functions found by lookup (all or nothing): the
 * functions themselves by address, or for a GOT patcher the calls that
 * reach them and its allocator, each sent to the variant's entry, which
 * chains to the copy's own function.
 */
int opal_mem_hooks_patch_copy(mca_patcher_base_style_t style, opal_mem_variant_t *variant,
                              uintptr_t (*lookup)(const char *name, void *arg), void *arg);
/*
 * Whether the copy, mapped at [start, end) and held there by the caller
 * (the loader's list is held still), is the one we patched: every jump
 * written into it still there, or for a GOT patcher every slot written in
 * it still holding its entry.
 */
bool opal_mem_hooks_copy_intact(mca_patcher_base_style_t style, const opal_mem_variant_t *variant,
                                uintptr_t start, uintptr_t end);
/* Undo the copy's patches, or with unloaded, drop them without writing; the
 * caller then gives the variant back (opal_mem_variant_put_copy). */
void opal_mem_hooks_unpatch_copy(mca_patcher_base_style_t style, opal_mem_variant_t *variant,
                                 bool unloaded);

/*
 * memory_namespaces.c.  Have the patcher watch dlopen, dlmopen and dlclose
 * (dynamic process): after each, mca_patcher_base_loader_changed() (the
 * API on top checks the source then).  Without the watch no copy is
 * patched.  Failing to watch is not fatal (said once).
 */
void opal_mem_hooks_watch_copies(void);
/* Bring the patched copies in line with the loaded ones (hooks' lock held). */
void opal_mem_hooks_sync_copies(mca_patcher_base_style_t style);
/* Forget every copy (before the restore of all patches; hooks' lock held). */
void opal_mem_hooks_forget_copies(mca_patcher_base_style_t style);

/* For the tools: the names of the intercepted functions, and what
 * installing the allocator intercepts changed in its behaviour (or NULL). */
size_t opal_mem_hooks_intercept_names(const char **names, size_t max);
const char *opal_mem_hooks_alloc_tradeoff(void);

#endif
