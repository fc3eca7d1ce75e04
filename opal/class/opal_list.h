/*
 * An intrusive doubly linked list with a sentinel: embed an
 * opal_list_item_t as the first member of a struct to make it listable.
 * Header only; nothing here allocates.
 */
#ifndef OPAL_LIST_H
#define OPAL_LIST_H

#include <stdbool.h>
#include <stddef.h>

typedef struct opal_list_item_t {
    struct opal_list_item_t *opal_list_next;
    struct opal_list_item_t *opal_list_prev;
} opal_list_item_t;

typedef struct opal_list_t {
    opal_list_item_t opal_list_sentinel;
    size_t opal_list_length;
} opal_list_t;

#define OPAL_LIST_STATIC_INIT(list) \
    { { &(list).opal_list_sentinel, &(list).opal_list_sentinel }, 0 }

static inline void opal_list_init(opal_list_t *list)
{
    list->opal_list_sentinel.opal_list_next = &list->opal_list_sentinel;
    list->opal_list_sentinel.opal_list_prev = &list->opal_list_sentinel;
    list->opal_list_length = 0;
}

static inline bool opal_list_is_empty(const opal_list_t *list)
{
    return list->opal_list_sentinel.opal_list_next == &list->opal_list_sentinel;
}

static inline size_t opal_list_get_size(const opal_list_t *list)
{
    return list->opal_list_length;
}

static inline opal_list_item_t *opal_list_get_first(opal_list_t *list)
{
    return list->opal_list_sentinel.opal_list_next;
}

static inline opal_list_item_t *opal_list_get_last(opal_list_t *list)
{
    return list->opal_list_sentinel.opal_list_prev;
}

static inline opal_list_item_t *opal_list_get_end(opal_list_t *list)
{
    return &list->opal_list_sentinel;
}

static inline void opal_list_insert_after(opal_list_t *list, opal_list_item_t *where,
                                          opal_list_item_t *item)
{
    item->opal_list_prev = where;
    item->opal_list_next = where->opal_list_next;
    where->opal_list_next->opal_list_prev = item;
    where->opal_list_next = item;
    list->opal_list_length++;
}

static inline void opal_list_append(opal_list_t *list, opal_list_item_t *item)
{
    opal_list_insert_after(list, list->opal_list_sentinel.opal_list_prev, item);
}

static inline void opal_list_prepend(opal_list_t *list, opal_list_item_t *item)
{
    opal_list_insert_after(list, &list->opal_list_sentinel, item);
}

static inline void opal_list_remove_item(opal_list_t *list, opal_list_item_t *item)
{
    item->opal_list_prev->opal_list_next = item->opal_list_next;
    item->opal_list_next->opal_list_prev = item->opal_list_prev;
    item->opal_list_next = item->opal_list_prev = NULL;
    list->opal_list_length--;
}

static inline opal_list_item_t *opal_list_remove_last(opal_list_t *list)
{
    if (opal_list_is_empty(list)) {
        return NULL;
    }
    opal_list_item_t *item = list->opal_list_sentinel.opal_list_prev;
    opal_list_remove_item(list, item);
    return item;
}

/* Iterate over items of type 'type' (whose first member is the list item). */
#define OPAL_LIST_FOREACH(item, list, type)                                        \
    for (item = (type *) (list)->opal_list_sentinel.opal_list_next;                \
         &(item)->super != &(list)->opal_list_sentinel;                            \
         item = (type *) (item)->super.opal_list_next)

/* The same, in reverse order. */
#define OPAL_LIST_FOREACH_REV(item, list, type)                                    \
    for (item = (type *) (list)->opal_list_sentinel.opal_list_prev;                \
         &(item)->super != &(list)->opal_list_sentinel;                            \
         item = (type *) (item)->super.opal_list_prev)

#endif
