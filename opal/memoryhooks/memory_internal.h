/*
 * Inside the memory hooks: the registry (memory_hooks.c) and the intercepts
 * (memory_intercepts.c, memory_alloc_intercepts.c) that feed it.
 */
#ifndef OPAL_MEMORYHOOKS_MEMORY_INTERNAL_H
#define OPAL_MEMORYHOOKS_MEMORY_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "opal/memoryhooks/memory.h"
#include "opal/util/readers.h"

/* Set up the registry (opal_init_util); tear everything down (last finalize). */
int opal_mem_hooks_init(void);
void opal_mem_hooks_finalize(void);

#define OPAL_MEM_HOOKS_HIDDEN __attribute__((visibility("hidden")))
#define OPAL_MEM_HOOKS_MAX_CALLBACKS 64

/* The page size, read once at init (no sysconf on the hook path). */
extern uintptr_t opal_mem_hooks_page_size OPAL_MEM_HOOKS_HIDDEN;

/*
 * The callback registry.  Readers (the hooks) walk the slots without locks.
 * Each slot counts the threads calling its callback; unregister clears the
 * slot and then waits for that count to drain, so that when it returns the
 * callback is not running anywhere and will not run again.
 */
typedef struct opal_mem_hooks_slot_t {
    opal_mem_hooks_callback_fn_t *func;
    void *cbdata;
    int users;  /* threads between "entered" and "left" for this slot */
} opal_mem_hooks_slot_t;

extern opal_mem_hooks_slot_t opal_mem_hooks_slots[OPAL_MEM_HOOKS_MAX_CALLBACKS] OPAL_MEM_HOOKS_HIDDEN;
extern int opal_mem_hooks_slots_used OPAL_MEM_HOOKS_HIDDEN; /* high-water mark: readers stop there */

/* How deep this thread is inside each slot's callback, so that a callback
 * (or a signal handler) may unregister itself without waiting on itself.
 * initial-exec: no allocation on first touch inside a hook. */
extern __thread unsigned char opal_mem_hooks_calling[OPAL_MEM_HOOKS_MAX_CALLBACKS]
    __attribute__((tls_model("initial-exec"))) OPAL_MEM_HOOKS_HIDDEN;

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
    /* A reader of func, drained by unregister (opal/util/readers.h). */
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

/*
 * The registry for internal callbacks (the UCX feed), with the registry
 * lock held, i.e. from code that memory_hooks.c runs under it.  remove
 * returns once no thread is inside func (except this one).
 */
int opal_mem_hooks_add_callback_locked(opal_mem_hooks_callback_fn_t *func, void *cbdata) OPAL_MEM_HOOKS_HIDDEN;
void opal_mem_hooks_remove_callback_locked(opal_mem_hooks_callback_fn_t *func) OPAL_MEM_HOOKS_HIDDEN;

/* Install the intercepts with the selected patcher; all or nothing. */
int opal_mem_hooks_install_intercepts(void);
/*
 * Put back jumps that another hooker wrote over since setup, chaining to its
 * code (cold).  An error means events are lost: the caller reports it.
 */
int opal_mem_hooks_check_intercepts(void);
/* Restore every patch.  Chain targets stay valid for threads still inside. */
void opal_mem_hooks_uninstall_intercepts(void);

/*
 * The copies of libc that dlmopen brings into other namespaces, for an
 * address-based patcher (memory_dl.c): each is patched with entry points
 * of its own (a variant), FIRST_COPY_VARIANT + its index.  glibc makes 15
 * namespaces besides the base one.
 */
#define OPAL_MEM_HOOKS_FIRST_COPY_VARIANT 2
#define OPAL_MEM_HOOKS_MAX_COPIES 15
/*
 * Patch one copy, its functions found by lookup (all or nothing): the
 * functions themselves by address, or for a GOT patcher the calls that
 * reach them and its allocator (memory_alloc_intercepts.c), each sent to
 * the variant's entry, which chains to the copy's own function.
 */
int opal_mem_hooks_patch_copy(int variant, uintptr_t (*lookup)(const char *name, void *arg), void *arg);
/* Whether every jump written into the copy is still there (the copy is mapped). */
bool opal_mem_hooks_copy_intact(int variant);
/* Undo the copy's patches, or with unloaded, drop them without writing. */
void opal_mem_hooks_unpatch_copy(int variant, bool unloaded);
/* The GOT patcher's allocator part of the two above. */
int opal_mem_hooks_patch_alloc_copy(int variant, uintptr_t (*lookup)(const char *name, void *arg), void *arg);
void opal_mem_hooks_unpatch_alloc_copy(int variant, bool unloaded);

/*
 * Watch dlopen, dlmopen and dlclose (dynamic process): after each, our
 * jumps are checked and the namespace copies of libc patched or forgotten.
 * An address-based patcher's watchers are ours; a GOT patcher watches the
 * loader itself and tells us.  Failing to watch is not fatal (said once).
 */
void opal_mem_hooks_install_dl_watch(void);
/* Bring the patched copies in line with the loaded ones (registry lock held). */
void opal_mem_hooks_sync_copies(void);
/* Forget every copy (before the restore of all patches; registry lock held). */
void opal_mem_hooks_forget_copies(void);
/* The loader added or removed objects: the work above, now or by the lock's holder. */
void opal_mem_hooks_objects_changed(void);

/* The allocator entry points, for mechanisms blind to libc-internal calls.
 * inspect looks at the allocator (with dlopen/dlsym) before any patch. */
void opal_mem_hooks_alloc_inspect(void);
int opal_mem_hooks_install_alloc_intercepts(void);
void opal_mem_hooks_uninstall_alloc_intercepts(void);
/* What installing them changed in the allocator's behaviour, or NULL. */
const char *opal_mem_hooks_alloc_tradeoff(void);

#endif
