/*
 * The middle floor of the memory hooks: an event source.  Each source
 * learns of releases its own way and hands every one to the registry below
 * it (opal_mem_hooks_dispatch); the API on top (memory_hooks.c) picks the
 * sources, starts and stops them and holds the lock.  A source calls
 * nothing above it.
 *
 * The sources: our patches (memory_patch.h: the intercepts, the namespace
 * copies, followed through the patcher's loader watch), UCX's libucm
 * events (memory_ucx.h), and the kernel's userfaultfd (memory_uffd.h),
 * which sees only the ranges subscribed to it: the registration cache
 * starts it beside the one that delivers our events
 * (opal_mem_hooks_source_get) and subscribes what it caches.  One file, or one small folder, per source.
 */
#ifndef OPAL_MEMORYHOOKS_MEMORY_SOURCE_H
#define OPAL_MEMORYHOOKS_MEMORY_SOURCE_H

#include <stdbool.h>
#include <stddef.h>

typedef struct opal_mem_source_t {
    const char *name;
    /*
     * Begin delivering events (called once, with the hooks' lock held).
     * On refusal return an OPAL error and point *reason at static text
     * that says why (shown by opal_patcher_info); nothing is left behind.
     */
    int (*start)(const char **reason);
    /*
     * What the started source catches, as OPAL_MEMORY_*_SUPPORT bits:
     * truthful, for the calls it covers in every namespace it covers.
     */
    int (*support_level)(void);
    /*
     * Repair after the process changed under the source (the loader added
     * or removed objects, another hooker wrote over a patch): called at
     * each registration and after each load (lock held).  An error means
     * events are lost; the caller reports it.  NULL: nothing to do, and
     * the loader is not watched for it.
     */
    int (*check)(void);
    /* Stop: when it returns the source delivers no more events. */
    void (*stop)(void);

    /*
     * Sources that watch ranges rather than calls (userfaultfd); NULL for
     * the others, which see every release in the process.  subscribe asks
     * for events on [addr, addr+len) (page aligned) and may refuse with an
     * OPAL error; unsubscribe ends them before a release the caller is
     * about to report itself, so that release costs no kernel round trip.
     */
    int (*subscribe)(void *addr, size_t len);
    void (*unsubscribe)(void *addr, size_t len);
    /*
     * Deliver now the events the source holds but has not dispatched yet
     * (a lookup calls it first).  With strict, also those the kernel has
     * queued and not yet handed over.
     */
    void (*drain)(bool strict);
} opal_mem_source_t;

#endif
