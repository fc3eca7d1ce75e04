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
#include <sched.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/memoryhooks/memory_internal.h"
#include "opal/util/output.h"

#define OPAL_MEM_HOOKS_MAX_CALLBACKS 64

typedef struct opal_mem_hooks_slot_t {
    opal_mem_hooks_callback_fn_t *func;
    void *cbdata;
    int users;  /* threads between "entered" and "left" for this slot */
} opal_mem_hooks_slot_t;

static opal_mem_hooks_slot_t slots[OPAL_MEM_HOOKS_MAX_CALLBACKS];
static int slots_used;            /* high-water mark: readers stop there */
static int support_level;         /* published after every patch succeeded */
static bool hooks_installed;
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;

uintptr_t opal_mem_hooks_page_size = 4096;

/* The slots this thread is calling right now (bit i: slot i), so that a
 * callback (or a signal handler) may unregister itself without waiting on
 * itself. */
static __thread uint64_t calling_slots __attribute__((tls_model("initial-exec")));

void opal_mem_hooks_dispatch(uintptr_t start, uintptr_t end, bool from_alloc)
{
    const uintptr_t mask = opal_mem_hooks_page_size - 1;
    start &= ~mask;
    end = (end + mask) & ~mask;
    if (end <= start) {
        return;
    }
    int n = __atomic_load_n(&slots_used, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++) {
        opal_mem_hooks_slot_t *slot = &slots[i];
        if (NULL == __atomic_load_n(&slot->func, __ATOMIC_RELAXED)) {
            continue;
        }
        /* Dekker-style pairing with unregister: announce ourselves, THEN
         * look at func (both seq_cst).  Either unregister sees our count, or
         * we see its NULL. */
        __atomic_add_fetch(&slot->users, 1, __ATOMIC_SEQ_CST);
        opal_mem_hooks_callback_fn_t *func = __atomic_load_n(&slot->func, __ATOMIC_SEQ_CST);
        if (func) {
            void *cbdata = __atomic_load_n(&slot->cbdata, __ATOMIC_RELAXED);
            uint64_t saved = calling_slots;
            calling_slots = saved | (UINT64_C(1) << i);
            func((void *) start, end - start, cbdata, from_alloc);
            calling_slots = saved;
        }
        __atomic_sub_fetch(&slot->users, 1, __ATOMIC_SEQ_CST);
    }
}

void opal_mem_hooks_release_hook(void *buf, size_t length, bool from_alloc)
{
    if (length > 0) {
        opal_mem_hooks_dispatch((uintptr_t) buf, (uintptr_t) buf + length, from_alloc);
    }
}

/* The delayed setup: select a patcher and install every intercept. */
static int setup_locked(void)
{
    if (hooks_installed) {
        return support_level ? OPAL_SUCCESS : OPAL_ERR_NOT_SUPPORTED;
    }
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

int opal_mem_hooks_register_release(opal_mem_hooks_callback_fn_t *func, void *cbdata)
{
    if (NULL == func) {
        opal_output("opal_mem_hooks_register_release: the callback is NULL");
        return OPAL_ERR_BAD_PARAM;
    }
    pthread_mutex_lock(&registry_lock);
    int rc = setup_locked();
    int free_slot = -1;
    for (int i = 0; OPAL_SUCCESS == rc && i < OPAL_MEM_HOOKS_MAX_CALLBACKS; i++) {
        if (slots[i].func == func) {
            opal_output("opal_mem_hooks_register_release: callback %p is already registered",
                        (void *) (uintptr_t) func);
            rc = OPAL_ERR_BAD_PARAM;
        } else if (NULL == slots[i].func && free_slot < 0 && 0 == slots[i].users) {
            free_slot = i;
        }
    }
    if (OPAL_SUCCESS == rc && free_slot < 0) {
        opal_output("opal_mem_hooks_register_release: more than %d callbacks", OPAL_MEM_HOOKS_MAX_CALLBACKS);
        rc = OPAL_ERR_OUT_OF_RESOURCE;
    }
    if (OPAL_SUCCESS == rc) {
        /* cbdata first: a reader that sees func must see its cbdata. */
        __atomic_store_n(&slots[free_slot].cbdata, cbdata, __ATOMIC_RELAXED);
        __atomic_store_n(&slots[free_slot].func, func, __ATOMIC_RELEASE);
        if (free_slot >= slots_used) {
            __atomic_store_n(&slots_used, free_slot + 1, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&registry_lock);
    return rc;
}

int opal_mem_hooks_unregister_release(opal_mem_hooks_callback_fn_t *func)
{
    pthread_mutex_lock(&registry_lock);
    int found = -1;
    for (int i = 0; i < slots_used; i++) {
        if (NULL != func && slots[i].func == func) {
            found = i;
            __atomic_store_n(&slots[i].func, NULL, __ATOMIC_SEQ_CST);
        }
    }
    pthread_mutex_unlock(&registry_lock);
    if (found < 0) {
        return OPAL_ERR_NOT_FOUND;
    }
    /* Wait for callers still inside it, but not for ourselves. */
    int self = (calling_slots >> found) & 1;
    while (__atomic_load_n(&slots[found].users, __ATOMIC_SEQ_CST) > self) {
        sched_yield();
    }
    return OPAL_SUCCESS;
}

int opal_mem_hooks_support_level(void)
{
    pthread_mutex_lock(&registry_lock);
    if (!hooks_installed) {
        (void) setup_locked();
    }
    pthread_mutex_unlock(&registry_lock);
    return __atomic_load_n(&support_level, __ATOMIC_ACQUIRE);
}

int opal_mem_hooks_init(void)
{
    long page = sysconf(_SC_PAGESIZE);
    opal_mem_hooks_page_size = page > 0 ? (uintptr_t) page : 4096;
    return OPAL_SUCCESS;
}

void opal_mem_hooks_finalize(void)
{
    pthread_mutex_lock(&registry_lock);
    if (hooks_installed) {
        __atomic_store_n(&support_level, 0, __ATOMIC_RELEASE);
        opal_mem_hooks_uninstall_intercepts();
        hooks_installed = false;
    }
    mca_patcher_base_fini();
    for (int i = 0; i < slots_used; i++) {
        __atomic_store_n(&slots[i].func, NULL, __ATOMIC_SEQ_CST);
    }
    for (int i = 0; i < slots_used; i++) {
        while (__atomic_load_n(&slots[i].users, __ATOMIC_SEQ_CST) > (int) ((calling_slots >> i) & 1)) {
            sched_yield();
        }
    }
    slots_used = 0;
    pthread_mutex_unlock(&registry_lock);
}
