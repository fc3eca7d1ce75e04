/*
 * The top floor of the memory hooks: the public API (memory.h), the
 * delayed setup that picks the source of our events, the lock, the support
 * level and the after-load step; and the range sources started beside it.
 * It calls the sources (memory_source.h) and the UCX feed, which call the
 * registry (memory_registry.h), whose writers this lock serializes.
 */
#include "opal_config.h"

#include <pthread.h>
#include <string.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/memoryhooks/memory_hooks.h"
#include "opal/memoryhooks/memory_patch.h"
#include "opal/memoryhooks/memory_registry.h"
#include "opal/memoryhooks/memory_ucx.h"
#include "opal/memoryhooks/memory_ucx_feed.h"
#include "opal/util/output.h"

static pthread_mutex_t hooks_lock = PTHREAD_MUTEX_INITIALIZER;
/* The source that delivers our events: NULL until a setup succeeded (lock). */
static const opal_mem_source_t *active;
static int support_level; /* the active source's, published once it started */
/* The loader added or removed objects since the lock's holder last looked. */
static bool objects_changed;
/* The range source and its references (opal_mem_hooks_source_get; lock). */
static const opal_mem_source_t *range_source;
static int range_users;

static void after_load(void);

/* Let go of the lock, then do the after-load step that came meanwhile. */
static void hooks_unlock(void)
{
    pthread_mutex_unlock(&hooks_lock);
    if (__atomic_load_n(&objects_changed, __ATOMIC_SEQ_CST)) {
        after_load();
    }
}

/* Start source as the one that delivers our events (lock held). */
static int start_locked(const opal_mem_source_t *source, const char **reason)
{
    /* A source that follows the loader hears of it from the start: what
     * the loader does meanwhile waits for the lock (after_load). */
    if (NULL != source->check) {
        mca_patcher_base_set_loader_callback(after_load);
    }
    int rc = source->start(reason);
    if (OPAL_SUCCESS != rc) {
        mca_patcher_base_set_loader_callback(NULL);
        return rc;
    }
    active = source;
    __atomic_store_n(&support_level, source->support_level(), __ATOMIC_RELEASE);
    return OPAL_SUCCESS;
}

/*
 * The delayed setup.  A claimed style that names a source (the claim
 * "ucx": UCX's hooks are active here) takes that source's events instead
 * of patching the same functions a second time; otherwise, or when it
 * refuses, our patches, which say themselves what failed.
 */
static int setup_locked(void)
{
    if (NULL != active) {
        return support_level ? OPAL_SUCCESS : OPAL_ERR_NOT_SUPPORTED;
    }
    const char *claimed = mca_patcher_base_claimed_style();
    const opal_mem_source_t *ucx = OPAL_MEM_UCX_SOURCE;
    const char *reason = NULL;
    if (NULL != claimed && NULL != ucx && 0 == strcmp(claimed, ucx->name)) {
        if (OPAL_SUCCESS == start_locked(ucx, &reason)) {
            return OPAL_SUCCESS;
        }
        opal_output("claim \"%s\": cannot receive UCX's memory events (%s); patching with the "
                    "component proven to stack with UCX instead",
                    claimed, reason);
    }
    return start_locked(&opal_mem_patch_source, &reason);
}

/*
 * The active source repaired after the process changed under it (for our
 * patches: the namespaces' copies, our jumps back in front), or no
 * support at all.
 */
static void check_locked(void)
{
    if (NULL == active || 0 == support_level) {
        return;
    }
    if (NULL != active->check && OPAL_SUCCESS != active->check()) {
        opal_output("memory hooks: release events are no longer delivered; support level 0");
        __atomic_store_n(&support_level, 0, __ATOMIC_RELEASE);
        return;
    }
    /* A libucm with its hooks off gets its events from our patches. */
    if (&opal_mem_patch_source == active) {
        opal_mem_hooks_ucx_feed_check();
    }
}

/*
 * The patcher base's loader callback, after the loader's work.  The lock
 * may be held by this very thread (a dlopen made under it) or by one that
 * waits for the loader's lock: never wait for it.  The flag stays for the
 * holder, who looks at it when it unlocks.
 */
