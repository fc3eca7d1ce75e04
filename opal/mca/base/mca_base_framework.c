/*
 * Framework open/close and component selection.
 */
#include "opal_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opal/constants.h"
#include "opal/mca/base/mca_base_component_repository.h"
#include "opal/mca/base/mca_base_framework.h"
#include "opal/mca/base/mca_base_var.h"
#include "opal/util/output.h"

static int register_framework_params(mca_base_framework_t *framework)
{
    framework->framework_selection = NULL;
    /* The selection parameter's full name is the framework's name alone. */
    mca_base_var_t selection = {
        .name = framework->framework_name,
        .help = "Components to use: a comma-separated list, or ^list to exclude",
        .type = MCA_BASE_VAR_TYPE_STRING, .storage = &framework->framework_selection,
    };
    framework->framework_verbose = 0;
    mca_base_var_t verbose = {
        .framework = framework->framework_name, .component = "base", .name = "verbose",
        .help = "Verbosity 0..100: > 0 prints selection decisions", .type = MCA_BASE_VAR_TYPE_INT,
        .storage = &framework->framework_verbose, .min = 0, .max = 100,
    };
    int rc = mca_base_var_register(&selection);
    if (OPAL_SUCCESS == rc) {
        rc = mca_base_var_register(&verbose);
    }
    if (OPAL_SUCCESS == rc && framework->framework_register) {
        rc = framework->framework_register();
    }
    return rc;
}

static void append_names(mca_base_framework_t *framework, char *buf, size_t len)
{
    mca_base_component_list_item_t *item;
    buf[0] = '\0';
    OPAL_LIST_FOREACH (item, &framework->framework_components, mca_base_component_list_item_t) {
        size_t used = strlen(buf);
        snprintf(buf + used, len - used, "%s%s", used ? ", " : "",
                 item->cli_component->mca_component_name);
    }
    if ('\0' == buf[0]) {
        snprintf(buf, len, "none available");
    }
}

static bool list_has(const char *list, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = list; p && *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t) (end - p) : strlen(p);
        if (n == len && 0 == strncmp(p, name, len)) {
            return true;
        }
        p = end ? end + 1 : NULL;
    }
    return false;
}

/*
 * Apply the include (a,b) or exclude (^a,b) list.  Every name must be a
 * known component: a typo must not silently select something else.
 */
static int apply_selection(mca_base_framework_t *framework)
{
    const char *selection = framework->framework_selection;
    if (NULL == selection || '\0' == selection[0]) {
        return OPAL_SUCCESS;
    }
    bool exclude = ('^' == selection[0]);
    const char *list = exclude ? selection + 1 : selection;
    char valid[512];
    append_names(framework, valid, sizeof(valid));

    for (const char *p = list;;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t) (end - p) : strlen(p);
        bool known = false;
        mca_base_component_list_item_t *item;
        OPAL_LIST_FOREACH (item, &framework->framework_components, mca_base_component_list_item_t) {
            const char *name = item->cli_component->mca_component_name;
            known |= (strlen(name) == n && 0 == strncmp(p, name, n));
        }
        if (!known || memchr(p, '^', n)) {
            opal_output("invalid value '%s' for MCA parameter '%s': '%.*s' is not a %s component "
                        "(valid choices: %s; prefix the list with ^ to exclude)",
                        selection, framework->framework_name, (int) n, p,
                        framework->framework_name, valid);
            return OPAL_ERR_NOT_FOUND;
        }
        if (NULL == end) {
            break;
        }
        p = end + 1;
    }

    mca_base_component_list_item_t *item, *next;
    for (item = (mca_base_component_list_item_t *) opal_list_get_first(&framework->framework_components);
         &item->super != opal_list_get_end(&framework->framework_components); item = next) {
        next = (mca_base_component_list_item_t *) item->super.opal_list_next;
        if (list_has(list, item->cli_component->mca_component_name) == exclude) {
            opal_output_verbose(framework->framework_verbose, 10, "%s: component %s not selected by '%s'",
                                framework->framework_name, item->cli_component->mca_component_name,
                                selection);
            opal_list_remove_item(&framework->framework_components, &item->super);
            mca_base_component_repository_release(item);
        }
    }
    return OPAL_SUCCESS;
}

