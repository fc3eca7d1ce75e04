/*
 * The page index against a brute-force oracle: random inserts, removes and
 * replacements (another item of the same range takes an item's slot) of
 * ranges of every size class (one page to most of the space, nested,
 * equal, crossing block boundaries, near page 0 and near the top), growth
 * by rehash, and after each step queries compared: overlapping (every range
 * exactly once), covering (candidates include every covering range),
 * might_overlap (never false when something overlaps; exact for short
 * ranges) and the hit's first look (first_candidate); lines of the table
 * overflow on the way (equal keys, neighbours).  Before it, the first look
 * where it is meant to be the whole lookup.  Then lock-free readers against
 * a writer: might_overlap must never miss a range that stays indexed while
 * the writer churns others.  Last, a table grown past 2 MiB (a mapping of
 * its own).
 */
#include "opal_config.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "opal/constants.h"
#include "opal/mca/rcache/base/rcache_base_pgindex.h"
#include "test/support/test_util.h"

#define N 3000
#define STEPS 20000

/* The index reads an item's range from the item (page numbers: shift 0). */
typedef struct item_t {
    unsigned char *first, *last;
} item_t;

static item_t items[N];
static bool present[N];
static mca_rcache_base_pgindex_t idx;
#define RANGE_AT   ((ptrdiff_t) offsetof(item_t, first))
#define lo_of(i)   ((uintptr_t) items[i].first)
#define hi_of(i)   ((uintptr_t) items[i].last)
#define item_of(i) (&items[i])

static void set_range(size_t i, uintptr_t lo, uintptr_t hi)
{
    items[i].first = (unsigned char *) lo;
    items[i].last = (unsigned char *) hi;
}

