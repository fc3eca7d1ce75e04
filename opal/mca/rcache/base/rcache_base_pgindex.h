/*
 * A page-granular index of ranges of pages, for registration caches: which
 * ranges overlap a range of pages (a release event), which cover one (a
 * cache hit).
 *
 * A range of n pages belongs to size class s, the smallest with n <= 2^s,
 * and is hashed by (s, block) where block = first >> s: it lies in that
 * block and the next.  A query probes, for each class that holds ranges,
 * the blocks it can meet (two for a lookup of one page), so a release of
 * pages that no range touches costs a few probes of the hash table and no
 * lock (see CHUNKS below for the common case: none at all).  When a query
 * would probe more blocks of a class than the class has ranges, it scans
 * the whole table instead (once for all such classes): a long release over
 * many small ranges costs O(min(blocks, ranges)), not O(log n + k).
 *
 * The table is open addressed, one cache line per bucket: each entry holds
 * the key and the caller's item (a pointer), so a probe compares keys
 * without touching the items, and growing the table reads the old table
 * alone, never an item.  The caller keeps each item's range (see init).
 *
 * Writers (insert, remove, rehash, overlapping) are serialized by the
 * caller.  covering() may also run without the writer's lock: it is then
 * best effort (it may miss a range being changed meanwhile, or hand out an
 * item that has just left the index) and its visitor must validate what it
 * finds.  might_overlap() runs without the lock and is exact or errs
 * towards true: a sequence count, odd while a writer changes the index,
 * tells it whether what it saw was consistent.  Nothing here allocates
 * except table_new.
 */
#ifndef OPAL_MCA_RCACHE_BASE_RCACHE_BASE_PGINDEX_H
#define OPAL_MCA_RCACHE_BASE_RCACHE_BASE_PGINDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MCA_RCACHE_BASE_PGINDEX_CLASSES 64
/*
 * Small ranges (class <= CHUNK_SHIFT, so they touch at most two chunks of
 * 2^CHUNK_SHIFT pages) are also counted per chunk, hashed into CHUNKS
 * counters: a release whose chunks all count 0 meets no small range, known
 * from one cache-resident array without touching the hash table.
 */
#define MCA_RCACHE_BASE_PGINDEX_CHUNK_SHIFT 9
#define MCA_RCACHE_BASE_PGINDEX_CHUNKS 8192

/*
 * An entry: the key (block << 7 | class << 1) and the item, NULL when the
 * slot is free.  Bit 0 of the key of a line's first entry says that the
 * line overflowed: an insert found it full and went on to the next line,
 * so a probe must go on too.  The bit is cleared only by a rehash.  Page
 * numbers are below 2^57 (2^25 with 32-bit pointers).
 */
typedef struct mca_rcache_base_pgindex_entry_t {
    uintptr_t key;
    void *item;
} mca_rcache_base_pgindex_entry_t;

/* Entries per 64-byte line (4, or 8 with 32-bit pointers): a bucket. */
#define MCA_RCACHE_BASE_PGINDEX_SLOT_SHIFT (sizeof(void *) > 4 ? 2 : 3)
#define MCA_RCACHE_BASE_PGINDEX_SLOTS (1u << MCA_RCACHE_BASE_PGINDEX_SLOT_SHIFT)
/*
 * Consecutive blocks of a class hashed together, a group: half a line.  A
 * group of a whole line makes a dense run fill its lines whole, so another
 * run's group sent to one of them moves on to the next line, and a hit
 * there reads two or more (linear probing with one group per line: 2.5
 * lines per hit at load 3/4 for dense regions far apart, against 1.6 with
 * half a line; rcache_pgindex_probe_test, bench/rcache/README.md).
 */
#define MCA_RCACHE_BASE_PGINDEX_GROUP_SHIFT (MCA_RCACHE_BASE_PGINDEX_SLOT_SHIFT - 1)
#define MCA_RCACHE_BASE_PGINDEX_OVERFLOW ((uintptr_t) 1)

/*
 * A table: this header, then the lines.  A table that a rehash replaced is
 * kept until fini (lock-free readers may still be in it), but its whole
 * pages after the header's are given back (MADV_DONTNEED: a late reader
 * reads free slots there).
 */
