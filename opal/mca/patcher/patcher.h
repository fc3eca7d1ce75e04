/*
 * The patcher framework: mechanisms that redirect calls of a function to an
 * intercept.  A component knows HOW to patch (GOT slots, code overwrite);
 * what to patch is decided by its users (opal/memoryhooks).
 *
 * A patch is recorded with everything needed to undo it; the base undoes
 * the module's patches in reverse order when the framework closes.
 *
 * The folder's floors: the components (linux/, overwrite/) call the base
 * (base/, base.h), never each other; the base calls the selected
 * component only through the module below.  Each component's header
 * says the floors inside it.
 */
#ifndef OPAL_MCA_PATCHER_PATCHER_H
#define OPAL_MCA_PATCHER_PATCHER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "opal/class/opal_list.h"
#include "opal/mca/mca.h"

#define MCA_PATCHER_BASE_VERSION 1

/* The longest byte sequence a patch may replace. */
#define MCA_PATCHER_PATCH_MAX_BYTES 32

typedef struct mca_patcher_base_patch_t mca_patcher_base_patch_t;

/* Undo one patch: put back exactly what it replaced. */
typedef void (*mca_patcher_base_restore_fn_t)(mca_patcher_base_patch_t *patch);

struct mca_patcher_base_patch_t {
    opal_list_item_t super;
    const char *patch_symbol;          /* intercepted symbol (static string), or NULL */
    uintptr_t patch_value;             /* where calls go now: the intercept */
    uintptr_t patch_func;              /* the function as given to patch_address, or 0 */
    uintptr_t patch_orig;              /* the patched place: code address or GOT slot */
    uintptr_t patch_chain;             /* what the intercept calls to reach the previous code */
    unsigned char patch_data[MCA_PATCHER_PATCH_MAX_BYTES];      /* bytes written */
    unsigned char patch_orig_data[MCA_PATCHER_PATCH_MAX_BYTES]; /* bytes replaced */
    unsigned patch_data_size;
    const char *patch_how;             /* static one-liner for opal_patcher_info */
    mca_patcher_base_restore_fn_t patch_restore;
    /* The patched code is gone (its object was unloaded): release what the
     * patch holds and write nothing.  NULL when there is nothing to release. */
    mca_patcher_base_restore_fn_t patch_forget;
    void *patch_component_data;        /* the component's own (trampoline, object …) */
};

/*
 * Redirect every call of 'symbol' to new_addr.  *old_addr receives what the
 * intercept must call to chain to the code that was reached before.  It is
 * stored BEFORE the first call can reach new_addr: an intercept entered by
 * another thread during installation must find its chain set.
 */
typedef int (*mca_patcher_base_patch_symbol_fn_t)(const char *symbol, uintptr_t new_addr,
                                                  uintptr_t *old_addr);

/*
 * Redirect the function at func_addr to new_addr (address based; works in
 * static executables).  The chain target is found afterwards with
 * mca_patcher_base_chain_of(func_addr).
 */
typedef int (*mca_patcher_base_patch_address_fn_t)(uintptr_t func_addr, uintptr_t new_addr);

/*
 * The same with the chain target: *chain is stored before the patch goes
 * live (see patch_symbol).  Optional; the base uses it when present.
 */
typedef int (*mca_patcher_base_patch_address_chain_fn_t)(uintptr_t func_addr, uintptr_t new_addr,
                                                         uintptr_t *chain);

/*
 * Optional, for a patcher that redirects calls rather than code (GOT):
 * redirect only the calls of 'symbol' that reach the definition 'def' (one
 * copy of a library: each dlmopen namespace has its own libc) to new_addr,
 * which chains to def itself.  Objects loaded later get it too, until
 * patch_retire(new_addr); the patches made stay until restored through
 * the base.
 */
typedef int (*mca_patcher_base_patch_definition_fn_t)(const char *symbol, uintptr_t def,
                                                      uintptr_t new_addr);
typedef void (*mca_patcher_base_patch_retire_fn_t)(uintptr_t new_addr);

/*
 * Optional: watch the loader from now on (idempotent).  After each dlopen,
 * dlmopen and dlclose, whoever made it, the module calls
 * mca_patcher_base_loader_changed() (base.h).  *unwatched receives the
 * dlmopen and dlclose its watch chains to, for the caller's own lookups:
 * those calls are not reported (the caller may hold the lock its loader
 * callback waits for).  base_dl.h defines the struct.
 */
struct mca_patcher_base_loader_t;
typedef int (*mca_patcher_base_watch_loader_fn_t)(struct mca_patcher_base_loader_t *unwatched);

/*
 * Optional, with the watch: the lock the module's dl intercepts hold
 * across the loader's work of a dlopen, dlmopen or dlclose and their own
 * after it (recursive; taken again by the thread that holds it).  Whoever
 * holds it sees no watched call change the loaded objects meanwhile: no
 * namespace emptied, no object unmapped.  trylock: true when taken.
 */
typedef bool (*mca_patcher_base_loader_trylock_fn_t)(void);
typedef void (*mca_patcher_base_loader_unlock_fn_t)(void);

/* Called once before the first patch, and once after the last restore. */
typedef int (*mca_patcher_base_init_fn_t)(void);
typedef int (*mca_patcher_base_fini_fn_t)(void);

typedef struct mca_patcher_base_module_t {
    mca_base_module_t super;
    /* Applied patches, oldest first.  Guarded by patch_list_mutex. */
    opal_list_t patch_list;
    pthread_mutex_t patch_list_mutex;
    mca_patcher_base_init_fn_t patch_init;
    mca_patcher_base_fini_fn_t patch_fini;
    mca_patcher_base_patch_symbol_fn_t patch_symbol;
    mca_patcher_base_patch_address_fn_t patch_address;
    mca_patcher_base_patch_address_chain_fn_t patch_address_chain;
    mca_patcher_base_patch_definition_fn_t patch_definition;
    mca_patcher_base_patch_retire_fn_t patch_retire;
    mca_patcher_base_watch_loader_fn_t patch_watch_loader;
    /* A sentence for opal_patcher_info: what this mechanism cannot see. */
    const char *patch_limits;
    mca_patcher_base_loader_trylock_fn_t patch_loader_trylock;
    mca_patcher_base_loader_unlock_fn_t patch_loader_unlock;
} mca_patcher_base_module_t;

typedef struct mca_patcher_base_component_t {
    mca_base_component_t patcherc_version;
} mca_patcher_base_component_t;

/* The selected module: NULL until the delayed setup has run. */
extern mca_patcher_base_module_t *opal_patcher;

#endif
