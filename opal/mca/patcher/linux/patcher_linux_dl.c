/*
 * The dl watchers: intercepts of dlopen, dlmopen, dlclose, dlsym and
 * dlvsym.
 *
 * The loader judges dlopen, dlmopen, dlsym and dlvsym by their return
 * address; each is called for the caller (base_dl.h), so the loader
 * searches, scopes and places exactly as without us.  A caller in a dlmopen
 * namespace is sent to its own copy of libc's function (where its dlerror
 * state lives), a caller of the base namespace to what its slot held.
 *
 * Each intercept is a redirection of the table (patcher_linux_table.c)
 * whose slots are restored through watcher_restore: a restore tells us
 * that the watch must be installed again, or that a slot was left to
 * another hooker (then this component stays loaded).
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <link.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/mca/patcher/base/base_dl.h"
#include "opal/mca/patcher/linux/patcher_linux.h"
#include "opal/util/proc_tasks.h"

typedef mca_patcher_base_dlopen_fn_t dlopen_fn_t;
typedef mca_patcher_base_dlmopen_fn_t dlmopen_fn_t;
typedef mca_patcher_base_dlsym_fn_t dlsym_fn_t;
typedef mca_patcher_base_dlvsym_fn_t dlvsym_fn_t;
typedef int (*dlclose_fn_t)(void *);

/* Our dl intercepts were put in slots since the last forget (restored or not). */
static bool watched;
/* Set by a restore that left a dl intercept of ours in another hooker's hands. */
static bool captured;

/* Our intercept of each dl function (below the intercepts). */
static const uintptr_t watchers[MCA_PATCHER_LINUX_DL_COUNT];

/* Whether a namespace besides the base one has objects (read without a lock, as debuggers do). */
static bool other_namespaces(void)
{
    const struct r_debug_extended *ns = mca_patcher_base_dl_namespaces();
    while (NULL != ns && NULL != (ns = mca_patcher_base_dl_next_namespace(ns))) {
        if (NULL != ns->base.r_map) {
            return true;
        }
    }
    return false;
}

/*
 * What watcher w chains to for the code returning to caller_ret: what the
 * base namespace's slots held, or for a caller in another namespace the
 * definition its own slots held (its copy of libc's).  Before the call it
 * is for: the lookup may leave an error for dlerror().
 */
static uintptr_t chain_for(int w, const void *caller_ret)
{
    const uintptr_t real = mca_patcher_linux_loader_real(w);
    Lmid_t lmid = LM_ID_BASE;
    if (!other_namespaces() || NULL == mca_patcher_base_dl_caller(caller_ret, &lmid) ||
        LM_ID_BASE == lmid) {
        return real;
    }
    uintptr_t def = mca_patcher_linux_definition_in(mca_patcher_linux_loader_symbol(w), watchers[w],
                                                    lmid);
    return 0 != def ? def : real;
}

/*
 * dlopen and dlmopen hold the table's lock from before the loader's work
 * to the end of ours (opened).  glibc lists a new object, where our scans
 * see it, before it has relocated it: a slot we wrote in between would get
 * the load address added (lazy binding) or the definition written over
 * it.  The loader's own lock is held across the same work, constructors
 * included, so serializing the calls with our patch passes takes nothing
 * from the program that glibc gives it.
 */
static void *opened(void *handle)
{
    if (NULL != handle) {
        mca_patcher_linux_take_back();
    }
    mca_patcher_linux_unlock();
    if (NULL != handle) {
        mca_patcher_base_loader_changed();
        mca_patcher_base_dl_clear_error(); /* none left by our lookups */
    }
    return handle;
}

static void *linux_dlopen(const char *file, int mode)
{
    const void *ret = __builtin_return_address(0);
    const dlopen_fn_t real = (dlopen_fn_t) chain_for(MCA_PATCHER_LINUX_DLOPEN, ret);
    mca_patcher_linux_lock();
    return opened(mca_patcher_base_dlopen_as(ret, real, file, mode));
}

static void *linux_dlmopen(Lmid_t lmid, const char *file, int mode)
{
    const void *ret = __builtin_return_address(0);
    const dlmopen_fn_t real = (dlmopen_fn_t) chain_for(MCA_PATCHER_LINUX_DLMOPEN, ret);
    mca_patcher_linux_lock();
    return opened(mca_patcher_base_dlmopen_as(ret, real, lmid, file, mode));
}

static int linux_dlclose(void *handle)
{
    const dlclose_fn_t real = (dlclose_fn_t) chain_for(MCA_PATCHER_LINUX_DLCLOSE,
                                                       __builtin_return_address(0));
    /* Held across the real dlclose: nothing may record a slot of an object
     * that is being unloaded before we prune. */
    mca_patcher_linux_lock();
    int rc = real(handle);
    mca_patcher_linux_after_close();
    mca_patcher_base_loader_unloaded();
    mca_patcher_linux_unlock();
    mca_patcher_base_loader_changed();
    return rc;
}

static bool is_watcher(uintptr_t addr)
{
    for (int i = 0; i < MCA_PATCHER_LINUX_DL_COUNT; i++) {
        if (watchers[i] == addr) {
            return true;
        }
    }
    return false;
}

/*
 * A definition our slots were redirected from: hand out the intercept
 * instead.  Not for an RTLD_NEXT lookup made from the object of the
 * intercept's chain (an interposer asking for the definition after its own):
 * the intercept would call it back.
 */
