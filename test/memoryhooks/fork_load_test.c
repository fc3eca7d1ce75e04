/*
 * A dlmopen in one thread while another thread forks: the loader callback
 * finds the hooks' lock held by the fork's prepare handler and leaves the
 * new namespace's check to the lock's holder, which must make it when the
 * fork is over (the parent's handler unlocks).  Each round a new namespace
 * with its own libc is opened while a thread forks in a loop; once no fork
 * is under way, a munmap through that libc must give its event.  Before,
 * the parent's handler unlocked without the check: the copy stayed
 * unpatched until some later call of the API (lost within 2-39 rounds).
 * The check left to the fork's holder often sees the last round's
 * namespace closed and this one's opened, its libc loaded where the old
 * one was: the old copy must be dropped before the new one is patched, or
 * dropping it forgets the new copy's patches (lost within 6-197 rounds on
 * i386 and 2-7 under AddressSanitizer before; after, none in 10 x 300 on
 * i386 and 5 x 300 under AddressSanitizer).
 * Both components (the suite runs it with each; overwrite by default):
 * under the linux one a namespace closed while a fork holds the lock and
 * another opened at the same place before the check runs was taken for
 * the old one, its GOT not looked at (lost within 9-13 rounds before the
 * GOT style's intactness test, none in 3 x 300 after).
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <gnu/lib-names.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"
#include "test/support/emulated.h"
#include "test/support/test_util.h"

#define BALLAST (128UL << 20) /* a slower fork: a wider window for the loader */

static volatile int events;
static int pause_asked, paused, stop;

static void on_release(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) buf, (void) len, (void) cbdata, (void) from_alloc;
    events++;
}

/* Forks in a loop; between two forks, waits while the main thread asks it to. */
static void *forker(void *arg)
{
    (void) arg;
    while (!__atomic_load_n(&stop, __ATOMIC_SEQ_CST)) {
        if (__atomic_load_n(&pause_asked, __ATOMIC_SEQ_CST)) {
            __atomic_store_n(&paused, 1, __ATOMIC_SEQ_CST);
            while (__atomic_load_n(&pause_asked, __ATOMIC_SEQ_CST)) {
                usleep(10);
            }
            __atomic_store_n(&paused, 0, __ATOMIC_SEQ_CST);
            continue;
        }
        const pid_t pid = fork();
        if (0 == pid) {
            _exit(0);
        }
        waitpid(pid, NULL, 0);
    }
    return NULL;
}

int main(void)
{
    if (OPAL_MEM_HOOKS_NUM_VARIANTS < 2) {
        TEST_SKIP("a build with %d variants cannot patch a namespace's libc",
                  OPAL_MEM_HOOKS_NUM_VARIANTS);
    }
    if (test_emulated()) {
        TEST_SKIP("a namespace's libc per round under qemu-user takes minutes");
    }
    setenv("OMPI_MCA_patcher", "overwrite", 0); /* the suite runs it with each */
    CHECK(OPAL_SUCCESS == opal_init_util(NULL, NULL));
    if (OPAL_SUCCESS != opal_mem_hooks_register_release(on_release, NULL)) {
        TEST_SKIP("the patcher %s cannot set up here", getenv("OMPI_MCA_patcher"));
    }
    char *ballast = mmap(NULL, BALLAST, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(MAP_FAILED != ballast);
    if (MAP_FAILED != ballast) {
        memset(ballast, 1, BALLAST);
    }
    pthread_t thread;
    CHECK(0 == pthread_create(&thread, NULL, forker, NULL));
    int lost = 0, rounds = 0;
    for (; rounds < 300 && !lost; rounds++) {
        void *copy = dlmopen(LM_ID_NEWLM, LIBC_SO, RTLD_NOW);
        CHECK_MSG(NULL != copy, "dlmopen %s: %s", LIBC_SO, dlerror());
        if (NULL == copy) {
            break;
        }
        __atomic_store_n(&pause_asked, 1, __ATOMIC_SEQ_CST); /* no fork under way from here */
        while (!__atomic_load_n(&paused, __ATOMIC_SEQ_CST)) {
            usleep(10);
        }
        int (*copy_munmap)(void *, size_t) = (int (*)(void *, size_t)) dlsym(copy, "munmap");
        void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        const int before = events;
        CHECK(NULL != copy_munmap && 0 == copy_munmap(page, 4096));
        lost = events == before;
        CHECK_MSG(!lost,
                  "round %d: a munmap by the libc of a namespace opened during a fork "
                  "gave no event, the fork long over",
                  rounds);
        __atomic_store_n(&pause_asked, 0, __ATOMIC_SEQ_CST);
        dlclose(copy);
    }
    __atomic_store_n(&stop, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&pause_asked, 0, __ATOMIC_SEQ_CST);
    pthread_join(thread, NULL);
    printf("%d rounds\n", rounds);
    munmap(ballast, BALLAST);
    CHECK(OPAL_SUCCESS == opal_mem_hooks_unregister_release(on_release));
    opal_finalize_util();
    return test_finish("fork_load_test");
}
