/*
 * The last finalize while another thread is inside a callback that
 * unregisters itself (a callback may): the finalize waits for the
 * callback to return, so it must not hold what unregister takes.
 */
#include "opal_config.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"
#include "test/support/test_util.h"

#define PAGE ((size_t) sysconf(_SC_PAGESIZE))
/* How long the callback lets the finalize go ahead before it unregisters. */
#define HEAD_START_US 200000

static pthread_t main_thread;
static volatile int inside, finalizing, unregistered = 1;

static void self_removing_callback(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) buf, (void) len, (void) cbdata, (void) from_alloc;
    if (pthread_equal(pthread_self(), main_thread) || inside) {
        return;
    }
    inside = 1;
    while (!finalizing) {
        usleep(100);
    }
    usleep(HEAD_START_US); /* the finalize is waiting for this callback now */
    /* Not found once the finalize took every callback out. */
    unregistered = opal_mem_hooks_unregister_release(self_removing_callback);
}

static void *unmap_one(void *arg)
{
    (void) arg;
    void *p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    munmap(p, PAGE);
    return NULL;
}

static void on_alarm(int sig)
{
    (void) sig;
    static const char msg[] = "FAIL: the last finalize and a callback's unregister wait for "
                              "each other\n";
    ssize_t n = write(STDERR_FILENO, msg, sizeof(msg) - 1);
    (void) n;
    _exit(1);
}

int main(int argc, char **argv)
{
    if (OPAL_SUCCESS != opal_init_util(&argc, &argv)) {
        return 1;
    }
    main_thread = pthread_self();
    signal(SIGALRM, on_alarm);
    alarm(30);
    CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(self_removing_callback, NULL));
    pthread_t t;
    pthread_create(&t, NULL, unmap_one, NULL);
    while (!inside) {
        usleep(100);
    }
    finalizing = 1;
    opal_finalize_util();
    pthread_join(t, NULL);
    alarm(0);
    CHECK_MSG(OPAL_SUCCESS == unregistered || OPAL_ERR_NOT_FOUND == unregistered,
              "the callback's unregister returned %d", unregistered);
    return test_finish("finalize_callback_test");
}
