/*
 * Page index: a hash of ranges by (size class, block), see the header.
 *
 * Lock-free readers follow hash_next pointers that a writer may be
 * rewriting (a node removed, re-inserted elsewhere, or moved by a rehash):
 * they may then wander into another chain or see a chain end early, but
 * only ever visit nodes (the caller keeps their memory), so every walk
 * without the lock is bounded and its result either validated by the
 * caller (covering) or by the sequence count (might_overlap).  Fields that
 * such readers load are written with atomic stores; a node is published
 * with a release store of the pointer to it.
 */
#include "opal_config.h"

#include <stdlib.h>

#include "opal/constants.h"
#include "opal/mca/rcache/base/rcache_base_pgindex.h"

typedef mca_rcache_base_pgindex_node_t node_t;
typedef mca_rcache_base_pgindex_t pgindex_t;
typedef mca_rcache_base_pgindex_visit_fn_t visit_fn_t;

typedef mca_rcache_base_pgindex_table_t table_t;

#define MIN_BUCKETS 256
/* Blocks of one class that might_overlap probes before it answers "maybe" (take the lock). */
#define PROBE_LIMIT 512

#define LOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)

#define class_of mca_rcache_base_pgindex_class
#define key_of mca_rcache_base_pgindex_key
#define WALK_LIMIT MCA_RCACHE_BASE_PGINDEX_WALK_LIMIT

/* The first block of class s whose ranges can reach page 'first' (they span two blocks). */
static inline uintptr_t block_lo(uintptr_t first, unsigned s)
{
    uintptr_t b = first >> s;
    return s && b ? b - 1 : b;
}

#define CHUNK_SHIFT MCA_RCACHE_BASE_PGINDEX_CHUNK_SHIFT
#define SMALL_CLASSES ((1ull << (CHUNK_SHIFT + 1)) - 1)
/* Chunks a query checks in chunk_count before it answers "maybe" for the small classes. */
#define CHUNK_LIMIT 64

static inline uint32_t *chunk_counter(pgindex_t *idx, uintptr_t chunk)
{
    return &idx->chunk_count[(uint64_t) chunk * 0x9e3779b97f4a7c15ull
                             >> (64 - __builtin_ctz(MCA_RCACHE_BASE_PGINDEX_CHUNKS))];
}

/* Count a small range in (add 1) or out (add -1) of its chunks (writer side). */
static void count_chunks(pgindex_t *idx, uintptr_t first, uintptr_t last, uint32_t add)
{
    if (class_of(first, last) <= CHUNK_SHIFT) {
        for (uintptr_t c = first >> CHUNK_SHIFT; c <= last >> CHUNK_SHIFT; c++) {
            uint32_t *counter = chunk_counter(idx, c);
            STORE(counter, *counter + add);
        }
    }
}

static inline void write_begin(pgindex_t *idx)
{
    STORE(&idx->seq, idx->seq + 1);
    __atomic_thread_fence(__ATOMIC_RELEASE);
}

static inline void write_end(pgindex_t *idx)
{
    __atomic_store_n(&idx->seq, idx->seq + 1, __ATOMIC_RELEASE);
}

mca_rcache_base_pgindex_table_t *mca_rcache_base_pgindex_table_new(size_t buckets)
{
    table_t *t = calloc(1, sizeof(*t) + buckets * sizeof(t->bucket[0]));
    if (t) {
        t->bits = (unsigned) __builtin_ctzl(buckets);
        t->line_shift = 64 - t->bits + MCA_RCACHE_BASE_PGINDEX_LINE_SHIFT;
    }
    return t;
}

