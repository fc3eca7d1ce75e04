/*
 * Open MPI's opal_config.h as a debug build of the same Open MPI would
 * have it: the components compiled with this one first on the include path
 * see the debug layout of every object (opal_object_t's magic id, file and
 * line), as a component built against a debug Open MPI does
 * (test/ompi/bad_build.sh).
 */
#ifndef OPATCH_TEST_CLAIM_DEBUG_H
#define OPATCH_TEST_CLAIM_DEBUG_H
#include_next "opal_config.h"
#undef OPAL_ENABLE_DEBUG
#define OPAL_ENABLE_DEBUG 1
#endif
