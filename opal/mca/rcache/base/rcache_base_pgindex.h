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
 * Writers (insert, remove, rehash, overlapping) are serialized by the
 * caller.  covering() may also run without the writer's lock: it is then
 * best effort (it may miss a range being changed meanwhile, never visits
 * freed memory as long as the caller keeps nodes' memory alive, which
 * type-stable allocation does) and its visitor must validate what it finds.
 * might_overlap() runs without the lock and is exact or errs towards true:
 * a sequence count, odd while a writer changes the index, tells it whether
 * what it saw was consistent.  Nothing here allocates except table_new.
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
 * A node is what a probe reads: the chain link and the key.  The range
 * itself is the caller's own copy (it has one anyway): two pointers, the
 * first and the last byte, at range_at bytes from the node (see init), so
 * a caller that embeds the node next to its range and its hot fields has
 * a probe touch one cache line per candidate.  The caller keeps that copy
 * as it was at insert until the node is removed.  Once removed, hash_next
 * is the caller's to link its own lists with (see remove).
 */
typedef struct mca_rcache_base_pgindex_node_t {
    struct mca_rcache_base_pgindex_node_t *hash_next;
    uintptr_t key; /* block << 6 | class */
} mca_rcache_base_pgindex_node_t;

typedef struct mca_rcache_base_pgindex_table_t {
    struct mca_rcache_base_pgindex_table_t *retired; /* the table this one replaced */
    unsigned bits;                                   /* log2 of the number of buckets */
    unsigned line_shift;                             /* 64 - bits + LINE_SHIFT (see bucket) */
    mca_rcache_base_pgindex_node_t *bucket[];
} mca_rcache_base_pgindex_table_t;

typedef struct mca_rcache_base_pgindex_t {
    mca_rcache_base_pgindex_table_t *table;
    ptrdiff_t range_at;  /* from a node to its range: unsigned char *first_byte, *last_byte */
    unsigned page_shift; /* page number = byte address >> page_shift */
    size_t count;
    uint64_t active; /* bit s: class s holds a range */
    uint32_t seq;    /* odd while a writer changes the index */
    size_t class_count[MCA_RCACHE_BASE_PGINDEX_CLASSES];
    uint32_t chunk_count[MCA_RCACHE_BASE_PGINDEX_CHUNKS];
} mca_rcache_base_pgindex_t;

/* Visitor: 0 to go on, anything else stops the walk and is returned. */
typedef int (*mca_rcache_base_pgindex_visit_fn_t)(mca_rcache_base_pgindex_node_t *node, void *ctx);

/*
 * range_at: where each node's range is, relative to the node (may be
 * negative); page_shift: log2 of the page size those byte addresses are
 * counted in (0: they are page numbers already).
 * OPAL_ERR_OUT_OF_RESOURCE if the first table cannot be allocated.
 */
int mca_rcache_base_pgindex_init(mca_rcache_base_pgindex_t *idx, ptrdiff_t range_at,
                                 unsigned page_shift);
/* Frees the tables (current and retired); the nodes are the caller's. */
void mca_rcache_base_pgindex_fini(mca_rcache_base_pgindex_t *idx);

void mca_rcache_base_pgindex_insert(mca_rcache_base_pgindex_t *idx,
                                    mca_rcache_base_pgindex_node_t *node, uintptr_t first,
                                    uintptr_t last);
/*
 * The node's hash_next stays as it was, so that a lock-free reader standing
 * on it still reaches the rest of its chain.  Afterwards the caller may
 * link the node through hash_next into lists of its own: a reader that
 * could still stand on it started before the removal, which might_overlap
 * and visit_lockfree notice by the sequence count, and covering's visitor
 * validates what it finds anyway.
 */
void mca_rcache_base_pgindex_remove(mca_rcache_base_pgindex_t *idx,
                                    mca_rcache_base_pgindex_node_t *node);

