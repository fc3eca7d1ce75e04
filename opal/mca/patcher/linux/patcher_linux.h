/*
 * The linux patcher: redirects calls by rewriting the GOT slots (PLT
 * relocations and GLOB_DAT entries) of every loaded object, and watches
 * dlopen, dlmopen, dlclose, dlsym and dlvsym so that objects loaded later are
 * patched too, unloaded ones are forgotten, and dlsym hands out no way
 * around the intercepts.
 *
 * Its floors, each file calling only those below it (top first):
 *   patcher_linux_component.c  parameter and query
 *   patcher_linux_module.c     the module: patch_symbol, patch_definition,
 *                              patch_retire, patch_watch_loader, fini
 *   patcher_linux_dl.c         the dl intercepts, their install and restore
 *   patcher_linux_table.c      the table of redirected symbols, its lock,
 *                              and take_back: the table given to objects
 *                              loaded since, slots reset by others taken back
 *   patcher_linux_got.c        walking objects, finding, rewriting and
 *                              restoring slots (patcher_linux_reloc.h)
 *   patcher_linux_loader.c     the loader's functions for our own lookups:
 *                              what our dl intercepts chain to
 */
#ifndef OPAL_MCA_PATCHER_LINUX_H
#define OPAL_MCA_PATCHER_LINUX_H

#include <dlfcn.h>
#include <link.h>
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
    /* Definitions that redirected slots reached before: dlsym results equal
     * to one of them are replaced by the intercept.  defs[0] is the chain,
     * what the intercept calls (set with the hook, never cleared). */
    uintptr_t defs[MCA_PATCHER_LINUX_MAX_DEFS];
    int ndefs;
    /* The extent of the object that held defs[0] when the hook was made
     * (both 0: code in no object). */
    uintptr_t chain_start, chain_end;
    /* The function keeps state per copy of its library (the allocator): a
     * slot bound to another copy (a dlmopen namespace) must not be sent to
     * a chain that belongs to a different copy. */
    bool per_copy_state;
    /* Nonzero: only slots that reach this definition are redirected (and
     * chain to it): patch_definition. */
    uintptr_t only_def;
    /* No longer given to any slot (patch_retire, or the object of its chain
     * unloaded); kept, since lock-free readers may be looking at it, and
     * taken again by the same intercept. */
    bool retired;
    /* The restore function of its slots' patch records: NULL for the GOT
     * floor's own, or one that calls it and learns how it went (the dl
     * intercepts'). */
    mca_patcher_base_restore_fn_t restore;
} mca_patcher_linux_hook_t;

/* Whether addr lies in the object that held the hook's chain when it was made. */
static inline bool mca_patcher_linux_in_chain_object(const mca_patcher_linux_hook_t *hook,
                                                     uintptr_t addr)
{
    return addr >= hook->chain_start && addr < hook->chain_end;
}

/* --- loader: the loader's functions for our own lookups --- */

/* The dl functions we watch, indexes of the loader floor's tables. */
enum {
    MCA_PATCHER_LINUX_DLOPEN,
    MCA_PATCHER_LINUX_DLMOPEN,
    MCA_PATCHER_LINUX_DLCLOSE,
    MCA_PATCHER_LINUX_DLSYM,
    MCA_PATCHER_LINUX_DLVSYM,
    MCA_PATCHER_LINUX_DL_COUNT
};

/* The symbol of dl function fn ("dlopen" ...). */
const char *mca_patcher_linux_loader_symbol(int fn);

/*
 * What our intercept of fn chains to (0: not known yet).  Set before the
 * intercept goes in, kept after fini for a call still on its way.
 */
uintptr_t mca_patcher_linux_loader_real(int fn);
void mca_patcher_linux_loader_set_real(int fn, uintptr_t real);
/*
 * The loader's own fn where it is known (loader_find_own), else what our
 * intercept chains to: for calls past our watch that must not run another
 * hooker's work either (0: not known yet).
 */
uintptr_t mca_patcher_linux_loader_own(int fn);

/*
 * Note the loader's own definitions (not what slots reach) of the dl
 * functions, by the real dlsym: our lookups that load nothing go there.
 */
void mca_patcher_linux_loader_find_own(void);

/* Whether the dlopen our intercept chains to is another hooker's, not the loader's. */
bool mca_patcher_linux_loader_foreign_dlopen(void);

/* dlsym by what our intercept chains to (or dlsym itself before there is one). */
void *mca_patcher_linux_loader_dlsym(void *handle, const char *symbol);

/*
 * dlsym(handle, symbol) made as the object holding the address object
 * (base_call_as.h), by the loader's own dlsym: RTLD_DEFAULT searches that
 * object's scope, as its lazy binding does (l_scope: RTLD_DEEPBIND puts
 * its own dependencies first), RTLD_NEXT what follows it.  False where
 * such a call cannot be made.
 */
bool mca_patcher_linux_loader_dlsym_as(const void *object, void *handle, const char *symbol,
                                       uintptr_t *def);

/*
 * def past a program's canonical PLT entry (base_dl.h), by the loader's
 * own dlsym; where that call cannot be made as the program, what follows
 * our own object stands in (the entry is never a definition).
 */
uintptr_t mca_patcher_linux_loader_past_plt_entry(uintptr_t def, const char *symbol);

