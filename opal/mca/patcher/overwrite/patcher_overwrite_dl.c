/*
 * The overwrite patcher's watch of the loader (patch_watch_loader): libc's
 * dlopen, dlmopen and dlclose are patched like any other function, by
 * address, with the module's patch function.  Their intercepts call the
 * loader for the caller (base_dl.h: it searches and places as without
 * us), then report through mca_patcher_base_loader_changed(), as the
 * linux component's GOT intercepts do.  What a load means for the
 * patcher's user (a library whose constructor wrote over our jumps, a
 * namespace with a copy of libc of its own) is the user's business.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <gnu/lib-names.h>
#include <pthread.h>
#include <stdbool.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/mca/patcher/base/base_dl.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite.h"
#include "opal/util/output.h"
#include "opal/util/proc_tasks.h"

/* A static link must not need them: there is no loader to watch there. */
#pragma weak dlopen
#pragma weak dlsym
#pragma weak dlclose

/* What the intercepts chain to: kept after fini for a call still on its way. */
static struct {
    mca_patcher_base_dlopen_fn_t dlopen;
    mca_patcher_base_dlmopen_fn_t dlmopen;
    int (*dlclose)(void *);
} chain;

/* An intercept was patched in since the last fini; all three are. */
static bool watched, watching;

/*
 * Held by the intercepts across the loader's work (the module's loader
 * lock, patcher.h): the watch's user, holding it, sees no dlclose of the
 * program unmap an object, nor empty a namespace, meanwhile.  Recursive:
 * a constructor or destructor run by the loader may call dlopen again.
 * glibc's own lock is held across the same work, so this takes nothing
 * from the program that the loader gives it.  Made new in a forked child
 * (another thread may have held it), as glibc makes its own.
 */
static pthread_mutex_t watch_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

static void watch_lock_take(void)
{
    pthread_mutex_lock(&watch_lock);
}

static void watch_lock_give(void)
{
    pthread_mutex_unlock(&watch_lock);
}

bool mca_patcher_overwrite_dl_trylock(void)
{
    return 0 == pthread_mutex_trylock(&watch_lock);
}

void mca_patcher_overwrite_dl_unlock(void)
{
    watch_lock_give();
}

void mca_patcher_overwrite_dl_atfork_child(void)
{
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&watch_lock, &attr);
    pthread_mutexattr_destroy(&attr);
}

/* After a successful open, for the caller: the report, then no error left by its work. */
static void *opened(void *handle)
{
    if (NULL != handle) {
        mca_patcher_base_loader_changed();
        mca_patcher_base_dl_clear_error();
    }
    return handle;
}

/* Entered from dlopen's patched entry: the caller is mca_patcher_base_patched_caller(). */
static void *watch_dlopen(const char *file, int mode)
{
    const void *caller = mca_patcher_base_patched_caller();
    watch_lock_take();
    void *handle = mca_patcher_base_dlopen_as(caller, chain.dlopen, file, mode);
    watch_lock_give();
    return opened(handle);
}

static void *watch_dlmopen(Lmid_t lmid, const char *file, int mode)
{
    const void *caller = mca_patcher_base_patched_caller();
    watch_lock_take();
    void *handle = mca_patcher_base_dlmopen_as(caller, chain.dlmopen, lmid, file, mode);
    watch_lock_give();
    return opened(handle);
}

static int watch_dlclose(void *handle)
{
    watch_lock_take();
    int rc = chain.dlclose(handle);
    mca_patcher_base_loader_unloaded();
    watch_lock_give();
    mca_patcher_base_loader_changed();
    return rc;
}

static bool is_watch_patch(mca_patcher_base_patch_t *patch, void *arg)
{
    (void) arg;
    return patch->patch_value == (uintptr_t) watch_dlopen ||
           patch->patch_value == (uintptr_t) watch_dlmopen ||
           patch->patch_value == (uintptr_t) watch_dlclose;
}

/* Patch libc's own definitions: another hooker's may sit in front (its GOT
 * redirections reach ours through them).  All three or none. */
static int watch(mca_patcher_overwrite_patch_fn_t patch)
{
    static const char *const names[] = {"dlopen", "dlmopen", "dlclose"};
    const uintptr_t entries[] = {(uintptr_t) watch_dlopen, (uintptr_t) watch_dlmopen,
                                 (uintptr_t) watch_dlclose};
    uintptr_t *chains[] = {(uintptr_t *) &chain.dlopen, (uintptr_t *) &chain.dlmopen,
                           (uintptr_t *) &chain.dlclose};
    uintptr_t defs[3];
    void *libc = NULL != dlopen && NULL != dlsym ? dlopen(LIBC_SO, RTLD_LAZY | RTLD_NOLOAD) : NULL;
    if (NULL == libc) {
        opal_output("patcher overwrite: cannot watch the loader: %s is not loaded here", LIBC_SO);
        return OPAL_ERR_NOT_FOUND;
    }
    int rc = OPAL_SUCCESS;
    for (int i = 0; i < 3 && OPAL_SUCCESS == rc; i++) {
        defs[i] = (uintptr_t) dlsym(libc, names[i]);
        if (0 == defs[i]) {
            opal_output("patcher overwrite: cannot watch the loader: %s has no %s", LIBC_SO,
                        names[i]);
            rc = OPAL_ERR_NOT_FOUND;
        }
    }
    dlclose(libc);
    for (int i = 0; i < 3 && OPAL_SUCCESS == rc; i++) {
        watched = true;
        rc = patch(names[i], defs[i], entries[i], chains[i]); /* says why it declined */
    }
    if (OPAL_SUCCESS != rc && watched) {
        /* A watch with a gap would report some calls and not others. */
        mca_patcher_base_restore_patches(opal_patcher, is_watch_patch, NULL);
    }
    return rc;
}

int mca_patcher_overwrite_dl_watch(mca_patcher_overwrite_patch_fn_t patch,
                                   struct mca_patcher_base_loader_t *unwatched)
{
    if (!watching) {
        int rc = watch(patch);
        if (OPAL_SUCCESS != rc) {
            return rc;
        }
        watching = true;
    }
    unwatched->dlmopen = chain.dlmopen;
    unwatched->dlclose = chain.dlclose;
    unwatched->dlsym = dlsym; /* not patched here: it gives definitions */
    return OPAL_SUCCESS;
}

void mca_patcher_overwrite_dl_fini(void)
{
    /* Restored by now; but a call that another thread made into an
     * intercept may still be inside the real dlopen, or past its last use
     * of our state but not yet returned from our code: unloading this
     * component would pull that code from under it.  Only with no other
     * thread can none be there. */
    if (watched && opal_proc_other_threads()) {
        mca_patcher_base_dl_keep_loaded((void *) watch_dlopen, dlopen,
                                        "another thread may still be inside a dl intercept");
    }
    watched = watching = false;
}