/*
 * Growing: the caller allocates a table outside its lock when wanted()
 * says so (the number of buckets, 0 if none is needed), then installs it
 * under the lock with rehash(), which returns the table to free (outside
 * the lock) when it was not needed any more, else NULL.  Replaced tables
 * are kept until fini: lock-free readers may still be in them.
 */
size_t mca_rcache_base_pgindex_wanted(const mca_rcache_base_pgindex_t *idx);
mca_rcache_base_pgindex_table_t *mca_rcache_base_pgindex_table_new(size_t buckets);
mca_rcache_base_pgindex_table_t *mca_rcache_base_pgindex_rehash(mca_rcache_base_pgindex_t *idx,
                                                                mca_rcache_base_pgindex_table_t *t);

/* Every range overlapping pages [first, last], each once (writer side). */
int mca_rcache_base_pgindex_overlapping(mca_rcache_base_pgindex_t *idx, uintptr_t first,
                                        uintptr_t last, mca_rcache_base_pgindex_visit_fn_t fn,
                                        void *ctx);

/* A chain is a few nodes long; a lock-free walk longer than this is being rebuilt under it. */
#define MCA_RCACHE_BASE_PGINDEX_WALK_LIMIT 64

/* The smallest s with last - first + 1 <= 2^s (capped: class 63 has only two blocks). */
static inline unsigned mca_rcache_base_pgindex_class(uintptr_t first, uintptr_t last)
{
    uintptr_t span = last - first;
    unsigned s = span ? 64 - (unsigned) __builtin_clzl(span) : 0;
    return s < MCA_RCACHE_BASE_PGINDEX_CLASSES ? s : MCA_RCACHE_BASE_PGINDEX_CLASSES - 1;
}

static inline uintptr_t mca_rcache_base_pgindex_key(unsigned s, uintptr_t block)
{
    return block << 6 | s;
}

/* The node's range in pages, from the caller's copy. */
static inline void mca_rcache_base_pgindex_range(const mca_rcache_base_pgindex_t *idx,
                                                 const mca_rcache_base_pgindex_node_t *node,
                                                 uintptr_t *first, uintptr_t *last)
{
    unsigned char *const *range = (unsigned char *const *) ((const char *) node + idx->range_at);
    *first = (uintptr_t) __atomic_load_n(&range[0], __ATOMIC_RELAXED) >> idx->page_shift;
    *last = (uintptr_t) __atomic_load_n(&range[1], __ATOMIC_RELAXED) >> idx->page_shift;
}

/*
 * Eight consecutive blocks of a class share one cache line of buckets (a
 * program registers neighbouring pages one after the other: they then meet
 * a line already in the cache).  The groups of eight are spread over the
 * table by Fibonacci hashing of the group's number with the class rotated
 * into its top bits, and a group's first block starts at a slot of the
 * line that the hash picks too, so that blocks eight apart do not all
 * crowd into slot 0.  Tables have at least 2^3 buckets.
 */
#define MCA_RCACHE_BASE_PGINDEX_LINE_SHIFT 3
static inline mca_rcache_base_pgindex_node_t *const *
mca_rcache_base_pgindex_bucket(const mca_rcache_base_pgindex_table_t *t, uintptr_t key)
{
    const unsigned line = MCA_RCACHE_BASE_PGINDEX_LINE_SHIFT;
    const uint64_t slots = ((uint64_t) 1 << line) - 1;
    uint64_t h = ((uint64_t) (key >> (6 + line)) ^ (uint64_t) key << 58) * 0x9e3779b97f4a7c15ull;
    return &t->bucket[(h >> t->line_shift) << line | (((key >> 6) + (h >> 29)) & slots)];
}

/*
 * Visit the nodes with this key that overlap pages [first, last] (or, with
 * key_only, all of them: the caller checks), looking at no more than
 * 'limit' nodes (*gave_up then).  Inline, so that a caller's visitor is
 * inlined too.
 */
