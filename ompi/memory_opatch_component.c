/*
 * memory/opatch: opal-patcher's whole hook set as a memory component of an
 * installed Open MPI 4.x.  Every release our intercepts see goes to Open
 * MPI's opal_mem_hooks_release_hook, and from there to each of its
 * consumers (the rcaches of the transports, opal_common_ucx's forwarding
 * to UCX).
 *
 * Open MPI's memory base queries every memory component, keeps the one
 * with the highest priority (the later one of equal priorities), unloads
 * the others without closing them and only then opens the one it kept; a
 * component whose open fails stays Open MPI's choice (opal_memory) even
 * so.  Hence the hooks are installed in the query, where a failure still
 * lets the stock component win, and only when ours can be selected (0 or
 * more) and no other memory component registered a priority that would
 * beat it.  Installed, the component
 * stays loaded to the end of the process: Open MPI 4.1 may unload it at
 * finalize without closing the framework, and a dlclose of a component
 * whose hooks are live would return into unmapped code (our dlclose
 * watcher is on the stack).
 */
#include "opal_config.h"

#include <stdbool.h>

#include "opal/class/opal_list.h"
#include "opal/constants.h"
#include "opal/mca/base/base.h"
#include "opal/mca/base/mca_base_var.h"
#include "opal/mca/memory/base/base.h"
#include "opal/mca/memory/base/empty.h"
#include "opal/mca/memory/memory.h"
#include "opal/memoryhooks/memory.h"
#include "opal/memoryhooks/memory_internal.h"
#include "opal/util/output.h"

#include "opatch_glue.h"
#include "opatch_inner.h"

static int opatch_register(void);
static int opatch_query(int *priority);
static int opatch_open(void);
static int opatch_close(void);

opal_memory_base_component_2_0_0_t mca_memory_opatch_component = {
    .memoryc_version = {
        OPAL_MEMORY_BASE_VERSION_2_0_0,
        .mca_component_name = "opatch",
        MCA_BASE_MAKE_VERSION(component, OPATCH_VERSION_MAJOR, OPATCH_VERSION_MINOR,
                              OPATCH_VERSION_RELEASE),
        .mca_open_component = opatch_open,
        .mca_close_component = opatch_close,
        .mca_register_component_params = opatch_register,
    },
    .memoryc_data = {MCA_BASE_METADATA_PARAM_NONE},
    .memoryc_query = opatch_query,
    .memoryc_register = opal_memory_base_component_register_empty,
    .memoryc_deregister = opal_memory_base_component_deregister_empty,
    .memoryc_set_alignment = opal_memory_base_component_set_alignment_empty,
};

/* Above memory/patcher's 80: adding our directory to the component path is enough. */
static int priority = 90;
static char *patcher;  /* our component(s), "" for by priority */
static int verbose;
static char *built;    /* read-only: what this is, for ompi_info */
static bool installed; /* in the query */

static int opatch_register(void)
{
    const mca_base_component_t *c = &mca_memory_opatch_component.memoryc_version;
    int rc = opatch_glue_check_runtime(c);
    if (OPAL_SUCCESS != rc) {
        return rc;
    }
    opatch_glue_check_path(c, true);
    priority = 90;
    patcher = "";
    built = "opal-patcher " OPATCH_VERSION " for Open MPI " OPATCH_OMPI_SERIES;
    if (mca_base_component_var_register(c, "priority",
                                        "Selection priority (memory/patcher has 80)",
                                        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_1,
                                        MCA_BASE_VAR_SCOPE_CONSTANT, &priority) < 0 ||
        mca_base_component_var_register(c, "patcher",
                                        "opal-patcher's mechanism for the hooks: overwrite (the "
                                        "functions' code), linux (the callers' GOT slots), or empty "
                                        "for the one of highest priority that works here (overwrite)",
                                        MCA_BASE_VAR_TYPE_STRING, NULL, 0, 0, OPAL_INFO_LVL_1,
                                        MCA_BASE_VAR_SCOPE_CONSTANT, &patcher) < 0 ||
        mca_base_component_var_register(c, "built", "What this component is (read only)",
                                        MCA_BASE_VAR_TYPE_STRING, NULL, 0,
                                        MCA_BASE_VAR_FLAG_DEFAULT_ONLY, OPAL_INFO_LVL_1,
                                        MCA_BASE_VAR_SCOPE_CONSTANT, &built) < 0) {
        return OPAL_ERROR;
    }
    return opatch_glue_register_verbose(c, &verbose);
}

