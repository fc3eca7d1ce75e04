/*
 * Page index: an open-addressed hash of ranges by (size class, block), see
 * the header.
 *
 * Lock-free readers may meet a slot while a writer rewrites it (an item
 * removed, its slot reused for another key): they may then pair a key with
 * the wrong item or miss an item, never read outside a table or reach
 * anything but an item the caller keeps alive (type-stable memory), so
 * every walk without the lock is bounded and its result either validated
 * by the caller (covering) or by the sequence count (visit_lockfree,
 * might_overlap).  Fields that such readers load are written with atomic
 * stores; an item is published with a release store of its slot's item
 * after its key.
 */
#include "opal_config.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/rcache/base/rcache_base_hugemem.h"
#include "opal/mca/rcache/base/rcache_base_pgindex.h"

typedef mca_rcache_base_pgindex_entry_t entry_t;
typedef mca_rcache_base_pgindex_t pgindex_t;
typedef mca_rcache_base_pgindex_visit_fn_t visit_fn_t;
typedef mca_rcache_base_pgindex_table_t table_t;

/*
 * 128 lines (8 KiB): with 64, 100 ranges in 16 dense regions far apart sent
 * a third of the lookups past their key's own slot (groups meeting in a
 * line: 201 instructions per hit against 190, bench/rcache).
 */
#define MIN_BITS 7
/* Blocks of one class that might_overlap probes before it answers "maybe" (take the lock). */
#define PROBE_LIMIT 512

/*
 * Prefetch distances.  The hash sends each group of blocks to its own
 * random line, and from about 1e5 ranges on the table is out of the
 * caches: a program registering pages one after the other would wait for
 * one line from memory per group.  So an insert of a group's first block
 * fetches the line of the group eight blocks further on (AHEAD_GROUPS), a few
 * registrations before its lookup needs it (a useless fetch when the
 * program does not register that group: one line per insert at most).  A
 * rehash reads the old table in order and writes the new one nearly in
 * order (the new home's top bits extend the old's), one new line per
 * group, each a miss: it fetches the new line of the group at the same
 * place AHEAD_LINES old lines further on.
 */
#define AHEAD_GROUPS (8 / GROUP)
#define AHEAD_LINES 16

#define LOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)

#define SLOT_SHIFT MCA_RCACHE_BASE_PGINDEX_SLOT_SHIFT
#define SLOTS MCA_RCACHE_BASE_PGINDEX_SLOTS
#define GROUP (1u << MCA_RCACHE_BASE_PGINDEX_GROUP_SHIFT)
#define OVERFLOW MCA_RCACHE_BASE_PGINDEX_OVERFLOW
#define class_of mca_rcache_base_pgindex_class
#define key_of mca_rcache_base_pgindex_key

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

static size_t page_bytes(void)
{
    static size_t page;
    if (0 == page) {
        page = (size_t) sysconf(_SC_PAGESIZE);
    }
    return page;
}

/*
 * A small table comes from calloc: a cache filled again and again reuses
 * the heap's memory (and calloc knows when fresh pages need no clearing);
 * aligned to a line by hand.  A table of MAPPED bytes or more is huge-page
 * memory of its own (rcache_base_hugemem.h: a table of 1e5-1e6 ranges is
 * read at random, and its pages would each cost a fault when filled),
 * populated at once (probes read a line before inserts write it, which
 * would fault each page twice: the zero page, then a copy): once replaced,
 * its pages are given back (release) and nothing of it stays counted, by
 * the heap or the resident set, but its first page.
 */
#define MAPPED MCA_RCACHE_BASE_HUGEMEM_UNIT

mca_rcache_base_pgindex_table_t *mca_rcache_base_pgindex_table_new(unsigned bits)
{
    size_t bytes = sizeof(table_t) + ((size_t) sizeof(entry_t) << (bits + SLOT_SHIFT));
    char *block;
    if (bytes >= MAPPED) {
        block = mca_rcache_base_hugemem_alloc(bytes);
    } else {
        block = calloc(1, bytes + 64);
    }
    if (NULL == block) {
        return NULL;
    }
    table_t *t = (table_t *) (((uintptr_t) block + 63) & ~(uintptr_t) 63);
    t->block = block;
    t->bytes = bytes;
    t->bits = bits;
    return t;
}

