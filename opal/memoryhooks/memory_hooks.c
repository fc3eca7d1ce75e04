/*
 * The public API of the memory hooks and the delayed setup, over the
 * callback registry (memory_registry.c), whose writers it serializes with
 * its lock.
 */
#include "opal_config.h"

#include <pthread.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/memoryhooks/memory_internal.h"
#if OPAL_HAVE_UCX
#    include <string.h>

#    include "opal/memoryhooks/memory_ucx.h"
#    include "opal/memoryhooks/memory_ucx_feed.h"
#endif
#include "opal/util/output.h"

static int support_level;         /* published after every patch succeeded */
static bool hooks_installed;
static bool from_ucx; /* our events come from UCX's handler, not our patches */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
/* The loader added or removed objects since the lock's holder last looked. */
static bool objects_changed;
static void registry_unlock(void);

/* The delayed setup: select a patcher and install every intercept. */
static int setup_locked(void)
{
    if (hooks_installed) {
        return support_level ? OPAL_SUCCESS : OPAL_ERR_NOT_SUPPORTED;
    }
#if OPAL_HAVE_UCX
    /* The claim "ucx": UCX's hooks are active here; take their events
     * instead of patching the same functions a second time. */
    const char *claimed = mca_patcher_base_claimed_style();
    if (NULL != claimed && 0 == strcmp(claimed, "ucx")) {
        const char *reason = NULL;
        if (OPAL_SUCCESS == opal_mem_hooks_ucx_start(&reason)) {
            from_ucx = hooks_installed = true;
            mca_patcher_base_set_selected_name("ucx");
            __atomic_store_n(&support_level, OPAL_MEMORY_FREE_SUPPORT | OPAL_MEMORY_MUNMAP_SUPPORT,
                             __ATOMIC_RELEASE);
            return OPAL_SUCCESS;
        }
        opal_output("claim \"ucx\": cannot receive UCX's memory events (%s); patching with the "
                    "component proven to stack with UCX instead", reason);
    }
#endif
    int rc = mca_patcher_base_select();
    if (OPAL_SUCCESS == rc) {
        rc = opal_mem_hooks_install_intercepts();
    }
    if (OPAL_SUCCESS != rc) {
        return OPAL_ERR_NOT_SUPPORTED == rc || OPAL_ERR_NOT_INITIALIZED == rc ? rc : OPAL_ERR_NOT_SUPPORTED;
    }
    hooks_installed = true;
    __atomic_store_n(&support_level,
                     OPAL_MEMORY_FREE_SUPPORT | OPAL_MEMORY_MUNMAP_SUPPORT | OPAL_MEMORY_CHUNK_SUPPORT,
                     __ATOMIC_RELEASE);
    return OPAL_SUCCESS;
}

/* Our jumps still in front (see opal_mem_hooks_check_intercepts), or no support at all. */
static void check_locked(void)
{
    if (hooks_installed && !from_ucx && 0 != support_level &&
        OPAL_SUCCESS != opal_mem_hooks_check_intercepts()) {
        opal_output("memory hooks: release events are no longer delivered; support level 0");
        __atomic_store_n(&support_level, 0, __ATOMIC_RELEASE);
    }
#if OPAL_HAVE_UCX
    /* A libucm with its hooks off gets its events from ours. */
    if (hooks_installed && !from_ucx && 0 != support_level) {
        opal_mem_hooks_ucx_feed_check();
    }
#endif
}

/*
 * Called after the loader's work (memory_dl.c).  The registry lock may be
 * held by this very thread (a dlopen made under it) or by one that waits
 * for the loader's lock: never wait for it.  The flag stays for the
 * holder, who looks at it when it unlocks.
 */
void opal_mem_hooks_objects_changed(void)
{
    __atomic_store_n(&objects_changed, true, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&objects_changed, __ATOMIC_SEQ_CST) &&
           0 == pthread_mutex_trylock(&registry_lock)) {
        __atomic_store_n(&objects_changed, false, __ATOMIC_SEQ_CST);
        if (hooks_installed && !from_ucx) {
            opal_mem_hooks_sync_copies();
            check_locked();
        }
        pthread_mutex_unlock(&registry_lock);
    }
}

static void registry_unlock(void)
{
    pthread_mutex_unlock(&registry_lock);
    if (__atomic_load_n(&objects_changed, __ATOMIC_SEQ_CST)) {
        opal_mem_hooks_objects_changed();
    }
}

/* The registry's add, saying why it refused. */
static int add_callback_locked(opal_mem_hooks_callback_fn_t *func, void *cbdata)
{
    int rc = opal_mem_hooks_registry_add(func, cbdata);
    if (OPAL_ERR_BAD_PARAM == rc) {
        opal_output("opal_mem_hooks_register_release: callback %p is already registered",
                    (void *) (uintptr_t) func);
    } else if (OPAL_SUCCESS != rc) {
        opal_output("opal_mem_hooks_register_release: more than %d callbacks",
                    OPAL_MEM_HOOKS_MAX_CALLBACKS);
    }
    return rc;
}

int opal_mem_hooks_register_release(opal_mem_hooks_callback_fn_t *func, void *cbdata)
{
    if (NULL == func) {
        opal_output("opal_mem_hooks_register_release: the callback is NULL");
        return OPAL_ERR_BAD_PARAM;
    }
    pthread_mutex_lock(&registry_lock);
    int rc = setup_locked();
    check_locked();
    if (OPAL_SUCCESS == rc) {
        rc = add_callback_locked(func, cbdata);
    }
    registry_unlock();
    return rc;
}

int opal_mem_hooks_unregister_release(opal_mem_hooks_callback_fn_t *func)
{
    pthread_mutex_lock(&registry_lock);
    const int slot = opal_mem_hooks_registry_clear(func);
    registry_unlock();
    if (slot < 0) {
        return OPAL_ERR_NOT_FOUND;
    }
    /* Unlocked: a callback that registers or unregisters takes the lock. */
    opal_mem_hooks_registry_drain(slot);
    return OPAL_SUCCESS;
}

int opal_mem_hooks_support_level(void)
{
    pthread_mutex_lock(&registry_lock);
    if (!hooks_installed) {
        (void) setup_locked();
    }
    check_locked();
    registry_unlock();
    return __atomic_load_n(&support_level, __ATOMIC_ACQUIRE);
}

int opal_mem_hooks_init(void)
{
    opal_mem_hooks_registry_init();
#if OPAL_HAVE_UCX
    return opal_mem_hooks_ucx_feed_register();
#else
    return OPAL_SUCCESS;
#endif
}

void opal_mem_hooks_finalize(void)
{
    pthread_mutex_lock(&registry_lock);
    if (hooks_installed) {
        __atomic_store_n(&support_level, 0, __ATOMIC_RELEASE);
#if OPAL_HAVE_UCX
        if (from_ucx) {
            opal_mem_hooks_ucx_stop();
        }
        opal_mem_hooks_ucx_feed_stop();
#endif
        if (!from_ucx) {
            opal_mem_hooks_uninstall_intercepts();
        }
        hooks_installed = from_ucx = false;
    }
    mca_patcher_base_fini();
    opal_mem_hooks_registry_remove_all();
    pthread_mutex_unlock(&registry_lock);
}
