/*
 * The top floor of the memory hooks (memory_hooks.c), for the rest of the
 * library: what opal_init_util and the registration cache call besides
 * the public API (memory.h).
 */
#ifndef OPAL_MEMORYHOOKS_MEMORY_HOOKS_H
#define OPAL_MEMORYHOOKS_MEMORY_HOOKS_H

#include "opal/memoryhooks/memory.h"
#include "opal/memoryhooks/memory_source.h"

/* Set up the registry (opal_init_util); tear everything down (last finalize). */
int opal_mem_hooks_init(void);
void opal_mem_hooks_finalize(void);

/*
 * A source that watches ranges (subscribe, unsubscribe, drain: the
 * userfaultfd source), started beside the one that delivers our events:
 * get starts it at the first reference and put stops it at the last.  One
 * such source at a time.  get refuses with an OPAL error and *reason (static text) when
 * the source cannot start, or, started, delivers no events (in a child
 * forked after it started).
 */
int opal_mem_hooks_source_get(const opal_mem_source_t *source, const char **reason);
void opal_mem_hooks_source_put(const opal_mem_source_t *source);

#endif