void mca_rcache_base_pgindex_table_free(mca_rcache_base_pgindex_table_t *t)
{
    if (t && t->bytes >= MAPPED) {
        mca_rcache_base_hugemem_free(t->block, t->bytes);
    } else if (t) {
        free(t->block);
    }
}

int mca_rcache_base_pgindex_init(pgindex_t *idx, ptrdiff_t range_at, unsigned page_shift)
{
    idx->table = mca_rcache_base_pgindex_table_new(MIN_BITS);
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
        mca_rcache_base_pgindex_table_free(t);
    }
    idx->table = NULL;
}

/*
 * Put (key, item) in the first free slot from the key's home on, marking
 * the full lines passed as overflowed (writer side; t may not be published
 * yet).  There is a free slot: the caller keeps the load below 1.
 */
static void place(table_t *t, uintptr_t key, void *item)
{
    const size_t mask = ((size_t) 1 << t->bits) - 1;
    size_t line = mca_rcache_base_pgindex_home(t, key);
    unsigned start = mca_rcache_base_pgindex_home_slot(key);
    for (;;) {
        entry_t *e = &t->entry[line * SLOTS];
        for (unsigned i = 0; i < SLOTS; i++) {
            unsigned j = (start + i) & (SLOTS - 1); /* its own slot first */
            if (NULL == e[j].item) {
                STORE(&e[j].key, key | (j ? 0 : e[0].key & OVERFLOW));
                __atomic_store_n(&e[j].item, item, __ATOMIC_RELEASE);
                return;
            }
        }
        if (!(e[0].key & OVERFLOW)) {
            STORE(&e[0].key, e[0].key | OVERFLOW);
            STORE(&t->overflowed, t->overflowed + 1);
        }
        line = (line + 1) & mask;
        start = 0;
    }
}

void mca_rcache_base_pgindex_insert(pgindex_t *idx, void *item, uintptr_t first, uintptr_t last)
{
    unsigned s = class_of(first, last);
    table_t *t = idx->table;
    write_begin(idx);
    place(t, key_of(s, first >> s), item);
    if (0 == ((first >> s) & (GROUP - 1))) {
        uintptr_t ahead = key_of(s, (first >> s) + AHEAD_GROUPS * GROUP);
        __builtin_prefetch(&t->entry[mca_rcache_base_pgindex_home(t, ahead) * SLOTS], 1);
    }
    idx->class_count[s]++;
    count_chunks(idx, first, last, 1);
    STORE(&idx->active, idx->active | (1ull << s));
    STORE(&idx->count, idx->count + 1);
    write_end(idx);
}

/*
 * The entry holding item, whose pages [*first, *last] it reads from the
 * item; NULL if it is not indexed.  In place's order: the key's own slot
 * first, the rest of its home line, then the overflowed lines after it.
 */
static entry_t *entry_of(const pgindex_t *idx, void *item, uintptr_t *first, uintptr_t *last)
{
    mca_rcache_base_pgindex_range(idx, item, first, last);
    const unsigned s = class_of(*first, *last);
    const uintptr_t key = key_of(s, *first >> s);
    table_t *t = idx->table;
    const size_t mask = ((size_t) 1 << t->bits) - 1;
    size_t line = mca_rcache_base_pgindex_home(t, key);
    unsigned start = mca_rcache_base_pgindex_home_slot(key);
    for (size_t n = 0; n <= mask; n++, line = (line + 1) & mask, start = 0) {
        entry_t *e = &t->entry[line * SLOTS];
        for (unsigned i = 0; i < SLOTS; i++) {
            unsigned j = (start + i) & (SLOTS - 1);
            if (e[j].item == item) {
                return &e[j];
            }
        }
    }
    return NULL;
}

void mca_rcache_base_pgindex_remove(pgindex_t *idx, void *item)
{
    uintptr_t first, last;
    entry_t *x = entry_of(idx, item, &first, &last);
    if (NULL == x) {
        return; /* not indexed: the caller's bug, and nothing to undo */
    }
    const unsigned s = class_of(first, last);
    write_begin(idx);
    STORE(&x->item, NULL);
    STORE(&idx->table->removed, idx->table->removed + 1);
    count_chunks(idx, first, last, (uint32_t) -1);
    if (0 == --idx->class_count[s]) {
        STORE(&idx->active, idx->active & ~(1ull << s));
    }
    STORE(&idx->count, idx->count - 1);
    write_end(idx);
}

