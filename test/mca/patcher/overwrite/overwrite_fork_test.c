/*
 * fork while another thread patches a function through the patcher's API
 * (outside the memory hooks, whose lock is held across fork).  The child
 * has only the forking thread: it must be able to call the function being
 * patched, and to patch, call and restore another one.
 *
 * 1. The other thread is inside the patch, before its write: this
 *    program's mprotect pauses 300 ms when the new trampoline page is made
 *    executable, with the component's lock held.
 * 2. The other thread is inside the write: it waits for a third thread
 *    that blocks the request signal (SIGRTMAX, or a little below under
 *    qemu-user) for 300 ms.  Meanwhile the page's protection is changed
 *    and, on x86, the function's first two bytes are a self-loop (its
 *    second instruction begins inside the jump's bytes).
 *
 * Each child has a 10 s alarm: one that waits for a lock whose owner is
 * not in the child, or runs into the self-loop, is killed by it.
 */
#include "opal_config.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <time.h>

#include "test/mca/patcher/overwrite/overwrite_test_util.h"
#include "test/support/emulated.h"

typedef long (*fn6_t)(long, long, long, long, long, long);

static mca_patcher_base_module_t *patcher;
static code_page_t cp;
static atomic_bool pause_tramp, writer_inside, answerer_blocks;

static void pause_ms(long ms)
{
    const struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* The patcher's mprotect (this definition comes first in the lookup):
 * case 1 pauses at the new trampoline page, away from the targets. */
int mprotect(void *addr, size_t len, int prot)
{
    const uintptr_t lo = (uintptr_t) cp.base, hi = lo + 2 * (size_t) sysconf(_SC_PAGESIZE);
    if ((PROT_READ | PROT_EXEC) == prot && ((uintptr_t) addr >= hi || (uintptr_t) addr < lo) &&
        atomic_exchange(&pause_tramp, false)) {
        atomic_store(&writer_inside, true);
        pause_ms(300);
    }
    return (int) syscall(SYS_mprotect, addr, len, prot);
}

static fn6_t chain_busy, chain_other;
static atomic_long other_runs;

static long intercept_busy(long a, long b, long c, long d, long e, long f)
{
    return chain_busy(a, b, c, d, e, f);
}

static long intercept_other(long a, long b, long c, long d, long e, long f)
{
    atomic_fetch_add(&other_runs, 1);
    return chain_other(a, b, c, d, e, f);
}

static void *patch_busy(void *arg)
{
    int rc = patcher->patch_address_chain((uintptr_t) arg, (uintptr_t) intercept_busy,
                                          (uintptr_t *) &chain_busy);
    return (void *) (intptr_t) rc;
}

/* Blocks the request signal until one is pending, then 300 ms more. */
static void *late_answer(void *arg)
{
    (void) arg;
    sigset_t req, pending;
    sigemptyset(&req);
    for (int sig = SIGRTMAX - 2; sig <= SIGRTMAX; sig++) {
        sigaddset(&req, sig);
    }
    pthread_sigmask(SIG_BLOCK, &req, NULL);
    atomic_store(&answerer_blocks, true);
    for (int ms = 0; ms < 5000 && !atomic_load(&writer_inside); ms++) {
        sigpending(&pending);
        for (int sig = SIGRTMAX - 2; sig <= SIGRTMAX; sig++) {
            if (sigismember(&pending, sig)) {
                atomic_store(&writer_inside, true);
            }
        }
        pause_ms(1);
    }
    pause_ms(300);
    pthread_sigmask(SIG_UNBLOCK, &req, NULL);
    return NULL;
}

/* In the child: busy (x + 42 or, mmap_like with f == 0, x + 1) still works,
 * and other can be patched, called and restored. */
static int child(fn6_t busy, long busy_value, fn6_t other)
{
    alarm(10);
    if (busy(1, 0, 0, 0, 0, 0) != busy_value) {
        return 2;
    }
    if (OPAL_SUCCESS != patcher->patch_address_chain((uintptr_t) other, (uintptr_t) intercept_other,
                                                     (uintptr_t *) &chain_other)) {
        return 3;
    }
    atomic_store(&other_runs, 0);
    if (other(5, 0, 0, 0, 0, 0) != 47 || 1 != atomic_load(&other_runs)) {
        return 4;
    }
    mca_patcher_base_restore_patches(patcher, NULL, NULL);
    return other(6, 0, 0, 0, 0, 0) == 48 && 1 == atomic_load(&other_runs) ? 0 : 5;
}

/* Patch busy in a thread (with a late answerer in case 2), fork once the
 * patch is under way, and check the child and the patch. */
static void fork_during_patch(const char *what, fn6_t busy, long busy_value, fn6_t other,
                              bool late)
{
    pthread_t patcher_thread, answerer;
    atomic_store(&writer_inside, false);
    atomic_store(&answerer_blocks, false);
    atomic_store(&pause_tramp, !late);
    if (late) {
        CHECK(0 == pthread_create(&answerer, NULL, late_answer, NULL));
        while (!atomic_load(&answerer_blocks)) { /* before the patch asks it */
            pause_ms(1);
        }
    }
    CHECK(0 == pthread_create(&patcher_thread, NULL, patch_busy, (void *) busy));
    for (int ms = 0; ms < 5000 && !atomic_load(&writer_inside); ms++) {
        pause_ms(1);
    }
    CHECK_MSG(atomic_load(&writer_inside), "%s: the patch never got under way", what);
    const pid_t pid = fork();
    if (0 == pid) {
        _exit(child(busy, busy_value, other));
    }
    test_child_ok(pid, what,
                  "(2: a call of the function being patched, 3: a patch, 4: the patched call, "
                  "5: the restore)");
    void *rc;
    pthread_join(patcher_thread, &rc);
    CHECK_MSG(OPAL_SUCCESS == (intptr_t) rc, "%s: the patch in the parent: %d", what,
              (int) (intptr_t) rc);
    if (late) {
        pthread_join(answerer, NULL);
    }
    CHECK_MSG(busy(1, 0, 0, 0, 0, 0) == busy_value, "%s: the patched call in the parent", what);
    mca_patcher_base_restore_patches(patcher, NULL, NULL);
}

int main(void)
{
    test_skip_if_signals_break_tls();
    patcher = overwrite_test_setup();
    code_page_init(&cp);
    fn6_t plus42 = (fn6_t) code_page_add(&cp, test_fn_plus42, sizeof(test_fn_plus42), 0);
    fn6_t mmap_like = (fn6_t) code_page_add(&cp, test_fn_mmap_like, sizeof(test_fn_mmap_like), 0);
    fn6_t other = (fn6_t) code_page_add(&cp, test_fn_plus42, sizeof(test_fn_plus42), 0);
    code_page_seal(&cp);
    alarm(60);

    fork_during_patch("1 (fork during the patch)", plus42, 43, other, false);
    fork_during_patch("2 (fork during the code write)", mmap_like, 2, other, true);

    opal_finalize_util();
    return test_finish("overwrite_fork_test");
}
