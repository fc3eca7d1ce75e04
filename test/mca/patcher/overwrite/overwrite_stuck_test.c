/*
 * Patching over a jump of ours that a failed restore left in place.  The
 * restore is made to fail by this program's own mprotect (the patcher's
 * calls reach it; every other call goes to the kernel), which refuses the
 * targets' page while 'refuse' is set: as a seccomp or W^X policy would,
 * and as a thread that blocks every signal makes a restore decline on Arm,
 * Power and RISC-V.  The jump stays, still leading to the intercept.
 *
 * 1. The same function and intercept patched again: the jump in place is
 *    taken back (nothing written); a new trampoline would have relocated
 *    it, and the intercept, chaining to that, would have called itself
 *    until the stack ran out.
 * 2. The same after the component's fini and init (a framework closed and
 *    opened again): the stuck trampoline is still taken back.
 * 3. Another intercept patched over the stuck jump: each call runs both
 *    once.  The first intercept patched again on top of that: declined (its
 *    own jump lies below, in the chain), and the calls are as before.
 *
 * Every call must return the target's value with each intercept run once.
 */
#include "opal_config.h"

#include <errno.h>
#include <sys/syscall.h>

#include "test/mca/patcher/overwrite/overwrite_test_util.h"

typedef long (*fn6_t)(long, long, long, long, long, long);

static uintptr_t refuse_lo, refuse_hi; /* the pages mprotect refuses, when set */

/* The patcher's mprotect (this definition comes first in the lookup). */
int mprotect(void *addr, size_t len, int prot)
{
    if ((uintptr_t) addr < refuse_hi && (uintptr_t) addr + len > refuse_lo) {
        errno = EACCES;
        return -1;
    }
    return (int) syscall(SYS_mprotect, addr, len, prot);
}

static fn6_t inner_chain, outer_chain;
static long inner_runs, outer_runs;

static long inner(long a, long b, long c, long d, long e, long f)
{
    inner_runs++;
    return inner_chain(a, b, c, d, e, f);
}

static long outer(long a, long b, long c, long d, long e, long f)
{
    outer_runs++;
    return outer_chain(a, b, c, d, e, f);
}

/* A call of target gives x + 42, with inner run once and outer 'outer_once' times. */
static void check_call(fn6_t target, long x, long outer_once, const char *when)
{
    inner_runs = outer_runs = 0;
    long r = target(x, 0, 0, 0, 0, 0);
    CHECK_MSG(x + 42 == r, "%s: the call returned %ld, not %ld", when, r, x + 42);
    CHECK_MSG(1 == inner_runs && outer_once == outer_runs,
              "%s: the intercepts ran %ld and %ld times, not 1 and %ld", when, inner_runs,
              outer_runs, outer_once);
}

static int patch(mca_patcher_base_module_t *patcher, fn6_t target,
                 long (*fn)(long, long, long, long, long, long), fn6_t *chain)
{
    return patcher->patch_address_chain((uintptr_t) target, (uintptr_t) fn, (uintptr_t *) chain);
}

/* Restore every patch while the targets' page refuses mprotect: our jumps stay. */
static void failed_restore(mca_patcher_base_module_t *patcher, const code_page_t *cp, fn6_t target,
                           const unsigned char *original)
{
    refuse_lo = (uintptr_t) cp->base;
    refuse_hi = refuse_lo + 2 * (size_t) sysconf(_SC_PAGESIZE);
    mca_patcher_base_restore_patches(patcher, NULL, NULL);
    refuse_lo = refuse_hi = 0;
    CHECK_MSG(0 != memcmp(original, (const void *) target, 8), "the refused restore wrote");
}

int main(void)
{
    mca_patcher_base_module_t *patcher = overwrite_test_setup();
    code_page_t cp;
    code_page_init(&cp);
    fn6_t target[3];
    unsigned char original[3][8];
    for (int k = 0; k < 3; k++) {
        target[k] = (fn6_t) code_page_add(&cp, test_fn_plus42, sizeof(test_fn_plus42), 0);
        memcpy(original[k], (const void *) target[k], 8);
    }
    code_page_seal(&cp);

    /* 1 */
    CHECK(OPAL_SUCCESS == patch(patcher, target[0], inner, &inner_chain));
    check_call(target[0], 1, 0, "patched");
    failed_restore(patcher, &cp, target[0], original[0]);
    check_call(target[0], 2, 0, "after the failed restore");
    int rc = patch(patcher, target[0], inner, &inner_chain);
    CHECK_MSG(OPAL_SUCCESS == rc, "patching again over our own jump: %s", opal_strerror(rc));
    check_call(target[0], 3, 0, "patched again");
    mca_patcher_base_restore_patches(patcher, NULL, NULL);
    CHECK_MSG(0 == memcmp(original[0], (const void *) target[0], 8), "not restored at last");

    /* 2 */
    CHECK(OPAL_SUCCESS == patch(patcher, target[1], inner, &inner_chain));
    failed_restore(patcher, &cp, target[1], original[1]);
    patcher->patch_fini();
    patcher->patch_init();
    rc = patch(patcher, target[1], inner, &inner_chain);
    CHECK_MSG(OPAL_SUCCESS == rc, "patching again after fini and init: %s", opal_strerror(rc));
    check_call(target[1], 4, 0, "patched again after fini and init");
    mca_patcher_base_restore_patches(patcher, NULL, NULL);

    /* 3 */
    CHECK(OPAL_SUCCESS == patch(patcher, target[2], inner, &inner_chain));
    failed_restore(patcher, &cp, target[2], original[2]);
    CHECK(OPAL_SUCCESS == patch(patcher, target[2], outer, &outer_chain));
    check_call(target[2], 5, 1, "another intercept over the stuck jump");
    fn6_t kept = inner_chain;
    rc = patch(patcher, target[2], inner, &inner_chain);
    CHECK_MSG(OPAL_ERR_NOT_SUPPORTED == rc,
              "the first intercept patched again over its own jump below: %d", rc);
    CHECK(kept == inner_chain);
    check_call(target[2], 6, 1, "after the declined patch");
    mca_patcher_base_restore_patches(patcher, NULL, NULL);
    check_call(target[2], 7, 0, "the other intercept restored");

    opal_finalize_util();
    return test_finish("overwrite_stuck_test");
}
