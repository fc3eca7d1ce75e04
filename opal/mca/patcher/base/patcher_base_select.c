/*
 * Selection of the patcher module (at the delayed setup), and the claim
 * downcall with which a consumer announces another hooker.
 */
#include "opal_config.h"

#include <pthread.h>
#include <string.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/util/output.h"

mca_patcher_base_module_t *opal_patcher = NULL;

static const char *claimed_style;
static const char *selected_name;
static mca_patcher_base_style_t selected_style;

/* The styles a consumer may claim: other hookers we know how to stack with. */
static const char *const known_styles[] = {"ucx", NULL};

int mca_patcher_base_claim(const char *style)
{
    if (NULL == style) {
        opal_output("mca_patcher_base_claim: style is NULL (known: ucx)");
        return OPAL_ERR_BAD_PARAM;
    }
    for (int i = 0; known_styles[i]; i++) {
        if (0 == strcmp(style, known_styles[i])) {
            if (!mca_base_framework_is_open(&opal_patcher_base_framework)) {
                opal_output("mca_patcher_base_claim(\"%s\"): call opal_init_util first", style);
                return OPAL_ERR_NOT_INITIALIZED;
            }
            if (NULL != selected_name) {
                opal_output("mca_patcher_base_claim(\"%s\"): too late, the hooks are already set up by %s",
                            style, selected_name);
                return OPAL_ERR_NOT_AVAILABLE;
            }
            claimed_style = known_styles[i];
            return OPAL_SUCCESS;
        }
    }
    opal_output("mca_patcher_base_claim: unknown style '%s' (known: ucx)", style);
    return OPAL_ERR_BAD_PARAM;
}

const char *mca_patcher_base_claimed_style(void)
{
    return claimed_style;
}

const char *mca_patcher_base_selected_name(void)
{
    return selected_name;
}

void mca_patcher_base_set_selected_name(const char *name)
{
    selected_name = name;
}

/*
 * Under a claim: the component that test/integration/ucx_stack proves to
 * stack with UCX in every hook mode and installation order.  (overwrite
 * loses its jumps when libucs is loaded after our setup in bistro mode:
 * UCX writes its own over them.)
 */
static const char *const claim_component = "linux";

static int select_claimed(mca_base_module_t **module, const mca_base_component_t **component)
{
    mca_base_component_list_item_t *item;
    OPAL_LIST_FOREACH (item, &opal_patcher_base_framework.framework_components,
                       mca_base_component_list_item_t) {
        const mca_base_component_t *c = item->cli_component;
        mca_base_module_t *m = NULL;
        int priority;
        const char *why = "it did not say why";
        if (0 != strcmp(c->mca_component_name, claim_component) || NULL == c->mca_query_component) {
            continue;
        }
        if (OPAL_SUCCESS == c->mca_query_component(&m, &priority, &why) && NULL != m) {
            m->module_component = c;
            *module = m;
            *component = c;
            opal_output_verbose(opal_patcher_base_framework.framework_verbose, 1,
                                "patcher: claim \"%s\": selected %s", claimed_style, claim_component);
            return OPAL_SUCCESS;
        }
        opal_output("claim \"%s\": patcher component %s cannot work here (%s); selecting by "
                    "priority", claimed_style, claim_component, why);
    }
    return OPAL_ERR_NOT_FOUND;
}

mca_patcher_base_style_t mca_patcher_base_style(void)
{
    return selected_style;
}

static mca_patcher_base_style_t style_of(const mca_patcher_base_module_t *patcher)
{
    if (NULL != patcher->patch_address_chain) {
        return MCA_PATCHER_BASE_STYLE_BY_ADDRESS;
    }
    if (NULL != patcher->patch_symbol && NULL != patcher->patch_definition &&
        NULL != patcher->patch_retire) {
        return MCA_PATCHER_BASE_STYLE_BY_SYMBOL;
    }
    return MCA_PATCHER_BASE_STYLE_NONE;
}

int mca_patcher_base_select(void)
{
    if (NULL != opal_patcher) {
        return OPAL_SUCCESS;
    }
    if (!mca_base_framework_is_open(&opal_patcher_base_framework)) {
        opal_output("the memory hooks need opal_init_util() first");
        return OPAL_ERR_NOT_INITIALIZED;
    }
    mca_base_module_t *module;
    const mca_base_component_t *component;
    const char *reason;
    int rc = OPAL_ERR_NOT_FOUND;
    if (NULL != claimed_style) {
        rc = select_claimed(&module, &component);
    }
    if (OPAL_SUCCESS != rc) {
        rc = mca_base_select(&opal_patcher_base_framework, &module, &component, &reason);
    }
    if (OPAL_SUCCESS != rc) {
        opal_output("no patcher component can intercept memory release calls in this process "
                    "(patcher=%s): %s",
                    opal_patcher_base_framework.framework_selection
                        ? opal_patcher_base_framework.framework_selection : "all",
                    reason);
        return OPAL_ERR_NOT_SUPPORTED;
    }
    mca_patcher_base_module_t *patcher = (mca_patcher_base_module_t *) module;
    const mca_patcher_base_style_t style = style_of(patcher);
    if (MCA_PATCHER_BASE_STYLE_NONE == style) {
        opal_output("patcher component %s patches neither by address with a chain nor by symbol",
                    component->mca_component_name);
        return OPAL_ERR_NOT_SUPPORTED;
    }
    opal_list_init(&patcher->patch_list);
    pthread_mutex_init(&patcher->patch_list_mutex, NULL);
    if (patcher->patch_init) {
        rc = patcher->patch_init();
        if (OPAL_SUCCESS != rc) {
            opal_output("patcher component %s failed to initialize: %s", component->mca_component_name,
                        opal_strerror(rc));
            return OPAL_ERR_NOT_SUPPORTED;
        }
    }
    selected_style = style;
    opal_patcher = patcher;
    return OPAL_SUCCESS;
}

void mca_patcher_base_fini(void)
{
    mca_patcher_base_module_t *patcher = opal_patcher;
    if (NULL != patcher) {
        mca_patcher_base_restore_patches(patcher, NULL, NULL);
        if (patcher->patch_fini) {
            patcher->patch_fini();
        }
        pthread_mutex_destroy(&patcher->patch_list_mutex);
        opal_patcher = NULL;
    }
    selected_name = NULL;
    selected_style = MCA_PATCHER_BASE_STYLE_NONE;
}

void mca_patcher_base_close(void)
{
    mca_patcher_base_fini();
    claimed_style = NULL;
}
