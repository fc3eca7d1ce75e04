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
 * Invalidation sets INVALID with one compare-and-swap that also tells
 * whether a reference is held, so a hit and an invalidation never both
 * win, and whoever sets it on an unused registration owns its retirement.
 *
 * Registrations are type stable: once allocated by a module, their memory
 * goes to the module's spare stack when released and is freed only at
 * destroy, so a lock-free reader that raced with a release reads a
 * registration (perhaps recycled for another range, which it checks after
 * taking its reference, or by the generation in the state word), never
 * freed memory.
 *
 * Where a registration is:
 *   valid      INDEXED and, unless PERSIST, EVICTABLE (the CLOCK may take it)
 *   released   found by a release event whose pages hold its whole block
 *              (pgindex_visit_lockfree's list) and left in the released
 *              slots without a look at it: every call invalidates those
 *              (as below) before it looks anything up
 *   invalid    in use: still in the index (no lookup takes it) until its
 *              last reference goes, then out and deregistered.  Unused:
 *              out of the index and deregistered at once when a call into
 *              the module invalidated it; when a release event did (lock
 *              free), pushed on the deferred stack as it is, taken out and
 *              deregistered at the next call.  When that call (or the
 *              released slots' drain in it) registers the same pages anew,
 *              the new registration takes the old one's index slot
 *              (pgindex_replace: no remove and insert)
 *   bypass     never indexed, CACHE_BYPASS, deregistered with its last
 *              reference
 * The lock (index changes, eviction) is never held across register_mem,
 * deregister_mem, malloc or free, and a release event takes it only when
 * a writer is changing the index at that moment or the release spans more
 * blocks of a size class than the lock-free walk probes (PROBE_LIMIT in
 * rcache_base_pgindex.c: over 2 MiB among one-page registrations); it
 * never waits for a fork() that holds it (release_walk_locked).
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
    MCA_RCACHE_GRDMA_RECENT = 0x1000,      /* hit since eviction last looked */
};
/* Slots for registrations found by release events and not invalidated yet (see released). */
#define MCA_RCACHE_GRDMA_RELEASED 32
/* The top half of the flags: a generation, one more at each reuse of the memory. */
#define MCA_RCACHE_GRDMA_GEN_ONE 0x10000u
#define MCA_RCACHE_GRDMA_GEN 0xffff0000u

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
    size_t clock_slot;
    bool clock_idle;               /* its last sweep found nothing unused (see evict_next_locked) */
    size_t cached_bytes, cached_entries; /* registrations in the index */
    uint32_t fork_gen;             /* generation of the registrations it holds */
    bool forked;                   /* in a child since the last call: drop the parent's */
    bool forking;                  /* fork() holds the lock (prepare to parent): nothing writes */
    int fork_walkers;              /* release events walking the index meanwhile, unlocked */
    bool verify_frames;            /* rcache_base_verify_frames when created */
    /*
     * Lock-free stack of registrations to deregister at the next call:
     * pushed by release events, taken whole (exchange) by the
     * drain, so there is no ABA.
     */
    mca_rcache_base_registration_t *deferred;
    /*
     * Registrations that release events found without touching them
     * (grdma_release), with the bytes released, invalidated at the next
     * call: released_n slots reserved by the events (fetch and add, at most
     * RELEASED used), each filled after its reservation; the drain empties
     * them under the lock.
     */
    uint32_t released_n;
    struct {
        mca_rcache_base_registration_t *reg;
        uintptr_t low, high;
    } released[MCA_RCACHE_GRDMA_RELEASED];
    /*
     * Released registrations kept for reuse (type-stable memory): pushed
     * lock-free, popped only under the lock, so a pop never meets ABA.
     */
    mca_rcache_base_registration_t *spare;
    void *slabs; /* the memory of all registrations, freed at destroy */
    size_t slab_regs;  /* registrations in them */
    size_t slab_bytes; /* their bytes */
} mca_rcache_grdma_module_t;

extern mca_rcache_base_component_t mca_rcache_grdma_component;

/* Parameters rcache_grdma_max_bytes and rcache_grdma_max_entries. */
extern size_t mca_rcache_grdma_max_bytes;
extern size_t mca_rcache_grdma_max_entries;

mca_rcache_base_module_t *mca_rcache_grdma_module_create(
    void *user_data, const mca_rcache_base_resources_t *resources, bool leave_pinned);

#endif