static void after_load(void)
{
    __atomic_store_n(&objects_changed, true, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&objects_changed, __ATOMIC_SEQ_CST) &&
           0 == pthread_mutex_trylock(&hooks_lock)) {
        __atomic_store_n(&objects_changed, false, __ATOMIC_SEQ_CST);
        check_locked();
        pthread_mutex_unlock(&hooks_lock);
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
    pthread_mutex_lock(&hooks_lock);
    int rc = setup_locked();
    check_locked();
    /* The check may have found the events lost (it said how): no callback then. */
    if (OPAL_SUCCESS == rc && 0 == __atomic_load_n(&support_level, __ATOMIC_RELAXED)) {
        rc = OPAL_ERR_NOT_SUPPORTED;
    }
    if (OPAL_SUCCESS == rc) {
        rc = add_callback_locked(func, cbdata);
    }
    hooks_unlock();
    return rc;
}

int opal_mem_hooks_unregister_release(opal_mem_hooks_callback_fn_t *func)
{
    pthread_mutex_lock(&hooks_lock);
    const int slot = opal_mem_hooks_registry_clear(func);
    hooks_unlock();
    if (slot < 0) {
        return OPAL_ERR_NOT_FOUND;
    }
    /* Unlocked: a callback that registers or unregisters takes the lock. */
    opal_mem_hooks_registry_drain(slot);
    return OPAL_SUCCESS;
}

int opal_mem_hooks_support_level(void)
{
    pthread_mutex_lock(&hooks_lock);
    if (NULL == active) {
        (void) setup_locked();
    }
    check_locked();
    hooks_unlock();
    return __atomic_load_n(&support_level, __ATOMIC_ACQUIRE);
}

int opal_mem_hooks_source_get(const opal_mem_source_t *source, const char **reason)
{
    int rc = OPAL_SUCCESS;
    pthread_mutex_lock(&hooks_lock);
    if (0 == range_users) {
        rc = source->start(reason);
    } else if (source != range_source) {
        *reason = "another range source is started already";
        rc = OPAL_ERR_NOT_AVAILABLE;
    } else if (0 == source->support_level()) {
        /* Started in a parent: this forked child has the source's state, not its events. */
        *reason = "no events in a child forked after the source started";
        rc = OPAL_ERR_NOT_AVAILABLE;
    }
    if (OPAL_SUCCESS == rc) {
        range_source = source;
        range_users++;
    }
    hooks_unlock();
    return rc;
}

void opal_mem_hooks_source_put(const opal_mem_source_t *source)
{
    pthread_mutex_lock(&hooks_lock);
    if (source == range_source && 0 == --range_users) {
        source->stop();
        range_source = NULL;
    }
    hooks_unlock();
}

/*
 * fork: a child has only the forking thread, so it must not inherit the
 * lock held by another one (registering, say): every later call of the
 * API in the child would wait for it.  Held across the fork, re-created in
 * the child.  Registered before any rcache's, so taken after its lock
 * (prepare handlers run in reverse order), as the rcache takes them.  The
 * patcher base's code-write lock comes after ours, as in a patch made
 * under ours; its own handler, registered after ours, would take it first.
 */
static void hooks_atfork_prepare(void)
{
    pthread_mutex_lock(&hooks_lock);
    mca_patcher_base_atfork_prepare();
}

static void hooks_atfork_parent(void)
{
    mca_patcher_base_atfork_parent();
    hooks_unlock(); /* a load in another thread meanwhile left its check to us (after_load) */
}

static void hooks_atfork_child(void)
{
    mca_patcher_base_atfork_child();
    pthread_mutex_init(&hooks_lock, NULL);
}

static void hooks_atfork(void)
{
    (void) pthread_atfork(hooks_atfork_prepare, hooks_atfork_parent, hooks_atfork_child);
}

int opal_mem_hooks_init(void)
{
    static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
    opal_mem_hooks_registry_init();
    pthread_once(&atfork_once, hooks_atfork);
    return opal_mem_hooks_ucx_feed_register();
}

void opal_mem_hooks_finalize(void)
{
    pthread_mutex_lock(&hooks_lock);
    if (NULL != active) {
        __atomic_store_n(&support_level, 0, __ATOMIC_RELEASE);
        opal_mem_hooks_ucx_feed_stop();
        mca_patcher_base_set_loader_callback(NULL);
        active->stop();
        active = NULL;
    }
    mca_patcher_base_fini();
    const int slots = opal_mem_hooks_registry_clear_all();
    pthread_mutex_unlock(&hooks_lock);
    /* Unlocked, as in unregister: a callback still running may take the lock. */
    for (int i = 0; i < slots; i++) {
        opal_mem_hooks_registry_drain(i);
    }
}
