/*
 * The variants of our intercepts (memory_variants.h): their state, and
 * which copy of libc each copy variant serves.
 */
#include "opal_config.h"

#include <stddef.h>

#include "opal/memoryhooks/memory_variants.h"

opal_mem_variant_t opal_mem_variants[NUM_VARIANTS];

opal_mem_variant_t *opal_mem_variant_take_copy(const struct link_map *map)
{
    for (int v = VARIANT_FIRST_COPY; v < NUM_VARIANTS; v++) {
        opal_mem_variant_t *variant = &opal_mem_variants[v];
        if (NULL == variant->copy_map) {
            variant->copy_map = map;
            variant->copy_base = map->l_addr;
            __atomic_store_n(&variant->copy_unloaded, false, __ATOMIC_RELAXED);
            return variant;
        }
    }
    return NULL;
}

opal_mem_variant_t *opal_mem_variant_copy_of(const struct link_map *map)
{
    for (int v = VARIANT_FIRST_COPY; v < NUM_VARIANTS; v++) {
        opal_mem_variant_t *variant = &opal_mem_variants[v];
        if (variant->copy_map == map && variant->copy_base == map->l_addr) {
            return variant;
        }
    }
    return NULL;
}

void opal_mem_variant_put_copy(opal_mem_variant_t *variant)
{
    for (int t = 0; t < OPAL_MEM_HOOKS_NUM_TARGETS; t++) {
        variant->patched[t] = 0;
    }
    variant->copy_map = NULL;
}
