/*
 * Two steps of the rcache tests that watch what the cache still holds.
 */
#ifndef OPAL_TEST_RCACHE_OPS_H
#define OPAL_TEST_RCACHE_OPS_H

#include <stdbool.h>
#include <stddef.h>

#include "opal/constants.h"
#include "opal/mca/rcache/base/base.h"

/* Register and drop at once: the range stays cached (and watched, with userfaultfd). */
static inline int test_rcache_cache(mca_rcache_base_module_t *rcache, char *p, size_t len)
{
    mca_rcache_base_registration_t *reg;
    int rc = rcache->rcache_register(rcache, p, len, 0, MCA_RCACHE_ACCESS_LOCAL_WRITE, &reg);
    if (OPAL_SUCCESS == rc) {
        rcache->rcache_deregister(rcache, reg);
    }
    return rc;
}

/* Whether the cache still hands out a registration for [p, p+len). */
static inline bool test_rcache_cached(mca_rcache_base_module_t *rcache, char *p, size_t len)
{
    mca_rcache_base_registration_t *reg = NULL;
    if (OPAL_SUCCESS != rcache->rcache_find(rcache, p, len, &reg)) {
        return false;
    }
    rcache->rcache_deregister(rcache, reg);
    return true;
}

#endif
