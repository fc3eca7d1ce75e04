/*
 * grdma module: register, find, deregister, invalidate, release events.
 *
 * The rule that keeps the release hook deadlock free: work that may
 * allocate or call into the device (register_mem, deregister_mem, malloc,
 * free, printing) happens with the lock dropped.  Under the lock,
 * registrations are only linked and unlinked; the ones to deregister are
 * chained (see link_set) and handled after unlocking, or pushed on the
 * deferred stack by release events.
 */
#include "opal_config.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/rcache/base/base.h"
#include "opal/mca/rcache/base/rcache_base_hugemem.h"
#include "opal/mca/rcache/grdma/rcache_grdma.h"
#include "opal/memoryhooks/memory_source.h"
#include "opal/util/readers.h"

typedef mca_rcache_base_registration_t reg_t;
typedef mca_rcache_grdma_module_t grdma_t;

static uintptr_t page_size;
static unsigned page_shift;

static inline size_t reg_size(const reg_t *reg)
{
    return (size_t)(reg->bound - reg->base) + 1;
}

/* The state word: ref_count and flags as one 64-bit value (the layout of the union in rcache.h). */
typedef union {
    struct {
        int32_t count;
        uint32_t flags;
    } s;
    uint64_t w;
} state_t;

static inline state_t state_load(const reg_t *reg)
{
    state_t st;
    st.w = __atomic_load_n(&reg->reg_state, __ATOMIC_ACQUIRE);
    return st;
}

static inline void state_store(reg_t *reg, int32_t count, uint32_t flags)
{
    state_t st = {.s = {count, flags}};
    __atomic_store_n(&reg->reg_state, st.w, __ATOMIC_RELEASE);
}