/* dlsym in one loaded object (and its dependencies), by the real functions. */
void *mca_patcher_linux_dlsym_in(struct link_map *map, Lmid_t lmid, const char *symbol);

/* Keep this component's object loaded: one of our dl intercepts may run after fini (why). */
void mca_patcher_linux_pin_self(const char *why);

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
 * symbol of one of table[first..first+count) and does not hold its
 * intercept yet.  The whole table [0, n) says which definitions a hook of
 * their own redirects.
 */
int mca_patcher_linux_got_patch(mca_patcher_linux_hook_t *table, int n, int first, int count);
/* The last got_patch met an object that the loader had not relocated yet and left it alone. */
bool mca_patcher_linux_got_left_unrelocated(void);

/* The extent of the PT_LOAD segments of the loaded object holding addr ([0, 0): none). */
void mca_patcher_linux_got_object_extent(uintptr_t addr, uintptr_t *start, uintptr_t *end);

/* How a slot's restore went. */
typedef enum {
    MCA_PATCHER_LINUX_SLOT_RESTORED, /* the slot holds its old value again */
    MCA_PATCHER_LINUX_SLOT_UNLOADED, /* its object is gone: nothing written */
    MCA_PATCHER_LINUX_SLOT_LEFT,     /* another hooker patched over it: left to it */
} mca_patcher_linux_slot_restore_t;

/* Restore the slot of a patch record (a hook's restore function calls it). */
mca_patcher_linux_slot_restore_t mca_patcher_linux_got_restore(mca_patcher_base_patch_t *patch);

/* Restore the slots given to the hook (its records' restore functions run). */
void mca_patcher_linux_got_restore_hook(const mca_patcher_linux_hook_t *hook);

/* Forget (without writing) the patch records whose slots were unloaded. */
void mca_patcher_linux_got_drop_unloaded(void);

/* Free the strings that patch records point at (after the last restore). */
void mca_patcher_linux_got_free_strings(void);

/* --- table: the redirections, their lock, take_back --- */

/*
 * Serializes the table's changes, dlopen, dlmopen and dlclose (the
 * loader's work and ours after it) and patch_fini.  Recursive: a
 * library's constructor or destructor run by the real dlopen/dlclose may
 * call dlopen again.  Never taken by a restore function (the base calls
 * those with its patch list mutex held, and we take that one under this
 * lock).
 */
void mca_patcher_linux_lock(void);
void mca_patcher_linux_unlock(void);
/* The same lock not waited for (the module's patch_loader_trylock): true when taken. */
bool mca_patcher_linux_trylock(void);

/*
 * Add (or refresh) a redirection and apply it to every loaded object: of
 * every slot of symbol (only_def 0; *old_addr receives the chain), or of
 * those that reach only_def.  restore: its records' restore function
 * (NULL: the GOT floor's).  Lock held.
 */
int mca_patcher_linux_hook_symbol(const char *symbol, uintptr_t new_addr, uintptr_t only_def,
                                  uintptr_t *old_addr, mca_patcher_base_restore_fn_t restore);

/* Give no more slots to the redirections to new_addr (patch_retire; lock held). */
void mca_patcher_linux_retire(uintptr_t new_addr);

/* Forget every redirection (patch_fini, after the last restore; lock held). */
void mca_patcher_linux_table_clear(void);

/*
 * The intercept for a dlsym result, or the result itself (follows stacked
 * hooks); next_from: for an RTLD_NEXT lookup, an address in the code that
 * made it (else 0): no intercept whose chain lies in that code's object.
 */
uintptr_t mca_patcher_linux_map_definition(uintptr_t addr, uintptr_t next_from);

/*
 * The definition, in namespace lmid, that slots redirected to intercept
 * (the hook of symbol) reached before, or 0.
 */
uintptr_t mca_patcher_linux_definition_in(const char *symbol, uintptr_t intercept, Lmid_t lmid);

/*
 * The loader is followed (our dl intercepts are in place) from now on,
 * counts being the loader's counts read before they went in; or no longer
 * (unfollow: no lock taken, for a restore function).
 */
typedef struct {
    unsigned long long adds, subs; /* objects added and removed so far (dl_phdr_info) */
} mca_patcher_linux_counts_t;
mca_patcher_linux_counts_t mca_patcher_linux_loader_counts(void);
void mca_patcher_linux_follow(mca_patcher_linux_counts_t counts);
void mca_patcher_linux_unfollow(void);
bool mca_patcher_linux_following(void);

/*
 * Once the loader is followed: patch new objects, and take back the slots
 * someone reset to what we chain to.
 */
void mca_patcher_linux_take_back(void);

/* After a dlclose, lock held: forget the records and definitions of what was unloaded. */
void mca_patcher_linux_after_close(void);

/* --- dl: the watchers --- */

/* Redirect dlopen, dlmopen, dlclose, dlsym and dlvsym, unless done (lock held). */
int mca_patcher_linux_dl_install(void);
/* What our dlmopen and dlclose intercepts chain to (installed). */
int mca_patcher_linux_dl_unwatched(mca_patcher_base_loader_t *unwatched);
/* Forget everything (patch_fini, after the last restore). */
void mca_patcher_linux_dl_forget(void);

#endif
