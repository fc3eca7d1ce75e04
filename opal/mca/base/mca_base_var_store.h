/*
 * Settings given before parameters are registered: from parameter files
 * and from --mca on the command line.  Internal to the MCA base.
 */
#ifndef OPAL_MCA_BASE_VAR_STORE_H
#define OPAL_MCA_BASE_VAR_STORE_H

#include "opal/mca/base/mca_base_var.h"

typedef struct mca_base_var_setting_t {
    char *name;
    char *value;
    char *origin;   /* "file:line" or "--mca" */
    mca_base_var_source_t source;
} mca_base_var_setting_t;

/* The latest setting of name from one source, or NULL. */
const mca_base_var_setting_t *mca_base_var_store_find(mca_base_var_source_t source, const char *name);

/* System file, then the user's: a later setting wins.  Malformed lines fail. */
int mca_base_var_store_load_files(void);

/* Take "--mca name value" (or "-mca") pairs out of argv. */
int mca_base_var_store_take_argv(int *argc, char **argv);

void mca_base_var_store_clear(void);

#endif