/* On failure *old is reloaded. */
static inline bool state_cas(reg_t *reg, state_t *old, state_t new_state)
{
    uint64_t expected = old->w; /* a plain word: the state stays in registers */
    bool done = __atomic_compare_exchange_n(&reg->reg_state, &expected, new_state.w, false,
                                            __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    old->w = expected;
    return done;
}

static inline uint64_t flag_bits(uint32_t flags)
{
    state_t st = {.s = {0, flags}};
    return st.w;
}

/* A count of one in the state word, to add or take away. */
static inline uint64_t count_one(void)
{
    state_t st = {.s = {1, 0}};
    return st.w;
}

/* Flags change atomically: lock-free hits and drops update the same word. */
static inline state_t set_flags(reg_t *reg, uint32_t set, uint32_t clear)
{
    state_t old = {.w = 0};
    if (set) {
        old.w = __atomic_fetch_or(&reg->reg_state, flag_bits(set), __ATOMIC_ACQ_REL);
    }
    if (clear) {
        old.w = __atomic_fetch_and(&reg->reg_state, ~flag_bits(clear), __ATOMIC_ACQ_REL);
    }
    return old;
}

/*
 * The state of a spare: no count, no flag but the generation, which each
 * reuse advances (mark_invalid tells incarnations apart by it).
 */
static inline uint32_t spare_flags(const reg_t *reg)
{
    return state_load(reg).s.flags & MCA_RCACHE_GRDMA_GEN;
}

/* A registration may be handed out: indexed, registered and not invalidated. */
static inline bool state_valid(uint32_t flags)
{
    const uint32_t mask = MCA_RCACHE_GRDMA_INDEXED | MCA_RCACHE_FLAGS_INVALID
                          | MCA_RCACHE_GRDMA_REGISTERING;
    return (flags & mask) == MCA_RCACHE_GRDMA_INDEXED;
}

/*
 * It stays cached when its last reference is dropped.  Only with
 * leave_pinned, PERSIST too: without it the module has no release hooks,
 * and a registration kept would outlive its pages unseen.
 */
static inline bool state_keep(const grdma_t *m, uint32_t flags)
{
    return m->leave_pinned && state_valid(flags);
}

static inline uintptr_t page_of(const void *addr)
{
    return (uintptr_t) addr >> page_shift;
}

/* [addr, addr + size) runs past the end of the address space: its last byte would wrap. */
static inline bool range_wraps(const void *addr, size_t size)
{
    return 0 != size && size - 1 > UINTPTR_MAX - (uintptr_t) addr;
}

/*
 * Registrations are carved from slabs, each one aligned to a cache line so
 * that what a hit touches (the public fields and the state word) is one
 * line.  Slabs are freed at destroy.  A slab's first line is its head (the
 * link to the slab before it, newest first, and its size); its
 * registrations follow, one stride each.  The first SMALL_SLABS bytes of
 * slabs are SLAB_BYTES each from the heap (a small cache stays small);
 * beyond them a slab is a 2 MiB unit of huge-page memory: a large cache's
 * registrations are read at random, and with small pages most such reads
 * also miss the TLB (and a fill pays a page fault every few dozen
 * registrations).  The first huge slab is nearly empty when it comes:
 * after 2.5 MiB of small ones it adds at most 52 bytes to each of 40 000
 * registrations of 64 (81 beyond each there with the index; the most at
 * any size measured is 87, where the index doubles: bench/rcache/bytes.sh).
 */
#define SLAB_BYTES 4096
#define SMALL_SLABS (5 * MCA_RCACHE_BASE_HUGEMEM_UNIT / 4)
#define CACHE_LINE 64
typedef struct slab_head {
    void *next;
    size_t regs;
    size_t mapped; /* bytes of its hugemem mapping, 0 from the heap */
} slab_head_t;
_Static_assert(sizeof(slab_head_t) <= CACHE_LINE, "a slab's head is its first line");
_Static_assert(sizeof(reg_t) <= CACHE_LINE, "a registration's own fields are one cache line");

static inline size_t reg_stride(const grdma_t *m)
{
    return (m->resources.sizeof_reg + CACHE_LINE - 1) & ~(size_t) (CACHE_LINE - 1);
}

/* Registration i of a slab. */
static inline reg_t *slab_reg(const grdma_t *m, void *slab, size_t i)
{
    return (reg_t *) ((char *) slab + CACHE_LINE + i * reg_stride(m));
}

/* Release chains, the deferred and the spare stacks link through reg_next. */
static inline reg_t *link_next(const reg_t *reg)
{
    return __atomic_load_n(&reg->reg_next, __ATOMIC_RELAXED);
}

static inline void link_set(reg_t *reg, reg_t *next)
{
    __atomic_store_n(&reg->reg_next, next, __ATOMIC_RELAXED);
}

static inline void chain_push(reg_t **chain, reg_t *reg)
{
    link_set(reg, *chain);
    *chain = reg;
}

/* Lock-free push of a chain [first..last] on a stack popped only under the lock, or whole. */
static void stack_push(reg_t **stack, reg_t *first, reg_t *last)
{
    reg_t *head = __atomic_load_n(stack, __ATOMIC_RELAXED);
    do {
        link_set(last, head);
    } while (!__atomic_compare_exchange_n(stack, &head, first, true, __ATOMIC_RELEASE,
                                          __ATOMIC_RELAXED));
}

/* A spare registration or NULL (lock held: the only popper, so no ABA). */
static reg_t *spare_pop_locked(grdma_t *m)
{
    reg_t *head = __atomic_load_n(&m->spare, __ATOMIC_ACQUIRE);
    while (head && !__atomic_compare_exchange_n(&m->spare, &head, link_next(head), true,
                                                __ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE)) {
    }
    return head;
}

/* Index a new registration, its state already INDEXED (lock held). */
static void index_insert(grdma_t *m, reg_t *reg)
{
    mca_rcache_base_pgindex_insert(&m->index, reg, page_of(reg->base), page_of(reg->bound));
    __atomic_store_n(&m->cached_bytes, m->cached_bytes + reg_size(reg), __ATOMIC_RELAXED);
    __atomic_store_n(&m->cached_entries, m->cached_entries + 1, __ATOMIC_RELAXED);
}

/*
 * Keep the index's load at most 3/4.  The new table is allocated with the
 * lock dropped (a release hook may be waiting for the lock inside the
 * allocator), filled and installed under it; the old table's lines are
 * given back after.  False if it could not grow.
 */
static bool index_grow(grdma_t *m)
{
    unsigned want = mca_rcache_base_pgindex_wanted(&m->index);
    mca_rcache_base_pgindex_table_t *fresh = want ? mca_rcache_base_pgindex_table_new(want) : NULL;
    if (NULL == fresh) {
        return 0 == want;
    }
    pthread_mutex_lock(&m->lock);
    fresh = mca_rcache_base_pgindex_rehash(&m->index, fresh);
    pthread_mutex_unlock(&m->lock);
    if (fresh) {
        mca_rcache_base_pgindex_table_free(fresh);
    } else {
        mca_rcache_base_pgindex_release(&m->index);
    }
    return true;
}

/* Where a registration is linked: set and cleared under the lock (EVICTABLE also cleared by marking). */
#define LINKED_FLAGS (MCA_RCACHE_GRDMA_INDEXED | MCA_RCACHE_GRDMA_EVICTABLE)

/* Take reg out of the index (lock held). */
static void index_remove(grdma_t *m, reg_t *reg)
{
    mca_rcache_base_pgindex_remove(&m->index, reg);
    __atomic_store_n(&m->cached_bytes, m->cached_bytes - reg_size(reg), __ATOMIC_RELAXED);
    __atomic_store_n(&m->cached_entries, m->cached_entries - 1, __ATOMIC_RELAXED);
}

/* The same if its flags f (from before the caller's atomic step) say it is there. */
static void unlink_reg(grdma_t *m, reg_t *reg, uint32_t f)
{
    if (f & MCA_RCACHE_GRDMA_INDEXED) {
        index_remove(m, reg);
    }
}

/*
 * Make reg invalid if it is indexed, not invalid yet and overlaps
 * [low, high]: never handed out again.  Lock free: setting INVALID (and
 * clearing EVICTABLE) and reading the count is one compare-and-swap, so no
 * hit and no other invalidation slips in between, and the range is read
 * after the state it is compared with: a registration recycled for another
 * range meanwhile has another generation, the CAS fails and the new range
 * is checked.  True if it was unused: the caller then owns it (takes it
 * out of the index under the lock, deregisters it).  One in use stays in
 * the index, invalid, until its last reference goes (drop_last_locked).
 */
static bool mark_invalid(reg_t *reg, uintptr_t low, uintptr_t high)
{
    state_t st = state_load(reg), inv;
    do {
        if ((st.s.flags & (MCA_RCACHE_GRDMA_INDEXED | MCA_RCACHE_FLAGS_INVALID))
                != MCA_RCACHE_GRDMA_INDEXED
            || (uintptr_t) __atomic_load_n(&reg->base, __ATOMIC_RELAXED) > high
            || (uintptr_t) __atomic_load_n(&reg->bound, __ATOMIC_RELAXED) < low) {
            return false;
        }
        inv = st;
        inv.s.flags = (st.s.flags & ~MCA_RCACHE_GRDMA_EVICTABLE) | MCA_RCACHE_FLAGS_INVALID;
    } while (!state_cas(reg, &st, inv));
    return 0 == st.s.count;
}

/* Registrations that marking handed over, chained through reg_next. */
struct marked {
    uintptr_t low, high;
    reg_t *chain;
};

static int mark_cb(void *item, void *ctx)
{
    struct marked *mk = ctx;
    reg_t *reg = item;
    if (mark_invalid(reg, mk->low, mk->high)) {
        chain_push(&mk->chain, reg);
    }
    return 0;
}

/*
 * Take a chain that marking handed over out of the index, onto *release
 * (lock held).  Their state keeps INDEXED until release_chain makes them
 * spare: nothing else acts on an invalid registration without references.
 */
static void unlink_chain_locked(grdma_t *m, reg_t *chain, reg_t **release)
{
    while (chain) {
        reg_t *reg = chain;
        chain = link_next(reg);
        index_remove(m, reg);
        chain_push(release, reg);
    }
}

/* Invalidate reg, one that the caller found (lock held); chained on *release if unused. */
static void invalidate_locked(grdma_t *m, reg_t *reg, reg_t **release)
{
    if (mark_invalid(reg, 0, UINTPTR_MAX)) {
        index_remove(m, reg);
        chain_push(release, reg);
    }
}

/*
 * Deregister a chain (lock NOT held) and keep the memory for reuse, pushed
 * on the spare stack at once.  The parent's pins are not ours after fork.
 */
static void release_chain(grdma_t *m, reg_t *chain)
{
    if (NULL == chain) {
        return;
    }
    const uint32_t gen = __atomic_load_n(&mca_rcache_base_fork_gen, __ATOMIC_ACQUIRE);
    reg_t *last = chain;
    for (reg_t *reg = chain; reg; reg = link_next(reg)) {
        if (reg->reg_fork_gen == gen) {
            m->resources.deregister_mem(m->resources.reg_data, reg);
        }
        /*
         * Frames are recorded only by a module made with verify_frames or
         * rcache_base_uffd=strict (register_slow); in any other, reg_frames
         * stays NULL (slab_alloc), and reading it would cost the
         * deregistration a cold line (it lies past the registration's first
         * line).  Either way a spare slot's is NULL.
         */
        if (m->verify_frames || m->super.rcache_uffd_strict) {
            mca_rcache_base_frames_release(reg);
        }
        state_store(reg, 0, spare_flags(reg));
        last = reg;
    }
    stack_push(&m->spare, chain, last);
}

/* Lock-free push of a whole chain; the drain takes the stack with one exchange. */
static void deferred_push(grdma_t *m, reg_t *chain)
{
    if (NULL == chain) {
        return;
    }
    reg_t *last = chain;
    while (link_next(last)) {
        last = link_next(last);
    }
    stack_push(&m->deferred, chain, last);
}

/*
 * The registration of exactly the pages [base, bound] on a chain of
 * invalid ones, taken off the chain; NULL if there is none.
 */
static reg_t *stale_take(reg_t **chain, uintptr_t base, uintptr_t bound)
{
    for (reg_t *prev = NULL, *reg = *chain; reg; prev = reg, reg = link_next(reg)) {
        if ((uintptr_t) reg->base == base && (uintptr_t) reg->bound == bound) {
            if (prev) {
                link_set(prev, link_next(reg));
            } else {
                *chain = link_next(reg);
            }
            return reg;
        }
    }
    return NULL;
}

/* Invalidate every registration overlapping [low, high] (lock held). */
static void invalidate_overlapping_locked(grdma_t *m, uintptr_t low, uintptr_t high,
                                          reg_t **release)
{
    struct marked mk = {.low = low, .high = high, .chain = NULL};
    mca_rcache_base_pgindex_overlapping(&m->index, low >> page_shift, high >> page_shift, mark_cb,
                                        &mk);
    /* After the walk: the index must not change under it. */
    unlink_chain_locked(m, mk.chain, release);
}

/* In a forked child: forget the parent's registrations (no deregister_mem). */
static __attribute__((noinline)) void drop_parent_registrations(grdma_t *m)
{
    reg_t *release = NULL;
    pthread_mutex_lock(&m->lock);
    if (m->forked) {
        m->forked = false;
        m->fork_gen = __atomic_load_n(&mca_rcache_base_fork_gen, __ATOMIC_ACQUIRE);
        invalidate_overlapping_locked(m, 0, UINTPTR_MAX, &release);
    }
    pthread_mutex_unlock(&m->lock);
    release_chain(m, release);
}

/*
 * Invalidate what release events left in the released slots (lock held),
 * the unused ones chained on stale, still indexed (returned: the caller's
 * chain stays in a register; the caller takes them out of the index, or
 * one of them takes the place of a new registration of the same pages,
 * reg_new_locked).  A slot reserved but not filled yet is an event between
 * its two steps: waited for.  A registration that left the index meanwhile
 * (evicted, perhaps reused) is invalidated only if it overlaps the
 * released bytes (mark_invalid checks).
 */
static __attribute__((noinline)) reg_t *drain_released_slow(grdma_t *m, uint32_t n, reg_t *stale)
{
    for (uint32_t done = 0; n;) {
        for (; done < n && done < MCA_RCACHE_GRDMA_RELEASED; done++) {
            reg_t *reg;
            while (NULL == (reg = __atomic_load_n(&m->released[done].reg, __ATOMIC_ACQUIRE))) {
                sched_yield();
            }
            __atomic_store_n(&m->released[done].reg, NULL, __ATOMIC_RELAXED);
            if (mark_invalid(reg, m->released[done].low, m->released[done].high)) {
                chain_push(&stale, reg);
            }
        }
        /* Emptied, unless an event reserved more meanwhile: then those too. */
        if (__atomic_compare_exchange_n(&m->released_n, &n, 0, false, __ATOMIC_RELEASE,
                                        __ATOMIC_ACQUIRE)) {
            break;
        }
    }
    return stale;
}

static inline reg_t *drain_released_locked(grdma_t *m, reg_t *stale)
{
    uint32_t n = __atomic_load_n(&m->released_n, __ATOMIC_ACQUIRE);
    return __builtin_expect(n, 0) ? drain_released_slow(m, n, stale) : stale;
}

/*
 * Work for the start of a call: a fork since the last one, a chain
 * deferred or slots released by release events (one test for all three).
 * Acquire: a count that a drain emptied comes with what the drain did (the
 * invalidations; its pair is drain_released_slow's CAS).
 */
static inline bool work_left(const grdma_t *m)
{
    return 0 != ((uintptr_t) __atomic_load_n(&m->deferred, __ATOMIC_RELAXED) |
                 __atomic_load_n(&m->released_n, __ATOMIC_ACQUIRE) | m->forked);
}

/* What release events left: marked invalid, still in the index; NULL if nothing. */
static inline reg_t *take_deferred(grdma_t *m)
{
    return __atomic_load_n(&m->deferred, __ATOMIC_RELAXED)
               ? __atomic_exchange_n(&m->deferred, NULL, __ATOMIC_ACQUIRE)
               : NULL;
}

/* Take such a chain out of the index, invalidate the released slots' ones, deregister. */
static void drain_chain(grdma_t *m, reg_t *chain)
{
    if (chain || __atomic_load_n(&m->released_n, __ATOMIC_RELAXED)) {
        reg_t *release = NULL;
        pthread_mutex_lock(&m->lock);
        unlink_chain_locked(m, drain_released_locked(m, chain), &release);
        pthread_mutex_unlock(&m->lock);
        release_chain(m, release);
    }
}

static __attribute__((noinline)) void grdma_progress_slow(grdma_t *m)
{
    if (m->forked) {
        drop_parent_registrations(m);
    }
    drain_chain(m, take_deferred(m));
}

/* At the start of every call: after fork, and work deferred by release events. */
static inline void grdma_progress(grdma_t *m)
{
    if (__builtin_expect(work_left(m), 0)) {
        grdma_progress_slow(m);
    }
}

/* Move the CLOCK hand one registration on, over every slab in turn (lock held). */
static reg_t *clock_advance(grdma_t *m)
{
    if (NULL == m->clock_slab || ++m->clock_slot == ((slab_head_t *) m->clock_slab)->regs) {
        void *next = m->clock_slab ? ((slab_head_t *) m->clock_slab)->next : NULL;
        m->clock_slab = next ? next : __atomic_load_n(&m->slabs, __ATOMIC_ACQUIRE);
        m->clock_slot = 0;
    }
    return slab_reg(m, m->clock_slab, m->clock_slot);
}

/*
 * CLOCK: the next unused registration not hit since the last look, which
 * is invalidated and chained on *release; registrations in use or recently
 * hit get a second chance.  The hand walks the slabs themselves, so the
 * cache keeps no list in eviction order: unlinking a registration touches
 * no neighbour, and a hit moves nothing.  False when none can go (lock held).
 *
 * A sweep that finds every registration in use leaves clock_idle set.  The
 * flag is set before the sweep: a drop that the sweep missed (its slot
 * already passed) sees it set and clears it (idle_end).
 */
static bool evict_next_locked(grdma_t *m, reg_t **release)
{
    __atomic_store_n(&m->clock_idle, true, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_SEQ_CST); /* the flag before the states (idle_end's pair) */
    for (size_t n = 2 * __atomic_load_n(&m->slab_regs, __ATOMIC_ACQUIRE); n > 0; n--) {
        reg_t *reg = clock_advance(m);
        state_t st = state_load(reg);
        if (!(st.s.flags & MCA_RCACHE_GRDMA_EVICTABLE)) {
            continue; /* spare, in registration, bypass, persistent or invalid */
        }
        /*
         * Unused and not recent: invalid only if no hit took it and no
         * release event marked it meanwhile (the CAS; a failed one reloads
         * the state, which is checked again whole).
         */
        while (0 == st.s.count
               && (st.s.flags & (MCA_RCACHE_GRDMA_EVICTABLE | MCA_RCACHE_GRDMA_RECENT))
                      == MCA_RCACHE_GRDMA_EVICTABLE) {
            state_t inv = {.s = {0, (st.s.flags & ~LINKED_FLAGS) | MCA_RCACHE_FLAGS_INVALID}};
            if (state_cas(reg, &st, inv)) {
                unlink_reg(m, reg, st.s.flags);
                chain_push(release, reg);
                __atomic_store_n(&m->clock_idle, false, __ATOMIC_RELAXED);
                return true;
            }
        }
        set_flags(reg, 0, MCA_RCACHE_GRDMA_RECENT);
    }
    return false;
}

/*
 * A registration of a limited cache is unused now (its count dropped to 0):
 * the CLOCK may take it.  The count's drop comes before the flag is read
 * (the fence pairs with evict_next_locked's).
 */
static inline void idle_end(grdma_t *m)
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(&m->clock_idle, __ATOMIC_RELAXED)) {
        __atomic_store_n(&m->clock_idle, false, __ATOMIC_RELAXED);
    }
}

