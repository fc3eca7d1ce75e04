/*
 * An MCA framework: a named set of components of one type, opened (its
 * components found, their parameters registered), used, and closed.
 *
 * The MCA base, floor by floor, each file calling only those below it:
 *   mca_base_framework.c             open, select and close a framework
 *   mca_base_component_repository.c  the built-in table and the DSO plugins
 *   mca_base_var.c                   parameters: registration, precedence
 *   mca_base_var_store.c             settings read before registration
 *                                    (parameter files, --mca)
 */
#ifndef OPAL_MCA_BASE_FRAMEWORK_H
#define OPAL_MCA_BASE_FRAMEWORK_H

#include <stdbool.h>

#include "opal/class/opal_list.h"
#include "opal/mca/mca.h"

/* One available component of a framework. */
typedef struct mca_base_component_list_item_t {
    opal_list_item_t super;
    const mca_base_component_t *cli_component;
    void *cli_dso_handle;        /* dlopen handle, NULL when built in */
    char *cli_dso_path;          /* where it was loaded from, NULL when built in */
} mca_base_component_list_item_t;

typedef struct mca_base_framework_t {
    const char *framework_name;
    const char *framework_description;
    int (*framework_register)(void); /* the framework's own parameters, or NULL */
    int (*framework_open)(void);     /* after components are opened, or NULL */
    int (*framework_close)(void);    /* before components are closed, or NULL */
    /* Filled in by the base: */
    int framework_verbose;           /* <name>_base_verbose */
    char *framework_selection;       /* <name>: include or ^exclude list */
    opal_list_t framework_components;
    int framework_refcount;
} mca_base_framework_t;

/*
 * Open: register <name> and <name>_base_verbose, find the components (built
 * in, or DSOs along mca_base_component_path), keep those the selection
 * parameter allows, register their parameters and open them.  Fails with a
 * message (and leaves nothing open) on a bad selection or parameter.
 * Reference counted.
 */
int mca_base_framework_open(mca_base_framework_t *framework);
int mca_base_framework_close(mca_base_framework_t *framework);
bool mca_base_framework_is_open(const mca_base_framework_t *framework);

/*
 * Query every component and pick the highest priority one that can work.
 * Declines and the choice are printed at verbose > 0.  OPAL_ERR_NOT_FOUND
 * when none can work; *reason then says why the last one declined.
 */
int mca_base_select(mca_base_framework_t *framework, mca_base_module_t **module,
                    const mca_base_component_t **component, const char **reason);

/* Every framework this library has, NULL terminated (for opal_patcher_info). */
extern mca_base_framework_t *const mca_base_frameworks[];

#endif