void mca_rcache_base_pgindex_replace(pgindex_t *idx, void *old_item, void *new_item)
{
    uintptr_t first, last;
    entry_t *x = entry_of(idx, old_item, &first, &last);
    if (NULL == x) {
        return; /* not indexed: the caller's bug, and nothing to undo */
    }
    /*
     * The same key in the same slot: no count, chunk or class changes.  A
     * writer all the same, for the lock-free walks: one that read the old
     * item must not take its result for a snapshot (a release event would
     * miss the new one).
     */
    write_begin(idx);
    __atomic_store_n(&x->item, new_item, __ATOMIC_RELEASE);
    write_end(idx);
}

unsigned mca_rcache_base_pgindex_wanted(const pgindex_t *idx)
{
    const table_t *t = __atomic_load_n(&idx->table, __ATOMIC_ACQUIRE);
    size_t slots = (size_t) 1 << (t->bits + SLOT_SHIFT);
    if (4 * LOAD(&idx->count) > 3 * slots) {
        /*
         * Load at most 3/4, and at least 3/8 after doubling: at most 43
         * bytes per item in the table (the replaced heap tables stay
         * counted by the heap, twice that at most; mapped ones are given
         * back).  Growing four times over instead copies half as many
         * entries in all, but leaves up to 85 bytes per item in the
         * table: with the huge-page slabs a cache of 50 000 one-page
         * registrations then held 107 bytes beyond each (bench/rcache).
         */
        return t->bits + 1;
    }
    /*
     * Overflow bits outlive the entries that set them: rebuild at the same
     * size when an eighth of the lines has gained one since the table was
     * built and as many entries have left it since.  Without removals every
     * bit is still needed and a rebuild would set them all again (a fill of
     * a million pages in 16 regions rebuilt its table 17 times).
     */
    size_t gained = LOAD(&t->overflowed) - t->built_overflowed, removed = LOAD(&t->removed);
    return 8 * (gained < removed ? gained : removed) > ((size_t) 1 << t->bits) ? t->bits : 0;
}

mca_rcache_base_pgindex_table_t *mca_rcache_base_pgindex_rehash(pgindex_t *idx, table_t *t)
{
    table_t *old = idx->table;
    if (t->bits != mca_rcache_base_pgindex_wanted(idx)) {
        return t; /* another thread grew it meanwhile */
    }
    /* Only the old table is read, line after line. */
    const size_t end = (size_t) SLOTS << old->bits;
    for (size_t i = 0; i < end; i++) {
        if (0 == (i & (GROUP - 1)) && i + AHEAD_LINES * SLOTS < end) {
            const entry_t *ahead = &old->entry[i + AHEAD_LINES * SLOTS];
            if (ahead->item) {
                size_t line = mca_rcache_base_pgindex_home(t, ahead->key & ~OVERFLOW);
                __builtin_prefetch(&t->entry[line * SLOTS], 1);
            }
        }
        if (old->entry[i].item) {
            place(t, old->entry[i].key & ~OVERFLOW, old->entry[i].item);
        }
    }
    t->built_overflowed = t->overflowed;
    t->retired = old;
    write_begin(idx);
    __atomic_store_n(&idx->table, t, __ATOMIC_RELEASE);
    write_end(idx);
    return NULL;
}

void mca_rcache_base_pgindex_release(pgindex_t *idx)
{
    const uintptr_t page = page_bytes();
    for (table_t *t = idx->table->retired; t; t = t->retired) {
        /*
         * The whole pages after the header's (a late reader reads the
         * table's size there): zero when read again, and given back.
         */
        uintptr_t lo = ((uintptr_t) t + sizeof(*t) + page - 1) & ~(page - 1);
        uintptr_t hi = ((uintptr_t) t + t->bytes) & ~(page - 1);
        if (hi > lo && 0 == __atomic_exchange_n(&t->released, 1, __ATOMIC_RELAXED)) {
            (void) madvise((void *) lo, hi - lo, MADV_DONTNEED);
        }
    }
}

static inline int probe(const pgindex_t *idx, const table_t *t, unsigned s, uintptr_t block,
                        uintptr_t first, uintptr_t last, visit_fn_t fn, void *ctx)
{
    return mca_rcache_base_pgindex_probe(idx, t, key_of(s, block), first, last, false, NULL, fn,
                                         ctx);
}

