/*
 * Our release events as the source of UCX's: when our patches deliver the
 * events and UCX's libucm is in the process with its own mmap hooks off,
 * we declare UCM_EVENT_VM_UNMAPPED external to libucm and hand it each of
 * our events (memory_ucx_feed.c), from a callback in the registry like
 * any other.  The API on top decides when to look (memory_hooks.c).
 */
#ifndef OPAL_MEMORYHOOKS_MEMORY_UCX_FEED_H
#define OPAL_MEMORYHOOKS_MEMORY_UCX_FEED_H

#include <stdbool.h>

#include "opal/constants.h"

#if OPAL_HAVE_UCX
/* The MCA parameter opal_mem_hooks_ucx_feed (opal_init_util). */
int opal_mem_hooks_ucx_feed_register(void);

/*
 * Start feeding if libucm is loaded now, its mmap hooks are off and the
 * parameter allows it.  Idempotent and cheap once decided; never loads
 * libucm.  Call with the hooks' lock held (memory_hooks.c), only while
 * our intercepts, installed by a patcher, deliver events.
 */
void opal_mem_hooks_ucx_feed_check(void);

/* Stop feeding (hooks' lock held): when it returns, no call into libucm
 * from our hooks is in flight, and the event is no longer external. */
void opal_mem_hooks_ucx_feed_stop(void);

/* Whether UCX's UCM_EVENT_VM_UNMAPPED handlers are fed from our hooks now. */
bool opal_mem_hooks_ucx_fed(void);
#else
/* Built without UCX: nothing to feed. */
static inline int opal_mem_hooks_ucx_feed_register(void)
{
    return OPAL_SUCCESS;
}
static inline void opal_mem_hooks_ucx_feed_check(void)
{
}
static inline void opal_mem_hooks_ucx_feed_stop(void)
{
}
static inline bool opal_mem_hooks_ucx_fed(void)
{
    return false;
}
#endif

#endif
