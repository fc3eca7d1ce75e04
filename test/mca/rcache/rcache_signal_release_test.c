/*
 * A release event from a signal handler that interrupted the cache's own
 * thread while it held the module's lock in the middle of an index write:
 * the lock-free walk cannot finish then (a writer is at work), and the
 * event must not wait for a lock that the thread it runs on holds.  The
 * thread registers, deregisters and invalidates one-page ranges in a loop;
 * SIGALRM every 4 ms maps PROT_NONE over 16 reserved pages with MAP_FIXED
 * (a release event through the real hooks).  A watchdog thread fails the
 * test when the loop stops moving for 5 s.  (An event that cannot have the
 * lock waits 1 ms for it, then reads the whole index: signals much closer
 * than that would leave the interrupted thread no time to run.)
 */
#include "opal_config.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/rcache/base/base.h"
#include "opal/runtime/opal.h"
#include "test/support/emulated.h"
#include "test/support/rcache_noop.h"
#include "test/support/test_util.h"

#define PAGES       4096
#define RESERVED    16 /* pages */
#define RUN_SECONDS 3

static unsigned char *reserved;
static size_t page;
static volatile long progress, signals;

static void on_alarm(int sig)
{
    (void) sig;
    mmap(reserved, RESERVED * page, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    signals++;
}

static void *watchdog(void *arg)
{
    (void) arg;
    long last = -1;
    for (int quiet = 0;; quiet = progress == last ? quiet + 1 : 0) {
        last = progress;
        if (quiet >= 50) {
            char msg[200];
            int n = snprintf(msg, sizeof(msg),
                             "FAIL: the registering thread hung (no progress for 5 s, %ld "
                             "iterations, %ld events from the signal handler)\n",
                             last, signals);
            (void) !write(STDERR_FILENO, msg, (size_t) n);
            _exit(1);
        }
        usleep(100000);
    }
    return NULL;
}

int main(void)
{
    page = (size_t) sysconf(_SC_PAGESIZE);
    setenv("OMPI_MCA_mpi_leave_pinned", "1", 1);
    CHECK(OPAL_SUCCESS == opal_init_util(NULL, NULL));
    mca_rcache_base_resources_t res = rcache_noop_resources("signal_release");
    mca_rcache_base_module_t *m = mca_rcache_base_module_create("grdma", NULL, &res);
    CHECK(NULL != m && m->rcache_hooked);
    reserved = mmap(NULL, RESERVED * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                    -1, 0);
    unsigned char *arena = mmap(NULL, PAGES * page, PROT_NONE,
                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    CHECK(MAP_FAILED != reserved && MAP_FAILED != arena);
    if (NULL == m || MAP_FAILED == reserved || MAP_FAILED == arena) {
        return test_finish("rcache_signal_release_test");
    }
    /* The watchdog starts with SIGALRM blocked: the handler runs on this thread. */
    sigset_t alarm_set, old;
    sigemptyset(&alarm_set);
    sigaddset(&alarm_set, SIGALRM);
    pthread_sigmask(SIG_BLOCK, &alarm_set, &old);
    pthread_t dog;
    CHECK(0 == pthread_create(&dog, NULL, watchdog, NULL));
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    struct sigaction sa = {.sa_handler = on_alarm};
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval every = {{0, 4000}, {0, 4000}}, off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &every, NULL);
    const time_t end = time(NULL) + RUN_SECONDS * (test_emulated() ? 4 : 1);
    for (long i = 0; time(NULL) < end; i++) {
        unsigned char *at = arena + (size_t) (i % PAGES) * page;
        mca_rcache_base_registration_t *reg;
        if (OPAL_SUCCESS == m->rcache_register(m, at, page, 0, 0, &reg)) {
            m->rcache_deregister(m, reg);
        }
        if (0 == i % 3) {
            m->rcache_invalidate_range(m, at, page); /* an index write under the lock */
        }
        progress = i;
    }
    setitimer(ITIMER_REAL, &off, NULL);
    printf("%ld iterations, %ld events from the signal handler\n", progress + 1, signals);
    CHECK_MSG(signals > 0, "no signal came in %d s", RUN_SECONDS);
    mca_rcache_base_module_destroy(m);
    opal_finalize_util();
    return test_finish("rcache_signal_release_test");
}
