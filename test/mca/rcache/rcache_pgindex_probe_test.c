/*
 * How many index lines a probe reads, under the address patterns programs
 * make: pages one after the other, strides of 16 pages, 1 MiB, 2 MiB and
 * 1 GiB, dense regions far apart, mixed size classes, random pages.  Each
 * pattern fills a fresh index (growing it as a cache does) and, every
 * time the table is at its fullest (just before it grows) and at the end,
 * every range is looked for: the lines read from its home to the line that
 * holds it (a hit reads the first, and reads on only past a line that
 * overflowed), and the lines a lookup of a page that no range covers reads
 * (up to the first line that did not overflow).  The hashing fails this
 * test when a pattern makes its probes long: a mean above MEAN_BOUND lines
 * per hit, or any probe above MAX_BOUND lines.  RCACHE_PGINDEX_PROBE_VERBOSE=1
 * prints the figures.
 */
#include "opal_config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "opal/constants.h"
#include "opal/mca/rcache/base/rcache_base_pgindex.h"
#include "test/support/test_util.h"

/*
 * Lines per hit on average, for any pattern at any fill, and lines read by
 * any one probe, found or not.  The hashing of this tree (Fibonacci, half
 * a line to a group, see mca_rcache_base_pgindex_home) reads, with 64-bit
 * pointers (two blocks to a group), at most 1.7 lines per hit on average
 * (dense regions far apart, at load 3/4; 1.0-1.1 for pages in order and
 * 2 MiB apart, 1.1-1.3 every 16th page, 1 MiB or 1 GiB apart, for mixed
 * spans and random pages) and up to 33 lines in one probe (an absent page
 * among mixed spans or random pages at load 3/4: open addressing
 * clusters); with 32-bit pointers (eight slots a line, four blocks to a
 * group) at most 1.25 and 15.  Four blocks to a group with 64-bit pointers
 * read 2.5 lines per hit for dense regions: MEAN_BOUND fails that.
 */
#define MEAN_BOUND 2.0
#define MAX_BOUND 64
#define MAX_RANGES 100000
#define ABSENT_PROBES 2000

typedef struct item_t {
    unsigned char *first, *last; /* page numbers (page_shift 0) */
} item_t;

static item_t items[MAX_RANGES];
static mca_rcache_base_pgindex_t idx;

static uint64_t rng;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Page numbers must stay below 2^57 (64-bit) or 2^25 (32-bit pointers): see the header. */
#define WIDE (UINTPTR_MAX > 0xffffffffu)
#define BASE (WIDE ? (uintptr_t) 0x7f0000000ull : (uintptr_t) 0x40000)
#define SPACE (WIDE ? (uintptr_t) 1 << 35 : (uintptr_t) 1 << 24) /* pages above BASE */

typedef struct pattern {
    const char *name;
    size_t count;     /* ranges (fewer where the space is smaller) */
    uintptr_t stride; /* pages from one range's start to the next; 0: see span/random */
    unsigned mode;    /* 0 one page at each stride; 1 mixed spans; 2 random pages; 3 regions */
    uintptr_t run, gap; /* mode 3: runs of 'run' pages, 'gap' pages apart */
} pattern_t;

static const pattern_t patterns[] = {
    {"in order", MAX_RANGES, 1, 0, 0, 0},
    {"every 16th page", MAX_RANGES, 16, 0, 0, 0},
    {"1 MiB apart", MAX_RANGES, 256, 0, 0, 0},
    {"2 MiB apart", MAX_RANGES, 512, 0, 0, 0},
    /* A 47-bit address space holds 2^17 areas of 1 GiB. */
    {"1 GiB apart", 30000, (uintptr_t) 1 << 18, 0, 0, 0},
    {"mixed spans", MAX_RANGES, 64, 1, 0, 0},
    {"random pages", MAX_RANGES, 0, 2, 0, 0},
    {"regions of 1000", MAX_RANGES, 0, 3, 1000, 1000000},
    {"regions of 16", MAX_RANGES, 0, 3, 16, 100003},
};

static void range_of(const pattern_t *p, size_t i, uintptr_t *first, uintptr_t *last)
{
    uintptr_t span = 1, off;
    switch (p->mode) {
    case 1: /* a power-of-two span of 1..64 pages at a random offset in its 64 */
        span = (uintptr_t) 1 << (next_rand() % 7);
        off = p->stride * i + next_rand() % (p->stride - span + 1);
        break;
    case 2:
        off = next_rand() % SPACE;
        break;
    case 3:
        off = i / p->run * p->gap + i % p->run;
        break;
    default:
        off = p->stride * i;
    }
    *first = BASE + off % SPACE;
    *last = *first + span - 1;
}

/*
 * Lines a probe of item's key reads up to the line that holds it, going on
 * only past lines marked overflowed, as a probe does: SIZE_MAX when it is
 * not reached so.
 */
