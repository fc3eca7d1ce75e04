/*
 * Patcher framework base: selection (run by the memory hooks' delayed
 * setup, which decides when), the list of applied patches and their undo,
 * and the claim downcall.
 *
 * Its floors, each file calling only those below it:
 *   patcher_base_frame.c    the framework object; its close undoes everything
 *   patcher_base_select.c   selection, the selected style and name, the claim
 *   patcher_base_patch.c    the patch list: add, restore or forget, inspect;
 *                           the loader watch and its callback
 *   patcher_base_protect.c  writing through page protections
 * and beside them, for the components' dl intercepts, patcher_base_dl.c
 * and patcher_base_call_as*.c (base_dl.h, base_call_as.h).
 */
#ifndef OPAL_MCA_PATCHER_BASE_BASE_H
#define OPAL_MCA_PATCHER_BASE_BASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "opal/mca/base/mca_base_framework.h"
#include "opal/mca/patcher/patcher.h"

extern mca_base_framework_t opal_patcher_base_framework;

/* Public: part of the documented API (README, "Using it"). */
const char *mca_patcher_base_selected_name(void);
int mca_patcher_base_claim(const char *style);

/* The style claimed with mca_patcher_base_claim(), or NULL. */
const char *mca_patcher_base_claimed_style(void);

/*
 * Select the best component that can work here and make it opal_patcher
 * (idempotent).  Returns OPAL_ERR_NOT_SUPPORTED, having said why, if none
 * can.
 */
int mca_patcher_base_select(void);

/*
 * Restore every patch, let the module clean up (patch_fini) and forget the
 * selection; a claim stays (a failed setup tried again keeps it).
 * Idempotent.
 */
void mca_patcher_base_fini(void);

/* The framework's close (the last finalize): mca_patcher_base_fini, and the claim ends. */
void mca_patcher_base_close(void);

/*
 * A component that watches the loader (patch_watch_loader) calls
 * mca_patcher_base_loader_changed() after each dlopen, dlmopen and dlclose
 * it saw, holding none of its locks; it calls the callback set by the
 * patcher's user (NULL: none).
 */
void mca_patcher_base_set_loader_callback(void (*callback)(void));
void mca_patcher_base_loader_changed(void);

/*
 * And right after the loader's work of each dlclose it saw, its loader
 * lock (patch_loader_trylock) still held, it calls
 * mca_patcher_base_loader_unloaded(): the callback set here learns what
 * is gone before any watched dlopen can load something at the same place.
 * The callback may take no lock that is held around a call of the loader.
 */
void mca_patcher_base_set_unload_callback(void (*callback)(void));
void mca_patcher_base_loader_unloaded(void);

/*
 * Have the selected module watch the loader (its patch_watch_loader): from
 * now on each dlopen, dlmopen and dlclose ends in
 * mca_patcher_base_loader_changed(), whether the module watches with GOT
 * slots or with jumps in libc's code.  *unwatched (base_dl.h) receives the
 * dlmopen, dlclose and dlsym for the caller's own lookups, which are not
 * reported.  An OPAL error when the module cannot watch (NOT_SUPPORTED:
 * it has no watch; otherwise the module said why when it tried).
 */
struct mca_patcher_base_loader_t;
int mca_patcher_base_watch_loader(struct mca_patcher_base_loader_t *unwatched);

/*
 * The selected module's loader lock (patch_loader_trylock), not waited
 * for: false when another thread holds it (a watched call, which reports
 * when it is done); true when the module has none (nothing to wait for).
 * Then unlock.
 */
bool mca_patcher_base_loader_trylock(void);
void mca_patcher_base_loader_unlock(void);

/*
 * How the selected module patches, for its user to ask once, at setup
 * (NONE before the selection):
 *  - BY_ADDRESS: the code of a function itself, named by its address, the
 *    chain handed out (patch_address_chain): every caller of that code is
 *    caught, libc's own calls too;
 *  - BY_SYMBOL: the calls between objects that name a symbol
 *    (patch_symbol; patch_definition and patch_retire for one copy of a
 *    library): blind to the calls inside an object.
 * A module that offers neither is not selected.
 */
typedef enum {
    MCA_PATCHER_BASE_STYLE_NONE,
    MCA_PATCHER_BASE_STYLE_BY_ADDRESS,
    MCA_PATCHER_BASE_STYLE_BY_SYMBOL,
} mca_patcher_base_style_t;
mca_patcher_base_style_t mca_patcher_base_style(void);

