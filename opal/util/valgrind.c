#include "opal_config.h"

#include <stdlib.h>
#include <string.h>

#include "opal/util/valgrind.h"

#if HAVE_VALGRIND_VALGRIND_H
#include <valgrind/valgrind.h>
#endif

bool opal_valgrind_replaces_malloc(void)
{
    /* Tools with their own malloc (memcheck, helgrind, drd, massif …)
     * preload vgpreload_<tool> beside vgpreload_core; callgrind does not. */
    const char *preload = getenv("LD_PRELOAD");
    const char *p = preload;
    while (p && (p = strstr(p, "vgpreload_"))) {
        if (0 != strncmp(p, "vgpreload_core", 14)) {
            return true;
        }
        p += 10;
    }
    return false;
}

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

void opal_valgrind_discard_translations(uintptr_t addr, size_t len)
{
#if HAVE_VALGRIND_VALGRIND_H
    VALGRIND_DISCARD_TRANSLATIONS(addr, len);
#else
    (void) addr;
    (void) len;
#endif
}