static size_t index_of(const void *item)
{
    return (size_t) ((const item_t *) item - items);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Page numbers (of 4 KiB pages): the last one of the address space, and a
 * dense window where mmap puts things (64 or 32 bits). */
#define TOP_PAGE   (UINTPTR_MAX >> 12)
#define DENSE_BASE (UINTPTR_MAX > 0xffffffffu ? (uintptr_t) 0x7f0000000ull : (uintptr_t) 0xb0000)

/* Where ranges live: a dense window, plus a few far away (page 0, the top). */
static uintptr_t random_page(void)
{
    switch (next_rand() % 8) {
    case 0:
        return next_rand() % 64;
    case 1:
        return TOP_PAGE - next_rand() % 64;
    default:
        return DENSE_BASE + next_rand() % 20000;
    }
}

/* Spans skewed to small, with every class up to 2^20 pages present. */
static uintptr_t random_span(void)
{
    unsigned bits = (unsigned) (next_rand() % 100 < 70 ? next_rand() % 4 : next_rand() % 21);
    return 1 + next_rand() % ((uintptr_t) 1 << bits);
}

struct seen {
    unsigned hits[N];
    size_t count;
};

static int mark(void *n, void *ctx)
{
    struct seen *s = ctx;
    s->hits[index_of(n)]++;
    s->count++;
    return 0;
}

/* Grows or rebuilds the table when wanted; the log2 of its lines before, or -1 if left alone. */
static int grow_if_wanted(void)
{
    unsigned want = mca_rcache_base_pgindex_wanted(&idx);
    int before = want ? (int) idx.table->bits : -1;
    if (want) {
        mca_rcache_base_pgindex_table_t *t = mca_rcache_base_pgindex_table_new(want);
        CHECK(NULL != t);
        CHECK(NULL == mca_rcache_base_pgindex_rehash(&idx, t));
        CHECK(0 == mca_rcache_base_pgindex_wanted(&idx));
        mca_rcache_base_pgindex_release(&idx);
    }
    CHECK(mca_rcache_base_pgindex_room(&idx));
    return before;
}

static void check_queries(uintptr_t first, uintptr_t last)
{
    static struct seen s;
    memset(&s, 0, sizeof(s));
    mca_rcache_base_pgindex_overlapping(&idx, first, last, mark, &s);
    bool any = false;
    for (size_t i = 0; i < N; i++) {
        bool overlaps = present[i] && lo_of(i) <= last && hi_of(i) >= first;
        any = any || overlaps;
        CHECK_MSG(s.hits[i] == (overlaps ? 1u : 0u),
                  "overlapping [%#lx, %#lx]: range %zu [%#lx, %#lx] present %d visited %u times",
                  (unsigned long) first, (unsigned long) last, i, (unsigned long) lo_of(i),
                  (unsigned long) hi_of(i), present[i], s.hits[i]);
    }
    bool maybe = mca_rcache_base_pgindex_might_overlap(&idx, first, last);
    CHECK_MSG(maybe || !any, "might_overlap [%#lx, %#lx] missed a range", (unsigned long) first,
              (unsigned long) last);
    if (last - first < 64) {
        CHECK_MSG(maybe == any, "might_overlap [%#lx, %#lx]: %d, truth %d", (unsigned long) first,
                  (unsigned long) last, maybe, any);
    }

    /* The first look: an indexed item, or NULL; a NULL it calls complete, nothing covers. */
    bool complete;
    const void *cand = mca_rcache_base_pgindex_first_candidate(&idx, first, last, &complete);
    CHECK_MSG(NULL == cand || present[index_of(cand)],
              "first candidate for [%#lx, %#lx] is not indexed", (unsigned long) first,
              (unsigned long) last);
    for (size_t i = 0; NULL == cand && complete && i < N; i++) {
        CHECK_MSG(!present[i] || lo_of(i) > first || hi_of(i) < last,
                  "first look at [%#lx, %#lx] said complete, and range %zu covers it",
                  (unsigned long) first, (unsigned long) last, i);
    }

    memset(&s, 0, sizeof(s));
    mca_rcache_base_pgindex_covering(&idx, first, last, mark, &s);
    for (size_t i = 0; i < N; i++) {
        bool covers = present[i] && lo_of(i) <= first && hi_of(i) >= last;
        CHECK_MSG(!covers || 1 == s.hits[i], "covering [%#lx, %#lx] missed range %zu",
                  (unsigned long) first, (unsigned long) last, i);
        CHECK_MSG(s.hits[i] <= 1 && (!s.hits[i] || present[i]),
                  "covering visited range %zu %u times (present %d)", i, s.hits[i], present[i]);
    }
}

static void oracle_test(void)
{
    bool overflowed = false;
    size_t replaced = 0;
    CHECK(OPAL_SUCCESS == mca_rcache_base_pgindex_init(&idx, RANGE_AT, 0));
    size_t count = 0;
    for (int step = 0; step < STEPS; step++) {
        size_t i = next_rand() % N;
        size_t free_j = next_rand() % N;
        if (present[i] && !present[free_j] && 0 == next_rand() % 4) {
            /* Another item of the same range takes its slot (a registration made again). */
            set_range(free_j, lo_of(i), hi_of(i));
            mca_rcache_base_pgindex_replace(&idx, item_of(i), item_of(free_j));
            present[i] = false;
            present[free_j] = true;
            replaced++;
        } else if (present[i]) {
            mca_rcache_base_pgindex_remove(&idx, item_of(i));
            present[i] = false;
            count--;
        } else {
            /* Sometimes an exact copy of another range: equal ranges coexist. */
            size_t j = next_rand() % N;
            if (present[j] && 0 == next_rand() % 10) {
                set_range(i, lo_of(j), hi_of(j));
            } else {
                uintptr_t lo = random_page(), span = random_span();
                set_range(i, lo, lo + span - 1 < lo ? UINTPTR_MAX : lo + span - 1);
            }
            mca_rcache_base_pgindex_insert(&idx, item_of(i), lo_of(i), hi_of(i));
            present[i] = true;
            count++;
            grow_if_wanted();
        }
        CHECK(mca_rcache_base_pgindex_size(&idx) == count);
        overflowed = overflowed || idx.table->overflowed;
        /* A point, a short range, a long one, and sometimes all of it. */
        uintptr_t p = random_page();
        check_queries(p, p);
        check_queries(p, p + random_span() - 1);
        if (0 == step % 500) {
            check_queries(p, p + ((uintptr_t) 1 << 24));
            check_queries(0, UINTPTR_MAX >> 12);
        }
        if (test_failures > 20) {
            break;
        }
    }
    for (size_t i = 0; i < N; i++) {
        if (present[i]) {
            mca_rcache_base_pgindex_remove(&idx, item_of(i));
            present[i] = false;
        }
    }
    CHECK(0 == mca_rcache_base_pgindex_size(&idx) && 0 == idx.active);
    CHECK_MSG(overflowed, "no line of the table overflowed: the probes past a line were not tested");
    CHECK_MSG(replaced > STEPS / 20, "only %zu replacements", replaced);
    check_queries(0, UINTPTR_MAX >> 12);
    mca_rcache_base_pgindex_fini(&idx);
}

/*
 * Lock-free readers: ranges 0..STABLE-1 stay indexed; a writer inserts and
 * removes the others (in the same pages, so the same chains) and grows the
 * table, under a lock the readers never take.
 */
#define STABLE 200
#define READERS 2
static pthread_mutex_t writer_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile int stop;
static volatile unsigned long misses;

static void *reader(void *arg)
{
    uint64_t x = (uint64_t) (uintptr_t) arg * 0x9e3779b97f4a7c15ull + 1;
    while (!stop) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t i = x % STABLE;
        uintptr_t p = lo_of(i) + (x >> 32) % (hi_of(i) - lo_of(i) + 1);
        if (!mca_rcache_base_pgindex_might_overlap(&idx, p, p)) {
            __atomic_add_fetch(&misses, 1, __ATOMIC_RELAXED);
        }
    }
    return NULL;
}

