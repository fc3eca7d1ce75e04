/*
 * Are we running under valgrind?  Code patched at run time and signals
 * that valgrind reserves make some mechanisms unusable there.
 */
#ifndef OPAL_UTIL_VALGRIND_H
#define OPAL_UTIL_VALGRIND_H

#include <stdbool.h>

bool opal_running_on_valgrind(void);

#endif
