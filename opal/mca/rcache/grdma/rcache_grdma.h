/*
 * grdma: a registration cache keyed by an interval tree of the valid
 * registrations, with an LRU of the unused ones.
 *
 * Where a registration is (all under the module lock):
 *   valid      in the tree and, unless PERSIST, on the LRU: a CLOCK list
 *              (second chance) so that a hit touches only the registration:
 *              eviction skips, and moves to the back, the ones in use or
 *              used since it last looked
 *   invalid    out of the tree; while in use on the in_use list; once
 *              unused, deregistered at once or, when the release came from
 *              inside the allocator, pushed on the deferred stack
 *   bypass     never in the tree; on the in_use list until released
 * ref_count and flags change only under the lock.  The lock is never held
 * across register_mem, deregister_mem, malloc or free, so a release hook
 * that fires inside the allocator may take it without deadlock.
 */
#ifndef OPAL_MCA_RCACHE_GRDMA_RCACHE_GRDMA_H
#define OPAL_MCA_RCACHE_GRDMA_RCACHE_GRDMA_H

#include <pthread.h>

#include "opal/mca/rcache/rcache.h"

/* Internal registration flags (above the public ones). */
enum {
    MCA_RCACHE_GRDMA_REGISTERING = 0x0100, /* register_mem running: not a hit yet */
    MCA_RCACHE_GRDMA_IN_TREE = 0x0200,
    MCA_RCACHE_GRDMA_ON_LRU = 0x0400,
    MCA_RCACHE_GRDMA_ON_IN_USE = 0x0800,
    MCA_RCACHE_GRDMA_RECENT = 0x1000,      /* hit since eviction last looked */
};

typedef struct mca_rcache_grdma_module_t {
    mca_rcache_base_module_t super;
    mca_rcache_base_resources_t resources;
    void *user_data;
    bool leave_pinned;
    size_t max_bytes, max_entries; /* 0: no limit */
    pthread_mutex_t lock;
    opal_interval_tree_t tree;
    /*
     * The same registrations hashed by base page: the fast path for the
     * common hit (the same buffer again).  Grown outside the lock.
     */
    mca_rcache_base_registration_t **hash;
    size_t hash_buckets;           /* a power of two */
    opal_list_t lru;               /* CLOCK order: next to consider first */
    opal_list_t in_use;
    size_t cached_bytes, cached_entries; /* registrations in the tree */
    uint32_t fork_gen;             /* generation of the registrations it holds */
    /*
     * Lock-free stack of registrations to deregister at the next call:
     * pushed by release hooks with from_alloc, taken whole (exchange) by the
     * drain, so there is no ABA.
     */
    mca_rcache_base_registration_t *deferred;
} mca_rcache_grdma_module_t;

extern mca_rcache_base_component_t mca_rcache_grdma_component;

/* Parameters rcache_grdma_max_bytes and rcache_grdma_max_entries. */
extern size_t mca_rcache_grdma_max_bytes;
extern size_t mca_rcache_grdma_max_entries;

mca_rcache_base_module_t *mca_rcache_grdma_module_create(
    void *user_data, const mca_rcache_base_resources_t *resources, bool leave_pinned);

#endif