static void concurrent_test(void)
{
    memset(present, 0, sizeof(present));
    CHECK(OPAL_SUCCESS == mca_rcache_base_pgindex_init(&idx, RANGE_AT, 0));
    for (size_t i = 0; i < N; i++) {
        uintptr_t lo = DENSE_BASE + next_rand() % 4000;
        set_range(i, lo, lo + random_span() % 16);
    }
    for (size_t i = 0; i < STABLE; i++) {
        mca_rcache_base_pgindex_insert(&idx, item_of(i), lo_of(i), hi_of(i));
        present[i] = true;
    }
    pthread_t th[READERS];
    for (size_t t = 0; t < READERS; t++) {
        pthread_create(&th[t], NULL, reader, (void *) (t + 1));
    }
    for (int step = 0; step < 200000; step++) {
        size_t i = STABLE + next_rand() % (N - STABLE);
        unsigned want = mca_rcache_base_pgindex_wanted(&idx);
        mca_rcache_base_pgindex_table_t *t = want ? mca_rcache_base_pgindex_table_new(want) : NULL;
        bool grown = false;
        pthread_mutex_lock(&writer_lock);
        if (t) {
            t = mca_rcache_base_pgindex_rehash(&idx, t);
            grown = NULL == t;
        }
        if (present[i]) {
            mca_rcache_base_pgindex_remove(&idx, item_of(i));
        } else {
            mca_rcache_base_pgindex_insert(&idx, item_of(i), lo_of(i), hi_of(i));
        }
        present[i] = !present[i];
        pthread_mutex_unlock(&writer_lock);
        mca_rcache_base_pgindex_table_free(t);
        if (grown) {
            mca_rcache_base_pgindex_release(&idx); /* readers may still be in the old lines */
        }
    }
    stop = 1;
    for (size_t t = 0; t < READERS; t++) {
        pthread_join(th[t], NULL);
    }
    CHECK_MSG(0 == misses, "might_overlap missed an indexed range %lu times", misses);
    mca_rcache_base_pgindex_fini(&idx);
}

