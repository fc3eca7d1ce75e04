/*
 * The component table of the copy of opal-patcher inside each Open MPI
 * component (ompi/): found before the one configure generates, it holds
 * the patcher framework and both patchers, built in.  No rcache: Open
 * MPI's own receives the events.
 */
#include "opal/mca/base/mca_base_framework.h"

extern mca_base_framework_t opal_patcher_base_framework;
extern const mca_base_component_t mca_patcher_linux_component;
extern const mca_base_component_t mca_patcher_overwrite_component;

mca_base_framework_t *const mca_base_frameworks[] = {
    &opal_patcher_base_framework,
    NULL
};

static const mca_base_component_t *const mca_base_static_components[] = {
    &mca_patcher_linux_component,
    &mca_patcher_overwrite_component,
    NULL
};
