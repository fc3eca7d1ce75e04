/*
 * The dl watchers: intercepts of dlopen, dlmopen, dlclose, dlsym and
 * dlvsym.
 *
 * The loader judges dlopen, dlmopen, dlsym and dlvsym by their return
 * address; each is called for the caller (base_dl.h), so the loader
 * searches, scopes and places exactly as without us.  A caller in a dlmopen
 * namespace is sent to its own copy of libc's function (where its dlerror
 * state lives), a caller of the base namespace to what its slot held.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <string.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/mca/patcher/linux/patcher_linux.h"
#include "opal/mca/patcher/base/base_dl.h"
#include "opal/util/output.h"
#include "opal/util/proc_tasks.h"

/* Weak: a static link must not need them (and glibc warns about a static
 * program naming dlopen/dlmopen, so those are only reached by chain). */
#pragma weak dlsym
#pragma weak dladdr1

typedef mca_patcher_base_dlopen_fn_t dlopen_fn_t;
typedef mca_patcher_base_dlmopen_fn_t dlmopen_fn_t;
typedef mca_patcher_base_dlsym_fn_t dlsym_fn_t;
typedef mca_patcher_base_dlvsym_fn_t dlvsym_fn_t;
typedef int (*dlclose_fn_t)(void *);

static bool installed;
/* Our dl intercepts were put in slots since the last forget (restored or not). */
static bool watched;
/* dl_iterate_phdr's counters when the objects were last patched/pruned. */
static unsigned long long seen_adds, seen_subs;

enum { WATCH_DLOPEN, WATCH_DLMOPEN, WATCH_DLCLOSE, WATCH_DLSYM, WATCH_DLVSYM, WATCH_COUNT };

/*
 * The real functions: what our intercepts chain to (never through our own
 * GOT, which is the program's when we are linked into it statically).
 * Kept after patch_fini for a call still on its way through an intercept.
 */
static uintptr_t reals[WATCH_COUNT];

/*
 * The loader's own functions (the definitions, not what slots reach), for
 * our lookups that load nothing (RTLD_NOLOAD handles): another hooker's
 * dlopen may do work of its own after each call (UCX's libucm re-patches
 * every object) and may be entered from inside its allocator, where that
 * work deadlocks.
 */
static uintptr_t loader[WATCH_COUNT];

#define REAL(name, index) ((name##_fn_t) reals[index])
#define LOADER(name, index) ((name##_fn_t) (loader[index] ? loader[index] : reals[index]))

static int read_counters(struct dl_phdr_info *info, size_t size, void *arg)
{
    unsigned long long *c = arg;
    c[0] = info->dlpi_adds;
    c[1] = info->dlpi_subs;
    return 1;
}

/*
 * After a successful open: give the redirections to the new objects, and
 * take back the slots that the dlopen we chain to may have reset (UCX's
 * libucm re-applies its patches to every object after each dlopen, ours
 * included): so even when no object was added, and after our own calls of
 * that dlopen.
 */
void mca_patcher_linux_take_back(void)
{
    unsigned long long c[2] = {0, 0};
    pthread_mutex_lock(&mca_patcher_linux_lock);
    if (__atomic_load_n(&installed, __ATOMIC_RELAXED)) {
        dl_iterate_phdr(read_counters, c);
        /* Only another hooker's dlopen behind ours can have reset slots. */
        const bool foreign_dlopen = 0 != loader[WATCH_DLOPEN] && reals[WATCH_DLOPEN] != loader[WATCH_DLOPEN];
        int rc = c[0] != seen_adds || foreign_dlopen
                     ? mca_patcher_linux_got_patch(mca_patcher_linux_hooks, mca_patcher_linux_nhooks)
                     : OPAL_SUCCESS;
        if (OPAL_SUCCESS != rc) {
            opal_output("patcher linux: could not patch the objects just loaded: %s",
                        opal_strerror(rc));
        }
        seen_adds = c[0];
    }
    pthread_mutex_unlock(&mca_patcher_linux_lock);
}

typedef struct watcher_t {
    const char *symbol;
    uintptr_t intercept;
} watcher_t;
static const watcher_t watchers[WATCH_COUNT]; /* below the intercepts */

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
    const uintptr_t real = __atomic_load_n(&reals[w], __ATOMIC_ACQUIRE);
    Lmid_t lmid = LM_ID_BASE;
    if (!other_namespaces() || NULL == mca_patcher_base_dl_caller(caller_ret, &lmid) ||
        LM_ID_BASE == lmid) {
        return real;
    }
    uintptr_t def = mca_patcher_linux_definition_in(watchers[w].symbol, watchers[w].intercept,
                                                    lmid);
    return 0 != def ? def : real;
}

