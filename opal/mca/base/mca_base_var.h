/*
 * MCA parameters.  A parameter is registered with a default and help text,
 * and takes its value from, in rising precedence: the default, a parameter
 * file ($sysconfdir/opal-patcher-mca-params.conf, then
 * $HOME/.opal-patcher/mca-params.conf), the environment (OMPI_MCA_<name>),
 * the command line (--mca <name> <value>, taken out of argv by
 * opal_init_util).
 */
#ifndef OPAL_MCA_BASE_VAR_H
#define OPAL_MCA_BASE_VAR_H

#include <stdbool.h>
#include <stddef.h>

typedef enum {
    MCA_BASE_VAR_TYPE_INT,    /* int */
    MCA_BASE_VAR_TYPE_BOOL,   /* bool: 1/0, true/false, yes/no, on/off */
    MCA_BASE_VAR_TYPE_STRING, /* char *: owned by the MCA system */
    MCA_BASE_VAR_TYPE_SIZE,   /* size_t: bytes, with optional k/m/g suffix */
} mca_base_var_type_t;

typedef enum {
    MCA_BASE_VAR_SOURCE_DEFAULT,
    MCA_BASE_VAR_SOURCE_FILE,
    MCA_BASE_VAR_SOURCE_ENV,
    MCA_BASE_VAR_SOURCE_COMMAND_LINE,
} mca_base_var_source_t;

typedef struct mca_base_var_t {
    const char *framework;   /* NULL for a core parameter */
    const char *component;   /* NULL, or "base" for a framework's own */
    const char *name;
    const char *help;
    mca_base_var_type_t type;
    void *storage;           /* holds the default on registration, the value after */
    int min, max;            /* MCA_BASE_VAR_TYPE_INT: accepted range, when min < max */
    const char *synonym;     /* another full name that sets the same parameter, or NULL */
} mca_base_var_t;

/*
 * Register a parameter and resolve its value.  The full name is
 * framework_component_name, NULL parts left out.  A value that cannot be
 * parsed fails with OPAL_ERR_BAD_PARAM after a message naming the parameter,
 * the value, where it came from and what is accepted; storage then keeps
 * the default.  Registering a name again re-reads its value.
 */
int mca_base_var_register(const mca_base_var_t *var);

/* Register n parameters in order; stop at the first failure and return it. */
int mca_base_var_register_array(const mca_base_var_t *vars, size_t n);

/* The full name, value (formatted) and source of a registered parameter. */
typedef struct mca_base_var_info_t {
    const char *full_name;
    const char *help;
    const char *value;       /* formatted current value */
    mca_base_var_source_t source;
    const char *source_detail; /* file:line, environment variable, "--mca" */
    mca_base_var_type_t type;
} mca_base_var_info_t;

/* Call fn for every registered parameter, in registration order. */
void mca_base_var_foreach(void (*fn)(const mca_base_var_info_t *info, void *arg), void *arg);

const char *mca_base_var_source_name(mca_base_var_source_t source);

/*
 * Where a value for full_name would come from, without registering:
 * command line, environment, then files.  NULL when nowhere.
 */
const char *mca_base_var_lookup(const char *full_name, mca_base_var_source_t *source,
                                const char **source_detail);

/*
 * Forget the parameters of one component (before its DSO is unloaded):
 * strings it owned are freed and every storage gets its default back.
 */
void mca_base_var_release_component(const char *framework, const char *component);

/* Startup and teardown of the parameter store (opal_init_util / finalize). */
int mca_base_var_init(int *pargc, char ***pargv);
void mca_base_var_finalize(void);

#endif
