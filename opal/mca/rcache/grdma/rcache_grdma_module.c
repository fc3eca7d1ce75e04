/*
 * grdma module: register, find, deregister, invalidate, release events.
 *
 * The rule that keeps the release hook deadlock free: work that may
 * allocate or call into the device (register_mem, deregister_mem, malloc,
 * free, printing) happens with the lock dropped.  Under the lock,
 * registrations are only linked and unlinked; the ones to deregister are
 * chained through reg_deferred_next and handled after unlocking (or, inside
 * the allocator, pushed on the deferred stack).
 */
#include "opal_config.h"

#include <stdlib.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/rcache/base/base.h"
#include "opal/mca/rcache/grdma/rcache_grdma.h"

typedef mca_rcache_base_registration_t reg_t;
typedef mca_rcache_grdma_module_t grdma_t;

#define REG_OF_NODE(n) ((reg_t *) ((char *) (n) - offsetof(reg_t, reg_vma)))
#define REG_OF_ITEM(i) ((reg_t *) ((char *) (i) - offsetof(reg_t, reg_list)))

static uintptr_t page_size;

static inline size_t reg_size(const reg_t *reg)
{
    return (size_t)(reg->bound - reg->base) + 1;
}

/* Flags are written under the lock; atomic stores let callers peek without it. */
static inline void set_flags(reg_t *reg, uint32_t set, uint32_t clear)
{
    __atomic_store_n(&reg->flags, (reg->flags | set) & ~clear, __ATOMIC_RELEASE);
}

/* Fibonacci hashing: the TOP bits of the product spread consecutive pages. */
static inline size_t hash_of(const grdma_t *m, uintptr_t base)
{
    return (size_t)(((uint64_t)(base / page_size) * 0x9e3779b97f4a7c15ull)
                    >> (64 - __builtin_ctzl(m->hash_buckets)));
}

static void hash_insert(grdma_t *m, reg_t *reg)
{
    reg_t **head = &m->hash[hash_of(m, (uintptr_t) reg->base)];
    reg->reg_hash_next = *head;
    *head = reg;
}

static void hash_remove(grdma_t *m, reg_t *reg)
{
    reg_t **pp = &m->hash[hash_of(m, (uintptr_t) reg->base)];
    while (*pp != reg) {
        pp = &(*pp)->reg_hash_next;
    }
    *pp = reg->reg_hash_next;
}

/* Index a new registration (lock held). */
static void index_insert(grdma_t *m, reg_t *reg)
{
    opal_interval_tree_insert(&m->tree, &reg->reg_vma, (uintptr_t) reg->base, (uintptr_t) reg->bound);
    hash_insert(m, reg);
    reg->flags |= MCA_RCACHE_GRDMA_IN_TREE;
    if (!(reg->flags & MCA_RCACHE_FLAGS_PERSIST)) {
        opal_list_append(&m->lru, &reg->reg_list);
        reg->flags |= MCA_RCACHE_GRDMA_ON_LRU;
    }
    m->cached_bytes += reg_size(reg);
    __atomic_store_n(&m->cached_entries, m->cached_entries + 1, __ATOMIC_RELAXED);
}

/*
 * Keep about one registration per bucket.  The new table is allocated with
 * the lock dropped (a release hook may be waiting for it inside the
 * allocator) and filled under it.
 */
static void hash_grow(grdma_t *m)
{
    size_t want = m->hash_buckets * 2;
    if (__atomic_load_n(&m->cached_entries, __ATOMIC_RELAXED) <= m->hash_buckets) {
        return;
    }
    reg_t **fresh = calloc(want, sizeof(*fresh));
    if (NULL == fresh) {
        return; /* longer chains, still correct */
    }
    pthread_mutex_lock(&m->lock);
    reg_t **old = m->hash;
    size_t old_buckets = m->hash_buckets;
    if (old_buckets * 2 == want) {
        m->hash = fresh;
        m->hash_buckets = want;
        for (size_t b = 0; b < old_buckets; b++) {
            for (reg_t *r = old[b], *next; r; r = next) {
                next = r->reg_hash_next;
                hash_insert(m, r);
            }
        }
    } else {
        old = fresh; /* another thread grew it meanwhile */
    }
    pthread_mutex_unlock(&m->lock);
    free(old);
}