static size_t table_bytes(unsigned bits)
{
    return ((size_t) 1 << (bits + MCA_RCACHE_BASE_PGINDEX_SLOT_SHIFT)) *
           sizeof(mca_rcache_base_pgindex_entry_t);
}

/*
 * Every growth doubles the table (at most 43 bytes per range in it); one
 * past 2 MiB is huge-page memory of its own (a 2 MiB-aligned mapping) and
 * gives its predecessor's pages back: 190 000 one-page ranges in 16 dense
 * regions far apart, every one found again, then none (the table ends at
 * load 0.72 on 64-bit).  Filling it never rebuilds a table at its own size
 * (no entry left, so every overflow bit is still needed; the rule before
 * did, 6 times here); churn afterwards (ranges removed and put elsewhere)
 * does, once the stale bits add up.
 */
#define MANY         190000
#define REGION_PAGES ((uintptr_t) 1 << 18)
static void large_test(void)
{
    item_t *many = malloc(MANY * sizeof(*many));
    CHECK(NULL != many);
    CHECK(OPAL_SUCCESS == mca_rcache_base_pgindex_init(&idx, RANGE_AT, 0));
    int same = 0, mapped = 0;
    for (size_t i = 0; i < MANY; i++) {
        uintptr_t p = DENSE_BASE + i / (MANY / 16 + 1) * REGION_PAGES + i % (MANY / 16 + 1);
        many[i].first = many[i].last = (unsigned char *) p;
        CHECK(mca_rcache_base_pgindex_room(&idx));
        mca_rcache_base_pgindex_insert(&idx, &many[i], p, p);
        int before = grow_if_wanted();
        if (before >= 0) {
            unsigned step = idx.table->bits - (unsigned) before;
            same += 0 == step;
            CHECK_MSG(0 == step || 1 == step, "a table of 2^%d lines grew to 2^%u", before,
                      idx.table->bits);
            if (table_bytes(idx.table->bits) >= ((size_t) 2 << 20)) {
                mapped++;
                CHECK_MSG(0 == ((uintptr_t) idx.table & (((uintptr_t) 2 << 20) - 1)),
                          "a table of 2^%u lines at %p", idx.table->bits, (void *) idx.table);
            }
        }
    }
    CHECK_MSG(table_bytes(idx.table->bits) >= ((size_t) 2 << 20), "the table stayed below 2 MiB");
    CHECK_MSG(mapped > 0, "no growth past 2 MiB");
    CHECK_MSG(0 == same, "filling rebuilt the table at its own size %d times", same);
    for (size_t i = 0; i < MANY; i += 7) {
        uintptr_t p = (uintptr_t) many[i].first;
        CHECK_MSG(mca_rcache_base_pgindex_might_overlap(&idx, p, p), "range %zu not found", i);
        CHECK(!mca_rcache_base_pgindex_might_overlap(&idx, p + REGION_PAGES / 2,
                                                     p + REGION_PAGES / 2 + 2));
    }
    const unsigned bits = idx.table->bits;
    int rebuilt = 0;
    for (size_t step = 0; 0 == rebuilt && step < 8 * (size_t) MANY; step++) {
        item_t *it = &many[next_rand() % MANY];
        mca_rcache_base_pgindex_remove(&idx, it);
        uintptr_t p = DENSE_BASE + next_rand() % (16 * REGION_PAGES);
        it->first = it->last = (unsigned char *) p;
        mca_rcache_base_pgindex_insert(&idx, it, p, p);
        rebuilt += grow_if_wanted() == (int) bits && idx.table->bits == bits;
    }
    CHECK_MSG(1 == rebuilt, "churn never rebuilt the table at its own size");
    for (size_t i = 0; i < MANY; i += 7) {
        uintptr_t p = (uintptr_t) many[i].first;
        CHECK_MSG(mca_rcache_base_pgindex_might_overlap(&idx, p, p),
                  "range %zu not found after churn", i);
    }
    for (size_t i = 0; i < MANY; i++) {
        mca_rcache_base_pgindex_remove(&idx, &many[i]);
    }
    CHECK(0 == mca_rcache_base_pgindex_size(&idx) && 0 == idx.active);
    mca_rcache_base_pgindex_fini(&idx);
    free(many);
}

