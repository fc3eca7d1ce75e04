/*
 * Other threads call dlopen and dlsym while the main thread sets the hooks
 * up and finalizes them 200 times.  Calls that entered our dl intercepts
 * before a finalize may still be running after it: the state they read
 * (the cached LD_LIBRARY_PATH, the table of redirections) must not be
 * freed or cleared under them, and a DSO component holding their code must
 * not be unloaded.  No crash (use after free under ASan), and dlsym always
 * finds a symbol that is defined.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"
#include "test/support/emulated.h"
#include "test/support/test_util.h"

#define ROUNDS 200
#define REEXEC_MARK "DL_THREADS_TEST_REEXEC"

static volatile int stop;
static unsigned long opens, lookups, lost;
/* Not dlopen or dlclose: handing out a dl intercept keeps the linux component loaded. */
static const char *const names[] = {"munmap", "mmap", "madvise", "free", "brk", "shmdt"};

static void on_event(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) buf, (void) len, (void) cbdata, (void) from_alloc;
}

/* A name without '/' that no directory has: the intercept searches the caller's paths. */
static void *opener(void *arg)
{
    (void) arg;
    while (!stop) {
        void *h = dlopen("libopal_dl_threads_test_absent.so.0", RTLD_LAZY);
        if (NULL != h) {
            dlclose(h);
        }
        opens++;
    }
    return NULL;
}

static void *looker(void *arg)
{
    (void) arg;
    while (!stop) {
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
            lost += NULL == dlsym(RTLD_DEFAULT, names[i]);
            lookups++;
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    (void) argc;
    /* The intercept reads LD_LIBRARY_PATH as the process started with it:
     * start again with a long one, so that a search walks it for a while. */
    if (NULL == getenv(REEXEC_MARK)) {
        const char *old = getenv("LD_LIBRARY_PATH");
        char path[4096];
        snprintf(path, sizeof(path), "%s%s/nonexistent/a:/nonexistent/b:/nonexistent/c:"
                 "/nonexistent/d:/nonexistent/e:/nonexistent/f:/nonexistent/g:/nonexistent/h",
                 old ? old : "", old && *old ? ":" : "");
        setenv("LD_LIBRARY_PATH", path, 1);
        setenv(REEXEC_MARK, "1", 1);
        test_execv("/proc/self/exe", argv);
        perror("execv /proc/self/exe");
        return 1;
    }

    test_skip_if_signals_break_tls();
    pthread_t threads[2];
    pthread_create(&threads[0], NULL, opener, NULL);
    pthread_create(&threads[1], NULL, looker, NULL);
    int failures = 0;
    const int rounds = test_rounds(ROUNDS);
    for (int round = 0; round < rounds && 0 == failures; round++) {
        if (OPAL_SUCCESS != opal_init_util(NULL, NULL)) {
            failures++;
            break;
        }
        failures += OPAL_SUCCESS != opal_mem_hooks_register_release(on_event, NULL);
        usleep(1000);
        opal_finalize_util();
    }
    stop = 1;
    for (int i = 0; i < 2; i++) {
        pthread_join(threads[i], NULL);
    }
    CHECK(0 == failures);
    CHECK_MSG(0 == lost, "dlsym returned NULL for a defined symbol %lu times of %lu", lost, lookups);
    printf("%lu dlopen and %lu dlsym calls over %d setup/finalize rounds\n", opens, lookups,
           rounds);
    return test_finish("dl_threads_test");
}
