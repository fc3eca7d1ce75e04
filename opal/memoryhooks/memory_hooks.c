/*
 * The release-callback registry and the delayed setup.
 *
 * Readers (the hooks) walk a fixed array of slots without locks.  Each slot
 * counts the threads calling its callback; unregister clears the slot and
 * then waits for that count to drain, so that when it returns the callback
 * is not running anywhere and will not run again.
 */
#include "opal_config.h"

#include <pthread.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/memoryhooks/memory_internal.h"
#if OPAL_HAVE_UCX
#    include <string.h>

#    include "opal/memoryhooks/memory_ucx.h"
#    include "opal/memoryhooks/memory_ucx_feed.h"
#endif
#include "opal/util/debug.h"
#include "opal/util/output.h"
#include "opal/util/readers.h"

opal_mem_hooks_slot_t opal_mem_hooks_slots[OPAL_MEM_HOOKS_MAX_CALLBACKS];
int opal_mem_hooks_slots_used;
__thread unsigned char opal_mem_hooks_calling[OPAL_MEM_HOOKS_MAX_CALLBACKS]
    __attribute__((tls_model("initial-exec")));

static int support_level;         /* published after every patch succeeded */
static bool hooks_installed;
static bool from_ucx; /* our events come from UCX's handler, not our patches */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
/* The loader added or removed objects since the lock's holder last looked. */
static bool objects_changed;
static void registry_unlock(void);

uintptr_t opal_mem_hooks_page_size = 4096;

static __attribute__((noinline)) void call_all(int n, void *start, size_t len, bool from_alloc)
{
    for (int i = 0; i < n; i++) {
        /* An empty slot is skipped without touching its (shared) count. */
        if (NULL != __atomic_load_n(&opal_mem_hooks_slots[i].func, __ATOMIC_RELAXED)) {
            opal_mem_hooks_call_slot(i, start, len, from_alloc);
        }
    }
}

void opal_mem_hooks_dispatch(uintptr_t start, size_t len, bool from_alloc)
{
    const uintptr_t mask = opal_mem_hooks_page_size - 1;
    OPAL_DEBUG_CHECK(0 == (start & mask) && len > 0);
    len = (len + mask) & ~mask;
    const int n = __atomic_load_n(&opal_mem_hooks_slots_used, __ATOMIC_ACQUIRE);
    /* One callback (an rcache) is the common case: no loop, no registers
     * to save around the call. */
    if (__builtin_expect(1 == n, 1)) {
        opal_mem_hooks_call_slot(0, (void *) start, len, from_alloc);
    } else {
        call_all(n, (void *) start, len, from_alloc);
    }
}

void opal_mem_hooks_release_hook(void *buf, size_t length, bool from_alloc)
{
    if (length > 0) {
        const uintptr_t mask = opal_mem_hooks_page_size - 1;
        const uintptr_t start = (uintptr_t) buf & ~mask;
        opal_mem_hooks_dispatch(start, (uintptr_t) buf + length - start, from_alloc);
    }
}

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

int opal_mem_hooks_add_callback_locked(opal_mem_hooks_callback_fn_t *func, void *cbdata)
{
    int rc = OPAL_SUCCESS;
    int free_slot = -1;
    for (int i = 0; OPAL_SUCCESS == rc && i < OPAL_MEM_HOOKS_MAX_CALLBACKS; i++) {
        if (opal_mem_hooks_slots[i].func == func) {
            opal_output("opal_mem_hooks_register_release: callback %p is already registered",
                        (void *) (uintptr_t) func);
            rc = OPAL_ERR_BAD_PARAM;
        } else if (NULL == opal_mem_hooks_slots[i].func && free_slot < 0 && 0 == opal_mem_hooks_slots[i].users) {
            free_slot = i;
        }
    }
    if (OPAL_SUCCESS == rc && free_slot < 0) {
        opal_output("opal_mem_hooks_register_release: more than %d callbacks", OPAL_MEM_HOOKS_MAX_CALLBACKS);
        rc = OPAL_ERR_OUT_OF_RESOURCE;
    }
    if (OPAL_SUCCESS == rc) {
        /* cbdata first: a reader that sees func must see its cbdata. */
        __atomic_store_n(&opal_mem_hooks_slots[free_slot].cbdata, cbdata, __ATOMIC_RELAXED);
        __atomic_store_n(&opal_mem_hooks_slots[free_slot].func, func, __ATOMIC_RELEASE);
        if (free_slot >= opal_mem_hooks_slots_used) {
            __atomic_store_n(&opal_mem_hooks_slots_used, free_slot + 1, __ATOMIC_RELEASE);
        }
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
        rc = opal_mem_hooks_add_callback_locked(func, cbdata);
    }
    registry_unlock();
    return rc;
}

/* Wait for the callers still inside slot i's (cleared) callback, but not for ourselves. */
static void drain_slot(int i)
{
    opal_readers_drain(&opal_mem_hooks_slots[i].users, opal_mem_hooks_calling[i]);
}

int opal_mem_hooks_unregister_release(opal_mem_hooks_callback_fn_t *func)
{
    pthread_mutex_lock(&registry_lock);
    int found = -1;
    for (int i = 0; i < opal_mem_hooks_slots_used; i++) {
        if (NULL != func && opal_mem_hooks_slots[i].func == func) {
            found = i;
            __atomic_store_n(&opal_mem_hooks_slots[i].func, NULL, __ATOMIC_SEQ_CST);
        }
    }
    registry_unlock();
    if (found < 0) {
        return OPAL_ERR_NOT_FOUND;
    }
    drain_slot(found);
    return OPAL_SUCCESS;
}

void opal_mem_hooks_remove_callback_locked(opal_mem_hooks_callback_fn_t *func)
{
    for (int i = 0; i < opal_mem_hooks_slots_used; i++) {
        if (opal_mem_hooks_slots[i].func == func) {
            __atomic_store_n(&opal_mem_hooks_slots[i].func, NULL, __ATOMIC_SEQ_CST);
            drain_slot(i);
        }
    }
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
    long page = sysconf(_SC_PAGESIZE);
    opal_mem_hooks_page_size = page > 0 ? (uintptr_t) page : 4096;
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
    for (int i = 0; i < opal_mem_hooks_slots_used; i++) {
        __atomic_store_n(&opal_mem_hooks_slots[i].func, NULL, __ATOMIC_SEQ_CST);
    }
    for (int i = 0; i < opal_mem_hooks_slots_used; i++) {
        drain_slot(i);
    }
    opal_mem_hooks_slots_used = 0;
    pthread_mutex_unlock(&registry_lock);
}
