/*
 * Open MPI's opal_config.h as a CUDA build of the same Open MPI would have
 * it (OPAL_CUDA_SUPPORT): the components compiled with this one first on
 * the include path are built for a CUDA Open MPI (test/ompi/bad_build.sh).
 */
#ifndef OPATCH_TEST_CLAIM_CUDA_H
#define OPATCH_TEST_CLAIM_CUDA_H
#include_next "opal_config.h"
#undef OPAL_CUDA_SUPPORT
#define OPAL_CUDA_SUPPORT 1
#endif
