/*
 * Treap with max-high augmentation.  The heap priority is a hash of the
 * node's address: no random number generator state, and nodes allocated in
 * address order still give a balanced tree in expectation.  Recursion depth
 * is the tree height, O(log n) expected.
 */
#include "opal_config.h"

#include "opal/class/opal_interval_tree.h"

typedef opal_interval_tree_node_t node_t;

static inline uintptr_t max_of(uintptr_t a, uintptr_t b)
{
    return a > b ? a : b;
}

static inline void update(node_t *n)
{
    uintptr_t m = n->high;
    if (n->left) {
        m = max_of(m, n->left->max_high);
    }
    if (n->right) {
        m = max_of(m, n->right->max_high);
    }
    n->max_high = m;
}

/* Total order: by low, ties broken by address so equal intervals coexist. */
static inline bool before(const node_t *a, const node_t *b)
{
    return a->low < b->low || (a->low == b->low && (uintptr_t) a < (uintptr_t) b);
}

static node_t *rotate_right(node_t *t)
{
    node_t *l = t->left;
    t->left = l->right;
    l->right = t;
    update(t);
    update(l);
    return l;
}

static node_t *rotate_left(node_t *t)
{
    node_t *r = t->right;
    t->right = r->left;
    r->left = t;
    update(t);
    update(r);
    return r;
}

static node_t *insert(node_t *t, node_t *n)
{
    if (NULL == t) {
        return n;
    }
    if (before(n, t)) {
        t->left = insert(t->left, n);
        if (t->left->priority > t->priority) {
            return rotate_right(t);
        }
    } else {
        t->right = insert(t->right, n);
        if (t->right->priority > t->priority) {
            return rotate_left(t);
        }
    }
    update(t);
    return t;
}

/* Join two treaps where every node of a comes before every node of b. */
static node_t *merge(node_t *a, node_t *b)
{
    if (NULL == a) {
        return b;
    }
    if (NULL == b) {
        return a;
    }
    if (a->priority > b->priority) {
        a->right = merge(a->right, b);
        update(a);
        return a;
    }
    b->left = merge(a, b->left);
    update(b);
    return b;
}

static node_t *remove_node(node_t *t, node_t *n)
{
    if (t == n) {
        return merge(t->left, t->right);
    }
    if (before(n, t)) {
        t->left = remove_node(t->left, n);
    } else {
        t->right = remove_node(t->right, n);
    }
    update(t);
    return t;
}

/*
 * Visit nodes with low <= low_max and high >= high_min.  A subtree whose
 * max_high is below high_min holds none; once a node's low passes low_max,
 * its right subtree does too.
 */
static int visit(node_t *t, uintptr_t low_max, uintptr_t high_min, opal_interval_tree_visit_fn_t fn,
                 void *ctx)
{
    while (NULL != t && t->max_high >= high_min) {
        int rc = visit(t->left, low_max, high_min, fn, ctx);
        if (0 != rc || t->low > low_max) {
            return rc;
        }
        if (t->high >= high_min && 0 != (rc = fn(t, ctx))) {
            return rc;
        }
        t = t->right; /* tail position: iterate instead of recursing */
    }
    return 0;
}

void opal_interval_tree_init(opal_interval_tree_t *tree)
{
    tree->root = NULL;
    tree->count = 0;
}

void opal_interval_tree_insert(opal_interval_tree_t *tree, opal_interval_tree_node_t *node,
                               uintptr_t low, uintptr_t high)
{
    /*
     * A full mixer (splitmix64's finalizer): a plain multiplicative hash
     * of addresses allocated with a fixed stride gives priorities that
     * follow the key order, and the treap degenerates.
     */
    uint64_t h = (uint64_t)(uintptr_t) node;
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    h ^= h >> 31;
    node->left = node->right = NULL;
    node->low = low;
    node->high = high;
    node->max_high = high;
    node->priority = (uint32_t)(h >> 32);
    tree->root = insert(tree->root, node);
    tree->count++;
}

void opal_interval_tree_remove(opal_interval_tree_t *tree, opal_interval_tree_node_t *node)
{
    tree->root = remove_node(tree->root, node);
    node->left = node->right = NULL;
    tree->count--;
}

int opal_interval_tree_overlapping(opal_interval_tree_t *tree, uintptr_t low, uintptr_t high,
                                   opal_interval_tree_visit_fn_t fn, void *ctx)
{
    return visit(tree->root, high, low, fn, ctx);
}

int opal_interval_tree_covering(opal_interval_tree_t *tree, uintptr_t low, uintptr_t high,
                                opal_interval_tree_visit_fn_t fn, void *ctx)
{
    return visit(tree->root, low, high, fn, ctx);
}

/* A child must not outrank its parent; fold its max_high into *m. */
static bool child_ok(const node_t *parent, const node_t *child, uintptr_t *m)
{
    if (NULL == child) {
        return true;
    }
    *m = max_of(*m, child->max_high);
    return child->priority <= parent->priority;
}

static bool verify(const node_t *t, const node_t *lo, const node_t *hi, size_t *count)
{
    if (NULL == t) {
        return true;
    }
    (*count)++;
    uintptr_t m = t->high;
    if (t->low > t->high || (lo && !before(lo, t)) || (hi && !before(t, hi))) {
        return false;
    }
    if (!child_ok(t, t->left, &m) || !child_ok(t, t->right, &m) || m != t->max_high) {
        return false;
    }
    return verify(t->left, lo, t, count) && verify(t->right, t, hi, count);
}

bool opal_interval_tree_verify(const opal_interval_tree_t *tree)
{
    size_t count = 0;
    return verify(tree->root, NULL, NULL, &count) && count == tree->count;
}