/* Take reg out of the tree and off its list (lock held). */
static void unlink_reg(grdma_t *m, reg_t *reg)
{
    if (reg->flags & MCA_RCACHE_GRDMA_IN_TREE) {
        opal_interval_tree_remove(&m->tree, &reg->reg_vma);
        hash_remove(m, reg);
        m->cached_bytes -= reg_size(reg);
        __atomic_store_n(&m->cached_entries, m->cached_entries - 1, __ATOMIC_RELAXED);
    }
    if (reg->flags & MCA_RCACHE_GRDMA_ON_LRU) {
        opal_list_remove_item(&m->lru, &reg->reg_list);
    } else if (reg->flags & MCA_RCACHE_GRDMA_ON_IN_USE) {
        opal_list_remove_item(&m->in_use, &reg->reg_list);
    }
    set_flags(reg, 0, MCA_RCACHE_GRDMA_IN_TREE | MCA_RCACHE_GRDMA_ON_LRU | MCA_RCACHE_GRDMA_ON_IN_USE);
}

static inline void chain_push(reg_t **chain, reg_t *reg)
{
    reg->reg_deferred_next = *chain;
    *chain = reg;
}

/*
 * Make reg invalid: never found again.  An unused one is unlinked and
 * chained for deregistration; one in use waits on the in_use list for its
 * last reference (lock held).
 */
static void invalidate_locked(grdma_t *m, reg_t *reg, reg_t **release)
{
    set_flags(reg, MCA_RCACHE_FLAGS_INVALID, 0);
    if (reg->ref_count > 0) {
        if (!(reg->flags & MCA_RCACHE_GRDMA_ON_IN_USE)) {
            unlink_reg(m, reg);
            opal_list_append(&m->in_use, &reg->reg_list);
            set_flags(reg, MCA_RCACHE_GRDMA_ON_IN_USE, 0);
        }
        return;
    }
    unlink_reg(m, reg);
    chain_push(release, reg);
}

/* Deregister and free (lock NOT held).  The parent's pins are not ours after fork. */
static void release_reg(grdma_t *m, reg_t *reg)
{
    if (reg->reg_fork_gen == __atomic_load_n(&mca_rcache_base_fork_gen, __ATOMIC_ACQUIRE)) {
        m->resources.deregister_mem(m->resources.reg_data, reg);
    }
    mca_rcache_base_frames_release(reg);
    free(reg);
}

static void release_chain(grdma_t *m, reg_t *chain)
{
    while (chain) {
        reg_t *next = chain->reg_deferred_next;
        release_reg(m, chain);
        chain = next;
    }
}

/* Lock-free push of a whole chain; the drain takes the stack with one exchange. */
static void deferred_push(grdma_t *m, reg_t *chain)
{
    if (NULL == chain) {
        return;
    }
    reg_t *last = chain;
    while (last->reg_deferred_next) {
        last = last->reg_deferred_next;
    }
    reg_t *head = __atomic_load_n(&m->deferred, __ATOMIC_RELAXED);
    do {
        last->reg_deferred_next = head;
    } while (!__atomic_compare_exchange_n(&m->deferred, &head, chain, true, __ATOMIC_RELEASE,
                                          __ATOMIC_RELAXED));
}

static int collect_cb(opal_interval_tree_node_t *node, void *ctx)
{
    chain_push((reg_t **) ctx, REG_OF_NODE(node));
    return 0;
}

/* Invalidate every registration overlapping [low, high] (lock held). */
static void invalidate_overlapping_locked(grdma_t *m, uintptr_t low, uintptr_t high,
                                          reg_t **release)
{
    reg_t *hits = NULL;
    /* Collect first: the tree must not change under the walk. */
    opal_interval_tree_overlapping(&m->tree, low, high, collect_cb, &hits);
    while (hits) {
        reg_t *next = hits->reg_deferred_next;
        invalidate_locked(m, hits, release);
        hits = next;
    }
}

/* In a forked child: forget the parent's registrations (no deregister_mem). */
static void drop_parent_registrations(grdma_t *m)
{
    reg_t *release = NULL;
    pthread_mutex_lock(&m->lock);
    uint32_t gen = __atomic_load_n(&mca_rcache_base_fork_gen, __ATOMIC_ACQUIRE);
    if (m->fork_gen != gen) {
        m->fork_gen = gen;
        invalidate_overlapping_locked(m, 0, UINTPTR_MAX, &release);
    }
    pthread_mutex_unlock(&m->lock);
    release_chain(m, release);
}

/* At the start of every call: after fork, and work deferred by release hooks. */
static inline void grdma_progress(grdma_t *m)
{
    if (__builtin_expect(m->fork_gen != mca_rcache_base_fork_gen, 0)) {
        drop_parent_registrations(m);
    }
    if (__atomic_load_n(&m->deferred, __ATOMIC_RELAXED)) {
        release_chain(m, __atomic_exchange_n(&m->deferred, NULL, __ATOMIC_ACQUIRE));
    }
}