/* Also read without the lock (a dropped reference): the counters are written atomically. */
static inline bool over_limits(const grdma_t *m, size_t add_entries, size_t add_bytes)
{
    return (m->max_entries
            && __atomic_load_n(&m->cached_entries, __ATOMIC_RELAXED) + add_entries > m->max_entries)
           || (m->max_bytes
               && __atomic_load_n(&m->cached_bytes, __ATOMIC_RELAXED) + add_bytes > m->max_bytes);
}

/*
 * Evict until adding this much fits, as far as unused registrations allow
 * (lock held).  After a sweep that found every registration in use, the
 * next calls return at once until a reference drops to none (idle_end,
 * called by the drops of a limited cache only, so that the drops of others
 * do not pay for it): a program holding more registrations than the limits
 * allow made each new one sweep them all.
 */
static void evict_for_limits_locked(grdma_t *m, size_t add_entries, size_t add_bytes,
                                    reg_t **release)
{
    while (over_limits(m, add_entries, add_bytes) &&
           !__atomic_load_n(&m->clock_idle, __ATOMIC_RELAXED) && evict_next_locked(m, release)) {
    }
}

/* Evict what the limits ask (lock NOT held).  Out of line: rare on a drop. */
static __attribute__((noinline)) void evict_for_limits(grdma_t *m)
{
    reg_t *release = NULL;
    pthread_mutex_lock(&m->lock);
    evict_for_limits_locked(m, 0, 0, &release);
    pthread_mutex_unlock(&m->lock);
    release_chain(m, release);
}

