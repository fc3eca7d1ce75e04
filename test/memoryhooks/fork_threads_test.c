/*
 * fork while another thread is inside a release: the child has only the
 * forking thread, so what the others held must not make it wait.
 *
 * 1. Another thread sits in a registered callback at the fork (held there
 *    until the fork is done): the child unregisters that callback and
 *    finalizes, each of which waits for the callback's callers to leave.
 * 2. Another thread keeps releasing a range big enough that every release
 *    takes the rcache's lock, which the rcache's fork handler holds: a fork
 *    catches it inside the rcache's release callback.  Each child destroys
 *    the rcache.
 * 3. Another thread keeps registering and unregistering a callback, which
 *    holds the hooks' lock: each child unregisters its own callback.
 *
 * A child that waits for a thread that is not there is killed by its alarm.
 */
#include "opal_config.h"

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/rcache/base/base.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"
#include "test/support/rcache_mock.h"
#include "test/support/test_util.h"

#define PAGE ((size_t) sysconf(_SC_PAGESIZE))

/* Run fn in a child with an alarm; true when it exited 0 in time. */
static bool in_child(int (*fn)(void *), void *arg, unsigned seconds, const char *what)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (0 == pid) {
        alarm(seconds);
        _exit(fn(arg));
    }
    return test_child_ok(pid, what, "(SIGALRM: it waited for a thread of the parent)");
}

/*
 * body runs in another thread until stop is set; meanwhile up to forks
 * children run fn until one fails (not every fork finds the thread inside:
 * the first child that hangs is enough).
 */
static volatile int stop;

static void fork_during(void *(*body)(void *), int forks, int (*fn)(void *), void *arg,
                        const char *what)
{
    pthread_t t;
    stop = 0;
    pthread_create(&t, NULL, body, NULL);
    for (int i = 0; i < forks && in_child(fn, arg, 2, what); i++) {
    }
    stop = 1;
    pthread_join(t, NULL);
}

/* 1: a thread held inside a callback. */
static pthread_t main_thread;
static volatile int held, forked;

static void holding_callback(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) buf, (void) len, (void) cbdata, (void) from_alloc;
    if (!pthread_equal(pthread_self(), main_thread)) {
        held = 1;
        while (!forked) {
            usleep(100);
        }
    }
}

static void *unmap_one(void *arg)
{
    (void) arg;
    void *p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    munmap(p, PAGE);
    return NULL;
}

static int child_unregisters(void *arg)
{
    (void) arg;
    int rc = opal_mem_hooks_unregister_release(holding_callback);
    opal_finalize_util();
    return OPAL_SUCCESS == rc ? 0 : 1;
}

static void test_thread_in_callback(void)
{
    main_thread = pthread_self();
    CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(holding_callback, NULL));
    pthread_t t;
    pthread_create(&t, NULL, unmap_one, NULL);
    while (!held) {
        usleep(100);
    }
    in_child(child_unregisters, NULL, 10, "unregister in a child forked while a thread was in the callback");
    forked = 1;
    pthread_join(t, NULL);
    CHECK(OPAL_SUCCESS == opal_mem_hooks_unregister_release(holding_callback));
}

/* 2: a thread inside the rcache's release. */
#define BIG ((size_t) 1 << 30)
#define FORKS 100
static char *big;

static void *release_big(void *arg)
{
    (void) arg;
    while (!stop) {
        madvise(big, BIG, MADV_DONTNEED);
    }
    return NULL;
}

static int child_destroys(void *arg)
{
    return OPAL_SUCCESS == mca_rcache_base_module_destroy(arg) ? 0 : 1;
}

static void test_thread_in_rcache_release(void)
{
    static mock_dev_t dev;
    mca_rcache_base_resources_t resources;
    mock_resources(&dev, &resources);
    mca_rcache_base_module_t *rcache = mca_rcache_base_module_create(NULL, NULL, &resources);
    big = mmap(NULL, BIG, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    char *buf = mmap(NULL, 64 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(NULL != rcache && MAP_FAILED != big && MAP_FAILED != buf);
    if (NULL == rcache || MAP_FAILED == big || MAP_FAILED == buf) {
        return;
    }
    /* Cached registrations: a release with none returns at once. */
    for (size_t i = 0; i < 64; i++) {
        mca_rcache_base_registration_t *reg = NULL;
        buf[i * PAGE] = 1;
        CHECK(OPAL_SUCCESS == rcache->rcache_register(rcache, buf + i * PAGE, PAGE, 0,
                                                      MCA_RCACHE_ACCESS_ANY, &reg));
        if (reg) {
            rcache->rcache_deregister(rcache, reg);
        }
    }
    fork_during(release_big, FORKS, child_destroys, rcache,
                "destroy in a child forked during a release");
    mock_destroy_and_check(rcache, &dev, "parent");
    munmap(buf, 64 * PAGE);
    munmap(big, BIG);
}

/* 3: a thread inside register and unregister. */
#define LOCK_FORKS 20

static void churned_callback(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) buf, (void) len, (void) cbdata, (void) from_alloc;
}

static void *churn_registration(void *arg)
{
    (void) arg;
    while (!stop) {
        opal_mem_hooks_register_release(churned_callback, NULL);
        opal_mem_hooks_unregister_release(churned_callback);
    }
    return NULL;
}

static void quiet_callback(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) buf, (void) len, (void) cbdata, (void) from_alloc;
}

static int child_unregisters_quiet(void *arg)
{
    (void) arg;
    return OPAL_SUCCESS == opal_mem_hooks_unregister_release(quiet_callback) ? 0 : 1;
}

static void test_thread_in_registration(void)
{
    CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(quiet_callback, NULL));
    fork_during(churn_registration, LOCK_FORKS, child_unregisters_quiet, NULL,
                "unregister in a child forked during a registration");
    CHECK(OPAL_SUCCESS == opal_mem_hooks_unregister_release(quiet_callback));
}

int main(int argc, char **argv)
{
    setenv("OMPI_MCA_mpi_leave_pinned", "1", 1);
    if (OPAL_SUCCESS != opal_init_util(&argc, &argv)) {
        return 1;
    }
    test_thread_in_callback();
    test_thread_in_rcache_release();
    test_thread_in_registration();
    opal_finalize_util();
    return test_finish("fork_threads_test");
}
