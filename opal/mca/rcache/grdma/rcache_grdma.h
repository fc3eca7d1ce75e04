/*
 * grdma: a registration cache keyed by a page index of the valid
 * registrations, evicting the cached ones with a CLOCK hand that walks the
 * slabs they are carved from (no list in eviction order).
 *
 * Each registration has one atomic state word, reg_state: ref_count and
 * flags.  A cache hit takes no lock: it finds candidates in the page index
 * (lock-free readers, see rcache_base_pgindex.h) and takes a reference
 * with one compare-and-swap that succeeds only while the registration is
 * INDEXED and neither INVALID nor REGISTERING, setting RECENT on the way
 * (the CLOCK's "used" bit: a hit moves nothing).  Dropping a reference is
 * one compare-and-swap too, unless it is the last one and the registration
 * must go (invalid, bypass, leave_pinned off): that takes the lock.
 * Invalidation sets INVALID with one atomic operation that also tells
 * whether a reference is held, so a hit and an invalidation never both win.
 *
 * Registrations are type stable: once allocated by a module, their memory
 * goes to the module's spare list when released and is freed only at
 * destroy, so a lock-free reader that raced with a release reads a
 * registration (perhaps recycled for another range, which it checks after
 * taking its reference), never freed memory.
 *
 * Where a registration is (changed under the module lock):
 *   valid      INDEXED and, unless PERSIST, EVICTABLE (the CLOCK may take it)
 *   invalid    out of the index; while in use on the in_use list; once
 *              unused, deregistered: at once when a call into the module
 *              invalidated it, at the next call when a release event did
 *              (pushed on the deferred stack)
 *   bypass     never indexed; on the in_use list until released
 * The lock is never held across register_mem, deregister_mem, malloc or
 * free, so a release hook that fires inside the allocator may take it
 * without deadlock.  A release event that overlaps no registration takes
 * no lock (mca_rcache_base_pgindex_might_overlap).
 */
#ifndef OPAL_MCA_RCACHE_GRDMA_RCACHE_GRDMA_H
#define OPAL_MCA_RCACHE_GRDMA_RCACHE_GRDMA_H

#include <pthread.h>

#include "opal/mca/rcache/base/rcache_base_pgindex.h"
#include "opal/mca/rcache/rcache.h"

/* Internal registration flags (above the public ones). */
enum {
    MCA_RCACHE_GRDMA_REGISTERING = 0x0100, /* register_mem running: not a hit yet */
    MCA_RCACHE_GRDMA_INDEXED = 0x0200,
    MCA_RCACHE_GRDMA_EVICTABLE = 0x0400,   /* valid, not PERSIST: the CLOCK may take it */
    MCA_RCACHE_GRDMA_ON_IN_USE = 0x0800,
    MCA_RCACHE_GRDMA_RECENT = 0x1000,      /* hit since eviction last looked */
};

typedef struct mca_rcache_grdma_module_t {
    mca_rcache_base_module_t super;
    mca_rcache_base_resources_t resources;
    void *user_data;
    bool leave_pinned;
    size_t max_bytes, max_entries; /* 0: no limit */
    bool limited;                  /* either is set: a dropped reference checks them */
    pthread_mutex_t lock;
    mca_rcache_base_pgindex_t index; /* grown outside the lock */
    void *clock_slab;              /* the CLOCK hand: a slab and a registration in it */
    unsigned clock_slot;
    opal_list_t in_use;
    size_t cached_bytes, cached_entries; /* registrations in the index */
    uint32_t fork_gen;             /* generation of the registrations it holds */
    bool forked;                   /* in a child since the last call: drop the parent's */
    bool verify_frames;            /* rcache_base_verify_frames when created */
    /*
     * Lock-free stack of registrations to deregister at the next call:
     * pushed by release events, taken whole (exchange) by the
     * drain, so there is no ABA.
     */
    mca_rcache_base_registration_t *deferred;
    /*
     * Released registrations kept for reuse (type-stable memory): pushed
     * lock-free, popped only under the lock, so a pop never meets ABA.
     */
    mca_rcache_base_registration_t *spare;
    void *slabs; /* the memory of all registrations, freed at destroy */
    size_t nslabs;
    unsigned slab_regs; /* registrations per slab */
} mca_rcache_grdma_module_t;

extern mca_rcache_base_component_t mca_rcache_grdma_component;

/* Parameters rcache_grdma_max_bytes and rcache_grdma_max_entries. */
extern size_t mca_rcache_grdma_max_bytes;
extern size_t mca_rcache_grdma_max_entries;

mca_rcache_base_module_t *mca_rcache_grdma_module_create(
    void *user_data, const mca_rcache_base_resources_t *resources, bool leave_pinned);

#endif