static void *found(void *addr, void *handle, const void *caller_ret)
{
    const uintptr_t next_from = RTLD_NEXT == handle ? (uintptr_t) caller_ret : 0;
    addr = (void *) mca_patcher_linux_map_definition((uintptr_t) addr, next_from);
    if (__builtin_expect(is_watcher((uintptr_t) addr), 0)) {
        mca_patcher_linux_pin_self("a dl intercept was handed out by dlsym");
    }
    return addr;
}

static void *linux_dlsym(void *handle, const char *symbol)
{
    const void *ret = __builtin_return_address(0);
    return found(mca_patcher_base_dlsym_as(ret,
                                           (dlsym_fn_t) chain_for(MCA_PATCHER_LINUX_DLSYM, ret),
                                           handle, symbol),
                 handle, ret);
}

static void *linux_dlvsym(void *handle, const char *symbol, const char *version)
{
    const void *ret = __builtin_return_address(0);
    return found(mca_patcher_base_dlvsym_as(ret,
                                            (dlvsym_fn_t) chain_for(MCA_PATCHER_LINUX_DLVSYM, ret),
                                            handle, symbol, version),
                 handle, ret);
}

static const uintptr_t watchers[MCA_PATCHER_LINUX_DL_COUNT] = {
    [MCA_PATCHER_LINUX_DLOPEN] = (uintptr_t) linux_dlopen,
    [MCA_PATCHER_LINUX_DLMOPEN] = (uintptr_t) linux_dlmopen,
    [MCA_PATCHER_LINUX_DLCLOSE] = (uintptr_t) linux_dlclose,
    [MCA_PATCHER_LINUX_DLSYM] = (uintptr_t) linux_dlsym,
    [MCA_PATCHER_LINUX_DLVSYM] = (uintptr_t) linux_dlvsym,
};

/*
 * The restore function of our intercepts' slots.  Called by the base with
 * its patch list mutex held: no lock here, flags for the next install and
 * for fini.
 */
static void watcher_restore(mca_patcher_base_patch_t *patch)
{
    switch (mca_patcher_linux_got_restore(patch)) {
    case MCA_PATCHER_LINUX_SLOT_RESTORED:
        /* Installed again by the next patch_symbol. */
        mca_patcher_linux_unfollow();
        break;
    case MCA_PATCHER_LINUX_SLOT_LEFT:
        /* Another hooker chains to it: this component stays loaded (fini). */
        __atomic_store_n(&captured, true, __ATOMIC_RELAXED);
        break;
    case MCA_PATCHER_LINUX_SLOT_UNLOADED:
        break;
    }
}

int mca_patcher_linux_dl_install(void)
{
    if (mca_patcher_linux_following()) {
        return OPAL_SUCCESS;
    }
    const mca_patcher_linux_counts_t counts = mca_patcher_linux_loader_counts();
    /* The real functions first: finding a lazily bound slot's definition
     * in another namespace opens its object (mca_patcher_linux_dlsym_in). */
    for (int i = 0; i < MCA_PATCHER_LINUX_DL_COUNT; i++) {
        uintptr_t chain;
        if (OPAL_SUCCESS ==
            mca_patcher_linux_got_chain(mca_patcher_linux_loader_symbol(i), watchers[i], &chain)) {
            mca_patcher_linux_loader_set_real(i, chain);
        }
    }
    mca_patcher_linux_loader_find_own();
    watched = true; /* before the first slot is written */
    for (int i = 0; i < MCA_PATCHER_LINUX_DL_COUNT; i++) {
        uintptr_t chain;
        int rc = mca_patcher_linux_hook_symbol(mca_patcher_linux_loader_symbol(i), watchers[i], 0,
                                               &chain, watcher_restore);
        if (OPAL_ERR_NOT_FOUND == rc) {
            continue; /* nothing defines it: nobody can call it */
        }
        if (OPAL_SUCCESS != rc) {
            return rc;
        }
        mca_patcher_linux_loader_set_real(i, chain);
    }
    mca_patcher_linux_follow(counts);
    return OPAL_SUCCESS;
}

int mca_patcher_linux_dl_unwatched(mca_patcher_base_loader_t *unwatched)
{
    const uintptr_t dlmopen_own = mca_patcher_linux_loader_own(MCA_PATCHER_LINUX_DLMOPEN);
    const uintptr_t dlclose_own = mca_patcher_linux_loader_own(MCA_PATCHER_LINUX_DLCLOSE);
    const uintptr_t dlsym_own = mca_patcher_linux_loader_own(MCA_PATCHER_LINUX_DLSYM);
    if (0 == dlmopen_own || 0 == dlclose_own || 0 == dlsym_own) {
        return OPAL_ERR_NOT_FOUND;
    }
    unwatched->dlmopen = (dlmopen_fn_t) dlmopen_own;
    unwatched->dlclose = (dlclose_fn_t) dlclose_own;
    unwatched->dlsym = (dlsym_fn_t) dlsym_own;
    return OPAL_SUCCESS;
}

void mca_patcher_linux_dl_forget(void)
{
    if (__atomic_exchange_n(&captured, false, __ATOMIC_RELAXED)) {
        mca_patcher_linux_pin_self("a GOT slot left to another hooker leads to a dl intercept");
    }
    /* A call that another thread made into one of our dl intercepts before
     * the slots were restored may still be running (inside the real
     * dlopen), or be past its last use of our state but not yet returned
     * from our code: unloading this component would pull that code from
     * under it.  Only with no other thread can none be there. */
    if (watched && opal_proc_other_threads()) {
        mca_patcher_linux_pin_self("another thread may still be inside a dl intercept");
    }
    watched = false;
    mca_patcher_linux_unfollow();
}