int mca_rcache_base_pgindex_init(pgindex_t *idx, ptrdiff_t range_at, unsigned page_shift)
{
    idx->table = mca_rcache_base_pgindex_table_new(MIN_BUCKETS);
    idx->range_at = range_at;
    idx->page_shift = page_shift;
    idx->count = 0;
    idx->active = 0;
    idx->seq = 0;
    for (unsigned s = 0; s < MCA_RCACHE_BASE_PGINDEX_CLASSES; s++) {
        idx->class_count[s] = 0;
    }
    for (size_t c = 0; c < MCA_RCACHE_BASE_PGINDEX_CHUNKS; c++) {
        idx->chunk_count[c] = 0;
    }
    return idx->table ? OPAL_SUCCESS : OPAL_ERR_OUT_OF_RESOURCE;
}

void mca_rcache_base_pgindex_fini(pgindex_t *idx)
{
    for (table_t *t = idx->table, *next; t; t = next) {
        next = t->retired;
        free(t);
    }
    idx->table = NULL;
}

static inline node_t **bucket_of(table_t *t, uintptr_t key)
{
    return (node_t **) mca_rcache_base_pgindex_bucket(t, key);
}

void mca_rcache_base_pgindex_insert(pgindex_t *idx, node_t *node, uintptr_t first, uintptr_t last)
{
    unsigned s = class_of(first, last);
    uintptr_t key = key_of(s, first >> s);
    node_t **head = bucket_of(idx->table, key);
    write_begin(idx);
    STORE(&node->key, key);
    STORE(&node->hash_next, *head);
    __atomic_store_n(head, node, __ATOMIC_RELEASE);
    idx->class_count[s]++;
    count_chunks(idx, first, last, 1);
    STORE(&idx->active, idx->active | (1ull << s));
    STORE(&idx->count, idx->count + 1);
    write_end(idx);
}

void mca_rcache_base_pgindex_remove(pgindex_t *idx, node_t *node)
{
    unsigned s = (unsigned) (node->key & 63);
    node_t **pp = bucket_of(idx->table, node->key);
    while (*pp != node) {
        pp = &(*pp)->hash_next;
    }
    uintptr_t first, last;
    mca_rcache_base_pgindex_range(idx, node, &first, &last);
    write_begin(idx);
    /* node->hash_next stays: a reader standing on node still reaches the rest. */
    STORE(pp, node->hash_next);
    count_chunks(idx, first, last, (uint32_t) -1);
    if (0 == --idx->class_count[s]) {
        STORE(&idx->active, idx->active & ~(1ull << s));
    }
    STORE(&idx->count, idx->count - 1);
    write_end(idx);
}

size_t mca_rcache_base_pgindex_wanted(const pgindex_t *idx)
{
    const table_t *t = __atomic_load_n(&idx->table, __ATOMIC_ACQUIRE);
    size_t buckets = (size_t) 1 << t->bits;
    return 2 * LOAD(&idx->count) > buckets ? 2 * buckets : 0; /* load at most 1/2 */
}

mca_rcache_base_pgindex_table_t *mca_rcache_base_pgindex_rehash(pgindex_t *idx, table_t *t)
{
    table_t *old = idx->table;
    if (t->bits <= old->bits) {
        return t;
    }
    write_begin(idx);
    for (size_t b = 0; b < ((size_t) 1 << old->bits); b++) {
        for (node_t *n = old->bucket[b], *next; n; n = next) {
            next = n->hash_next;
            node_t **head = bucket_of(t, n->key);
            STORE(&n->hash_next, *head);
            *head = n;
        }
    }
    t->retired = old;
    __atomic_store_n(&idx->table, t, __ATOMIC_RELEASE);
    write_end(idx);
    return NULL;
}

static inline int probe(const pgindex_t *idx, const table_t *t, unsigned s, uintptr_t block,
                        uintptr_t first, uintptr_t last, visit_fn_t fn, void *ctx, size_t limit,
                        bool *gave_up)
{
    return mca_rcache_base_pgindex_probe(idx, t, key_of(s, block), first, last, false, fn, ctx,
                                         limit, gave_up);
}