/* Evict one unused registration (the device ran out of resources); false if there is none. */
static bool evict_one(grdma_t *m)
{
    reg_t *release = NULL;
    pthread_mutex_lock(&m->lock);
    evict_next_locked(m, &release);
    pthread_mutex_unlock(&m->lock);
    release_chain(m, release);
    return NULL != release;
}

/*
 * Take a reference if reg may be handed out; marks it RECENT in the same
 * step.  No lock needed: the CAS fails if an invalidation got there first.
 */
static inline bool take_ref(reg_t *reg)
{
    state_t st = state_load(reg);
    while (state_valid(st.s.flags) && st.s.count < INT32_MAX) {
        /* One more (no carry: below INT32_MAX), RECENT set: word arithmetic, no field moves. */
        state_t ref = {.w = (st.w + count_one()) | flag_bits(MCA_RCACHE_GRDMA_RECENT)};
        if (state_cas(reg, &st, ref)) {
            return true;
        }
    }
    return false;
}

static __attribute__((noinline)) int drop_ref_cold(grdma_t *m, reg_t *reg);

/*
 * A lookup: the first and the last byte asked (a registration's base is a
 * page's first byte and its bound a page's last byte, so it covers the
 * bytes asked exactly when it covers their pages).
 */
struct lookup {
    grdma_t *m;
    uintptr_t base, bound;
    int32_t access;
    reg_t *hit;  /* valid, covers, has the access asked; referenced */
    reg_t *grow; /* valid, covers, lacks some access (under the lock only) */
    uint32_t seq;  /* the index's sequence count when a lock-free lookup began */
    bool seen;     /* that lookup met a candidate */
    uint32_t skip; /* under the lock: the released slots [0, skip) hold ones to pass by */
};

/*
 * A candidate from the index, under the lock: its fields are stable then
 * (recycling takes the lock), so they are checked before the reference.
 */
static inline int lookup_cb(void *item, void *ctx)
{
    struct lookup *l = ctx;
    reg_t *reg = item;
    for (uint32_t i = 0; i < l->skip; i++) {
        if (reg == __atomic_load_n(&l->m->released[i].reg, __ATOMIC_RELAXED)) {
            return 0; /* released: the drain after this lookup marks it (register_slow) */
        }
    }
    if ((uintptr_t) reg->base > l->base || (uintptr_t) reg->bound < l->bound) {
        return 0; /* the index leaves the check to us: these fields share the hit's cache line */
    }
    if ((reg->access_flags & l->access) != l->access) {
        if (NULL == l->grow && state_valid(state_load(reg).s.flags)) {
            l->grow = reg;
        }
        return 0;
    }
    if (!take_ref(reg)) {
        return 0;
    }
    l->hit = reg;
    return 1;
}

/* reg covers what l asks, with the access asked. */
static inline bool covers(const reg_t *reg, const struct lookup *l)
{
    return (uintptr_t) reg->base <= l->base && (uintptr_t) reg->bound >= l->bound &&
           (reg->access_flags & l->access) == l->access;
}

/*
 * A candidate of the lock-free hit: referenced first (if valid), checked
 * after, when the reference pins the fields (the registration may have been
 * recycled for another range since the index walk saw it).  One that does
 * not cover (another range in the same block, too little access, recycled)
 * is dropped again: rare, and cheaper than checking twice on every hit.
 */
static inline int hit_cb(void *item, void *ctx)
{
    struct lookup *l = ctx;
    reg_t *reg = item;
    if (!take_ref(reg)) {
        /* An invalid one stays so while indexed: no lookup under the lock would take it. */
        l->seen |= !(state_load(reg).s.flags & MCA_RCACHE_FLAGS_INVALID);
        return 0;
    }
    if (covers(reg, l)) {
        l->hit = reg;
        return 1;
    }
    l->seen = true; /* perhaps one to grow (under the lock) */
    drop_ref_cold(l->m, reg);
    return 0;
}

/* A covering registration with the access asked, referenced, in l->hit (under the lock). */
static inline __attribute__((always_inline)) void lookup(grdma_t *m, struct lookup *l)
{
    mca_rcache_base_pgindex_covering(&m->index, l->base >> page_shift, l->bound >> page_shift,
                                     lookup_cb, l);
}

/* The same without the lock: best effort, a miss is asked again under the lock. */
static inline __attribute__((always_inline)) void lookup_lockfree(grdma_t *m, struct lookup *l)
{
    l->hit = NULL;
    l->seen = false;
    l->seq = __atomic_load_n(&m->index.seq, __ATOMIC_ACQUIRE);
    mca_rcache_base_pgindex_covering(&m->index, l->base >> page_shift, l->bound >> page_shift,
                                     hit_cb, l);
}

/*
 * The last reference of a registration that must go (or may have to):
 * under the lock.  Out of line, so that the common drop stays small.
 */
static __attribute__((noinline)) int drop_last_locked(grdma_t *m, reg_t *reg)
{
    reg_t *release = NULL;
    int rc = OPAL_SUCCESS;
    pthread_mutex_lock(&m->lock);
    state_t st = state_load(reg), dropped;
    do {
        if (st.s.count <= 0) {
            rc = OPAL_ERR_BAD_PARAM;
            break;
        }
        dropped = st;
        dropped.s.count--;
        if (0 == dropped.s.count && !state_keep(m, st.s.flags)) {
            dropped.s.flags = (st.s.flags & ~LINKED_FLAGS) | MCA_RCACHE_FLAGS_INVALID;
        }
    } while (!state_cas(reg, &st, dropped));
    if (OPAL_SUCCESS == rc && 0 == dropped.s.count) {
        if (dropped.s.flags & MCA_RCACHE_FLAGS_INVALID) {
            unlink_reg(m, reg, st.s.flags);
            chain_push(&release, reg);
        } else {
            idle_end(m);
            evict_for_limits_locked(m, 0, 0, &release);
        }
    }
    pthread_mutex_unlock(&m->lock);
    release_chain(m, release);
    return rc;
}

/* Drop a reference: one CAS unless it is the last and the registration must go. */
static inline int drop_ref(grdma_t *m, reg_t *reg)
{
    state_t st = state_load(reg);
    for (;;) {
        if (st.s.count <= 0) {
            return OPAL_ERR_BAD_PARAM;
        }
        if (1 == st.s.count && !state_keep(m, st.s.flags)) {
            return drop_last_locked(m, reg);
        }
        state_t dropped = {.w = st.w - count_one()}; /* no borrow: the count is positive */
        if (state_cas(reg, &st, dropped)) {
            break;
        }
    }
    if (__builtin_expect(m->limited, 0) && 1 == st.s.count) {
        idle_end(m);
        if (over_limits(m, 0, 0)) {
            evict_for_limits(m); /* now unused: the limits may evict it or an older one */
        }
    }
    return OPAL_SUCCESS;
}