int mca_rcache_base_pgindex_overlapping(pgindex_t *idx, uintptr_t first, uintptr_t last,
                                        visit_fn_t fn, void *ctx)
{
    uint64_t scan = 0; /* classes with fewer ranges than blocks to probe */
    for (uint64_t act = idx->active; act; act &= act - 1) {
        unsigned s = (unsigned) __builtin_ctzll(act);
        uintptr_t lo = block_lo(first, s), hi = last >> s;
        if (hi - lo >= idx->class_count[s]) {
            scan |= 1ull << s;
            continue;
        }
        for (uintptr_t b = lo; b - lo <= hi - lo; b++) {
            int rc = probe(idx, idx->table, s, b, first, last, fn, ctx);
            if (rc) {
                return rc;
            }
        }
    }
    const table_t *t = idx->table;
    for (size_t i = 0; scan && i < ((size_t) SLOTS << t->bits); i++) {
        const entry_t *x = &t->entry[i];
        uintptr_t lo, hi;
        if (NULL == x->item || !(scan >> mca_rcache_base_pgindex_key_class(x->key) & 1)) {
            continue;
        }
        mca_rcache_base_pgindex_range(idx, x->item, &lo, &hi);
        if (lo <= last && hi >= first) {
            int rc = fn(x->item, ctx);
            if (rc) {
                return rc;
            }
        }
    }
    return 0;
}

bool mca_rcache_base_pgindex_visit_lockfree(pgindex_t *idx, uintptr_t first, uintptr_t last,
                                            visit_fn_t fn, void *ctx,
                                            mca_rcache_base_pgindex_list_t *list)
{
    uint32_t seq = __atomic_load_n(&idx->seq, __ATOMIC_ACQUIRE);
    if (seq & 1) {
        return false;
    }
    const table_t *t = __atomic_load_n(&idx->table, __ATOMIC_ACQUIRE);
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
    for (; act && !rc; act &= act - 1) {
        unsigned s = (unsigned) __builtin_ctzll(act);
        uintptr_t lo = block_lo(first, s), hi = last >> s;
        if (hi - lo >= PROBE_LIMIT) {
            rc = 1; /* too many blocks: not a snapshot */
            break;
        }
        for (uintptr_t b = lo; !rc && b - lo <= hi - lo; b++) {
            /* A block that lies whole in [first, last]: its ranges surely overlap. */
            bool whole = (b << s) >= first && ((b << s) | (((uintptr_t) 1 << s) - 1)) <= last;
            rc = mca_rcache_base_pgindex_probe(idx, t, key_of(s, b), first, last, true,
                                               whole ? list : NULL, fn, ctx);
        }
    }
    /* What was read is a snapshot only if no writer started meanwhile. */
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (!rc && LOAD(&idx->seq) == seq) {
        return true;
    }
    if (list) {
        list->n = 0;
    }
    return false;
}

void mca_rcache_base_pgindex_visit_all_lockfree(pgindex_t *idx, visit_fn_t fn, void *ctx)
{
    const table_t *t, *read = NULL;
    while (read != (t = __atomic_load_n(&idx->table, __ATOMIC_ACQUIRE))) {
        const size_t end = (size_t) SLOTS << t->bits;
        for (size_t i = 0; i < end; i++) {
            void *item = __atomic_load_n(&t->entry[i].item, __ATOMIC_ACQUIRE);
            if (item) {
                (void) fn(item, ctx);
            }
        }
        read = t;
    }
}

/* Is it in range, by the item's own copy of its range. */
static int found_cb(void *item, void *ctx)
{
    const uintptr_t *q = ctx; /* the pgindex, first, last */
    uintptr_t lo, hi;
    mca_rcache_base_pgindex_range((const pgindex_t *) q[0], item, &lo, &hi);
    return lo <= q[2] && hi >= q[1];
}

bool mca_rcache_base_pgindex_might_overlap(pgindex_t *idx, uintptr_t first, uintptr_t last)
{
    uintptr_t query[3] = {(uintptr_t) idx, first, last};
    return !mca_rcache_base_pgindex_visit_lockfree(idx, first, last, found_cb, query, NULL);
}