int mca_rcache_base_pgindex_overlapping(pgindex_t *idx, uintptr_t first, uintptr_t last,
                                        visit_fn_t fn, void *ctx)
{
    bool unused;
    uint64_t scan = 0; /* classes with fewer ranges than blocks to probe */
    for (uint64_t act = idx->active; act; act &= act - 1) {
        unsigned s = (unsigned) __builtin_ctzll(act);
        uintptr_t lo = block_lo(first, s), hi = last >> s;
        if (hi - lo >= idx->class_count[s]) {
            scan |= 1ull << s;
            continue;
        }
        for (uintptr_t b = lo; b - lo <= hi - lo; b++) {
            int rc = probe(idx, idx->table, s, b, first, last, fn, ctx, SIZE_MAX, &unused);
            if (rc) {
                return rc;
            }
        }
    }
    for (size_t b = 0; scan && b < ((size_t) 1 << idx->table->bits); b++) {
        for (node_t *n = idx->table->bucket[b]; n; n = n->hash_next) {
            uintptr_t lo, hi;
            if (!(scan >> (n->key & 63) & 1)) {
                continue;
            }
            mca_rcache_base_pgindex_range(idx, n, &lo, &hi);
            if (lo <= last && hi >= first) {
                int rc = fn(n, ctx);
                if (rc) {
                    return rc;
                }
            }
        }
    }
    return 0;
}

bool mca_rcache_base_pgindex_visit_lockfree(pgindex_t *idx, uintptr_t first, uintptr_t last,
                                            visit_fn_t fn, void *ctx, uint32_t *seq_out)
{
    uint32_t seq = __atomic_load_n(&idx->seq, __ATOMIC_ACQUIRE);
    if (seq & 1) {
        return false;
    }
    const table_t *t = __atomic_load_n(&idx->table, __ATOMIC_ACQUIRE);
    bool gave_up = false;
    int rc = 0;
    uint64_t act = LOAD(&idx->active);
    if ((act & SMALL_CLASSES) && (last >> CHUNK_SHIFT) - (first >> CHUNK_SHIFT) < CHUNK_LIMIT) {
        bool counted = false;
        for (uintptr_t c = first >> CHUNK_SHIFT; !counted && c <= last >> CHUNK_SHIFT; c++) {
            counted = 0 != LOAD(chunk_counter(idx, c));
        }
        if (!counted) {
            act &= ~SMALL_CLASSES; /* no small range in these chunks */
        }
    }
    for (; act && !rc && !gave_up; act &= act - 1) {
        unsigned s = (unsigned) __builtin_ctzll(act);
        uintptr_t lo = block_lo(first, s), hi = last >> s;
        if (hi - lo >= PROBE_LIMIT) {
            return false;
        }
        for (uintptr_t b = lo; !rc && !gave_up && b - lo <= hi - lo; b++) {
            rc = mca_rcache_base_pgindex_probe(idx, t, key_of(s, b), first, last, true, fn, ctx,
                                               WALK_LIMIT, &gave_up);
        }
    }
    /* What was read is a snapshot only if no writer started meanwhile. */
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    *seq_out = seq;
    return !rc && !gave_up && LOAD(&idx->seq) == seq;
}

/* Is it in range, by the node's own copy of its range. */
static int found_cb(node_t *node, void *ctx)
{
    const uintptr_t *q = ctx; /* the pgindex, first, last */
    uintptr_t lo, hi;
    mca_rcache_base_pgindex_range((const pgindex_t *) q[0], node, &lo, &hi);
    return lo <= q[2] && hi >= q[1];
}

bool mca_rcache_base_pgindex_might_overlap(pgindex_t *idx, uintptr_t first, uintptr_t last)
{
    uintptr_t query[3] = {(uintptr_t) idx, first, last};
    uint32_t seq;
    return !mca_rcache_base_pgindex_visit_lockfree(idx, first, last, found_cb, query, &seq);
}
