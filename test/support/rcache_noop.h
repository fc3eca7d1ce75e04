/*
 * A device that does nothing: register_mem and deregister_mem succeed at
 * once.  For the benchmarks and tests that drive the cache alone.
 */
#ifndef TEST_SUPPORT_RCACHE_NOOP_H
#define TEST_SUPPORT_RCACHE_NOOP_H

#include "opal/constants.h"
#include "opal/mca/rcache/rcache.h"

static inline int rcache_noop_register(void *data, void *base, size_t size,
                                       mca_rcache_base_registration_t *reg)
{
    (void) data, (void) base, (void) size, (void) reg;
    return OPAL_SUCCESS;
}

static inline int rcache_noop_deregister(void *data, mca_rcache_base_registration_t *reg)
{
    (void) data, (void) reg;
    return OPAL_SUCCESS;
}

/* Resources for a cache named name on that device, registrations of the base size. */
static inline mca_rcache_base_resources_t rcache_noop_resources(char *name)
{
    mca_rcache_base_resources_t res = {.cache_name = name,
                                       .sizeof_reg = sizeof(mca_rcache_base_registration_t),
                                       .register_mem = rcache_noop_register,
                                       .deregister_mem = rcache_noop_deregister};
    return res;
}

#endif
