/*
 * A restore that cannot write leaves our jump in place, still leading to
 * the intercept (the function's page sealed here with mseal, which refuses
 * every mprotect of it; on Arm, Power and RISC-V a thread that blocks every
 * signal does the same to a restore).  A later patch of the same function
 * with the same intercept must take that jump back as it is: a new
 * trampoline would relocate the jump, and the intercept, chaining to the
 * new trampoline, would reach itself again until the stack ran out.  Every
 * call is intercepted once and returns the right value, before and after.
 */
#include "opal_config.h"

#include <errno.h>
#include <sys/syscall.h>

#include "test/mca/patcher/overwrite/overwrite_test_util.h"

#ifndef SYS_mseal
#    define SYS_mseal 462 /* Linux 6.10, the same number on every architecture */
#endif

typedef long (*fn6_t)(long, long, long, long, long, long);

static fn6_t chain;
static long hits;

static long intercept(long a, long b, long c, long d, long e, long f)
{
    hits++;
    return chain(a, b, c, d, e, f);
}

/* Calls the target and checks that it gave x + 42 with exactly one interception. */
static void call_intercepted(fn6_t target, long x, const char *when)
{
    long before = hits;
    long r = target(x, 0, 0, 0, 0, 0);
    CHECK_MSG(x + 42 == r, "%s: the call returned %ld, not %ld", when, r, x + 42);
    CHECK_MSG(before + 1 == hits, "%s: intercepted %ld times, not once", when, hits - before);
}

static void count_intact(const mca_patcher_base_patch_t *patch, bool intact, void *arg)
{
    (void) patch;
    *(int *) arg += intact;
}

int main(void)
{
    mca_patcher_base_module_t *patcher = overwrite_test_setup();
    code_page_t cp;
    code_page_init(&cp);
    fn6_t target = (fn6_t) code_page_add(&cp, test_fn_plus42, sizeof(test_fn_plus42), 0);
    code_page_seal(&cp);
    unsigned char original[64];
    memcpy(original, (const void *) target, sizeof(original));

    CHECK(OPAL_SUCCESS == patcher->patch_address_chain((uintptr_t) target, (uintptr_t) intercept,
                                                       (uintptr_t *) &chain));
    call_intercepted(target, 1, "patched");

    const size_t page = (size_t) sysconf(_SC_PAGESIZE);
    if (0 != syscall(SYS_mseal, cp.base, 2 * page, 0)) {
        int err = errno;
        mca_patcher_base_restore_patches(patcher, NULL, NULL);
        TEST_SKIP("no mseal system call to make the restore fail (%s; Linux 6.10 and later)",
                  strerror(err));
    }
    mca_patcher_base_restore_patches(patcher, NULL, NULL);
    CHECK_MSG(0 != memcmp(original, (const void *) target, sizeof(original)),
              "the restore wrote the sealed page");
    call_intercepted(target, 2, "after the failed restore");

    /* The same function and intercept again: the jump in place is taken back. */
    int rc = patcher->patch_address_chain((uintptr_t) target, (uintptr_t) intercept,
                                          (uintptr_t *) &chain);
    CHECK_MSG(OPAL_SUCCESS == rc, "patching again over our own jump failed: %s", opal_strerror(rc));
    for (long x = 3; x < 10; x++) {
        call_intercepted(target, x, "patched again");
    }
    int listed = 0;
    mca_patcher_base_foreach_patch(patcher, count_intact, &listed);
    CHECK_MSG(1 == listed, "%d intact patches listed, not one", listed);

    mca_patcher_base_restore_patches(patcher, NULL, NULL);
    call_intercepted(target, 10, "after the second failed restore");
    opal_finalize_util();
    return test_finish("overwrite_stuck_test");
}
