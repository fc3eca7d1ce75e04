/*
 * patcher/opatch_overwrite and patcher/opatch_linux: one of opal-patcher's
 * mechanisms as a component of Open MPI's patcher framework, for the
 * stock memory/patcher (selected with --mca memory patcher --mca patcher
 * opatch_overwrite).  Built once per mechanism (ompi/Makefile.include).
 *
 * patch_symbol hands back what the stock intercept must call to reach the
 * code it displaced (our trampoline, or the previous definition), so the
 * stock hooks chain instead of making the system call themselves, and
 * stack with another hooker.  Our patches live in our own records: the
 * module's patch_list stays empty, and patch_fini undoes them all.
 *
 * OPATCH_MECHANISM is a string and OPATCH_COMPONENT the struct's name (not
 * built from one token: "linux" is a macro of GNU C).
 */
#include "opal_config.h"

#include "opal/constants.h"
#include "opal/mca/base/mca_base_var.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/mca/patcher/patcher.h"
#include "opal/util/output.h"

#include "opatch_glue.h"
#include "opatch_inner.h"

#define OPATCH_COMPONENT_NAME "opatch_" OPATCH_MECHANISM

static int opatch_register(void);
static int opatch_query(mca_base_module_t **module, int *priority);

mca_patcher_base_component_t OPATCH_COMPONENT = {
    .patcherc_version = {
        OPAL_PATCHER_BASE_VERSION_1_0_0,
        .mca_component_name = OPATCH_COMPONENT_NAME,
        MCA_BASE_MAKE_VERSION(component, OPATCH_VERSION_MAJOR, OPATCH_VERSION_MINOR,
                              OPATCH_VERSION_RELEASE),
        .mca_query_component = opatch_query,
        .mca_register_component_params = opatch_register,
    },
    .patcherc_data = {MCA_BASE_METADATA_PARAM_NONE},
};

/* Below overwrite's 37: the stock mechanism stays the default, ours is asked for. */
static int priority = 30;
static int verbose;

static int opatch_patch_init(void)
{
    int rc = opatch_inner_start(OPATCH_MECHANISM, verbose);
    if (0 == rc) {
        rc = opatch_inner_patcher_select();
        /* Open MPI may unload us at finalize without closing the framework. */
        if (0 == rc && !opatch_glue_stay_loaded(&OPATCH_COMPONENT.patcherc_version)) {
            rc = OPAL_ERROR;
        }
        if (0 != rc) {
            opatch_inner_stop();
        }
    }
    if (0 != rc) {
        opal_output(0, "opal-patcher: patcher " OPATCH_COMPONENT_NAME ": cannot work here (said above)");
        return OPAL_ERR_NOT_AVAILABLE;
    }
    return OPAL_SUCCESS;
}

static int opatch_patch_fini(void)
{
    opatch_inner_stop();
    return OPAL_SUCCESS;
}

static int opatch_patch_symbol(const char *symbol, uintptr_t new_addr, uintptr_t *old_addr)
{
    uintptr_t chain = 0;
    /* The stock caller passes where its chain lives: it is set before the patch is live. */
    int rc = opatch_inner_patch_symbol(symbol, new_addr, NULL != old_addr ? old_addr : &chain);
    if (0 != rc) {
        opal_output(0, "opal-patcher: patcher " OPATCH_COMPONENT_NAME ": cannot patch %s (said above)", symbol);
        return OPAL_ERROR;
    }
    return OPAL_SUCCESS;
}

static mca_patcher_base_module_t opatch_module = {
    .patch_init = opatch_patch_init,
    .patch_fini = opatch_patch_fini,
    .patch_symbol = opatch_patch_symbol,
};

static int opatch_register(void)
{
    const mca_base_component_t *c = &OPATCH_COMPONENT.patcherc_version;
    int rc = opatch_glue_check_runtime(c);
    if (OPAL_SUCCESS != rc) {
        return rc;
    }
    opatch_glue_check_path(c, false);
    priority = 30;
    if (mca_base_component_var_register(c, "priority", "Selection priority (overwrite has 37)",
                                        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_1,
                                        MCA_BASE_VAR_SCOPE_CONSTANT, &priority) < 0) {
        return OPAL_ERROR;
    }
    return opatch_glue_register_verbose(c, &verbose);
}

static int opatch_query(mca_base_module_t **module, int *prio)
{
    *prio = priority;
    *module = &opatch_module.super;
    return OPAL_SUCCESS;
}
