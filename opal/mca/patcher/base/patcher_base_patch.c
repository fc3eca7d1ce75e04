/*
 * The module's list of applied patches and their undo; the loader watch
 * and its callback.
 */
#include "opal_config.h"

#include <stdlib.h>
#include <string.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/util/debug.h"

mca_patcher_base_patch_t *mca_patcher_base_patch_new(void)
{
    return calloc(1, sizeof(mca_patcher_base_patch_t));
}

void mca_patcher_base_patch_add(mca_patcher_base_module_t *module, mca_patcher_base_patch_t *patch)
{
    /* Every patch must be undoable, and say where it is and what it replaced. */
    OPAL_DEBUG_CHECK(NULL != patch->patch_restore && 0 != patch->patch_orig);
    OPAL_DEBUG_CHECK(patch->patch_data_size <= MCA_PATCHER_PATCH_MAX_BYTES);
    pthread_mutex_lock(&module->patch_list_mutex);
    opal_list_append(&module->patch_list, &patch->super);
    pthread_mutex_unlock(&module->patch_list_mutex);
}

/* Remove the patches filter accepts, newest first, undoing each (restore) or not (forget). */
static void remove_patches(mca_patcher_base_module_t *module,
                           bool (*filter)(mca_patcher_base_patch_t *, void *), void *arg, bool restore)
{
    pthread_mutex_lock(&module->patch_list_mutex);
    /* Newest first: a location patched twice gets its oldest bytes back last. */
    mca_patcher_base_patch_t *patch = (mca_patcher_base_patch_t *) opal_list_get_last(&module->patch_list);
    while (&patch->super != opal_list_get_end(&module->patch_list)) {
        mca_patcher_base_patch_t *prev = (mca_patcher_base_patch_t *) patch->super.opal_list_prev;
        if (NULL == filter || filter(patch, arg)) {
            /* Undone before it leaves the list: a fork meanwhile (see below) finds it listed. */
            mca_patcher_base_restore_fn_t undo = restore ? patch->patch_restore : patch->patch_forget;
            if (undo) {
                undo(patch);
            }
            opal_list_remove_item(&module->patch_list, &patch->super);
            free(patch);
        }
        patch = prev;
    }
    pthread_mutex_unlock(&module->patch_list_mutex);
}

void mca_patcher_base_restore_patches(mca_patcher_base_module_t *module,
                                      bool (*filter)(mca_patcher_base_patch_t *, void *), void *arg)
{
    remove_patches(module, filter, arg, true);
}

void mca_patcher_base_forget_patches(mca_patcher_base_module_t *module,
                                     bool (*filter)(mca_patcher_base_patch_t *, void *), void *arg)
{
    remove_patches(module, filter, arg, false);
}

/*
 * fork: the list's lock is made new in the child, not taken before the
 * fork: a walk holds it while its visitor runs, and a visitor may wait for
 * anything, the forking thread included.  A writer that changes code under
 * it waits inside it for the code-write lock, which the fork holds
 * (atfork_prepare), before it changes the list: the child finds the patch
 * it was about to undo still listed and applied.  Only the few stores of a
 * list operation in another thread at the very moment of the fork could
 * be seen half done, as with the loader's own lists.
 */
void mca_patcher_base_patch_list_atfork_child(void)
{
    mca_patcher_base_module_t *patcher = opal_patcher;
    if (NULL != patcher) {
        pthread_mutex_init(&patcher->patch_list_mutex, NULL);
    }
}

uintptr_t mca_patcher_base_chain_of(mca_patcher_base_module_t *module, uintptr_t func_addr)
{
    uintptr_t chain = 0;
    mca_patcher_base_patch_t *patch;
    pthread_mutex_lock(&module->patch_list_mutex);
    OPAL_LIST_FOREACH (patch, &module->patch_list, mca_patcher_base_patch_t) {
        if (patch->patch_func == func_addr) {
            chain = patch->patch_chain;
        }
    }
    pthread_mutex_unlock(&module->patch_list_mutex);
    return chain;
}

/* The patched place holds what the patch wrote (module's list lock held). */
static bool holds_its_bytes(const mca_patcher_base_patch_t *patch)
{
    return 0 == memcmp((const void *) patch->patch_orig, patch->patch_data, patch->patch_data_size);
}