/*
 * CLOCK: the next unused registration not hit since the last look, which
 * is unlinked and chained on *release; registrations in use or recently
 * hit get a second chance at the back.  False when none can go (lock held).
 */
static bool evict_next_locked(grdma_t *m, reg_t **release)
{
    for (size_t n = 2 * opal_list_get_size(&m->lru); n > 0; n--) {
        reg_t *reg = REG_OF_ITEM(opal_list_get_first(&m->lru));
        if (0 == reg->ref_count && !(reg->flags & MCA_RCACHE_GRDMA_RECENT)) {
            invalidate_locked(m, reg, release);
            return true;
        }
        set_flags(reg, 0, MCA_RCACHE_GRDMA_RECENT);
        opal_list_remove_item(&m->lru, &reg->reg_list);
        opal_list_append(&m->lru, &reg->reg_list);
    }
    return false;
}

/* Evict until adding this much fits, as far as unused registrations allow (lock held). */
static void evict_for_limits_locked(grdma_t *m, size_t add_entries, size_t add_bytes,
                                    reg_t **release)
{
    while (((m->max_entries && m->cached_entries + add_entries > m->max_entries)
            || (m->max_bytes && m->cached_bytes + add_bytes > m->max_bytes))
           && evict_next_locked(m, release)) {
    }
}

/* Evict one unused registration; false if there is none. */
static bool evict_one(grdma_t *m)
{
    reg_t *release = NULL;
    pthread_mutex_lock(&m->lock);
    evict_next_locked(m, &release);
    pthread_mutex_unlock(&m->lock);
    release_chain(m, release);
    return NULL != release;
}

/* Take a reference (lock held); the registration stays where it is on the CLOCK list. */
static inline void take_ref_locked(reg_t *reg)
{
    reg->ref_count++;
    if (!(reg->flags & MCA_RCACHE_GRDMA_RECENT)) {
        set_flags(reg, MCA_RCACHE_GRDMA_RECENT, 0);
    }
}

struct lookup {
    int32_t access;
    reg_t *hit;  /* valid, covers, has the access asked */
    reg_t *grow; /* valid, covers, lacks some access */
};

/* Consider a registration that covers the range: 1 when it is a hit. */
static inline int lookup_consider(struct lookup *l, reg_t *reg)
{
    if (reg->flags & MCA_RCACHE_GRDMA_REGISTERING) {
        return 0;
    }
    if ((reg->access_flags & l->access) == l->access) {
        l->hit = reg;
        return 1;
    }
    if (NULL == l->grow) {
        l->grow = reg;
    }
    return 0;
}

static int lookup_cb(opal_interval_tree_node_t *node, void *ctx)
{
    return lookup_consider(ctx, REG_OF_NODE(node));
}

/* A covering registration: first those starting at the same page (hash), then the tree. */
static void lookup_locked(grdma_t *m, uintptr_t base, uintptr_t bound, struct lookup *l)
{
    for (reg_t *r = m->hash[hash_of(m, base)]; r; r = r->reg_hash_next) {
        if ((uintptr_t) r->base == base && (uintptr_t) r->bound >= bound
            && lookup_consider(l, r)) {
            return;
        }
    }
    opal_interval_tree_covering(&m->tree, base, bound, lookup_cb, l);
}

