/*
 * grdma component: its parameters and the factory of modules.
 */
#include "opal_config.h"

#include "opal/constants.h"
#include "opal/mca/base/mca_base_var.h"
#include "opal/mca/rcache/grdma/rcache_grdma.h"

static int grdma_priority;
size_t mca_rcache_grdma_max_bytes;
size_t mca_rcache_grdma_max_entries;

static int grdma_register_params(void)
{
    grdma_priority = 50;
    mca_rcache_grdma_max_bytes = 0;
    mca_rcache_grdma_max_entries = 0;
    const mca_base_var_t vars[] = {
        {.framework = "rcache", .component = "grdma", .name = "priority",
         .help = "Selection priority of the grdma registration cache",
         .type = MCA_BASE_VAR_TYPE_INT, .storage = &grdma_priority,
         .min = 0, .max = 100},
        {.framework = "rcache", .component = "grdma", .name = "max_bytes",
         .help = "Most bytes kept registered per cache; unused registrations are evicted "
                 "oldest first beyond it (0: no limit)",
         .type = MCA_BASE_VAR_TYPE_SIZE, .storage = &mca_rcache_grdma_max_bytes},
        {.framework = "rcache", .component = "grdma", .name = "max_entries",
         .help = "Most registrations kept per cache; unused ones are evicted oldest first "
                 "beyond it (0: no limit)",
         .type = MCA_BASE_VAR_TYPE_SIZE, .storage = &mca_rcache_grdma_max_entries},
    };
    return mca_base_var_register_array(vars, sizeof(vars) / sizeof(vars[0]));
}

/* grdma works everywhere; modules are made per create call (rcache_create). */
static int grdma_query(mca_base_module_t **module, int *priority, const char **reason)
{
    static mca_base_module_t placeholder;
    *module = &placeholder;
    *priority = grdma_priority;
    return OPAL_SUCCESS;
}

mca_rcache_base_component_t mca_rcache_grdma_component = {
    .rcache_version = {
        MCA_BASE_COMPONENT_INIT("rcache", MCA_RCACHE_BASE_VERSION, "grdma",
                                "Page-indexed registration cache, lock-free hits, leave_pinned"),
        .mca_register_component_params = grdma_register_params,
        .mca_query_component = grdma_query,
    },
    .rcache_create = mca_rcache_grdma_module_create,
};
