/*
 * What a test must know of the emulator that a cross build runs it under
 * (OPAL_TEST_EMULATOR: qemu-user), where it differs from a real kernel.
 */
#ifndef OPAL_TEST_EMULATED_H
#define OPAL_TEST_EMULATED_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "test/support/test_util.h"

static inline bool test_emulated(void)
{
    const char *emulator = getenv("OPAL_TEST_EMULATOR");
    return NULL != emulator && '\0' != emulator[0];
}

/*
 * qemu-i386 7.2 gives a thread another thread's TLS (%gs base) when it
 * returns from a signal handler for a trap or fault that it raised (int3,
 * hlt) while other threads run; an asynchronous signal does not do it, nor
 * does a real kernel.  The overwrite component's int3 write then breaks
 * the TLS of the threads that call into a function while it is patched or
 * restored.  A test with such threads skips where the overwrite component
 * will be selected (OMPI_MCA_patcher unset, including it, or excluding
 * something else): to be called before its threads start.
 */
static inline void test_skip_if_traps_break_tls(void)
{
#if defined(__i386__)
    const char *list = getenv("OMPI_MCA_patcher");
    const bool named = NULL != list && NULL != strstr(list, "overwrite");
    const bool overwrite = NULL == list || ('^' == list[0] ? !named : named);
    if (test_emulated() && overwrite) {
        TEST_SKIP("under qemu-i386 a thread that returns from the handler of the overwrite "
                  "component's int3 trap may be left with another thread's TLS (an emulator "
                  "bug), and this test has threads call into the functions being patched");
    }
#endif
}

#endif