/* drop_ref for the rare path of a lookup that took a recycled registration. */
static int drop_ref_cold(grdma_t *m, reg_t *reg)
{
    return drop_ref(m, reg);
}

/* A lookup of [addr, addr + size) (of addr's byte when size is 0) with this access. */
static inline void lookup_init(struct lookup *l, grdma_t *m, const void *addr, size_t size,
                               int32_t access)
{
    l->m = m;
    l->base = (uintptr_t) addr;
    l->bound = (uintptr_t) addr + size - (0 != size);
    l->access = access;
    l->skip = 0;
}

/* The pages of [addr, addr + size) (of addr's page when size is 0): first byte, last byte. */
static inline void page_range(const void *addr, size_t size, uintptr_t *base, uintptr_t *bound)
{
    *base = (uintptr_t) addr & ~(page_size - 1);
    *bound = ((uintptr_t) addr + size - (0 != size)) | (page_size - 1);
}

/*
 * A new slab of spare registrations (lock NOT held); false if out of memory.
 * Of a spare, only the state word (read by the CLOCK hand) and reg_frames
 * are read before reg_new_locked writes the rest: nothing else is cleared.
 */
static bool slab_alloc(grdma_t *m)
{
    const size_t stride = reg_stride(m), unit = MCA_RCACHE_BASE_HUGEMEM_UNIT;
    size_t grown = __atomic_load_n(&m->slab_bytes, __ATOMIC_RELAXED);
    size_t mapped = grown >= SMALL_SLABS && stride <= unit - CACHE_LINE ? unit : 0;
    /* A registration larger than a small slab has one of its own. */
    size_t small = stride > SLAB_BYTES - CACHE_LINE ? CACHE_LINE + stride : SLAB_BYTES;
    size_t bytes = mapped ? mapped : small;
    size_t regs = (bytes - CACHE_LINE) / stride;
    char *slab = mapped ? mca_rcache_base_hugemem_alloc(mapped) : aligned_alloc(CACHE_LINE, bytes);
    if (NULL == slab) {
        return false;
    }
    ((slab_head_t *) slab)->regs = regs;
    ((slab_head_t *) slab)->mapped = mapped;
    reg_t *first = slab_reg(m, slab, 0), *last = first;
    for (size_t i = 0; i < regs; i++) {
        reg_t *reg = slab_reg(m, slab, i);
        state_store(reg, 0, 0);
        reg->reg_frames = NULL;
        link_set(last, reg);
        last = reg;
    }
    link_set(last, NULL);
    /*
     * Linked and counted in one locked step: a CLOCK sweep (locked) that
     * counted the registrations before a new slab was linked would walk the longer
     * cycle with the shorter count, pass some slots once instead of twice,
     * and leave clock_idle set over an unused registration it never came
     * back to.
     */
    pthread_mutex_lock(&m->lock);
    ((slab_head_t *) slab)->next = m->slabs;
    __atomic_store_n(&m->slabs, slab, __ATOMIC_RELEASE);
    __atomic_store_n(&m->slab_regs, m->slab_regs + regs, __ATOMIC_RELEASE);
    __atomic_store_n(&m->slab_bytes, m->slab_bytes + bytes, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&m->lock);
    stack_push(&m->spare, first, last);
    return true;
}

/*
 * A spare registration set up for [base, bound], referenced, REGISTERING,
 * and indexed unless it is a bypass one; NULL when there is no spare (lock
 * held).  Indexed in the slot of old when there is one: an invalid unused
 * registration of the same pages still indexed (a program registering
 * again the pages it freed and mapped again), taken out of the index
 * either way.
 */
static reg_t *reg_new_locked(grdma_t *m, void *addr, uintptr_t base, uintptr_t bound,
                             uint32_t flags, int32_t access_flags, reg_t *old)
{
    reg_t *reg = spare_pop_locked(m);
    if (NULL == reg) {
        if (old) {
            index_remove(m, old);
        }
        return NULL;
    }
    /* Not the header: a stale lock-free reader may still be looking at its state word. */
    if (m->resources.sizeof_reg > sizeof(reg_t)) {
        memset((char *) reg + sizeof(reg_t), 0, m->resources.sizeof_reg - sizeof(reg_t));
    }
    reg->rcache = &m->super;
    /* Read by lock-free markers of an older incarnation (mark_invalid). */
    __atomic_store_n(&reg->base, (unsigned char *) base, __ATOMIC_RELAXED);
    __atomic_store_n(&reg->bound, (unsigned char *) bound, __ATOMIC_RELAXED);
    reg->alloc_base = addr;
    reg->access_flags = access_flags;
    reg->reg_fork_gen = m->fork_gen; /* reg_frames: NULL in every spare (release_chain) */
    /*
     * The whole state in one store (no reader takes a reference while it
     * is REGISTERING), then linked: visible (but never a hit) while
     * register_mem runs, so that a release of these pages during
     * registration invalidates it.  A new one gets a full turn of the
     * CLOCK hand (RECENT), wherever its slot is.
     */
    uint32_t state = (flags & (MCA_RCACHE_FLAGS_CACHE_BYPASS | MCA_RCACHE_FLAGS_PERSIST)) |
                     MCA_RCACHE_GRDMA_REGISTERING |
                     ((spare_flags(reg) + MCA_RCACHE_GRDMA_GEN_ONE) & MCA_RCACHE_GRDMA_GEN);
    /* Bypass, with PERSIST too: never indexed (unlink_reg and state_keep go by the state). */
    if (!(flags & MCA_RCACHE_FLAGS_CACHE_BYPASS)) {
        state |= MCA_RCACHE_GRDMA_INDEXED;
        if (!(flags & MCA_RCACHE_FLAGS_PERSIST)) {
            state |= MCA_RCACHE_GRDMA_EVICTABLE | MCA_RCACHE_GRDMA_RECENT;
        }
    }
    state_store(reg, 1, state);
    if (old) {
        mca_rcache_base_pgindex_replace(&m->index, old, reg);
    } else if (!(flags & MCA_RCACHE_FLAGS_CACHE_BYPASS)) {
        index_insert(m, reg);
    }
    return reg;
}

/*
 * rcache_base_uffd=strict: a hit whose pages have other frames than when
 * it was registered lost its pages to a release whose event has not come
 * yet (another thread mapped the address first).  It is invalidated and
 * dropped here; false: look again.
 */
static __attribute__((noinline)) bool confirm_hit(grdma_t *m, reg_t *hit)
{
    if (mca_rcache_base_frames_same(hit)) {
        return true;
    }
    reg_t *release = NULL;
    pthread_mutex_lock(&m->lock);
    invalidate_locked(m, hit, &release);
    pthread_mutex_unlock(&m->lock);
    release_chain(m, release);
    drop_ref(m, hit);
    return false;
}

/* The userfaultfd source's events first: they may invalidate what a lookup would find. */
static inline void uffd_drain(grdma_t *m)
{
    const opal_mem_source_t *src = m->super.rcache_uffd;
    if (__builtin_expect(NULL != src, 0)) {
        src->drain(m->super.rcache_uffd_strict);
    }
}

/*
 * What a lock-free lookup that missed knew: the index's sequence count when
 * it began and whether it met a candidate (passed by value: a lookup whose
 * address escaped would live in memory on the hit path).
 */
