/*
 * Where components come from: the table built into the library, and DSO
 * plugins (mca_<framework>_<component>.so) along mca_base_component_path.
 * Internal to the MCA base.
 */
#ifndef OPAL_MCA_BASE_COMPONENT_REPOSITORY_H
#define OPAL_MCA_BASE_COMPONENT_REPOSITORY_H

#include "opal/mca/base/mca_base_framework.h"

/* Register the repository's parameters (mca_base_component_path). */
int mca_base_component_repository_register(void);

/* Append every available component of the framework to its list. */
int mca_base_component_repository_find(mca_base_framework_t *framework);

/* Free one list item, unloading its DSO. */
void mca_base_component_repository_release(mca_base_component_list_item_t *item);

#endif