/* After a successful open, for the caller: our work, then no error left by it. */
static void *opened(void *handle)
{
    if (NULL != handle) {
        mca_patcher_linux_take_back();
        mca_patcher_base_loader_changed();
        mca_patcher_base_dl_clear_error();
    }
    return handle;
}

static void *linux_dlopen(const char *file, int mode)
{
    const void *ret = __builtin_return_address(0);
    return opened(
        mca_patcher_base_dlopen_as(ret, (dlopen_fn_t) chain_for(WATCH_DLOPEN, ret), file, mode));
}

static void *linux_dlmopen(Lmid_t lmid, const char *file, int mode)
{
    const void *ret = __builtin_return_address(0);
    return opened(mca_patcher_base_dlmopen_as(ret, (dlmopen_fn_t) chain_for(WATCH_DLMOPEN, ret),
                                              lmid, file, mode));
}

static int linux_dlclose(void *handle)
{
    unsigned long long c[2] = {0, 0};
    const dlclose_fn_t real = (dlclose_fn_t) chain_for(WATCH_DLCLOSE, __builtin_return_address(0));
    /* Held across the real dlclose: nothing may record a slot of an object
     * that is being unloaded before we prune. */
    pthread_mutex_lock(&mca_patcher_linux_lock);
    int rc = real(handle);
    dl_iterate_phdr(read_counters, c);
    if (c[1] != seen_subs && __atomic_load_n(&installed, __ATOMIC_RELAXED)) {
        mca_patcher_linux_got_drop_unloaded();
        seen_subs = c[1];
    }
    pthread_mutex_unlock(&mca_patcher_linux_lock);
    mca_patcher_base_loader_changed();
    return rc;
}

void *mca_patcher_linux_dlsym_in(struct link_map *map, Lmid_t lmid, const char *symbol)
{
    /* A link_map is a handle only once the loader has built its search
     * list (dlopen did): a plain dependency has none.  Opening it again
     * (RTLD_NOLOAD: nothing is loaded, no constructor runs) builds it. */
    const bool program = LM_ID_BASE == lmid && NULL == map->l_prev;
    void *handle = NULL;
    if (0 == reals[WATCH_DLOPEN] || 0 == reals[WATCH_DLMOPEN] || 0 == reals[WATCH_DLCLOSE] ||
        0 == reals[WATCH_DLSYM] || (!program && (NULL == map->l_name || '\0' == map->l_name[0]))) {
        return NULL;
    }
    if (program) {
        handle = LOADER(dlopen, WATCH_DLOPEN)(NULL, RTLD_LAZY);
    } else if (LM_ID_BASE == lmid) {
        handle = LOADER(dlopen, WATCH_DLOPEN)(map->l_name, RTLD_LAZY | RTLD_NOLOAD);
    } else {
        handle = LOADER(dlmopen, WATCH_DLMOPEN)(lmid, map->l_name, RTLD_LAZY | RTLD_NOLOAD);
    }
    if (NULL == handle) {
        return NULL;
    }
    void *addr = LOADER(dlsym, WATCH_DLSYM)(handle, symbol);
    LOADER(dlclose, WATCH_DLCLOSE)(handle);
    return addr;
}

static bool is_watcher(uintptr_t addr);

/*
 * One of our dl intercepts may run after we are finalized: handed out by
 * dlsym and kept by its caller (a hooker chaining to "the real dlopen", as
 * UCX's libucm does), or still running in another thread.  The object
 * holding it must then stay loaded.
 */
void mca_patcher_linux_pin_self(const char *why)
{
    static bool pinned;
    if (!__atomic_exchange_n(&pinned, true, __ATOMIC_ACQ_REL)) {
        mca_patcher_base_dl_keep_loaded((void *) &mca_patcher_linux_component,
                                        0 != reals[WATCH_DLOPEN] ? LOADER(dlopen, WATCH_DLOPEN) : NULL, why);
    }
}

/* A definition our slots were redirected from: hand out the intercept instead. */
static void *found(void *addr)
{
    addr = (void *) mca_patcher_linux_map_definition((uintptr_t) addr);
    if (__builtin_expect(is_watcher((uintptr_t) addr), 0)) {
        mca_patcher_linux_pin_self("a dl intercept was handed out by dlsym");
    }
    return addr;
}

static void *linux_dlsym(void *handle, const char *symbol)
{
    const void *ret = __builtin_return_address(0);
    return found(
        mca_patcher_base_dlsym_as(ret, (dlsym_fn_t) chain_for(WATCH_DLSYM, ret), handle, symbol));
}

