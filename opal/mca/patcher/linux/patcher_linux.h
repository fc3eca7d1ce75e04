/*
 * The linux patcher: redirects calls by rewriting the GOT slots (PLT
 * relocations and GLOB_DAT entries) of every loaded object, and watches
 * dlopen, dlmopen, dlclose, dlsym and dlvsym so that objects loaded later are
 * patched too, unloaded ones are forgotten, and dlsym hands out no way
 * around the intercepts.
 *
 *   patcher_linux_component.c  parameter and query
 *   patcher_linux_module.c     module, the table of redirected symbols
 *   patcher_linux_got.c        walking objects, finding and rewriting slots
 *   patcher_linux_dl.c         the dlopen/dlmopen/dlclose/dlsym/dlvsym intercepts
 */
#ifndef OPAL_MCA_PATCHER_LINUX_H
#define OPAL_MCA_PATCHER_LINUX_H

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "opal/mca/patcher/base/base_dl.h"
#include "opal/mca/patcher/patcher.h"

extern mca_patcher_base_component_t mca_patcher_linux_component;
extern mca_patcher_base_module_t mca_patcher_linux_module;

/* The dl watchers use 5, our memory hooks 15 and 15 per dlmopen namespace (15 at most): 245. */
#define MCA_PATCHER_LINUX_MAX_HOOKS   256
#define MCA_PATCHER_LINUX_MAX_SYMBOL  64
/* Definitions one hook may replace: one per namespace (16), an interposer's. */
#define MCA_PATCHER_LINUX_MAX_DEFS    20

/* A symbol redirected by patch_symbol; objects loaded later get it too. */
typedef struct mca_patcher_linux_hook_t {
    char symbol[MCA_PATCHER_LINUX_MAX_SYMBOL];
    uintptr_t value;        /* the intercept */
    uintptr_t chain;        /* what the intercept calls: what calls reached before */
    /* Definitions that redirected slots reached before (chain first): dlsym
     * results equal to one of them are replaced by the intercept. */
    uintptr_t defs[MCA_PATCHER_LINUX_MAX_DEFS];
    int ndefs;
    /* The function keeps state per copy of its library (the allocator): a
     * slot bound to another copy (a dlmopen namespace) must not be sent to
     * a chain that belongs to a different copy. */
    bool per_copy_state;
    /* Nonzero: only slots that reach this definition are redirected (and
     * chain to it): patch_definition. */
    uintptr_t only_def;
    /* No longer given to any slot (patch_retire); kept, since lock-free
     * readers may be looking at it, and taken again by the same intercept. */
    bool retired;
} mca_patcher_linux_hook_t;

/*
 * Serializes patch_symbol, the work after dlopen/dlclose and patch_fini.
 * Recursive: a library's constructor or destructor run by the real
 * dlopen/dlclose may call dlopen again.  Never taken by a restore
 * function (the base calls those with its patch list mutex held, and we
 * take that one under this lock).
 */
extern pthread_mutex_t mca_patcher_linux_lock;

extern mca_patcher_linux_hook_t mca_patcher_linux_hooks[MCA_PATCHER_LINUX_MAX_HOOKS];
extern int mca_patcher_linux_nhooks;
extern int mca_patcher_linux_verbose;

/* --- module: the table --- */

/*
 * Add (or refresh) a redirection and apply it to every loaded object: of
 * every slot of symbol (only_def 0; *old_addr receives the chain), or of
 * those that reach only_def.
 */
int mca_patcher_linux_hook_symbol(const char *symbol, uintptr_t new_addr, uintptr_t only_def,
                                  uintptr_t *old_addr);

/* The intercept for a dlsym result, or the result itself (follows stacked hooks). */
uintptr_t mca_patcher_linux_map_definition(uintptr_t addr);

/* How to reach the real function behind one of our dl intercepts. */
uintptr_t mca_patcher_linux_chain_of(const char *symbol);

/* The intercept of the hook of every slot of symbol (patch_symbol's), or 0. */
uintptr_t mca_patcher_linux_chain_value(const char *symbol);

/*
 * The definition, in namespace lmid, that slots redirected to intercept
 * (the hook of symbol) reached before, or 0.
 */
uintptr_t mca_patcher_linux_definition_in(const char *symbol, uintptr_t intercept, Lmid_t lmid);

/* --- got: the mechanism --- */

/* Whether the process has dynamic linking at all (the component's query). */
bool mca_patcher_linux_have_dynamic(const char **reason);

/*
 * Find the chain of 'symbol' for a new hook: the definition that calls
 * reach now.  OPAL_ERR_NOT_FOUND if nothing defines it.
 */
int mca_patcher_linux_got_chain(const char *symbol, uintptr_t new_addr, uintptr_t *chain);

/*
 * Rewrite every slot, in every loaded object but our own, that names the
 * symbol of one of hooks[0..nhooks) and does not hold its intercept yet.
 */
int mca_patcher_linux_got_patch(mca_patcher_linux_hook_t *hooks, int nhooks);

/* Forget (without writing) the patch records whose slots were unloaded. */
void mca_patcher_linux_got_drop_unloaded(void);

/* Free the strings that patch records point at (after the last restore). */
void mca_patcher_linux_got_free_strings(void);

/* Where 'dyn' (an ElfW(Dyn) d_ptr as found in memory) points, for an object at base. */
uintptr_t mca_patcher_linux_dyn_ptr(uintptr_t base, uintptr_t d_ptr, const ElfW(Phdr) *phdr,
                                    int phnum);

/* --- dl: the watchers --- */

/* Redirect dlopen, dlmopen, dlclose, dlsym and dlvsym, unless done (with the lock held). */
int mca_patcher_linux_dl_install(void);
/* What our dlmopen and dlclose intercepts chain to (installed). */
int mca_patcher_linux_dl_unwatched(mca_patcher_base_loader_t *unwatched);
/* A slot holding this value was restored: the watchers may need installing again. */
void mca_patcher_linux_dl_restored(uintptr_t value);
/* Forget everything (patch_fini). */
void mca_patcher_linux_dl_forget(void);
/* Patch new objects, and take back the slots someone reset to what we chain to. */
void mca_patcher_linux_take_back(void);
/* Whether addr is one of our dl intercepts (they live in this component). */
bool mca_patcher_linux_is_watcher(uintptr_t addr);
/* Keep this component's object loaded: one of our dl intercepts may run after fini (why). */
void mca_patcher_linux_pin_self(const char *why);
/* Set by a restore that left a dl intercept of ours in another hooker's hands. */
extern bool mca_patcher_linux_watcher_captured;

/* dlsym in one loaded object (and its dependencies), by the real functions. */
void *mca_patcher_linux_dlsym_in(struct link_map *map, Lmid_t lmid, const char *symbol);

#endif