/*
 * The first look (first_candidate) where it is meant to be the whole
 * lookup: one-page ranges only, every other page of dense runs in 8
 * regions 1 GiB apart (their groups share lines), some pages five times
 * and then their neighbours (past their overflowed home lines).  An
 * indexed page is found by it, or it says it was not complete (never NULL
 * and complete); a page between them gets NULL, complete where the home
 * line never overflowed; once a range of another class is in, no first
 * look is complete.
 */
static void first_look_test(void)
{
    CHECK(OPAL_SUCCESS == mca_rcache_base_pgindex_init(&idx, RANGE_AT, 0));
    memset(present, 0, sizeof(present));
    for (size_t i = 0; i + 1 < N; i++) {
        /*
         * The last 200: four more copies each of the pages of the first 40
         * (equal keys fill their home line), and the page after each, of
         * the same group (same home line): it lands past that line.
         */
        const size_t extra = i < N - 201 ? 0 : i - (N - 201), at = extra ? extra % 40 : i;
        const uintptr_t page = ((uintptr_t) (at % 8) << 18 | (at / 8) * 2) + (extra >= 160);
        set_range(i, page, page);
        grow_if_wanted();
        mca_rcache_base_pgindex_insert(&idx, item_of(i), page, page);
        present[i] = true;
    }
    size_t found = 0, complete_misses = 0;
    bool complete;
    for (size_t i = 0; i + 1 < N; i++) {
        const void *cand = mca_rcache_base_pgindex_first_candidate(&idx, lo_of(i), lo_of(i),
                                                                   &complete);
        CHECK_MSG(NULL != cand || !complete, "page %#lx is indexed: the first look said complete",
                  (unsigned long) lo_of(i));
        CHECK_MSG(NULL == cand || lo_of(index_of(cand)) == lo_of(i),
                  "the first look at page %#lx gave range %zu", (unsigned long) lo_of(i),
                  index_of(cand));
        found += cand == item_of(i);
        if (i < 40 || i >= N - 201) {
            continue; /* the page after it is indexed */
        }
        cand = mca_rcache_base_pgindex_first_candidate(&idx, lo_of(i) + 1, lo_of(i) + 1, &complete);
        CHECK_MSG(NULL == cand, "page %#lx is not indexed: the first look gave range %zu",
                  (unsigned long) lo_of(i) + 1, index_of(cand));
        complete_misses += complete;
    }
    CHECK_MSG(found > N / 2 && complete_misses > N / 2,
              "the first look found %zu of %d pages, and was complete for %zu misses", found, N - 1,
              complete_misses);
    CHECK_MSG(idx.table->overflowed, "no line overflowed: the incomplete first look was not tried");
    /* A range of two pages: class 1 holds ranges now. */
    set_range(N - 1, 1, 2);
    grow_if_wanted();
    mca_rcache_base_pgindex_insert(&idx, item_of(N - 1), 1, 2);
    present[N - 1] = true;
    for (size_t i = 0; i + 1 < N; i++) {
        (void) mca_rcache_base_pgindex_first_candidate(&idx, lo_of(i) + 1, lo_of(i) + 1, &complete);
        CHECK_MSG(!complete, "two classes hold ranges: the first look at %#lx said complete",
                  (unsigned long) lo_of(i) + 1);
    }
    for (size_t i = 0; i < N; i++) {
        mca_rcache_base_pgindex_remove(&idx, item_of(i));
        present[i] = false;
    }
    mca_rcache_base_pgindex_fini(&idx);
}

int main(void)
{
    first_look_test();
    oracle_test();
    concurrent_test();
    large_test();
    return test_finish("rcache_pgindex_test");
}
