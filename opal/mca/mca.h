/*
 * What every MCA component and module shares.  A framework's component
 * struct begins with mca_base_component_t; its module struct begins with
 * mca_base_module_t.
 */
#ifndef OPAL_MCA_H
#define OPAL_MCA_H

#include <stddef.h>

#define MCA_BASE_VERSION_MAJOR 1
#define MCA_BASE_VERSION_MINOR 0

#define MCA_BASE_MAX_TYPE_NAME_LEN      31
#define MCA_BASE_MAX_COMPONENT_NAME_LEN 63

typedef struct mca_base_module_t {
    const struct mca_base_component_t *module_component;
} mca_base_module_t;

/*
 * Query: can this component work in this process?  On success store the
 * module and its priority (higher wins).  Otherwise return
 * OPAL_ERR_NOT_SUPPORTED and point *reason at a static sentence saying why;
 * selection reports it.
 */
typedef int (*mca_base_query_component_fn_t)(mca_base_module_t **module, int *priority,
                                             const char **reason);
typedef int (*mca_base_register_component_params_fn_t)(void);
typedef int (*mca_base_open_component_fn_t)(void);
typedef int (*mca_base_close_component_fn_t)(void);

typedef struct mca_base_component_t {
    int mca_major_version;                  /* MCA_BASE_VERSION_MAJOR when built */
    int mca_minor_version;
    const char *mca_type_name;              /* framework, e.g. "patcher" */
    int mca_type_major_version;             /* the framework interface version */
    const char *mca_component_name;         /* e.g. "overwrite" */
    const char *mca_component_description;  /* one line for opal_patcher_info */
    mca_base_register_component_params_fn_t mca_register_component_params;
    mca_base_open_component_fn_t mca_open_component;
    mca_base_close_component_fn_t mca_close_component;
    mca_base_query_component_fn_t mca_query_component;
} mca_base_component_t;

#define MCA_BASE_COMPONENT_INIT(type, type_version, name, description)          \
    .mca_major_version = MCA_BASE_VERSION_MAJOR,                                \
    .mca_minor_version = MCA_BASE_VERSION_MINOR, .mca_type_name = (type),       \
    .mca_type_major_version = (type_version), .mca_component_name = (name),     \
    .mca_component_description = (description)

#endif