static int grdma_register(mca_rcache_base_module_t *rcache, void *addr, size_t size,
                          uint32_t flags, int32_t access_flags, reg_t **reg_out)
{
    grdma_t *m = (grdma_t *) rcache;
    if (NULL == reg_out) {
        return OPAL_ERR_BAD_PARAM;
    }
    *reg_out = NULL;
    grdma_progress(m);
    uintptr_t base = (uintptr_t) addr & ~(page_size - 1);
    uintptr_t bound = (((uintptr_t) addr + (size ? size : 1) + page_size - 1) & ~(page_size - 1)) - 1;
    bool bypass = flags & MCA_RCACHE_FLAGS_CACHE_BYPASS;
    reg_t *release = NULL;

    pthread_mutex_lock(&m->lock);
    if (!bypass) {
        struct lookup l = {.access = access_flags};
        lookup_locked(m, base, bound, &l);
        if (l.hit) {
            take_ref_locked(l.hit);
            pthread_mutex_unlock(&m->lock);
            if (mca_rcache_base_verify_frames) {
                mca_rcache_base_frames_check(l.hit, "rcache_register");
            }
            *reg_out = l.hit;
            return OPAL_SUCCESS;
        }
        if (l.grow) {
            /* Replace it with one covering both ranges with both sets of access. */
            base = base < (uintptr_t) l.grow->base ? base : (uintptr_t) l.grow->base;
            bound = bound > (uintptr_t) l.grow->bound ? bound : (uintptr_t) l.grow->bound;
            access_flags |= l.grow->access_flags;
            invalidate_locked(m, l.grow, &release);
        }
        evict_for_limits_locked(m, 1, bound - base + 1, &release);
    }
    pthread_mutex_unlock(&m->lock);
    release_chain(m, release);

    reg_t *reg = calloc(1, m->resources.sizeof_reg);
    if (NULL == reg) {
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    reg->rcache = rcache;
    reg->base = (unsigned char *) base;
    reg->bound = (unsigned char *) bound;
    reg->alloc_base = addr;
    reg->ref_count = 1;
    reg->flags = (flags & (MCA_RCACHE_FLAGS_CACHE_BYPASS | MCA_RCACHE_FLAGS_PERSIST))
                 | MCA_RCACHE_GRDMA_REGISTERING;
    reg->access_flags = access_flags;
    reg->reg_fork_gen = m->fork_gen;

    /*
     * Visible (but never a hit) while register_mem runs, so that a release
     * of these pages during registration invalidates it.
     */
    pthread_mutex_lock(&m->lock);
    if (bypass) {
        opal_list_append(&m->in_use, &reg->reg_list);
        reg->flags |= MCA_RCACHE_GRDMA_ON_IN_USE;
    } else {
        index_insert(m, reg);
    }
    pthread_mutex_unlock(&m->lock);
    hash_grow(m);

    int rc;
    do {
        rc = m->resources.register_mem(m->resources.reg_data, (void *) base, bound - base + 1, reg);
    } while (OPAL_ERR_OUT_OF_RESOURCE == rc && evict_one(m));

    if (OPAL_SUCCESS == rc && mca_rcache_base_verify_frames) {
        mca_rcache_base_frames_record(reg);
    }
    pthread_mutex_lock(&m->lock);
    if (OPAL_SUCCESS != rc) {
        unlink_reg(m, reg);
    }
    set_flags(reg, 0, MCA_RCACHE_GRDMA_REGISTERING);
    pthread_mutex_unlock(&m->lock);
    if (OPAL_SUCCESS != rc) {
        free(reg);
        return rc;
    }
    *reg_out = reg;
    return OPAL_SUCCESS;
}

static int grdma_find(mca_rcache_base_module_t *rcache, void *addr, size_t size, reg_t **reg_out)
{
    grdma_t *m = (grdma_t *) rcache;
    if (NULL == reg_out) {
        return OPAL_ERR_BAD_PARAM;
    }
    grdma_progress(m);
    uintptr_t base = (uintptr_t) addr & ~(page_size - 1);
    uintptr_t bound = (((uintptr_t) addr + (size ? size : 1) + page_size - 1) & ~(page_size - 1)) - 1;
    struct lookup l = {.access = 0};
    pthread_mutex_lock(&m->lock);
    lookup_locked(m, base, bound, &l);
    if (l.hit) {
        take_ref_locked(l.hit);
    }
    pthread_mutex_unlock(&m->lock);
    if (l.hit && mca_rcache_base_verify_frames) {
        mca_rcache_base_frames_check(l.hit, "rcache_find");
    }
    *reg_out = l.hit;
    return l.hit ? OPAL_SUCCESS : OPAL_ERR_NOT_FOUND;
}

static int grdma_deregister(mca_rcache_base_module_t *rcache, reg_t *reg)
{
    grdma_t *m = (grdma_t *) rcache;
    reg_t *release = NULL;
    if (NULL == reg || reg->rcache != rcache) {
        return OPAL_ERR_BAD_PARAM;
    }
    grdma_progress(m);
    pthread_mutex_lock(&m->lock);
    if (reg->ref_count <= 0) {
        pthread_mutex_unlock(&m->lock);
        return OPAL_ERR_BAD_PARAM;
    }
    if (0 == --reg->ref_count) {
        uint32_t f = reg->flags;
        bool keep = !(f & (MCA_RCACHE_FLAGS_INVALID | MCA_RCACHE_FLAGS_CACHE_BYPASS))
                    && (m->leave_pinned || (f & MCA_RCACHE_FLAGS_PERSIST));
        if (!keep) {
            set_flags(reg, MCA_RCACHE_FLAGS_INVALID, 0);
            unlink_reg(m, reg);
            chain_push(&release, reg);
        } else {
            evict_for_limits_locked(m, 0, 0, &release);
        }
    }
    pthread_mutex_unlock(&m->lock);
    release_chain(m, release);
    return OPAL_SUCCESS;
}

static int grdma_invalidate_range(mca_rcache_base_module_t *rcache, void *addr, size_t size)
{
    grdma_t *m = (grdma_t *) rcache;
    reg_t *release = NULL;
    if (0 == size) {
        return OPAL_SUCCESS;
    }
    grdma_progress(m);
    pthread_mutex_lock(&m->lock);
    invalidate_overlapping_locked(m, (uintptr_t) addr, (uintptr_t) addr + size - 1, &release);
    pthread_mutex_unlock(&m->lock);
    release_chain(m, release);
    return OPAL_SUCCESS;
}

/*
 * The release hook: runs before the pages go, possibly inside the
 * allocator.  Invalidation is immediate; deregistration is deferred when
 * from_alloc (deregister_mem and free may need the allocator's lock).
 */
static void grdma_release(mca_rcache_base_module_t *rcache, void *addr, size_t size,
                          bool from_alloc)
{
    grdma_t *m = (grdma_t *) rcache;
    reg_t *release = NULL;
    if (0 == size || 0 == __atomic_load_n(&m->cached_entries, __ATOMIC_RELAXED)) {
        /*
         * Nothing cached.  A registration inserted concurrently races with
         * the release of its own pages: the caller's bug, not ours to catch.
         */
        return;
    }
    pthread_mutex_lock(&m->lock);
    invalidate_overlapping_locked(m, (uintptr_t) addr, (uintptr_t) addr + size - 1, &release);
    pthread_mutex_unlock(&m->lock);
    if (from_alloc) {
        deferred_push(m, release);
    } else {
        release_chain(m, release);
    }
}

static void grdma_atfork(mca_rcache_base_module_t *rcache, mca_rcache_base_atfork_phase_t phase)
{
    grdma_t *m = (grdma_t *) rcache;
    if (MCA_RCACHE_ATFORK_PREPARE == phase) {
        pthread_mutex_lock(&m->lock);
    } else if (MCA_RCACHE_ATFORK_PARENT == phase) {
        pthread_mutex_unlock(&m->lock);
    } else {
        pthread_mutex_init(&m->lock, NULL); /* held by a thread id that no longer exists */
    }
}

/* Destroy: every registration made here is deregistered exactly once. */
static void grdma_finalize(mca_rcache_base_module_t *rcache)
{
    grdma_t *m = (grdma_t *) rcache;
    reg_t *release = NULL;
    grdma_progress(m);
    pthread_mutex_lock(&m->lock);
    invalidate_overlapping_locked(m, 0, UINTPTR_MAX, &release);
    /* Still referenced: the caller destroys under its own users; they go too. */
    while (!opal_list_is_empty(&m->in_use)) {
        reg_t *reg = REG_OF_ITEM(opal_list_get_first(&m->in_use));
        unlink_reg(m, reg);
        chain_push(&release, reg);
    }
    pthread_mutex_unlock(&m->lock);
    release_chain(m, release);
    release_chain(m, __atomic_exchange_n(&m->deferred, NULL, __ATOMIC_ACQUIRE));
    pthread_mutex_destroy(&m->lock);
    free(m->hash);
    free(m);
}

mca_rcache_base_module_t *mca_rcache_grdma_module_create(
    void *user_data, const mca_rcache_base_resources_t *resources, bool leave_pinned)
{
    grdma_t *m = calloc(1, sizeof(*m));
    if (m) {
        m->hash_buckets = 256;
        m->hash = calloc(m->hash_buckets, sizeof(*m->hash));
    }
    if (NULL == m || NULL == m->hash) {
        free(m);
        return NULL;
    }
    page_size = (uintptr_t) sysconf(_SC_PAGESIZE);
    m->super.rcache_register = grdma_register;
    m->super.rcache_find = grdma_find;
    m->super.rcache_deregister = grdma_deregister;
    m->super.rcache_invalidate_range = grdma_invalidate_range;
    m->super.rcache_release = grdma_release;
    m->super.rcache_atfork = grdma_atfork;
    m->super.rcache_finalize = grdma_finalize;
    m->resources = *resources;
    m->user_data = user_data;
    m->leave_pinned = leave_pinned;
    m->max_bytes = mca_rcache_grdma_max_bytes;
    m->max_entries = mca_rcache_grdma_max_entries;
    pthread_mutex_init(&m->lock, NULL);
    opal_interval_tree_init(&m->tree);
    opal_list_init(&m->lru);
    opal_list_init(&m->in_use);
    m->fork_gen = mca_rcache_base_fork_gen;
    return &m->super;
}
