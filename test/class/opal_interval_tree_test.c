/*
 * The interval tree against a brute-force oracle: random inserts and
 * removes (including equal and nested intervals), every overlap and cover
 * query compared, invariants checked throughout.
 */
#include "opal_config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "opal/class/opal_interval_tree.h"
#include "test/support/test_util.h"

#define N 2000
#define SPACE 10000

static opal_interval_tree_node_t nodes[N];
static bool present[N];

static uint64_t rng = 88172645463325252ull;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

struct seen {
    bool hit[N];
    size_t count;
    uintptr_t last_low;
    bool ordered;
};

static int mark(opal_interval_tree_node_t *n, void *ctx)
{
    struct seen *s = ctx;
    size_t i = (size_t)(n - nodes);
    s->ordered = s->ordered && n->low >= s->last_low;
    s->last_low = n->low;
    if (!s->hit[i]) {
        s->hit[i] = true;
        s->count++;
    } else {
        s->count = SIZE_MAX; /* visited twice */
    }
    return 0;
}

static int stop_at_first(opal_interval_tree_node_t *n, void *ctx)
{
    *(opal_interval_tree_node_t **) ctx = n;
    return 7;
}

static void check_queries(opal_interval_tree_t *t, int rounds)
{
    static struct seen s;
    for (int q = 0; q < rounds; q++) {
        uintptr_t lo = next_rand() % SPACE, hi = lo + next_rand() % 300;
        for (int cover = 0; cover < 2; cover++) {
            memset(&s, 0, sizeof(s));
            s.ordered = true;
            if (cover) {
                opal_interval_tree_covering(t, lo, hi, mark, &s);
            } else {
                opal_interval_tree_overlapping(t, lo, hi, mark, &s);
            }
            size_t expect = 0;
            bool same = true;
            for (int i = 0; i < N; i++) {
                bool want = present[i] && (cover ? nodes[i].low <= lo && nodes[i].high >= hi
                                                 : nodes[i].low <= hi && nodes[i].high >= lo);
                expect += want;
                same = same && want == s.hit[i];
            }
            CHECK_MSG(same && s.count == expect, "%s [%lu,%lu]: %zu visited, %zu expected",
                      cover ? "cover" : "overlap", (unsigned long) lo, (unsigned long) hi, s.count,
                      expect);
            CHECK(s.ordered);
        }
    }
}

int main(void)
{
    opal_interval_tree_t t;
    opal_interval_tree_init(&t);
    CHECK(opal_interval_tree_verify(&t));

    /* Early stop returns the visitor's value. */
    opal_interval_tree_insert(&t, &nodes[0], 10, 20);
    present[0] = true;
    opal_interval_tree_node_t *first = NULL;
    CHECK(7 == opal_interval_tree_overlapping(&t, 15, 15, stop_at_first, &first));
    CHECK(first == &nodes[0]);
    CHECK(0 == opal_interval_tree_covering(&t, 5, 15, stop_at_first, &first));
    opal_interval_tree_remove(&t, &nodes[0]);
    present[0] = false;

    for (int step = 0; step < 20000; step++) {
        int i = (int)(next_rand() % N);
        if (present[i]) {
            opal_interval_tree_remove(&t, &nodes[i]);
            present[i] = false;
        } else {
            uintptr_t lo = next_rand() % SPACE;
            uintptr_t len = (next_rand() % 4) ? next_rand() % 64 : next_rand() % 2000;
            if (0 == next_rand() % 10 && i > 0 && present[i - 1]) {
                lo = nodes[i - 1].low; /* equal low ends */
                len = nodes[i - 1].high - lo;
            }
            opal_interval_tree_insert(&t, &nodes[i], lo, lo + len);
            present[i] = true;
        }
        if (0 == step % 1000) {
            CHECK(opal_interval_tree_verify(&t));
            check_queries(&t, 50);
        }
    }
    size_t count = 0;
    for (int i = 0; i < N; i++) {
        count += present[i];
    }
    CHECK(count == opal_interval_tree_size(&t));
    CHECK(opal_interval_tree_verify(&t));
    check_queries(&t, 500);

    /* Extremes of the address space. */
    for (int i = 0; i < N; i++) {
        if (present[i]) {
            opal_interval_tree_remove(&t, &nodes[i]);
            present[i] = false;
        }
    }
    CHECK(0 == opal_interval_tree_size(&t) && NULL == t.root);
    opal_interval_tree_insert(&t, &nodes[1], UINTPTR_MAX - 4095, UINTPTR_MAX);
    opal_interval_tree_insert(&t, &nodes[2], 0, 4095);
    struct seen s = {.ordered = true};
    opal_interval_tree_overlapping(&t, 0, UINTPTR_MAX, mark, &s);
    CHECK(2 == s.count && s.ordered);

    return test_finish("opal_interval_tree_test");
}
