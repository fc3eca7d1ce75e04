/*
 * Internal consistency checks, compiled in by --enable-debug only.  A
 * failed check names itself and aborts: it is a bug in this library.
 */
#ifndef OPAL_UTIL_DEBUG_H
#define OPAL_UTIL_DEBUG_H

#include <stdlib.h>

#include "opal/util/output.h"

#if OPAL_ENABLE_DEBUG
#define OPAL_DEBUG_CHECK(cond)                                                         \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            opal_output("internal check failed at %s:%d: %s", __FILE__, __LINE__, #cond); \
            abort();                                                                   \
        }                                                                              \
    } while (0)
#else
#define OPAL_DEBUG_CHECK(cond) ((void) 0)
#endif

#endif