typedef struct {
    bool tried;
    bool seen;
    uint32_t seq;
} missed_t;

static inline missed_t missed_by(const struct lookup *l)
{
    missed_t mi = {.tried = true, .seen = l->seen, .seq = l->seq};
    return mi;
}

static const missed_t not_tried = {.tried = false};

static int register_slow(grdma_t *m, void *addr, size_t size, uint32_t flags, int32_t access_flags,
                         reg_t **reg_out, missed_t tried);

/*
 * A hit found outside grdma_register's own path, handed out after the
 * checks the module was made with: the frames (rcache_base_verify_frames),
 * and under rcache_base_uffd=strict a hit it cannot confirm is registered
 * again.
 */
static __attribute__((noinline)) int hand_out_hit(grdma_t *m, reg_t *hit, void *addr, size_t size,
                                                  uint32_t flags, int32_t access_flags,
                                                  reg_t **reg_out)
{
    if (m->verify_frames) {
        mca_rcache_base_frames_check(hit, "rcache_register");
    }
    if (__builtin_expect(m->super.rcache_uffd_strict, 0) && !confirm_hit(m, hit)) {
        return register_slow(m, addr, size, flags, access_flags, reg_out, not_tried);
    }
    *reg_out = hit;
    return OPAL_SUCCESS;
}

/*
 * Everything but the lock-free hit: work left by release events, a bypass
 * registration, a new one.  'tried': the lock-free lookup that missed
 * already, if any.
 */
static __attribute__((noinline)) int register_slow(grdma_t *m, void *addr, size_t size,
                                                   uint32_t flags, int32_t access_flags,
                                                   reg_t **reg_out, missed_t tried)
{
    if (NULL == reg_out) {
        return OPAL_ERR_BAD_PARAM;
    }
    *reg_out = NULL;
    /*
     * Checked here only: the hit path's lookup of such a range probes the
     * top size class alone, where no registration is, and comes here.  The
     * pages of the whole address space are 2^64 bytes: a size_t of 0.
     */
    uintptr_t base, bound;
    page_range(addr, size, &base, &bound);
    if (range_wraps(addr, size) || 0 == bound - base + 1) {
        return OPAL_ERR_BAD_PARAM;
    }
    if (!tried.tried) {
        uffd_drain(m); /* register_checked drained already */
    }
    if (__builtin_expect(m->forked, 0)) {
        drop_parent_registrations(m);
    }
    /* Taken out of the index in the locked section below (one lock for both), deregistered after. */
    reg_t *deferred = take_deferred(m);
    bool bypass = flags & MCA_RCACHE_FLAGS_CACHE_BYPASS;
    struct lookup l;
    reg_t *reg = NULL;
    lookup_init(&l, m, addr, size, access_flags);
    l.hit = NULL;

    /*
     * What the hit's lock-free lookup knew, in locals that stay in
     * registers (read back from l, a seq and a seen stored apart were
     * loaded as one word: a store-forwarding stall on every miss).  Two
     * scalars, not a missed_t: with one, GCC laid out the hit path one
     * instruction longer.  Without that lookup (work left by release
     * events or fork, a bypass one) the lookup is made under the lock
     * only, after the drain of what release events left: the lock is
     * taken for that drain anyway.
     */
    bool seen = true; /* a bypass one looks for nothing: unused */
    uint32_t seq = 0;
    if (tried.tried) {
        seen = tried.seen;
        seq = tried.seq;
    }
    /* The new one took an old one's slot: the index's load is the same. */
    bool replaced = false;
    do { /* at least once: what release events left is taken out under the lock */
        reg_t *release = NULL, *old = NULL;
        bool full = false; /* the index must grow first */
        pthread_mutex_lock(&m->lock);
        /*
         * The lock-free lookup met no candidate but invalid ones and no
         * writer has been at the index since it began: the same lookup
         * under the lock would find nothing either (what release events
         * left meanwhile is passed by or invalid, and the drain after it
         * only removes).
         */
        bool again = !bypass &&
                     (seen || (seq & 1) || !mca_rcache_base_pgindex_unchanged(&m->index, seq));
        l.grow = NULL; /* decided under the lock only */
        if (again) {
            /*
             * Before the drain, passing the released slots' registrations
             * by their address: the drain's compare-and-swap on each waits
             * for its line (the event only prefetched it), and the lookup
             * runs meanwhile without reading it.  Slots filled after this
             * count are events under way during this call, as they would be
             * after a drain made first.
             */
            uint32_t n = __atomic_load_n(&m->released_n, __ATOMIC_ACQUIRE);
            l.skip = n < MCA_RCACHE_GRDMA_RELEASED ? n : MCA_RCACHE_GRDMA_RELEASED;
            lookup(m, &l);
        }
        /* Invalid, unused and still indexed (lookups pass them by), until taken out below. */
        reg_t *stale = drain_released_locked(m, deferred);
        deferred = NULL;
        if (NULL == l.hit && l.grow) {
            /* Replace it with one covering both ranges with both sets of access. */
            base = base < (uintptr_t) l.grow->base ? base : (uintptr_t) l.grow->base;
            bound = bound > (uintptr_t) l.grow->bound ? bound : (uintptr_t) l.grow->bound;
            access_flags |= l.grow->access_flags;
            invalidate_locked(m, l.grow, &release);
        }
        if (NULL == l.hit && !bypass) {
            old = stale_take(&stale, base, bound); /* its slot for the new one: same pages */
        }
        unlink_chain_locked(m, stale, &release); /* before the limits count them */
        if (NULL == l.hit) {
            /* A new one in old's place adds nothing to the limits or the index's load. */
            if (!bypass && !old && m->limited) {
                evict_for_limits_locked(m, 1, bound - base + 1, &release);
            }
            full = !bypass && !old && !mca_rcache_base_pgindex_room(&m->index);
            reg = full ? NULL : reg_new_locked(m, addr, base, bound, flags, access_flags, old);
            if (old) {
                chain_push(&release, old); /* out of the index now, either way */
                replaced = NULL != reg;
            }
        }
        pthread_mutex_unlock(&m->lock);
        release_chain(m, release);
        if (full ? !index_grow(m) : NULL == l.hit && NULL == reg && !slab_alloc(m)) {
            return OPAL_ERR_OUT_OF_RESOURCE;
        }
    } while (NULL == l.hit && NULL == reg);
    if (l.hit) {
        return hand_out_hit(m, l.hit, addr, size, flags, access_flags, reg_out);
    }
    if (!replaced) {
        index_grow(m);
    }
    if (m->super.rcache_uffd && !bypass) {
        /* Before the registration: a release meanwhile is an event that invalidates it.
         * Refused (the cap): the patcher still covers it. */
        (void) m->super.rcache_uffd->subscribe((void *) base, bound - base + 1);
    }

    int rc;
    do {
        rc = m->resources.register_mem(m->resources.reg_data, (void *) base, bound - base + 1, reg);
    } while (OPAL_ERR_OUT_OF_RESOURCE == rc && evict_one(m));

    if (OPAL_SUCCESS != rc) {
        pthread_mutex_lock(&m->lock);
        unlink_reg(m, reg, reg->flags); /* ours alone: a release meanwhile only marked it */
        state_store(reg, 0, spare_flags(reg));
        pthread_mutex_unlock(&m->lock);
        stack_push(&m->spare, reg, reg);
        return rc;
    }
    if (m->verify_frames || m->super.rcache_uffd_strict) {
        mca_rcache_base_frames_record(reg);
    }
    /* Now a hit for others: one atomic step, no lock (an invalidation meanwhile stays). */
    set_flags(reg, 0, MCA_RCACHE_GRDMA_REGISTERING);
    *reg_out = reg;
    return OPAL_SUCCESS;
}