typedef struct mca_rcache_base_pgindex_table_t {
    struct mca_rcache_base_pgindex_table_t *retired; /* the table this one replaced */
    void *block;                                     /* what to free */
    size_t bytes;                                    /* header and lines */
    unsigned bits;                                   /* log2 of the number of lines */
    int released;                                    /* its lines were given back */
    size_t overflowed;                               /* lines with OVERFLOW set (writer side) */
    size_t built_overflowed;                         /* of them, set when it was built */
    size_t removed;                                  /* entries removed since it was built */
    mca_rcache_base_pgindex_entry_t entry[] __attribute__((aligned(64)));
} mca_rcache_base_pgindex_table_t;

typedef struct mca_rcache_base_pgindex_t {
    mca_rcache_base_pgindex_table_t *table;
    ptrdiff_t range_at;  /* from an item to its range: unsigned char *first_byte, *last_byte */
    unsigned page_shift; /* page number = byte address >> page_shift */
    size_t count;
    uint64_t active; /* bit s: class s holds a range */
    uint32_t seq;    /* odd while a writer changes the index */
    size_t class_count[MCA_RCACHE_BASE_PGINDEX_CLASSES];
    uint32_t chunk_count[MCA_RCACHE_BASE_PGINDEX_CHUNKS];
} mca_rcache_base_pgindex_t;

/* Visitor: 0 to go on, anything else stops the walk and is returned. */
typedef int (*mca_rcache_base_pgindex_visit_fn_t)(void *item, void *ctx);

/*
 * range_at: where each item's range is, relative to the item (the caller
 * keeps it as it was at insert until the item is removed); page_shift:
 * log2 of the page size those byte addresses are counted in (0: they are
 * page numbers already).  OPAL_ERR_OUT_OF_RESOURCE if the first table
 * cannot be allocated.
 */
int mca_rcache_base_pgindex_init(mca_rcache_base_pgindex_t *idx, ptrdiff_t range_at,
                                 unsigned page_shift);
/* Frees the tables (current and retired); the items are the caller's. */
void mca_rcache_base_pgindex_fini(mca_rcache_base_pgindex_t *idx);

/* There is room for one more item (else grow first). */
static inline bool mca_rcache_base_pgindex_room(const mca_rcache_base_pgindex_t *idx)
{
    return idx->count + 1 < ((size_t) 1 << (idx->table->bits + MCA_RCACHE_BASE_PGINDEX_SLOT_SHIFT));
}
/* Only with room(). */
void mca_rcache_base_pgindex_insert(mca_rcache_base_pgindex_t *idx, void *item, uintptr_t first,
                                    uintptr_t last);
/* A lock-free reader may still hand out the item afterwards (see above). */
void mca_rcache_base_pgindex_remove(mca_rcache_base_pgindex_t *idx, void *item);
/*
 * new_item takes old_item's slot: its range must be old_item's (the same
 * key).  One store where a remove and an insert would update the counts
 * twice.
 */
void mca_rcache_base_pgindex_replace(mca_rcache_base_pgindex_t *idx, void *old_item,
                                     void *new_item);

/*
 * Growing: the caller allocates a table outside its lock when wanted() says
 * so (the log2 of its lines, 0 if none is needed: more than 3/4 of the
 * slots used, or many lines overflowed and as many entries left since it
 * was built), then installs it under the lock with rehash(), which returns
 * it when it was not needed any more (free it with table_free outside the
 * lock), else NULL: then call release() outside the lock to give the
 * replaced table's lines back.
 */
unsigned mca_rcache_base_pgindex_wanted(const mca_rcache_base_pgindex_t *idx);
mca_rcache_base_pgindex_table_t *mca_rcache_base_pgindex_table_new(unsigned bits);
void mca_rcache_base_pgindex_table_free(mca_rcache_base_pgindex_table_t *t);
mca_rcache_base_pgindex_table_t *mca_rcache_base_pgindex_rehash(mca_rcache_base_pgindex_t *idx,
                                                                mca_rcache_base_pgindex_table_t *t);
void mca_rcache_base_pgindex_release(mca_rcache_base_pgindex_t *idx);

/* Every range overlapping pages [first, last], each once (writer side). */
int mca_rcache_base_pgindex_overlapping(mca_rcache_base_pgindex_t *idx, uintptr_t first,
                                        uintptr_t last, mca_rcache_base_pgindex_visit_fn_t fn,
                                        void *ctx);

/* The smallest s with last - first + 1 <= 2^s (capped: class 63 has only two blocks). */
static inline unsigned mca_rcache_base_pgindex_class(uintptr_t first, uintptr_t last)
{
    uintptr_t span = last - first;
    unsigned s = span ? 64 - (unsigned) __builtin_clzll(span) : 0;
    return s < MCA_RCACHE_BASE_PGINDEX_CLASSES ? s : MCA_RCACHE_BASE_PGINDEX_CLASSES - 1;
}

