/*
 * The page index's list (visit_lockfree with a list: a release event's
 * walk): an item of a block that the released pages hold whole is put on
 * the list instead of visited, and stays in the index; one of a block held
 * in part is visited (it may not overlap); with the list full, or with no
 * room at all, the rest are visited; a walk that is not a snapshot (a
 * writer at work, a visitor that stopped it) returns an empty list.
 */
#include "opal_config.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "opal/constants.h"
#include "opal/mca/rcache/base/rcache_base_pgindex.h"
#include "test/support/test_util.h"

/* The index reads an item's range from the item (page numbers: shift 0). */
typedef struct item_t {
    unsigned char *first, *last;
} item_t;

#define ITEMS 8
static mca_rcache_base_pgindex_t idx;
static item_t items[ITEMS];
static unsigned visits[ITEMS];

static item_t *item_at(size_t i, uintptr_t first, uintptr_t last)
{
    items[i].first = (unsigned char *) first;
    items[i].last = (unsigned char *) last;
    mca_rcache_base_pgindex_insert(&idx, &items[i], first, last);
    return &items[i];
}

static int count_cb(void *item, void *ctx)
{
    (void) ctx;
    visits[(item_t *) item - items]++;
    return 0;
}

/* The walk of pages [first, last] with room for max; visits counted; its result in *ok. */
static mca_rcache_base_pgindex_list_t walk(uintptr_t first, uintptr_t last, unsigned max, bool *ok)
{
    mca_rcache_base_pgindex_list_t list = {.n = 0, .max = max};
    memset(visits, 0, sizeof(visits));
    *ok = mca_rcache_base_pgindex_visit_lockfree(&idx, first, last, count_cb, NULL, &list);
    return list;
}

static int stop_cb(void *item, void *ctx)
{
    (void) item;
    (void) ctx;
    return 1;
}

static bool is_listed(const mca_rcache_base_pgindex_list_t *list, const item_t *it)
{
    for (unsigned i = 0; i < list->n; i++) {
        if (list->item[i] == it) {
            return true;
        }
    }
    return false;
}

int main(void)
{
    bool ok;
    CHECK(OPAL_SUCCESS ==
          mca_rcache_base_pgindex_init(&idx, ((ptrdiff_t) offsetof(item_t, first)), 0));
    item_t *a = item_at(0, 1000, 1000); /* class 0: its block is its page */
    item_t *b = item_at(1, 2000, 2001); /* class 1, block 1000: pages 2000-2001 */
    item_t *c = item_at(2, 3001, 3002); /* class 1, block 1500 (3000-3001), into the next */
    item_t *d = item_at(3, 1001, 1001);

    mca_rcache_base_pgindex_list_t l = walk(1000, 1000, 8, &ok);
    CHECK(ok && 1 == l.n && a == l.item[0] && 0 == visits[0]);
    CHECK(4 == mca_rcache_base_pgindex_size(&idx));

    l = walk(2001, 2001, 8, &ok); /* half of b's block: visited (its range decides) */
    CHECK(ok && 0 == l.n && 1 == visits[1]);
    l = walk(1990, 2010, 8, &ok); /* all of it */
    CHECK(ok && 1 == l.n && b == l.item[0] && 0 == visits[1]);
    l = walk(3000, 3001, 8, &ok); /* c's block whole, c itself not: c overlaps, listed */
    CHECK(ok && 1 == l.n && c == l.item[0] && 0 == visits[2]);
    l = walk(3002, 3003, 8, &ok); /* c from the block before: visited */
    CHECK(ok && 0 == l.n && 1 == visits[2]);

    l = walk(1000, 1001, 1, &ok); /* room for one of a and d: the other visited */
    CHECK(ok && 1 == l.n && 1 == visits[0] + visits[3] && (is_listed(&l, a) != is_listed(&l, d)));
    l = walk(1000, 1001, 0, &ok); /* no room */
    CHECK(ok && 0 == l.n && 1 == visits[0] && 1 == visits[3]);

    idx.seq++; /* a writer at work: no snapshot, nothing listed, the caller walks under the lock */
    l = walk(1000, 1000, 8, &ok);
    CHECK(!ok && 0 == l.n);
    idx.seq++;
    /* A walk that listed a and then stopped in d's visitor is no snapshot either: emptied. */
    l = (mca_rcache_base_pgindex_list_t){.n = 0, .max = 1};
    CHECK(!mca_rcache_base_pgindex_visit_lockfree(&idx, 1000, 1001, stop_cb, NULL, &l));
    CHECK(0 == l.n);

    mca_rcache_base_pgindex_fini(&idx);
    return test_finish("rcache_pgindex_list_test");
}