/*
 * A registration with a userfaultfd source or page-frame checks: the
 * source's events first, the checks after the hit.
 */
static __attribute__((noinline)) int register_checked(grdma_t *m, void *addr, size_t size,
                                                      uint32_t flags, int32_t access_flags,
                                                      reg_t **reg_out)
{
    uffd_drain(m);
    grdma_progress(m); /* what the source's events left, before the lookup */
    struct lookup l;
    lookup_init(&l, m, addr, size, access_flags);
    lookup_lockfree(m, &l);
    if (NULL == l.hit) {
        return register_slow(m, addr, size, flags, access_flags, reg_out, missed_by(&l));
    }
    return hand_out_hit(m, l.hit, addr, size, flags, access_flags, reg_out);
}

/* The hit's slow way: the whole lock-free walk, then register_slow. */
static __attribute__((noinline)) int register_walk(grdma_t *m, void *addr, size_t size,
                                                   uint32_t flags, int32_t access_flags,
                                                   reg_t **reg_out)
{
    struct lookup l;
    lookup_init(&l, m, addr, size, access_flags);
    lookup_lockfree(m, &l);
    if (__builtin_expect(NULL != l.hit, 1)) {
        *reg_out = l.hit;
        return OPAL_SUCCESS;
    }
    return register_slow(m, addr, size, flags, access_flags, reg_out, missed_by(&l));
}

/* A first candidate that took a reference and does not cover (rare): dropped, then the walk. */
static __attribute__((noinline)) int register_walk_after(grdma_t *m, reg_t *reg, void *addr,
                                                         size_t size, uint32_t flags,
                                                         int32_t access_flags, reg_t **reg_out)
{
    drop_ref_cold(m, reg);
    return register_walk(m, addr, size, flags, access_flags, reg_out);
}

/*
 * The hit: no lock, one look at one index line, one compare-and-swap.  One
 * test sends everything else elsewhere: no result pointer, a bypass
 * registration, work left by release events or fork (register_slow), a
 * userfaultfd source or frame checks (register_checked).  The look is the
 * key's home line in the one class that could cover (first_candidate);
 * when it finds nothing and was the whole lookup (complete), the miss goes
 * to register_slow at once, which trusts it as it trusts the walk (by the
 * index's count read before it); anything else walks (register_walk).  The
 * slow ways are out of line, so the hit saves few registers.
 */
