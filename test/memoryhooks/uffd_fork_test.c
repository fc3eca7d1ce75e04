/*
 * The userfaultfd source in a forked child: the child has no reader and
 * no watch, and starts a source of its own (as an rcache created there
 * after the parent's are destroyed does).  Its first drain must return.
 * The parent's reader is kept busy (a thread releases a watched page over
 * and over, each release waiting for the read) so that some forks happen
 * while it is between a read and its last push: the child must not
 * inherit that moment.  A child whose drain does not return is killed by
 * its alarm.  SKIP where userfaultfd is refused, with the reason.
 */
#include "opal_config.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/memoryhooks/memory_uffd.h"
#include "opal/runtime/opal.h"
#include "test/support/test_util.h"

#define PAGE  4096
#define FORKS 1000

static char *busy_page;
static int stop_busy;

static void *releaser(void *arg)
{
    (void) arg;
    while (!__atomic_load_n(&stop_busy, __ATOMIC_ACQUIRE)) {
        busy_page[0] = 1;
        syscall(SYS_madvise, busy_page, PAGE, MADV_DONTNEED); /* waits for the read */
    }
    return NULL;
}

/* The child: a source of its own, one watched page, one drain. */
static void child(void)
{
    alarm(5);
    const char *reason = NULL;
    if (OPAL_SUCCESS != opal_mem_uffd_source.start(&reason)) {
        fprintf(stderr, "child: the source does not start: %s\n", reason ? reason : "?");
        _exit(2);
    }
    char *p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (MAP_FAILED == p || OPAL_SUCCESS != opal_mem_uffd_source.subscribe(p, PAGE)) {
        _exit(3);
    }
    opal_mem_uffd_source.drain(false);
    _exit(0);
}

int main(int argc, char **argv)
{
    alarm(120);
    const char *why = opal_mem_uffd_probe();
    if (why) {
        TEST_SKIP("userfaultfd source: %s", why);
    }
    CHECK(OPAL_SUCCESS == opal_init_util(&argc, &argv));
    const char *reason = NULL;
    CHECK(OPAL_SUCCESS == opal_mem_uffd_source.start(&reason));
    busy_page = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(MAP_FAILED != busy_page);
    CHECK(OPAL_SUCCESS == opal_mem_uffd_source.subscribe(busy_page, PAGE));
    pthread_t t;
    CHECK(0 == pthread_create(&t, NULL, releaser, NULL));

    int hung = -1, failed = 0;
    for (int i = 0; i < FORKS && hung < 0; i++) {
        pid_t pid = fork();
        if (0 == pid) {
            child();
        }
        int status = 0;
        CHECK(pid > 0 && pid == waitpid(pid, &status, 0));
        if (WIFSIGNALED(status) && SIGALRM == WTERMSIG(status)) {
            hung = i;
        } else if (!WIFEXITED(status) || 0 != WEXITSTATUS(status)) {
            failed++;
        }
    }
    __atomic_store_n(&stop_busy, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    CHECK_MSG(hung < 0, "the child of fork %d of %d: its first drain did not return", hung + 1,
              FORKS);
    CHECK_MSG(0 == failed, "%d children failed", failed);
    opal_mem_uffd_source.stop();
    opal_finalize_util();
    return test_finish("uffd_fork_test");
}
