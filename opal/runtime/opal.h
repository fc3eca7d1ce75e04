/*
 * Start and stop the library.  Reference counted: N inits need N
 * finalizes; the last finalize restores every patch, closes every framework
 * and unloads DSO components.
 */
#ifndef OPAL_RUNTIME_OPAL_H
#define OPAL_RUNTIME_OPAL_H

#include "opal/constants.h"

/*
 * pargc/pargv may be NULL.  When given, "--mca NAME VALUE" pairs are taken
 * out of argv (argc is reduced) and set as MCA parameters.
 */
int opal_init_util(int *pargc, char ***pargv);
int opal_finalize_util(void);

#endif