static size_t lines_to(const mca_rcache_base_pgindex_table_t *t, const item_t *it)
{
    uintptr_t first = (uintptr_t) it->first, last = (uintptr_t) it->last;
    unsigned s = mca_rcache_base_pgindex_class(first, last);
    size_t mask = ((size_t) 1 << t->bits) - 1;
    size_t line = mca_rcache_base_pgindex_home(t, mca_rcache_base_pgindex_key(s, first >> s));
    for (size_t n = 1; n <= mask + 1; n++, line = (line + 1) & mask) {
        const mca_rcache_base_pgindex_entry_t *e = &t->entry[line * MCA_RCACHE_BASE_PGINDEX_SLOTS];
        for (unsigned j = 0; j < MCA_RCACHE_BASE_PGINDEX_SLOTS; j++) {
            if (e[j].item == it) {
                return n;
            }
        }
        if (!(e[0].key & MCA_RCACHE_BASE_PGINDEX_OVERFLOW)) {
            break; /* a probe stops here */
        }
    }
    return SIZE_MAX;
}

/* Lines a probe of the key (class 0, one page) reads when nothing matches. */
static size_t lines_absent(const mca_rcache_base_pgindex_table_t *t, uintptr_t page)
{
    size_t mask = ((size_t) 1 << t->bits) - 1;
    size_t line = mca_rcache_base_pgindex_home(t, mca_rcache_base_pgindex_key(0, page));
    size_t n = 1;
    while (n <= mask && (t->entry[line * MCA_RCACHE_BASE_PGINDEX_SLOTS].key
                         & MCA_RCACHE_BASE_PGINDEX_OVERFLOW)) {
        line = (line + 1) & mask;
        n++;
    }
    return n;
}

static bool verbose;

/* Every range present looked for, and absent pages: the bounds checked. */
static void measure(const pattern_t *p, size_t count, const char *when)
{
    const mca_rcache_base_pgindex_table_t *t = idx.table;
    double sum = 0;
    size_t max = 0, max_absent = 0, overflowed = 0;
    for (size_t i = 0; i < count; i++) {
        size_t n = lines_to(t, &items[i]);
        CHECK_MSG(SIZE_MAX != n, "%s: range %zu is not reached from its home line", p->name, i);
        sum += (double) n;
        max = n > max ? n : max;
    }
    for (size_t i = 0; i < ABSENT_PROBES; i++) {
        size_t n = lines_absent(t, BASE + next_rand() % SPACE);
        max_absent = n > max_absent ? n : max_absent;
    }
    for (size_t l = 0; l < ((size_t) 1 << t->bits); l++) {
        overflowed += t->entry[l * MCA_RCACHE_BASE_PGINDEX_SLOTS].key & 1;
    }
    double mean = sum / (double) count;
    double load = (double) count / (double) ((size_t) MCA_RCACHE_BASE_PGINDEX_SLOTS << t->bits);
    if (verbose) {
        printf("%-16s %-6s %6zu ranges, load %.2f: %.3f lines per hit, max %zu, absent max %zu, "
               "%.4f of the lines overflowed\n",
               p->name, when, count, load, mean, max, max_absent,
               (double) overflowed / (double) ((size_t) 1 << t->bits));
    }
    CHECK_MSG(mean <= MEAN_BOUND, "%s, %zu ranges (load %.2f): %.3f lines per hit (bound %.1f)",
              p->name, count, load, mean, MEAN_BOUND);
    CHECK_MSG(max <= MAX_BOUND && max_absent <= MAX_BOUND,
              "%s, %zu ranges (load %.2f): probes of %zu lines (hit) and %zu (absent), bound %d",
              p->name, count, load, max, max_absent, MAX_BOUND);
}

static void run(const pattern_t *p)
{
    size_t count = p->count;
    if (p->stride && (SPACE / p->stride) < count) {
        count = SPACE / p->stride; /* 32-bit: the patterns that fit */
    }
    rng = 0x9e3779b97f4a7c15ull;
    CHECK(OPAL_SUCCESS == mca_rcache_base_pgindex_init(&idx, 0, 0));
    for (size_t i = 0; i < count; i++) {
        uintptr_t first, last;
        range_of(p, i, &first, &last);
        items[i].first = (unsigned char *) first;
        items[i].last = (unsigned char *) last;
        mca_rcache_base_pgindex_insert(&idx, &items[i], first, last);
        unsigned want = mca_rcache_base_pgindex_wanted(&idx);
        if (want) {
            measure(p, i + 1, "full");
            mca_rcache_base_pgindex_table_t *t = mca_rcache_base_pgindex_table_new(want);
            CHECK(NULL != t);
            CHECK(NULL == mca_rcache_base_pgindex_rehash(&idx, t));
            mca_rcache_base_pgindex_release(&idx);
        }
    }
    measure(p, count, "end");
    mca_rcache_base_pgindex_fini(&idx);
}

int main(void)
{
    const char *v = getenv("RCACHE_PGINDEX_PROBE_VERBOSE");
    verbose = v && '1' == v[0];
    for (size_t i = 0; i < sizeof(patterns) / sizeof(patterns[0]) && test_failures < 20; i++) {
        run(&patterns[i]);
    }
    return test_finish("rcache_pgindex_probe_test");
}