bool mca_patcher_base_patch_intact(mca_patcher_base_module_t *module, uintptr_t func_addr)
{
    bool intact = true;
    mca_patcher_base_patch_t *patch;
    pthread_mutex_lock(&module->patch_list_mutex);
    OPAL_LIST_FOREACH (patch, &module->patch_list, mca_patcher_base_patch_t) {
        if (patch->patch_func == func_addr) {
            intact = holds_its_bytes(patch);
        }
    }
    pthread_mutex_unlock(&module->patch_list_mutex);
    return intact;
}

bool mca_patcher_base_patches_intact_in(mca_patcher_base_module_t *module, uintptr_t start,
                                        uintptr_t end,
                                        bool (*filter)(mca_patcher_base_patch_t *, void *),
                                        void *arg, int *count)
{
    bool intact = true;
    int n = 0;
    mca_patcher_base_patch_t *patch;
    pthread_mutex_lock(&module->patch_list_mutex);
    OPAL_LIST_FOREACH (patch, &module->patch_list, mca_patcher_base_patch_t) {
        if (patch->patch_orig >= start && patch->patch_orig < end && filter(patch, arg)) {
            n++;
            intact = intact && holds_its_bytes(patch);
        }
    }
    pthread_mutex_unlock(&module->patch_list_mutex);
    *count = n;
    return intact;
}

void mca_patcher_base_foreach_patch(mca_patcher_base_module_t *module,
                                    void (*fn)(const mca_patcher_base_patch_t *patch, bool intact,
                                               void *arg),
                                    void *arg)
{
    mca_patcher_base_patch_t *patch;
    pthread_mutex_lock(&module->patch_list_mutex);
    OPAL_LIST_FOREACH (patch, &module->patch_list, mca_patcher_base_patch_t) {
        fn(patch, holds_its_bytes(patch), arg);
    }
    pthread_mutex_unlock(&module->patch_list_mutex);
}

void mca_patcher_base_name_patch(mca_patcher_base_module_t *module, uintptr_t func_addr, const char *symbol)
{
    mca_patcher_base_patch_t *patch;
    pthread_mutex_lock(&module->patch_list_mutex);
    OPAL_LIST_FOREACH (patch, &module->patch_list, mca_patcher_base_patch_t) {
        if (patch->patch_func == func_addr && NULL == patch->patch_symbol) {
            patch->patch_symbol = symbol;
        }
    }
    pthread_mutex_unlock(&module->patch_list_mutex);
}

static void (*loader_callback)(void);

void mca_patcher_base_set_loader_callback(void (*callback)(void))
{
    __atomic_store_n(&loader_callback, callback, __ATOMIC_RELEASE);
}

int mca_patcher_base_watch_loader(struct mca_patcher_base_loader_t *unwatched)
{
    mca_patcher_base_module_t *module = opal_patcher;
    if (NULL == module || NULL == module->patch_watch_loader) {
        return OPAL_ERR_NOT_SUPPORTED;
    }
    return module->patch_watch_loader(unwatched);
}

bool mca_patcher_base_loader_trylock(void)
{
    mca_patcher_base_module_t *module = opal_patcher;
    return NULL == module || NULL == module->patch_loader_trylock || module->patch_loader_trylock();
}

void mca_patcher_base_loader_unlock(void)
{
    mca_patcher_base_module_t *module = opal_patcher;
    if (NULL != module && NULL != module->patch_loader_unlock) {
        module->patch_loader_unlock();
    }
}

static void (*unload_callback)(void);

void mca_patcher_base_set_unload_callback(void (*callback)(void))
{
    __atomic_store_n(&unload_callback, callback, __ATOMIC_RELEASE);
}

void mca_patcher_base_loader_unloaded(void)
{
    void (*callback)(void) = __atomic_load_n(&unload_callback, __ATOMIC_ACQUIRE);
    if (NULL != callback) {
        callback();
    }
}

void mca_patcher_base_loader_changed(void)
{
    void (*callback)(void) = __atomic_load_n(&loader_callback, __ATOMIC_ACQUIRE);
    if (NULL != callback) {
        callback();
    }
}