static void *linux_dlvsym(void *handle, const char *symbol, const char *version)
{
    const void *ret = __builtin_return_address(0);
    return found(mca_patcher_base_dlvsym_as(ret, (dlvsym_fn_t) chain_for(WATCH_DLVSYM, ret), handle,
                                            symbol, version));
}

static const watcher_t watchers[WATCH_COUNT] = {
    [WATCH_DLOPEN] = {"dlopen", (uintptr_t) linux_dlopen},
    [WATCH_DLMOPEN] = {"dlmopen", (uintptr_t) linux_dlmopen},
    [WATCH_DLCLOSE] = {"dlclose", (uintptr_t) linux_dlclose},
    [WATCH_DLSYM] = {"dlsym", (uintptr_t) linux_dlsym},
    [WATCH_DLVSYM] = {"dlvsym", (uintptr_t) linux_dlvsym},
};

static bool is_watcher(uintptr_t addr)
{
    for (int i = 0; i < WATCH_COUNT; i++) {
        if (watchers[i].intercept == addr) {
            return true;
        }
    }
    return false;
}

int mca_patcher_linux_dl_install(void)
{
    if (__atomic_load_n(&installed, __ATOMIC_RELAXED)) {
        return OPAL_SUCCESS;
    }
    unsigned long long c[2] = {0, 0};
    dl_iterate_phdr(read_counters, c);
    /* The real functions first: finding a lazily bound slot's definition
     * in another namespace opens its object (mca_patcher_linux_dlsym_in). */
    for (int i = 0; i < WATCH_COUNT; i++) {
        uintptr_t chain;
        if (OPAL_SUCCESS == mca_patcher_linux_got_chain(watchers[i].symbol, watchers[i].intercept,
                                                        &chain)) {
            __atomic_store_n(&reals[i], chain, __ATOMIC_RELEASE);
        }
    }
    /* RTLD_DEFAULT finds definitions, whatever the slots hold. */
    for (int i = 0; i < WATCH_COUNT && 0 != reals[WATCH_DLSYM]; i++) {
        loader[i] = (uintptr_t) REAL(dlsym, WATCH_DLSYM)(RTLD_DEFAULT, watchers[i].symbol);
    }
    watched = true; /* before the first slot is written */
    for (int i = 0; i < WATCH_COUNT; i++) {
        uintptr_t chain;
        int rc = mca_patcher_linux_hook_symbol(watchers[i].symbol, watchers[i].intercept, 0, &chain);
        if (OPAL_ERR_NOT_FOUND == rc) {
            continue; /* nothing defines it: nobody can call it */
        }
        if (OPAL_SUCCESS != rc) {
            return rc;
        }
        __atomic_store_n(&reals[i], chain, __ATOMIC_RELEASE);
    }
    seen_adds = c[0];
    seen_subs = c[1];
    __atomic_store_n(&installed, true, __ATOMIC_RELAXED);
    return OPAL_SUCCESS;
}

int mca_patcher_linux_dl_unwatched(mca_patcher_base_loader_t *unwatched)
{
    if (0 == reals[WATCH_DLMOPEN] || 0 == reals[WATCH_DLCLOSE]) {
        return OPAL_ERR_NOT_FOUND;
    }
    unwatched->dlmopen = REAL(dlmopen, WATCH_DLMOPEN);
    unwatched->dlclose = REAL(dlclose, WATCH_DLCLOSE);
    return OPAL_SUCCESS;
}

bool mca_patcher_linux_is_watcher(uintptr_t addr)
{
    return is_watcher(addr);
}

void mca_patcher_linux_dl_restored(uintptr_t value)
{
    /* Called by a restore with the base's patch list mutex held: no lock
     * here, a flag for the next patch_symbol. */
    for (int i = 0; i < WATCH_COUNT; i++) {
        if (watchers[i].intercept == value) {
            __atomic_store_n(&installed, false, __ATOMIC_RELAXED);
        }
    }
}

void mca_patcher_linux_dl_forget(void)
{
    /* A call that another thread made into one of our dl intercepts before
     * the slots were restored may still be running (inside the real
     * dlopen), or be past its last use of our state but not yet returned
     * from our code: unloading this component would pull that code from
     * under it.  Only with no other thread can none be there. */
    if (watched && opal_proc_other_threads()) {
        mca_patcher_linux_pin_self("another thread may still be inside a dl intercept");
    }
    watched = false;
    installed = false;
    seen_adds = seen_subs = 0;
}