static inline uintptr_t mca_rcache_base_pgindex_key(unsigned s, uintptr_t block)
{
    return block << 7 | (uintptr_t) s << 1;
}

/* The size class in a key (its overflow bit aside). */
static inline unsigned mca_rcache_base_pgindex_key_class(uintptr_t key)
{
    return (unsigned) (key >> 1 & 63);
}

/* The item's range in pages, from the caller's copy. */
static inline void mca_rcache_base_pgindex_range(const mca_rcache_base_pgindex_t *idx,
                                                 const void *item, uintptr_t *first,
                                                 uintptr_t *last)
{
    unsigned char *const *range = (unsigned char *const *) ((const char *) item + idx->range_at);
    *first = (uintptr_t) __atomic_load_n(&range[0], __ATOMIC_RELAXED) >> idx->page_shift;
    *last = (uintptr_t) __atomic_load_n(&range[1], __ATOMIC_RELAXED) >> idx->page_shift;
}

/*
 * A key's home: the consecutive blocks of a group share one line (a
 * program registers neighbouring pages one after the other: they then meet
 * a line already in the cache, and a line holds a run of them), with half
 * of its slots free for another group.  The groups are spread over the
 * table by Fibonacci hashing of the group's number with the class rotated
 * into its top bits.
 */
static inline size_t mca_rcache_base_pgindex_home(const mca_rcache_base_pgindex_table_t *t,
                                                  uintptr_t key)
{
    const unsigned shift = 7 + MCA_RCACHE_BASE_PGINDEX_GROUP_SHIFT;
    const uint64_t class_bits = (uint64_t) mca_rcache_base_pgindex_key_class(key) << 58;
    uint64_t h = ((uint64_t) (key >> shift) ^ class_bits) * 0x9e3779b97f4a7c15ull;
    return (size_t) (h >> (64 - t->bits));
}

/* The key's own slot in its line, where an insert puts it when that slot is free. */
static inline unsigned mca_rcache_base_pgindex_home_slot(uintptr_t key)
{
    return (unsigned) (key >> 7) & (MCA_RCACHE_BASE_PGINDEX_SLOTS - 1);
}

/* Items that a lock-free walk listed instead of visiting (see visit_lockfree). */
#define MCA_RCACHE_BASE_PGINDEX_LISTED 8
typedef struct mca_rcache_base_pgindex_list_t {
    unsigned n, max; /* max <= LISTED */
    void *item[MCA_RCACHE_BASE_PGINDEX_LISTED];
} mca_rcache_base_pgindex_list_t;

/*
 * Visit the item of entry x if it overlaps pages [first, last] (or with
 * key_only: in any case), or put it on list instead while list has room.
 */
static inline __attribute__((always_inline)) int mca_rcache_base_pgindex_visit_slot(
    const mca_rcache_base_pgindex_t *idx, const mca_rcache_base_pgindex_entry_t *x, uintptr_t first,
    uintptr_t last, bool key_only, mca_rcache_base_pgindex_list_t *list,
    mca_rcache_base_pgindex_visit_fn_t fn, void *ctx)
{
    void *item = __atomic_load_n(&x->item, __ATOMIC_ACQUIRE);
    uintptr_t lo, hi;
    if (NULL == item) {
        return 0;
    }
    if (list && list->n < list->max) {
        list->item[list->n++] = item;
        return 0;
    }
    if (!key_only) {
        mca_rcache_base_pgindex_range(idx, item, &lo, &hi);
    }
    return key_only || (lo <= last && hi >= first) ? fn(item, ctx) : 0;
}

/*
 * Which slots of the line at e hold key (bit j for slot j), compared
 * without a branch (which slot holds it is random: a branch per slot would
 * be mispredicted); *key0 gets the first slot's key, whose bit 0 says
 * whether the line overflowed.
 */
static inline __attribute__((always_inline)) unsigned
mca_rcache_base_pgindex_line_match(const mca_rcache_base_pgindex_entry_t *e, uintptr_t key,
                                   uintptr_t *key0)
{
    const uintptr_t ovf = MCA_RCACHE_BASE_PGINDEX_OVERFLOW;
    *key0 = __atomic_load_n(&e[0].key, __ATOMIC_RELAXED);
    unsigned match = 0;
#pragma GCC unroll 8
    for (unsigned j = 0; j < MCA_RCACHE_BASE_PGINDEX_SLOTS; j++) {
        uintptr_t k = j ? __atomic_load_n(&e[j].key, __ATOMIC_RELAXED) : *key0;
        match |= (unsigned) ((k & ~ovf) == key) << j;
    }
    return match;
}

