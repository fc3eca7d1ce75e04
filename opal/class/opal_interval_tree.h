/*
 * An intrusive interval tree: a treap ordered by the low end, each node
 * augmented with the largest high end of its subtree, so that every
 * interval overlapping a range is found in O(log n + k) expected time and a
 * covering one in O(log n).
 *
 * Embed an opal_interval_tree_node_t in your struct.  Nothing here
 * allocates, takes a lock or calls out (other than the visitor), so the
 * tree may be used inside a memory release hook under the caller's lock.
 * The caller serializes writers and readers.
 */
#ifndef OPAL_CLASS_OPAL_INTERVAL_TREE_H
#define OPAL_CLASS_OPAL_INTERVAL_TREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct opal_interval_tree_node_t {
    struct opal_interval_tree_node_t *left;
    struct opal_interval_tree_node_t *right;
    uintptr_t low;      /* first point of the interval */
    uintptr_t high;     /* last point (inclusive) */
    uintptr_t max_high; /* largest high in this subtree */
    uint32_t priority;  /* treap heap key, derived from the node address */
} opal_interval_tree_node_t;

typedef struct opal_interval_tree_t {
    opal_interval_tree_node_t *root;
    size_t count;
} opal_interval_tree_t;

/*
 * Visitor: return 0 to go on, anything else to stop the walk (the value is
 * returned by the walk).  It must not insert or remove nodes.
 */
typedef int (*opal_interval_tree_visit_fn_t)(opal_interval_tree_node_t *node, void *ctx);

void opal_interval_tree_init(opal_interval_tree_t *tree);

/* Insert node covering [low, high], low <= high.  Equal intervals are allowed. */
void opal_interval_tree_insert(opal_interval_tree_t *tree, opal_interval_tree_node_t *node,
                               uintptr_t low, uintptr_t high);

/* Remove a node that is in the tree. */
void opal_interval_tree_remove(opal_interval_tree_t *tree, opal_interval_tree_node_t *node);

/* Visit, in order of low, every node overlapping [low, high]. */
int opal_interval_tree_overlapping(opal_interval_tree_t *tree, uintptr_t low, uintptr_t high,
                                   opal_interval_tree_visit_fn_t fn, void *ctx);

/* Visit, in order of low, every node that covers all of [low, high]. */
int opal_interval_tree_covering(opal_interval_tree_t *tree, uintptr_t low, uintptr_t high,
                                opal_interval_tree_visit_fn_t fn, void *ctx);

static inline size_t opal_interval_tree_size(const opal_interval_tree_t *tree)
{
    return tree->count;
}

/* Check order, heap and augmentation invariants and the count (for tests). */
bool opal_interval_tree_verify(const opal_interval_tree_t *tree);

#endif
