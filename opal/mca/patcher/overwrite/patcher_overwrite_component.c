/*
 * The overwrite patcher component: its priority parameter, and the query
 * that declines where this architecture has no instruction support.
 */
#include "opal_config.h"

#include <stdbool.h>
#include <stdio.h>
#include <sys/utsname.h>

#include "opal/constants.h"
#include "opal/mca/base/mca_base_var.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_arch.h"
#include "opal/util/valgrind.h"

/* Preferred over the GOT patcher (37) where it works: it sees every caller. */
static int overwrite_priority = 45;

/* Patch under valgrind too (for instruction counts with callgrind). */
static bool overwrite_valgrind = false;

static int overwrite_register(void)
{
    mca_base_var_t vars[] = {
        {.framework = "patcher", .component = "overwrite", .name = "priority",
         .help = "Selection priority of the code-overwrite patcher",
         .type = MCA_BASE_VAR_TYPE_INT, .storage = &overwrite_priority},
        {.framework = "patcher", .component = "overwrite", .name = "valgrind",
         .help = "Patch under valgrind as well (single-threaded measurements only: "
                 "no protection for other threads during the write)",
         .type = MCA_BASE_VAR_TYPE_BOOL, .storage = &overwrite_valgrind},
    };
    return mca_base_var_register_array(vars, sizeof(vars) / sizeof(vars[0]));
}

static int overwrite_query(mca_base_module_t **module, int *priority, const char **reason)
{
    if (!MCA_PATCHER_OVERWRITE_HAVE_ARCH) {
        static char why[96];
        struct utsname u;
        snprintf(why, sizeof(why), "no instruction support for %s",
                 uname(&u) == 0 ? u.machine : "this architecture");
        *reason = why;
        return OPAL_ERR_NOT_SUPPORTED;
    }
    if (opal_running_on_valgrind() && !overwrite_valgrind) {
        /* valgrind runs translations of the code and reserves the signals
         * our code write uses to move other threads off the patch. */
        *reason = "running under valgrind, which does not see code patched at run time "
                  "(patcher=linux works there; patcher_overwrite_valgrind=1 forces it "
                  "for single-threaded measurements)";
        return OPAL_ERR_NOT_SUPPORTED;
    }
    *module = &mca_patcher_overwrite_module.super;
    *priority = overwrite_priority;
    return OPAL_SUCCESS;
}

mca_patcher_base_component_t mca_patcher_overwrite_component = {
    .patcherc_version = {
        MCA_BASE_COMPONENT_INIT("patcher", MCA_PATCHER_BASE_VERSION, "overwrite",
                                "rewrites function entries with a jump; trampolines chain to "
                                "the displaced code"),
        .mca_register_component_params = overwrite_register,
        .mca_query_component = overwrite_query,
    },
};