/*
 * Visit the items with this key that overlap pages [first, last] (or, with
 * key_only, all of them: the caller checks), or list them (visit_slot):
 * the home line, then the next lines while they overflowed.  Each line is
 * visited at most once.  Inline, so that a caller's visitor is inlined too.
 *
 * The key first, then the item: a slot being rewritten may pair a key with
 * another item or with none; the caller validates what it is handed (see
 * the top).  The key's own slot is looked at first (where it usually is,
 * one predictable test), then the line's keys all at once (line_match).
 */
static inline __attribute__((always_inline)) int mca_rcache_base_pgindex_probe(
    const mca_rcache_base_pgindex_t *idx, const mca_rcache_base_pgindex_table_t *t, uintptr_t key,
    uintptr_t first, uintptr_t last, bool key_only, mca_rcache_base_pgindex_list_t *list,
    mca_rcache_base_pgindex_visit_fn_t fn, void *ctx)
{
    const uintptr_t ovf = MCA_RCACHE_BASE_PGINDEX_OVERFLOW;
    size_t line = mca_rcache_base_pgindex_home(t, key);
    unsigned home = mca_rcache_base_pgindex_home_slot(key);
    const mca_rcache_base_pgindex_entry_t *e = &t->entry[line * MCA_RCACHE_BASE_PGINDEX_SLOTS];
    if ((__atomic_load_n(&e[home].key, __ATOMIC_RELAXED) & ~ovf) == key) {
        int rc = mca_rcache_base_pgindex_visit_slot(idx, &e[home], first, last, key_only, list, fn,
                                                    ctx);
        if (rc) {
            return rc;
        }
    }
    /* Past the key's own slot: the mask is computed here only (a hit has returned). */
    const size_t mask = ((size_t) 1 << t->bits) - 1;
    for (size_t n = 0; n <= mask; n++) {
        uintptr_t key0;
        unsigned match = mca_rcache_base_pgindex_line_match(e, key, &key0);
        for (match &= ~(n ? 0u : 1u << home); match; match &= match - 1) {
            int rc = mca_rcache_base_pgindex_visit_slot(idx, &e[__builtin_ctz(match)], first, last,
                                                        key_only, list, fn, ctx);
            if (rc) {
                return rc;
            }
        }
        if (!(key0 & ovf)) {
            break;
        }
        line = (line + 1) & mask;
        e = &t->entry[line * MCA_RCACHE_BASE_PGINDEX_SLOTS];
    }
    return 0;
}

/*
 * Candidates for ranges covering all of pages [first, last]: two probes per
 * class that holds ranges.  The visitor gets every range of the blocks
 * probed and checks coverage itself, from its own copy of the range (a
 * caller keeping the range next to its hot fields then touches one cache
 * line per candidate).  Lock free it is best effort (see above); under the
 * writer's lock it is exact.
 */
static inline __attribute__((always_inline)) int
mca_rcache_base_pgindex_covering(mca_rcache_base_pgindex_t *idx, uintptr_t first, uintptr_t last,
                                 mca_rcache_base_pgindex_visit_fn_t fn, void *ctx)
{
    const mca_rcache_base_pgindex_table_t *t = __atomic_load_n(&idx->table, __ATOMIC_ACQUIRE);
    /* A covering range has at least last - first + 1 pages: skip the smaller classes. */
    uint64_t act = __atomic_load_n(&idx->active, __ATOMIC_RELAXED)
                   & (~0ull << mca_rcache_base_pgindex_class(first, last));
    for (; act; act &= act - 1) {
        unsigned s = (unsigned) __builtin_ctzll(act);
        uintptr_t b = first >> s;
        int rc = mca_rcache_base_pgindex_probe(idx, t, mca_rcache_base_pgindex_key(s, b), first,
                                               last, true, NULL, fn, ctx);
        /* Ranges of class s > 0 reach into the next block. */
        if (0 == rc && s && b) {
            rc = mca_rcache_base_pgindex_probe(idx, t, mca_rcache_base_pgindex_key(s, b - 1), first,
                                               last, true, NULL, fn, ctx);
        }
        if (rc) {
            return rc;
        }
    }
    return 0;
}

