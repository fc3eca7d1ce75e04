/*
 * The linux (GOT) patcher component: its priority parameter, and the query
 * that declines where the process has no dynamic linking.
 */
#include "opal_config.h"

#include "opal/constants.h"
#include "opal/mca/base/mca_base_var.h"
#include "opal/mca/patcher/linux/patcher_linux.h"

/* Below the overwrite patcher (45): a GOT does not see every caller. */
static int linux_priority = 37;

static int linux_register(void)
{
    mca_base_var_t var = {
        .framework = "patcher",
        .component = "linux",
        .name = "priority",
        .help = "Selection priority of the GOT patcher",
        .type = MCA_BASE_VAR_TYPE_INT,
        .storage = &linux_priority,
    };
    return mca_base_var_register(&var);
}

static int linux_query(mca_base_module_t **module, int *priority, const char **reason)
{
    if (!mca_patcher_linux_have_dynamic(reason)) {
        return OPAL_ERR_NOT_SUPPORTED;
    }
    *module = &mca_patcher_linux_module.super;
    *priority = linux_priority;
    return OPAL_SUCCESS;
}

mca_patcher_base_component_t mca_patcher_linux_component = {
    .patcherc_version = {
        MCA_BASE_COMPONENT_INIT("patcher", MCA_PATCHER_BASE_VERSION, "linux",
                                "rewrites GOT slots in every loaded object; watches dlopen, "
                                "dlclose and dlsym"),
        .mca_register_component_params = linux_register,
        .mca_query_component = linux_query,
    },
};
