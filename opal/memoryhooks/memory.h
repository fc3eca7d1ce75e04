/*
 * Memory release hooks: learn, before it happens, that pages of the
 * address space are about to be released or replaced.
 *
 * The first successful opal_mem_hooks_register_release() performs the
 * delayed setup: the patcher framework selects a component and the
 * intercepts are installed.  Nothing is patched before that.
 *
 * Inside, three floors; each file calls only the floors below its own:
 *   top     memory_hooks.c     this API, the choice of the event source, the
 *                              lock, the support level, the after-load step
 *   middle  the event sources behind one table (memory_source.h): our
 *           patches (memory_patch.h), UCX's events (memory_ucx.c), the
 *           kernel's userfaultfd (memory_uffd.c); and the UCX feed
 *           (memory_ucx_feed.c), a registered callback like any other
 *   bottom  memory_registry.c  the callbacks, and the dispatch of each event
 */
#ifndef OPAL_MEMORYHOOKS_MEMORY_H
#define OPAL_MEMORYHOOKS_MEMORY_H

#include <stdbool.h>
#include <stddef.h>

#define OPAL_MEMORY_FREE_SUPPORT   0x0001
#define OPAL_MEMORY_MUNMAP_SUPPORT 0x0002
#define OPAL_MEMORY_CHUNK_SUPPORT  0x0004

/*
 * A release callback.  [buf, buf+length) covers the released pages (page
 * aligned).  from_alloc is true whenever the event may come from inside the
 * allocator: then the callback must neither allocate nor free.
 *
 * glibc declares munmap, madvise … "leaf": they never call back into the
 * caller's file.  The hooks make that untrue.  So state that a callback
 * writes, and that its own file reads around such a call, must be volatile
 * or atomic; otherwise the compiler may keep a stale copy in a register.
 */
typedef void(opal_mem_hooks_callback_fn_t)(void *buf, size_t length, void *cbdata,
                                           bool from_alloc);

int opal_mem_hooks_register_release(opal_mem_hooks_callback_fn_t *func, void *cbdata);
int opal_mem_hooks_unregister_release(opal_mem_hooks_callback_fn_t *func);
int opal_mem_hooks_support_level(void);
void opal_mem_hooks_release_hook(void *buf, size_t length, bool from_alloc);

#endif
