#include "opal_config.h"

#include <stdlib.h>
#include <string.h>

#include "opal/util/valgrind.h"

#if HAVE_VALGRIND_VALGRIND_H
#include <valgrind/valgrind.h>
#endif

bool opal_running_on_valgrind(void)
{
#if HAVE_VALGRIND_VALGRIND_H
    /* A client request: a few no-op instructions natively. */
    if (RUNNING_ON_VALGRIND) {
        return true;
    }
#endif
    /* Without the header: valgrind preloads its vgpreload_*.so. */
    const char *preload = getenv("LD_PRELOAD");
    return preload && strstr(preload, "vgpreload");
}
