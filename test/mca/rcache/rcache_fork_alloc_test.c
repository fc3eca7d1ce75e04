/*
 * fork() while another thread's allocator releases memory under its own
 * lock.  glibc's fork runs the prepare handlers first (the rcache's takes
 * each module's lock) and only then takes the allocator's locks; a release
 * event from inside the allocator (malloc_trim's madvise, with the arena
 * locked) that the rcache cannot walk lock-free (over PROBE_LIMIT blocks
 * of a size class that holds a registration: 512 pages among one-page
 * registrations) went for the module's lock: each thread held what the
 * other waited for.
 *
 * Made deterministic with two hooks of the test's own: a release callback
 * registered before the rcache's (so called first) holds the trimming
 * thread inside the allocator until the forking thread is past the
 * rcache's prepare handler, which an atfork handler registered before the
 * rcache's (so run after it) says.  SKIP where no such event comes (an
 * allocator other than glibc's, or the linux component, which reports
 * malloc_trim's ranges before calling it).
 */
#include "opal_config.h"

#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/rcache/base/base.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"
#include "test/support/rcache_mock.h"
#include "test/support/test_util.h"

typedef mca_rcache_base_registration_t reg_t;

static uintptr_t watched;                /* a cached registration's page, in a free chunk */
static volatile int in_trim, forker_in; /* the trimming thread's event; the fork's prepare */

static void wait_for(volatile int *flag, int ms)
{
    const struct timespec tick = {0, 1000000};
    for (int i = 0; i < ms && !*flag; i++) {
        nanosleep(&tick, NULL);
    }
}

/* First of the callbacks: the event of the trim holds here until the fork is under way. */
static void hold_trim(void *buf, size_t length, void *cbdata, bool from_alloc)
{
    (void) cbdata, (void) from_alloc;
    if (!in_trim && (uintptr_t) buf <= watched && watched - (uintptr_t) buf < length) {
        in_trim = 1;
        wait_for(&forker_in, 5000);
    }
}

static void forker_prepare(void)
{
    forker_in = 1;
}

static void *trim(void *arg)
{
    (void) arg;
    malloc_trim(0);
    return NULL;
}

static void deadlocked(int sig)
{
    (void) sig;
    static const char msg[] = "FAIL: fork and a release event inside the allocator deadlocked\n";
    (void) !write(STDERR_FILENO, msg, sizeof(msg) - 1);
    _exit(1);
}

int main(void)
{
    const size_t page = (size_t) sysconf(_SC_PAGESIZE);
    const size_t chunk = 600 * page; /* over PROBE_LIMIT (512) one-page blocks */
    /* The chunk from the heap, kept there when freed: malloc_trim gives its pages back. */
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, INT_MAX);
    setenv("OMPI_MCA_mpi_leave_pinned", "1", 1);
    if (OPAL_SUCCESS != opal_init_util(NULL, NULL)
        || OPAL_SUCCESS != opal_mem_hooks_register_release(hold_trim, NULL)) {
        TEST_SKIP("no memory release hooks here");
    }
    pthread_atfork(forker_prepare, NULL, NULL);

    mock_dev_t dev = {0};
    mca_rcache_base_resources_t res;
    mock_resources(&dev, &res);
    mca_rcache_base_module_t *m = mca_rcache_base_module_create("grdma", NULL, &res);
    char *big = malloc(chunk), *after = malloc(64); /* after: big is not the top chunk */
    CHECK(NULL != m && NULL != big && NULL != after);
    if (NULL == m || NULL == big || NULL == after) {
        return test_finish("rcache_fork_alloc_test");
    }
    memset(big, 1, chunk);
    watched = ((uintptr_t) big + chunk / 2) & ~(uintptr_t) (page - 1);
    reg_t *reg;
    CHECK(OPAL_SUCCESS == m->rcache_register(m, (void *) watched, page, 0, 0, &reg));
    CHECK(OPAL_SUCCESS == m->rcache_deregister(m, reg));
    free(big);

    pthread_t trimmer;
    CHECK(0 == pthread_create(&trimmer, NULL, trim, NULL));
    wait_for(&in_trim, 5000);
    if (!in_trim) {
        pthread_join(trimmer, NULL);
        TEST_SKIP("malloc_trim made no release event of the freed chunk here (not glibc's "
                  "allocator, or a patcher that reports it before the call)");
    }
    signal(SIGALRM, deadlocked);
    alarm(30);
    fflush(NULL);
    pid_t pid = fork();
    if (0 == pid) {
        _exit(0);
    }
    int status = 0;
    CHECK(pid > 0 && pid == waitpid(pid, &status, 0) && WIFEXITED(status));
    pthread_join(trimmer, NULL);
    alarm(0);

    /* The trim's event invalidated the registration: gone at the next call. */
    CHECK(OPAL_ERR_NOT_FOUND == m->rcache_find(m, (void *) watched, page, &reg));
    CHECK_MSG(1 == dev.registered && 1 == dev.deregistered, "%ld registered, %ld deregistered",
              dev.registered, dev.deregistered);
    free(after);
    mock_destroy_and_check(m, &dev, "fork during a trim");
    opal_finalize_util();
    return test_finish("rcache_fork_alloc_test");
}
