/*
 * What the Open MPI components of opal-patcher share (compiled against
 * Open MPI's headers): the check of the running Open MPI against the one
 * they were built for, and the word on a component of the same name.
 */
#ifndef OPATCH_GLUE_H
#define OPATCH_GLUE_H

#include "opal_config.h"

#include <stdbool.h>

#include "opal/mca/mca.h"

/*
 * The series (major.minor) and the build (debug, CUDA) of the Open MPI the
 * component was compiled against; the test of a mismatch builds a copy
 * that claims another series (test/ompi/Makefile.include).
 */
#ifndef OPATCH_BUILT_FOR_MAJOR
#    define OPATCH_BUILT_FOR_MAJOR OPAL_MAJOR_VERSION
#endif
#ifndef OPATCH_BUILT_FOR_MINOR
#    define OPATCH_BUILT_FOR_MINOR OPAL_MINOR_VERSION
#endif
#define OPATCH_STRINGIFY_(x) #x
#define OPATCH_STRINGIFY(x) OPATCH_STRINGIFY_(x)
#define OPATCH_OMPI_SERIES OPATCH_STRINGIFY(OPATCH_BUILT_FOR_MAJOR) "." OPATCH_STRINGIFY(OPATCH_BUILT_FOR_MINOR)

/*
 * At register time: whether the running libopen-pal is of the series and
 * the build this component was compiled for (its version, and the sizes
 * of the structures we share with it).  On a mismatch, one line naming
 * both, and OPAL_ERR_NOT_AVAILABLE: Open MPI then drops the component
 * quietly and its own components take over.
 */
int opatch_glue_check_runtime(const mca_base_component_t *component);

/*
 * Say what Open MPI 4.1 does not say about mca_base_component_path: which
 * other files of this component's name it ignores (it keeps the first of
 * each name, this one), and with report_stop which directories it
 * ignores after one it cannot read (it stops there).
 */
void opatch_glue_check_path(const mca_base_component_t *component, bool report_stop);

/*
 * Keep this component's code mapped to the end of the process, before its
 * hooks go live: Open MPI 4.1 may unload a component at finalize without
 * closing its framework (memory), which would leave our jumps in front of
 * unmapped code, and a dlclose of it could not take them out either (it
 * runs through our dlclose watcher).  Returns false, having said why, if
 * it cannot.
 */
bool opatch_glue_stay_loaded(const mca_base_component_t *component);

/* Register <type>_<name>_verbose (level 1 user), storage set to 0. */
int opatch_glue_register_verbose(const mca_base_component_t *component, int *storage);

#endif
