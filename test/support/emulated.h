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

/* The rounds of a stress loop: a quarter under the emulator, where each one
 * costs some hundred times more (native runs keep them all). */
static inline int test_rounds(int native)
{
    return test_emulated() ? native / 4 : native;
}

/*
 * qemu-i386 7.2 may give a thread another thread's TLS (%gs base) when it
 * returns from a signal handler that waited while other threads run (a
 * program whose handler sleeps 200 us, four threads reading %gs:0 in a
 * loop: 1-3 changes in 12 000 signals under qemu-i386, none natively).
 * The overwrite component's code write on i386 holds the other threads in
 * its request signal's handler when a patch point begins with a one-byte
 * instruction (glibc's mmap, madvise): their TLS may break, and with it
 * glibc's dlopen error handling (dl_threads_test: "error while loading
 * shared libraries" for a failed dlopen) and our per-thread nesting
 * guard (concurrency_test: some calls reported twice).  A test with such
 * threads skips where the overwrite component will be selected
 * (OMPI_MCA_patcher unset, including it, or excluding something else):
 * to be called before its threads start.  Natively both tests run.
 */
static inline void test_skip_if_signals_break_tls(void)
{
#if defined(__i386__)
    const char *list = getenv("OMPI_MCA_patcher");
    const bool named = NULL != list && NULL != strstr(list, "overwrite");
    const bool overwrite = NULL == list || ('^' == list[0] ? !named : named);
    if (test_emulated() && overwrite) {
        TEST_SKIP("under qemu-i386 a thread that returns from the overwrite component's "
                  "request signal handler may be left with another thread's TLS (an emulator "
                  "bug), and this test has threads call into the functions being patched");
    }
#endif
}

#endif