/*
 * Whether another memory component registered a priority that Open MPI's
 * selection would keep over ours: higher, or equal and after us in its list.
 */
static bool outranked(const char **by, int *theirs)
{
    bool after_us = false;
    mca_base_component_list_item_t *item;
    OPAL_LIST_FOREACH (item, &opal_memory_base_framework.framework_components,
                       mca_base_component_list_item_t) {
        const mca_base_component_t *c = item->cli_component;
        if (c == &mca_memory_opatch_component.memoryc_version) {
            after_us = true;
            continue;
        }
        const int *value = NULL;
        int index = mca_base_var_find(c->mca_project_name, c->mca_type_name, c->mca_component_name,
                                      "priority");
        if (index >= 0 && OPAL_SUCCESS == mca_base_var_get_value(index, &value, NULL, NULL) &&
            NULL != value && (*value > priority || (*value == priority && after_us))) {
            *by = c->mca_component_name;
            *theirs = *value;
            return true;
        }
    }
    return false;
}

static int install(void)
{
    const char *by;
    int theirs;
    /* Open MPI keeps the highest priority from 0 up: below it, never ours. */
    if (priority < 0) {
        if (verbose > 0) {
            opal_output(0, "opal-patcher: memory opatch: priority %d: Open MPI never selects a "
                        "memory component below 0: not installing", priority);
        }
        return OPAL_ERR_NOT_AVAILABLE;
    }
    if (outranked(&by, &theirs)) {
        if (verbose > 0) {
            opal_output(0, "opal-patcher: memory opatch: memory/%s has priority %d, ours %d: not "
                        "installing, Open MPI keeps memory/%s", by, theirs, priority, by);
        }
        return OPAL_ERR_NOT_AVAILABLE;
    }
    if (!opatch_glue_stay_loaded(&mca_memory_opatch_component.memoryc_version)) {
        return OPAL_ERR_NOT_AVAILABLE;
    }
    int rc = opatch_inner_start(NULL != patcher ? patcher : "", verbose);
    if (0 == rc) {
        rc = opatch_inner_hooks_install(opal_mem_hooks_release_hook);
        if (0 != rc) {
            opatch_inner_stop();
        }
    }
    if (0 != rc) {
        opal_output(0, "opal-patcher: memory opatch: the hooks cannot be installed here (said "
                    "above; memory_opatch_patcher=\"%s\"): declining, Open MPI's own memory "
                    "components take over", NULL != patcher ? patcher : "");
        return OPAL_ERR_NOT_AVAILABLE;
    }
    installed = true;
    return OPAL_SUCCESS;
}

static int opatch_query(int *prio)
{
    *prio = -1;
    if (!installed && OPAL_SUCCESS != install()) {
        return OPAL_ERR_NOT_AVAILABLE;
    }
    *prio = priority;
    return OPAL_SUCCESS;
}

static int opatch_open(void)
{
    /* Every patch succeeded (in the query): say exactly what is delivered. */
    const int ours = opatch_inner_hooks_support();
    const int level = (ours & OPATCH_INNER_FREE_SUPPORT ? OPAL_MEMORY_FREE_SUPPORT : 0) |
                      (ours & OPATCH_INNER_MUNMAP_SUPPORT ? OPAL_MEMORY_MUNMAP_SUPPORT : 0) |
                      (ours & OPATCH_INNER_CHUNK_SUPPORT ? OPAL_MEMORY_CHUNK_SUPPORT : 0);
    opal_mem_hooks_set_support(level);
    if (verbose > 0) {
        const char *by = opatch_inner_hooks_selected();
        opal_output(0, "opal-patcher: memory opatch: active, %s; hooks installed by opal-patcher's "
                    "%s component; support level 0x%x", built, NULL != by ? by : "?", level);
    }
    return OPAL_SUCCESS;
}

static int opatch_close(void)
{
    if (installed) {
        opal_mem_hooks_set_support(0);
        opatch_inner_hooks_uninstall();
        opatch_inner_stop();
        installed = false;
    }
    return OPAL_SUCCESS;
}
