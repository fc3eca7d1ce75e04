/*
 * Our patches as an event source (memory_patch.h): the patcher framework
 * selects a component, the intercepts go in with it, all or nothing, then
 * the patcher's loader watch and the copies of libc in the dlmopen
 * namespaces made before our setup.
 */
#include "opal_config.h"

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/memoryhooks/memory_patch.h"

/* How the selected patcher patches: asked once, at the start. */
static mca_patcher_base_style_t style;

/* Undo every patch; the copies are forgotten before anything is written back. */
static void patch_stop(void)
{
    if (NULL != opal_patcher) {
        opal_mem_hooks_forget_copies(style);
    }
    opal_mem_hooks_uninstall_intercepts();
    style = MCA_PATCHER_BASE_STYLE_NONE;
}

/* What failed is said by the patcher base or the intercept, with its name. */
static int patch_start(const char **reason)
{
    int rc = mca_patcher_base_select();
    if (OPAL_SUCCESS != rc) {
        *reason = "no patcher component can work here";
        return rc;
    }
    style = mca_patcher_base_style();
    if (OPAL_SUCCESS != opal_mem_hooks_install_intercepts(style)) {
        patch_stop();
        mca_patcher_base_fini();
        *reason = "an intercept cannot be installed";
        return OPAL_ERR_NOT_SUPPORTED;
    }
    opal_mem_hooks_watch_copies();
    opal_mem_hooks_sync_copies(style); /* namespaces made before our setup */
    mca_patcher_base_set_selected_name(opal_patcher->super.module_component->mca_component_name);
    return OPAL_SUCCESS;
}

static int patch_support_level(void)
{
    return OPAL_MEMORY_FREE_SUPPORT | OPAL_MEMORY_MUNMAP_SUPPORT | OPAL_MEMORY_CHUNK_SUPPORT;
}

/* The namespaces' copies in line with the loaded ones, then our jumps back in front. */
static int patch_check(void)
{
    opal_mem_hooks_sync_copies(style);
    return opal_mem_hooks_check_intercepts(style);
}

const opal_mem_source_t opal_mem_patch_source = {
    .name = "patcher",
    .start = patch_start,
    .support_level = patch_support_level,
    .check = patch_check,
    .stop = patch_stop,
};