/*
 * Lock free, best effort: a hit's first look.  The item with the key of
 * pages [first, last] in the smallest class that holds ranges and could
 * cover them, from the key's home line (its own slot first, where a range
 * alone in its block usually sits), or NULL.  *complete tells whether a
 * NULL is all that covering() would have found: one class to look in, of
 * single pages (no second block), and a home line that never overflowed.
 * The caller validates the item.
 */
static inline void *mca_rcache_base_pgindex_first_candidate(mca_rcache_base_pgindex_t *idx,
                                                            uintptr_t first, uintptr_t last,
                                                            bool *complete)
{
    const mca_rcache_base_pgindex_table_t *t = __atomic_load_n(&idx->table, __ATOMIC_ACQUIRE);
    const uint64_t act = __atomic_load_n(&idx->active, __ATOMIC_RELAXED)
                         & (~0ull << mca_rcache_base_pgindex_class(first, last));
    *complete = 0 == act;
    if (0 == act) {
        return NULL;
    }
    const unsigned s = (unsigned) __builtin_ctzll(act);
    const uintptr_t key = mca_rcache_base_pgindex_key(s, first >> s);
    const uintptr_t ovf = MCA_RCACHE_BASE_PGINDEX_OVERFLOW;
    const mca_rcache_base_pgindex_entry_t *e =
        &t->entry[mca_rcache_base_pgindex_home(t, key) * MCA_RCACHE_BASE_PGINDEX_SLOTS];
    const unsigned home = mca_rcache_base_pgindex_home_slot(key);
    if ((__atomic_load_n(&e[home].key, __ATOMIC_RELAXED) & ~ovf) == key) {
        return __atomic_load_n(&e[home].item, __ATOMIC_ACQUIRE);
    }
    /* Another slot of the line (a group displaced by another one). */
    uintptr_t key0;
    const unsigned match = mca_rcache_base_pgindex_line_match(e, key, &key0);
    if (match) {
        return __atomic_load_n(&e[__builtin_ctz(match)].item, __ATOMIC_ACQUIRE);
    }
    *complete = 0 == (act & (act - 1)) && 0 == s && !(key0 & ovf);
    return NULL;
}

/* Lock free: false only if no range overlapped [first, last] at some instant during the call. */
bool mca_rcache_base_pgindex_might_overlap(mca_rcache_base_pgindex_t *idx, uintptr_t first,
                                           uintptr_t last);

/*
 * Lock free: visit every item of the blocks where ranges overlapping pages
 * [first, last] can be (key_only: the visitor checks the range from its
 * own copy, as for covering; a nonzero return stops the walk).  True when
 * the walk was complete and consistent: the visitor then saw every item
 * that overlapped at one instant of the call (no writer was at work
 * meanwhile).  False when it cannot tell (a writer was at work, too many
 * blocks, the visitor stopped): use overlapping() under the lock.
 *
 * With a list (may be NULL): an item of a block that lies whole in [first,
 * last] surely overlaps, and while the list has room it is put there
 * instead of visited, without a look at the item (a release event that
 * leaves the rest to later then reads no line of it).  The list is emptied
 * when the call returns false: overlapping() visits them all.
 */
bool mca_rcache_base_pgindex_visit_lockfree(mca_rcache_base_pgindex_t *idx, uintptr_t first,
                                            uintptr_t last, mca_rcache_base_pgindex_visit_fn_t fn,
                                            void *ctx, mca_rcache_base_pgindex_list_t *list);

/*
 * Every item of the index without the writer's lock, for a caller that
 * cannot wait for it: best effort as covering() (an item a writer inserts
 * or replaces meanwhile may be missed), and fn must validate each item it
 * is given (range, state).  A rehash meanwhile is followed: the table that
 * replaced the one read is read whole too (a replaced table stays until
 * fini, its lines given back read as free slots).  Reads the whole table.
 */
void mca_rcache_base_pgindex_visit_all_lockfree(mca_rcache_base_pgindex_t *idx,
                                                mca_rcache_base_pgindex_visit_fn_t fn, void *ctx);

/* Under the writer's lock: no writer changed the index since *seq was read. */
static inline bool mca_rcache_base_pgindex_unchanged(const mca_rcache_base_pgindex_t *idx,
                                                     uint32_t seq)
{
    return __atomic_load_n(&idx->seq, __ATOMIC_RELAXED) == seq;
}

static inline size_t mca_rcache_base_pgindex_size(const mca_rcache_base_pgindex_t *idx)
{
    return __atomic_load_n(&idx->count, __ATOMIC_RELAXED);
}

#endif
