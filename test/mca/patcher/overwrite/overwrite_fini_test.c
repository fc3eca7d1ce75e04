/*
 * The patcher's fini after code writes that install our move (SIGRTMAX,
 * a little below under qemu-user) handler.
 *
 * - One thread: fini puts the old dispositions back, and a DSO component
 *   is unloaded when the framework closes (not under qemu-user, whose own
 *   thread is another thread to the process).
 * - Another thread running: the old dispositions are back too, but the
 *   handlers' code stays mapped: that thread may still be returning from
 *   the move handler it ran for fini.
 * - A thread that blocks the move signal: a patch that needs threads moved
 *   off its bytes declines (the thread cannot answer); fini cannot make
 *   sure that no request is in flight, so the handler stays installed,
 *   and its code stays mapped.  Once every thread answers again, the next
 *   fini puts the old disposition back.  No SIGTRAP handler is ever
 *   installed (no code write uses a trap).
 *
 * 300 functions patched and restored in one setup with the write that
 * asks the other threads: each one's round is its own.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

#include "test/mca/patcher/overwrite/overwrite_test_util.h"
#include "test/support/emulated.h"

static atomic_bool release_blocker, blocking, stop_idler;

static void *idler(void *arg)
{
    (void) arg;
    while (!atomic_load(&stop_idler)) {
        usleep(1000);
    }
    return NULL;
}

static void *blocker(void *arg)
{
    (void) arg;
    sigset_t set;
    sigemptyset(&set);
    for (int k = 0; k < 3; k++) { /* the move signal is one of these */
        sigaddset(&set, SIGRTMAX - k);
    }
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    atomic_store(&blocking, true);
    while (!atomic_load(&release_blocker)) {
        usleep(1000);
    }
    return NULL;
}

static long intercept(long x)
{
    return x;
}

static long seven(long x)
{
    (void) x;
    return 7;
}

#define MANY_POINTS 300

/* x86: a target whose write holds every other thread; elsewhere any target. */
#ifdef OVERWRITE_TEST_HOLD_FN
#    define MANY_FN OVERWRITE_TEST_HOLD_FN
#else
#    define MANY_FN test_fn_plus42
#endif

static void many_points(mca_patcher_base_module_t *mod)
{
    code_page_t cp;
    code_page_init(&cp);
    unsigned char *fns[MANY_POINTS];
    for (int i = 0; i < MANY_POINTS; i++) {
        /* Misaligned (x86: the jump straddles an 8-byte word, no single store). */
        fns[i] = code_page_add(&cp, MANY_FN, sizeof(MANY_FN), 5);
    }
    code_page_seal(&cp);
    int patched = 0, intercepted = 0, restored = 0;
    for (int i = 0; i < MANY_POINTS; i++) {
        uintptr_t chain;
        patched += OPAL_SUCCESS == mod->patch_address_chain((uintptr_t) fns[i], (uintptr_t) seven, &chain);
        intercepted += 7 == ((long (*)(long)) fns[i])(1);
    }
    mca_patcher_base_restore_patches(mod, NULL, NULL);
    for (int i = 0; i < MANY_POINTS; i++) {
        restored += 43 == ((long (*)(long)) fns[i])(1);
    }
    CHECK_MSG(MANY_POINTS == patched && MANY_POINTS == intercepted && MANY_POINTS == restored,
              "%d points: %d patched, %d intercepted, %d restored", MANY_POINTS, patched,
              intercepted, restored);
}

static void *handler_of(int sig)
{
    struct sigaction sa;
    sigaction(sig, NULL, &sa);
    return (sa.sa_flags & SA_SIGINFO) ? (void *) sa.sa_sigaction : (void *) sa.sa_handler;
}

/* The move signal's handler where one is installed (SIG_DFL otherwise). */
static void *move_handler_now(void)
{
    for (int k = 0; k < 3; k++) {
        if (SIG_DFL != handler_of(SIGRTMAX - k)) {
            return handler_of(SIGRTMAX - k);
        }
    }
    return SIG_DFL;
}

/* Whether the code at addr is in a loaded object. */
static bool mapped(void *addr)
{
    Dl_info info;
    return 0 != dladdr(addr, &info);
}

