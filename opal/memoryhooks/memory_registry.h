/*
 * The bottom floor of the memory hooks: the release-callback registry.
 * It calls nothing of the memory hooks above it, takes no lock and prints
 * nothing; every event source hands its releases to it, and the API on top
 * (memory_hooks.c) adds and removes the callbacks under its own lock.
 *
 * Readers (the hooks) walk a fixed array of slots without locks.  Each slot
 * counts the threads calling its callback; removal clears the slot and
 * then waits for that count to drain, so that when it returns the callback
 * is not running anywhere and will not run again.
 */
#ifndef OPAL_MEMORYHOOKS_MEMORY_REGISTRY_H
#define OPAL_MEMORYHOOKS_MEMORY_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "opal/memoryhooks/memory.h"
#include "opal/util/readers.h"

#define OPAL_MEM_HOOKS_HIDDEN        __attribute__((visibility("hidden")))
#define OPAL_MEM_HOOKS_MAX_CALLBACKS 64

/* The page size, read once at init (no sysconf on the hook path). */
extern uintptr_t opal_mem_hooks_page_size OPAL_MEM_HOOKS_HIDDEN;

typedef struct opal_mem_hooks_slot_t {
    opal_mem_hooks_callback_fn_t *func;
    void *cbdata;
    int users; /* threads between "entered" and "left" for this slot */
} opal_mem_hooks_slot_t;

extern opal_mem_hooks_slot_t
    opal_mem_hooks_slots[OPAL_MEM_HOOKS_MAX_CALLBACKS] OPAL_MEM_HOOKS_HIDDEN;
extern int opal_mem_hooks_slots_used
    OPAL_MEM_HOOKS_HIDDEN; /* high-water mark: readers stop there */

/* How deep this thread is inside each slot's callback, so that a callback
 * (or a signal handler) may unregister itself without waiting on itself.
 * initial-exec: no allocation on first touch inside a hook. */
extern __thread unsigned char opal_mem_hooks_calling[OPAL_MEM_HOOKS_MAX_CALLBACKS]
    __attribute__((tls_model("initial-exec"))) OPAL_MEM_HOOKS_HIDDEN;

/* Read the page size, and after a fork keep only the forking thread's
 * counts in the child (opal_init_util). */
void opal_mem_hooks_registry_init(void) OPAL_MEM_HOOKS_HIDDEN;

/*
 * The writers, serialized by their caller (the hooks' lock).  add puts
 * func in the lowest free slot: callbacks are called in slot order, which
 * is the order of registration as long as none was removed.  It fails with
 * OPAL_ERR_BAD_PARAM when func is registered already, and with
 * OPAL_ERR_OUT_OF_RESOURCE when every slot is taken (a slot whose removed
 * callback is still running is not free yet).
 */
int opal_mem_hooks_registry_add(opal_mem_hooks_callback_fn_t *func,
                                void *cbdata) OPAL_MEM_HOOKS_HIDDEN;
/*
 * Take func out: no thread enters it any more.  Returns its slot for
 * opal_mem_hooks_registry_drain(), or -1 when func is not registered.
 */
int opal_mem_hooks_registry_clear(opal_mem_hooks_callback_fn_t *func) OPAL_MEM_HOOKS_HIDDEN;
/*
 * Wait until no other thread is inside the callback cleared from slot
 * (this thread may be: a callback may remove itself).  Needs no lock, and
 * should hold none that a callback could wait for.
 */
void opal_mem_hooks_registry_drain(int slot) OPAL_MEM_HOOKS_HIDDEN;
/* Clear, then drain. */
void opal_mem_hooks_registry_remove(opal_mem_hooks_callback_fn_t *func) OPAL_MEM_HOOKS_HIDDEN;
/*
 * Take every callback out (the last finalize): no thread enters one any
 * more.  Returns the number of slots to drain, 0 .. n-1.
 */
int opal_mem_hooks_registry_clear_all(void) OPAL_MEM_HOOKS_HIDDEN;

/*
 * Deliver [start, start+len) to every registered callback: start page
 * aligned, len > 0 (rounded up to pages here).  Allocation free, lock free,
 * signal safe.
 */
void opal_mem_hooks_dispatch(uintptr_t start, size_t len, bool from_alloc) OPAL_MEM_HOOKS_HIDDEN;

/* Call slot i's callback, if it is (still) registered. */
static inline void opal_mem_hooks_call_slot(int i, void *start, size_t len, bool from_alloc)
{
    opal_mem_hooks_slot_t *slot = &opal_mem_hooks_slots[i];
    /* A reader of func, drained by removal (opal/util/readers.h). */
    opal_readers_enter(&slot->users);
    opal_mem_hooks_callback_fn_t *func = __atomic_load_n(&slot->func, __ATOMIC_SEQ_CST);
    if (__builtin_expect(NULL != func, 1)) {
        opal_mem_hooks_calling[i]++;
        func(start, len, __atomic_load_n(&slot->cbdata, __ATOMIC_RELAXED), from_alloc);
        opal_mem_hooks_calling[i]--;
    }
    opal_readers_leave(&slot->users);
}

/*
 * opal_mem_hooks_dispatch(start, len, true), with the one-callback case
 * inlined into the intercept: the hottest path (munmap, madvise) then makes
 * a single call, to the callback itself.
 */
static inline void opal_mem_hooks_report(uintptr_t start, size_t len)
{
    /* Rounded before the acquire load: the intercept's own load of the page size serves. */
    const uintptr_t mask = opal_mem_hooks_page_size - 1;
    const size_t pages_len = (len + mask) & ~mask;
    if (__builtin_expect(1 != __atomic_load_n(&opal_mem_hooks_slots_used, __ATOMIC_ACQUIRE), 0)) {
        opal_mem_hooks_dispatch(start, len, true);
        return;
    }
    opal_mem_hooks_call_slot(0, (void *) start, pages_len, true);
}

#endif
