/*
 * The release-callback registry (memory_registry.h): the slots, the
 * dispatch to them, and the writers that the hooks' API serializes.
 */
#include "opal_config.h"

#include <pthread.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/memoryhooks/memory_registry.h"
#include "opal/util/debug.h"
#include "opal/util/readers.h"

opal_mem_hooks_slot_t opal_mem_hooks_slots[OPAL_MEM_HOOKS_MAX_CALLBACKS];
int opal_mem_hooks_slots_used;
__thread unsigned char opal_mem_hooks_calling[OPAL_MEM_HOOKS_MAX_CALLBACKS]
    __attribute__((tls_model("initial-exec")));

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

/*
 * The child of a fork has one thread, the one that forked: the counts of
 * the parent's other threads inside a callback would never drain there
 * (its unregister and last finalize would wait forever).  Only this
 * thread's own stay.
 */
static void registry_atfork_child(void)
{
    for (int i = 0; i < OPAL_MEM_HOOKS_MAX_CALLBACKS; i++) {
        __atomic_store_n(&opal_mem_hooks_slots[i].users, opal_mem_hooks_calling[i], __ATOMIC_RELAXED);
    }
}

static void registry_atfork(void)
{
    (void) pthread_atfork(NULL, NULL, registry_atfork_child);
}

void opal_mem_hooks_registry_init(void)
{
    static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
    long page = sysconf(_SC_PAGESIZE);
    opal_mem_hooks_page_size = page > 0 ? (uintptr_t) page : 4096;
    pthread_once(&atfork_once, registry_atfork);
}

int opal_mem_hooks_registry_add(opal_mem_hooks_callback_fn_t *func, void *cbdata)
{
    int free_slot = -1;
    for (int i = 0; i < OPAL_MEM_HOOKS_MAX_CALLBACKS; i++) {
        if (opal_mem_hooks_slots[i].func == func) {
            return OPAL_ERR_BAD_PARAM;
        }
        if (NULL == opal_mem_hooks_slots[i].func && free_slot < 0 &&
            0 == __atomic_load_n(&opal_mem_hooks_slots[i].users, __ATOMIC_SEQ_CST)) {
            free_slot = i;
        }
    }
    if (free_slot < 0) {
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    /* cbdata first: a reader that sees func must see its cbdata. */
    __atomic_store_n(&opal_mem_hooks_slots[free_slot].cbdata, cbdata, __ATOMIC_RELAXED);
    __atomic_store_n(&opal_mem_hooks_slots[free_slot].func, func, __ATOMIC_RELEASE);
    if (free_slot >= opal_mem_hooks_slots_used) {
        __atomic_store_n(&opal_mem_hooks_slots_used, free_slot + 1, __ATOMIC_RELEASE);
    }
    return OPAL_SUCCESS;
}

int opal_mem_hooks_registry_clear(opal_mem_hooks_callback_fn_t *func)
{
    int found = -1;
    for (int i = 0; NULL != func && i < opal_mem_hooks_slots_used; i++) {
        if (opal_mem_hooks_slots[i].func == func) {
            found = i;
            __atomic_store_n(&opal_mem_hooks_slots[i].func, NULL, __ATOMIC_SEQ_CST);
        }
    }
    return found;
}

void opal_mem_hooks_registry_drain(int slot)
{
    opal_readers_drain(&opal_mem_hooks_slots[slot].users, opal_mem_hooks_calling[slot]);
}

void opal_mem_hooks_registry_remove(opal_mem_hooks_callback_fn_t *func)
{
    const int slot = opal_mem_hooks_registry_clear(func);
    if (slot >= 0) {
        opal_mem_hooks_registry_drain(slot);
    }
}

int opal_mem_hooks_registry_clear_all(void)
{
    const int used = opal_mem_hooks_slots_used;
    for (int i = 0; i < used; i++) {
        __atomic_store_n(&opal_mem_hooks_slots[i].func, NULL, __ATOMIC_SEQ_CST);
    }
    /* A reader that loaded the old count finds its slots empty. */
    __atomic_store_n(&opal_mem_hooks_slots_used, 0, __ATOMIC_RELEASE);
    return used;
}