/* Who delivers our events, as mca_patcher_base_selected_name() reports it. */
void mca_patcher_base_set_selected_name(const char *name);

/* Component side: a zeroed patch record, and adding it to the module's list. */
mca_patcher_base_patch_t *mca_patcher_base_patch_new(void);
void mca_patcher_base_patch_add(mca_patcher_base_module_t *module, mca_patcher_base_patch_t *patch);

/*
 * Restore and free every patch of the module, newest first (module's
 * patch_list_mutex taken here).  Patches for which 'filter' returns false are
 * kept; filter NULL restores all.
 */
void mca_patcher_base_restore_patches(mca_patcher_base_module_t *module,
                                      bool (*filter)(mca_patcher_base_patch_t *, void *), void *arg);

/*
 * The same for patches whose code was unloaded: nothing is written there,
 * each patch's patch_forget releases what it holds.
 */
void mca_patcher_base_forget_patches(mca_patcher_base_module_t *module,
                                     bool (*filter)(mca_patcher_base_patch_t *, void *), void *arg);

/* Give the patch of the function at func_addr a symbol name (for opal_patcher_info). */
void mca_patcher_base_name_patch(mca_patcher_base_module_t *module, uintptr_t func_addr, const char *symbol);

/* The chain target recorded for a patch of the function at func_addr, or 0. */
uintptr_t mca_patcher_base_chain_of(mca_patcher_base_module_t *module, uintptr_t func_addr);

/*
 * Whether every patch that filter accepts and whose patched place lies in
 * [start, end) holds the bytes it wrote; *count receives how many such
 * patches there are.  Only those places are read: the caller knows that
 * range mapped.
 */
bool mca_patcher_base_patches_intact_in(mca_patcher_base_module_t *module, uintptr_t start,
                                        uintptr_t end,
                                        bool (*filter)(mca_patcher_base_patch_t *, void *),
                                        void *arg, int *count);

/*
 * Whether the newest patch of the function at func_addr still holds the
 * bytes it wrote (another hooker may have written over them since); true
 * when there is none.
 */
bool mca_patcher_base_patch_intact(mca_patcher_base_module_t *module, uintptr_t func_addr);

/*
 * Call fn for each applied patch, oldest first; intact says whether the
 * patched place still holds the bytes written there.  The module's list
 * is locked meanwhile: fn must neither patch nor restore.
 */
void mca_patcher_base_foreach_patch(mca_patcher_base_module_t *module,
                                    void (*fn)(const mca_patcher_base_patch_t *patch, bool intact,
                                               void *arg),
                                    void *arg);

/*
 * Run write(arg) with the pages of [addr, addr+len) writable, then put each
 * page's protection back as it was.  Fails cleanly (OPAL_ERR_NOT_SUPPORTED,
 * *reason set) if the protection cannot be read or changed, for example
 * under a W^X policy; nothing is written then.
 */
int mca_patcher_base_with_writable(uintptr_t addr, size_t len, void (*write)(void *arg), void *arg,
                                   const char **reason);

/*
 * The same for code that runs: its pages stay executable (while writable
 * too), even where /proc/self/maps does not say so.  qemu-user 7.2 shows a
 * guest page with the protection of the first page of the host mapping
 * holding it, and maps guest code read-only on the host: a program's or
 * library's text that follows its read-only headers is listed "r--p".
 */
int mca_patcher_base_with_code_writable(uintptr_t addr, size_t len, void (*write)(void *arg),
                                        void *arg, const char **reason);

/*
 * The page protection (PROT_* bits) of the mapping holding addr, from
 * /proc/self/maps; on arm64 with PROT_BTI for a page guarded by BTI
 * (smaps' "bt"), which maps does not show.
 */
int mca_patcher_base_page_protection(uintptr_t addr, int *prot);

/*
 * fork: no write of the two above is under way in the child, where the
 * thread making it would be missing (a page left writable, on x86 a
 * function's first bytes left a self-loop).  prepare waits for the write
 * under way, if any, and holds off the next one; parent lets them go;
 * child makes their lock new.  Called by the memory hooks' fork handlers
 * with their lock held (memory_hooks.c): patches are made under it, so it
 * must be taken first.
 */
void mca_patcher_base_atfork_prepare(void);
void mca_patcher_base_atfork_parent(void);
void mca_patcher_base_atfork_child(void);
/* The child's part for the selected module's list of patches (atfork_child calls it). */
void mca_patcher_base_patch_list_atfork_child(void);

#endif