static int grdma_register(mca_rcache_base_module_t *rcache, void *addr, size_t size, uint32_t flags,
                          int32_t access_flags, reg_t **reg_out)
{
    grdma_t *m = (grdma_t *) rcache;
    bool pending = work_left(m);
    bool checks = (NULL != m->super.rcache_uffd) | m->verify_frames;
    if (__builtin_expect(NULL == reg_out || (flags & MCA_RCACHE_FLAGS_CACHE_BYPASS) || pending, 0)) {
        return register_slow(m, addr, size, flags, access_flags, reg_out, not_tried);
    }
    if (__builtin_expect(checks, 0)) {
        return register_checked(m, addr, size, flags, access_flags, reg_out);
    }
    struct lookup l;
    bool complete;
    lookup_init(&l, m, addr, size, access_flags);
    l.seq = __atomic_load_n(&m->index.seq, __ATOMIC_ACQUIRE); /* before the index is read */
    l.seen = false;
    reg_t *reg = mca_rcache_base_pgindex_first_candidate(&m->index, l.base >> page_shift,
                                                         l.bound >> page_shift, &complete);
    if (NULL == reg && complete) {
        return register_slow(m, addr, size, flags, access_flags, reg_out, missed_by(&l));
    }
    if (NULL == reg || !take_ref(reg)) {
        return register_walk(m, addr, size, flags, access_flags, reg_out);
    }
    if (__builtin_expect(!covers(reg, &l), 0)) {
        return register_walk_after(m, reg, addr, size, flags, access_flags, reg_out);
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
    uffd_drain(m);
    grdma_progress(m);
    struct lookup l;
    lookup_init(&l, m, addr, size, 0);
    lookup_lockfree(m, &l);
    if (NULL == l.hit) {
        /* Lock-free lookups may miss a registration that moved meanwhile: ask again, exactly. */
        pthread_mutex_lock(&m->lock);
        lookup(m, &l);
        pthread_mutex_unlock(&m->lock);
    }
    if (l.hit && m->verify_frames) {
        mca_rcache_base_frames_check(l.hit, "rcache_find");
    }
    if (l.hit && m->super.rcache_uffd_strict && !confirm_hit(m, l.hit)) {
        l.hit = NULL;
    }
    *reg_out = l.hit;
    return l.hit ? OPAL_SUCCESS : OPAL_ERR_NOT_FOUND;
}

static int grdma_deregister(mca_rcache_base_module_t *rcache, reg_t *reg)
{
    grdma_t *m = (grdma_t *) rcache;
    if (NULL == reg || reg->rcache != rcache) {
        return OPAL_ERR_BAD_PARAM;
    }
    grdma_progress(m);
    return drop_ref(m, reg);
}

static int grdma_invalidate_range(mca_rcache_base_module_t *rcache, void *addr, size_t size)
{
    grdma_t *m = (grdma_t *) rcache;
    reg_t *release = NULL;
    if (range_wraps(addr, size)) {
        return OPAL_ERR_BAD_PARAM;
    }
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
 * How long a release event waits for the lock before it reads the whole
 * index without it: longer than a writer's stretch, short of a rehash of a
 * large index (which a whole read costs about as much as).
 */
#define RELEASE_WAIT_NS 1000000L

/* Whether RELEASE_WAIT_NS passed since the first call (*since zero before it). */
static bool waited_too_long(struct timespec *since)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (0 == since->tv_sec && 0 == since->tv_nsec) {
        *since = now;
        return false;
    }
    return (now.tv_sec - since->tv_sec) * 1000000000L + (now.tv_nsec - since->tv_nsec) >
           RELEASE_WAIT_NS;
}

/*
 * The walk of a release event that the lock-free one could not finish:
 * under the lock, but never waiting for fork().  glibc's fork takes its
 * allocator's locks after the prepare handlers, and grdma_atfork takes the
 * lock there: an event from inside the allocator (malloc_trim or heap
 * trimming, an arena locked) that waited for it would wait for a fork that
 * waits for that arena.  A fork holds the lock without writing, so the walk
 * needs no lock then, and the parent's handler waits for it before letting
 * go.  Any other holder is a writer, for a short stretch: yield, try again.
 * Unless it never lets go: the thread that this event interrupted from a
 * signal handler (the lock's holder, in the middle of a write), or one that
 * holds it while it waits for a released slot that this thread's
 * interrupted event reserved (drain_released_slow).  So after
 * RELEASE_WAIT_NS the walk reads the whole index without the lock instead.
 */
static void release_walk_locked(grdma_t *m, struct marked *mk)
{
    bool locked;
    struct timespec since = {0, 0};
    while (!(locked = 0 == pthread_mutex_trylock(&m->lock))) {
        opal_readers_enter(&m->fork_walkers);
        if (__atomic_load_n(&m->forking, __ATOMIC_SEQ_CST)) {
            break;
        }
        opal_readers_leave(&m->fork_walkers);
        if (waited_too_long(&since)) {
            mca_rcache_base_pgindex_visit_all_lockfree(&m->index, mark_cb, mk);
            return;
        }
        sched_yield();
    }
    mca_rcache_base_pgindex_overlapping(&m->index, mk->low >> page_shift, mk->high >> page_shift,
                                        mark_cb, mk);
    if (locked) {
        pthread_mutex_unlock(&m->lock);
    } else {
        opal_readers_leave(&m->fork_walkers);
    }
}

/*
 * Hand what a release event listed to the next call: a reserved slot each,
 * filled after.  One that finds no slot (other events took the room) is
 * invalidated now, as the unlisted ones are; no slot is reserved when the
 * events before this one left no room for the whole list, so the count
 * stays below RELEASED plus a list for each event under way.
 */
static void released_push(grdma_t *m, const mca_rcache_base_pgindex_list_t *list, struct marked *mk)
{
    if (0 == list->n) {
        return;
    }
    uint32_t at = MCA_RCACHE_GRDMA_RELEASED;
    if (__atomic_load_n(&m->released_n, __ATOMIC_RELAXED) <= MCA_RCACHE_GRDMA_RELEASED - list->n) {
        at = __atomic_fetch_add(&m->released_n, list->n, __ATOMIC_ACQUIRE);
    }
    for (unsigned i = 0; i < list->n; i++, at++) {
        if (at < MCA_RCACHE_GRDMA_RELEASED) {
            /*
             * The next call will invalidate it (a compare-and-swap of its
             * state): its line is fetched meanwhile, not waited for here.
             */
            __builtin_prefetch(list->item[i], 1);
            m->released[at].low = mk->low;
            m->released[at].high = mk->high;
            __atomic_store_n(&m->released[at].reg, list->item[i], __ATOMIC_RELEASE);
        } else {
            (void) mark_cb(list->item[i], mk);
        }
    }
}

/*
 * The release hook: runs before the pages go, possibly inside the
 * allocator.  Lock free: a lock-free walk of the index finds what the
 * pages overlap.  The registrations whose whole block the pages hold
 * surely overlap: they go to the released slots as found, without a look
 * at them (so at scale the event waits for the index line alone, not for
 * the registration's line after it), and every call into the module
 * invalidates those before it looks anything up (work_left, the drain
 * under the lock): none is handed out after the event returned.  The
 * others found are invalidated at once (mark_invalid, which reads their
 * range); the walk is redone under the lock only when a writer was at work
 * meanwhile.  Taking the unused ones out of the index and deregistering
 * them is left to the next call into this module (or its destruction),
 * always: deregister_mem and free may need the allocator's lock when
 * from_alloc, and otherwise the event stays short (UCX defers the same
 * way).  What waits is bounded: RELEASED slots (when they are taken, the
 * event invalidates at once), and the invalidated registrations
 * themselves, chained on the deferred stack, each at most once
 * (mark_invalid hands it over once): however many events come without a
 * call, nothing is allocated and nothing grows.  Pages that no
 * registration touches cost a few lock-free probes, or one look at the
 * chunk counts.
 */
static void grdma_release(mca_rcache_base_module_t *rcache, void *addr, size_t size,
                          bool from_alloc)
{
    grdma_t *m = (grdma_t *) rcache;
    struct marked mk = {.low = (uintptr_t) addr, .high = (uintptr_t) addr + size - 1};
    (void) from_alloc;
    /*
     * A registration inserted concurrently with the release of its own
     * pages is the caller's race, not ours to catch.
     */
    if (0 == size || 0 == __atomic_load_n(&m->cached_entries, __ATOMIC_RELAXED)) {
        return;
    }
    mca_rcache_base_pgindex_list_t list; /* its array is written as filled */
    list.n = 0;
    list.max = MCA_RCACHE_BASE_PGINDEX_LISTED;
    if (!mca_rcache_base_pgindex_visit_lockfree(&m->index, mk.low >> page_shift,
                                                mk.high >> page_shift, mark_cb, &mk, &list)) {
        release_walk_locked(m, &mk);
    }
    released_push(m, &list, &mk);
    deferred_push(m, mk.chain);
}

static void grdma_atfork(mca_rcache_base_module_t *rcache, mca_rcache_base_atfork_phase_t phase)
{
    grdma_t *m = (grdma_t *) rcache;
    if (MCA_RCACHE_ATFORK_PREPARE == phase) {
        pthread_mutex_lock(&m->lock);
        __atomic_store_n(&m->forking, true, __ATOMIC_SEQ_CST); /* release_walk_locked */
    } else if (MCA_RCACHE_ATFORK_PARENT == phase) {
        __atomic_store_n(&m->forking, false, __ATOMIC_SEQ_CST);
        opal_readers_drain(&m->fork_walkers, 0);
        pthread_mutex_unlock(&m->lock);
    } else {
        pthread_mutex_init(&m->lock, NULL); /* held by a thread id that no longer exists */
        m->forking = false;
        m->fork_walkers = 0; /* their threads stayed in the parent */
        m->forked = true; /* the registrations are the parent's: dropped at the next call */
        /*
         * The released slots too: their registrations go anyway, and a slot
         * may stay reserved for good (its event's thread is not here).
         */
        m->released_n = 0;
        for (int i = 0; i < MCA_RCACHE_GRDMA_RELEASED; i++) {
            m->released[i].reg = NULL;
        }
    }
}

/* Destroy: every registration made here is deregistered exactly once. */
static void grdma_finalize(mca_rcache_base_module_t *rcache)
{
    grdma_t *m = (grdma_t *) rcache;
    reg_t *release = NULL;
    grdma_progress(m); /* the deferred ones, out of the index */
    /*
     * Every registration not spare goes: cached, in use (the caller destroys
     * under its own users), invalid and waiting for its last reference,
     * bypass.  No release event runs any more (the base took the module out
     * of its callback first); the index goes whole.
     */
    for (slab_head_t *slab = m->slabs; slab; slab = slab->next) {
        for (size_t i = 0; i < slab->regs; i++) {
            reg_t *reg = slab_reg(m, slab, i);
            if (state_load(reg).s.flags & ~MCA_RCACHE_GRDMA_GEN) {
                chain_push(&release, reg);
            }
        }
    }
    release_chain(m, release);
    for (slab_head_t *slab = m->slabs, *next; slab; slab = next) {
        next = slab->next;
        if (slab->mapped) {
            mca_rcache_base_hugemem_free(slab, slab->mapped);
        } else {
            free(slab);
        }
    }
    pthread_mutex_destroy(&m->lock);
    mca_rcache_base_pgindex_fini(&m->index);
    free(m);
}

mca_rcache_base_module_t *mca_rcache_grdma_module_create(
    void *user_data, const mca_rcache_base_resources_t *resources, bool leave_pinned)
{
    page_size = (uintptr_t) sysconf(_SC_PAGESIZE);
    page_shift = (unsigned) __builtin_ctzl(page_size);
    grdma_t *m = calloc(1, sizeof(*m));
    /* The index reads each range from the registration: base and bound (last byte). */
    if (NULL == m || OPAL_SUCCESS != mca_rcache_base_pgindex_init(
                         &m->index, (ptrdiff_t) offsetof(reg_t, base), page_shift)) {
        free(m);
        return NULL;
    }
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
    m->limited = m->max_bytes || m->max_entries;
    m->verify_frames = 0 != mca_rcache_base_verify_frames;
    pthread_mutex_init(&m->lock, NULL);
    m->fork_gen = mca_rcache_base_fork_gen;
    return &m->super;
}