static inline __attribute__((always_inline)) int mca_rcache_base_pgindex_probe(
    const mca_rcache_base_pgindex_t *idx, const mca_rcache_base_pgindex_table_t *t, uintptr_t key,
    uintptr_t first, uintptr_t last, bool key_only, mca_rcache_base_pgindex_visit_fn_t fn,
    void *ctx, size_t limit, bool *gave_up)
{
    mca_rcache_base_pgindex_node_t *n =
        __atomic_load_n(mca_rcache_base_pgindex_bucket(t, key), __ATOMIC_ACQUIRE);
    for (; n; n = __atomic_load_n(&n->hash_next, __ATOMIC_ACQUIRE)) {
        if (0 == limit--) {
            *gave_up = true;
            return 0;
        }
        if (__atomic_load_n(&n->key, __ATOMIC_RELAXED) != key) {
            continue; /* another key in the same bucket */
        }
        uintptr_t lo, hi;
        if (!key_only) {
            mca_rcache_base_pgindex_range(idx, n, &lo, &hi);
        }
        if (key_only || (lo <= last && hi >= first)) {
            int rc = fn(n, ctx);
            if (rc) {
                return rc;
            }
        }
    }
    return 0;
}

/*
 * Candidates for ranges covering all of pages [first, last]: two probes per
 * class that holds ranges.  The visitor gets every range of the blocks
 * probed and checks coverage itself, from its own copy of the range (a
 * caller embedding the node next to its hot fields then touches one cache
 * line per candidate).  Lock free it is best effort (see above); under the
 * writer's lock it misses only ranges beyond WALK_LIMIT in one chain.
 */
static inline __attribute__((always_inline)) int
mca_rcache_base_pgindex_covering(mca_rcache_base_pgindex_t *idx, uintptr_t first, uintptr_t last,
                                 mca_rcache_base_pgindex_visit_fn_t fn, void *ctx)
{
    const mca_rcache_base_pgindex_table_t *t = __atomic_load_n(&idx->table, __ATOMIC_ACQUIRE);
    bool gave_up = false;
    /* A covering range has at least last - first + 1 pages: skip the smaller classes. */
    uint64_t act = __atomic_load_n(&idx->active, __ATOMIC_RELAXED)
                   & (~0ull << mca_rcache_base_pgindex_class(first, last));
    for (; act; act &= act - 1) {
        unsigned s = (unsigned) __builtin_ctzll(act);
        uintptr_t b = first >> s;
        int rc = mca_rcache_base_pgindex_probe(idx, t, mca_rcache_base_pgindex_key(s, b), first,
                                               last, true, fn, ctx,
                                               MCA_RCACHE_BASE_PGINDEX_WALK_LIMIT, &gave_up);
        /* Ranges of class s > 0 reach into the next block. */
        if (0 == rc && s && b) {
            rc = mca_rcache_base_pgindex_probe(idx, t, mca_rcache_base_pgindex_key(s, b - 1), first,
                                               last, true, fn, ctx,
                                               MCA_RCACHE_BASE_PGINDEX_WALK_LIMIT, &gave_up);
        }
        if (rc) {
            return rc;
        }
    }
    return 0;
}

/* Lock free: false only if no range overlapped [first, last] at some instant during the call. */
bool mca_rcache_base_pgindex_might_overlap(mca_rcache_base_pgindex_t *idx, uintptr_t first,
                                           uintptr_t last);

/*
 * Lock free: visit every node of the blocks where ranges overlapping pages
 * [first, last] can be (key_only: the visitor checks the range from its
 * own copy, as for covering; a nonzero return stops the walk).  True when
 * the walk was complete and consistent: the visitor then saw every node
 * that overlapped at the instant *seq names, and if unchanged(*seq) holds
 * later under the writer's lock, the index is still as it was then.  False
 * when it cannot tell (a writer was at work, too many blocks, a chain too
 * long, the visitor stopped): use overlapping() under the lock.
 */
bool mca_rcache_base_pgindex_visit_lockfree(mca_rcache_base_pgindex_t *idx, uintptr_t first,
                                            uintptr_t last, mca_rcache_base_pgindex_visit_fn_t fn,
                                            void *ctx, uint32_t *seq);

/* Under the writer's lock: no writer changed the index since visit_lockfree's *seq. */
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