/* Whether the code at addr is in the overwrite component's own DSO. */
static bool in_component_dso(void *addr)
{
    Dl_info info;
    return 0 != dladdr(addr, &info) && NULL != info.dli_fname &&
           NULL != strstr(info.dli_fname, "mca_patcher_overwrite");
}

/* Targets that need every other thread moved off their bytes. */
static unsigned char *mmap_like_fn, *hold_fn;

/* Patch them: how many patches succeeded. */
static int patch_movers(mca_patcher_base_module_t *mod)
{
    uintptr_t chain = 0;
    int ok = OPAL_SUCCESS == mod->patch_address_chain((uintptr_t) mmap_like_fn,
                                                      (uintptr_t) intercept, &chain);
    if (hold_fn) {
        ok += OPAL_SUCCESS ==
              mod->patch_address_chain((uintptr_t) hold_fn, (uintptr_t) intercept, &chain);
    }
    return ok;
}

int main(void)
{
    /* One thread. */
    mca_patcher_base_module_t *mod = overwrite_test_setup();
    many_points(mod);
    void *handler = move_handler_now();
    bool dso = in_component_dso(handler);
    CHECK_MSG(SIG_DFL != handler, "no move signal handler installed by the code writes");
    opal_finalize_util();
    CHECK_MSG(SIG_DFL == handler_of(SIGTRAP) && SIG_DFL == move_handler_now(),
              "the old SIGTRAP or move signal disposition is not back after fini");
    if (test_emulated()) {
        printf("note: emulated, the emulator's own thread keeps the DSO loaded\n");
    } else {
        CHECK_MSG(!dso || !mapped(handler),
                  "with no other thread the overwrite component's DSO was not unloaded at fini");
    }

    code_page_t cp;
    code_page_init(&cp);
    mmap_like_fn = code_page_add(&cp, test_fn_mmap_like, sizeof(test_fn_mmap_like), 0);
#ifdef OVERWRITE_TEST_HOLD_FN
    hold_fn = code_page_add(&cp, OVERWRITE_TEST_HOLD_FN, sizeof(OVERWRITE_TEST_HOLD_FN), 0);
#endif
    code_page_seal(&cp);
    int movers = hold_fn ? 2 : 1;

    /* Another thread, answering. */
    pthread_t t;
    pthread_create(&t, NULL, idler, NULL);
    mod = overwrite_test_setup();
    CHECK(movers == patch_movers(mod));
    handler = move_handler_now();
    opal_finalize_util();
    CHECK_MSG(SIG_DFL == handler_of(SIGTRAP) && SIG_DFL == move_handler_now(),
              "the old SIGTRAP or move signal disposition is not back after fini with an "
              "answering thread");
    CHECK_MSG(mapped(handler),
              "after fini with another thread running, the signal handler's code (%p) is "
              "unmapped: that thread may still be returning through it",
              handler);
    atomic_store(&stop_idler, true);
    pthread_join(t, NULL);

    /* A thread that blocks the move signal. */
    pthread_create(&t, NULL, blocker, NULL);
    /* Not a sleep: on a loaded machine the thread may not have run yet. */
    while (!atomic_load(&blocking)) {
        usleep(1000);
    }
    mod = overwrite_test_setup();
    CHECK_MSG(0 == patch_movers(mod),
              "a patch that needs every thread moved succeeded while one blocks the move signal");
    opal_finalize_util();
    handler = move_handler_now();
    CHECK_MSG(SIG_DFL != handler && SIG_IGN != handler && mapped(handler),
              "after fini with a thread not answering, the move signal handler %p is not in "
              "mapped code", handler);
    CHECK_MSG(SIG_DFL == handler_of(SIGTRAP), "a SIGTRAP handler was installed");

    atomic_store(&release_blocker, true);
    pthread_join(t, NULL);
    mod = overwrite_test_setup();
    CHECK(movers == patch_movers(mod));
    opal_finalize_util();
    CHECK_MSG(SIG_DFL == handler_of(SIGTRAP) && SIG_DFL == move_handler_now(),
              "the old SIGTRAP or move signal disposition is not back after a clean fini");
    return test_finish("overwrite_fini_test");
}
