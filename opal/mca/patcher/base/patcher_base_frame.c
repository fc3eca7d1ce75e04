/*
 * The patcher framework: its MCA framework object and its teardown.
 */
#include "opal_config.h"

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"

static int patcher_base_close(void)
{
    mca_patcher_base_close();
    return OPAL_SUCCESS;
}

mca_base_framework_t opal_patcher_base_framework = {
    .framework_name = "patcher",
    .framework_description = "Redirect calls of a function to an intercept (GOT or code overwrite)",
    .framework_close = patcher_base_close,
};