static void release_components(mca_base_framework_t *framework, bool opened)
{
    mca_base_component_list_item_t *item;
    while (NULL != (item = (mca_base_component_list_item_t *)
                        opal_list_remove_last(&framework->framework_components))) {
        if (opened && item->cli_component->mca_close_component) {
            item->cli_component->mca_close_component();
        }
        mca_base_component_repository_release(item);
    }
}

static int open_components(mca_base_framework_t *framework)
{
    mca_base_component_list_item_t *item;
    OPAL_LIST_FOREACH (item, &framework->framework_components, mca_base_component_list_item_t) {
        const mca_base_component_t *c = item->cli_component;
        if (c->mca_register_component_params) {
            int rc = c->mca_register_component_params();
            if (OPAL_SUCCESS != rc) {
                return rc;
            }
        }
    }
    OPAL_LIST_FOREACH (item, &framework->framework_components, mca_base_component_list_item_t) {
        const mca_base_component_t *c = item->cli_component;
        if (c->mca_open_component) {
            int rc = c->mca_open_component();
            if (OPAL_SUCCESS != rc) {
                opal_output("%s: component %s failed to open: %s", framework->framework_name,
                            c->mca_component_name, opal_strerror(rc));
                return rc;
            }
        }
    }
    return OPAL_SUCCESS;
}

int mca_base_framework_open(mca_base_framework_t *framework)
{
    if (framework->framework_refcount++ > 0) {
        return OPAL_SUCCESS;
    }
    opal_list_init(&framework->framework_components);
    int rc = register_framework_params(framework);
    if (OPAL_SUCCESS == rc) {
        rc = mca_base_component_repository_find(framework);
    }
    if (OPAL_SUCCESS == rc) {
        rc = apply_selection(framework);
    }
    if (OPAL_SUCCESS == rc) {
        rc = open_components(framework);
    }
    if (OPAL_SUCCESS == rc && framework->framework_open) {
        rc = framework->framework_open();
    }
    if (OPAL_SUCCESS != rc) {
        /* Leave nothing half open: a later, corrected open starts afresh. */
        release_components(framework, false);
        framework->framework_refcount = 0;
    }
    return rc;
}

bool mca_base_framework_is_open(const mca_base_framework_t *framework)
{
    return framework->framework_refcount > 0;
}

int mca_base_framework_close(mca_base_framework_t *framework)
{
    if (framework->framework_refcount <= 0 || --framework->framework_refcount > 0) {
        return OPAL_SUCCESS;
    }
    /* The framework undoes its work (e.g. restores patches) before any
     * component's code is unloaded. */
    int rc = framework->framework_close ? framework->framework_close() : OPAL_SUCCESS;
    release_components(framework, true);
    return rc;
}

int mca_base_select(mca_base_framework_t *framework, mca_base_module_t **module,
                    const mca_base_component_t **component, const char **reason)
{
    int best_priority = -1;
    const char *fw = framework->framework_name;
    *module = NULL;
    *component = NULL;
    *reason = "no component is available";

    mca_base_component_list_item_t *item;
    OPAL_LIST_FOREACH (item, &framework->framework_components, mca_base_component_list_item_t) {
        const mca_base_component_t *c = item->cli_component;
        mca_base_module_t *m = NULL;
        int priority = -1;
        const char *why = "it did not say why";
        if (NULL == c->mca_query_component) {
            continue;
        }
        int rc = c->mca_query_component(&m, &priority, &why);
        if (OPAL_SUCCESS != rc || NULL == m) {
            opal_output_verbose(framework->framework_verbose, 1, "%s: component %s declined: %s", fw,
                                c->mca_component_name, why);
            *reason = why;
            continue;
        }
        opal_output_verbose(framework->framework_verbose, 5, "%s: component %s can work, priority %d", fw,
                            c->mca_component_name, priority);
        m->module_component = c;
        if (priority > best_priority) {
            best_priority = priority;
            *module = m;
            *component = c;
        }
    }
    if (NULL == *module) {
        return OPAL_ERR_NOT_FOUND;
    }
    opal_output_verbose(framework->framework_verbose, 1, "%s: selected component %s (priority %d)", fw,
                        (*component)->mca_component_name, best_priority);
    return OPAL_SUCCESS;
}
