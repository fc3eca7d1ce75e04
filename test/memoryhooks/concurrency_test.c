/*
 * 4 threads call mmap/munmap/madvise in a loop while the main thread
 * installs and restores the patches 200 times: no crash, and no missed
 * event for a call made entirely while the hooks were installed.
 */
#include "opal_config.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"
#include "test/support/emulated.h"
#include "test/support/test_util.h"

#define THREADS 4
#define ROUNDS 200
#define PAGE 4096

/* Odd while the hooks are installed; bumped at each change. */
static volatile unsigned long generation;
static volatile int stop;
static __thread volatile unsigned long my_events; /* volatile: munmap is "leaf" */
static unsigned long missed[THREADS], checked[THREADS];

static void on_event(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) buf, (void) len, (void) cbdata, (void) from_alloc;
    my_events++;
}

static void *worker(void *arg)
{
    int id = (int) (intptr_t) arg;
    while (!stop) {
        char *p = mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (MAP_FAILED == p) {
            continue;
        }
        p[0] = 1;
        unsigned long gen = __atomic_load_n(&generation, __ATOMIC_ACQUIRE);
        unsigned long before = my_events;
        madvise(p, PAGE, MADV_DONTNEED);
        munmap(p, 2 * PAGE);
        /* Only calls made wholly inside one installed period must be seen. */
        if ((gen & 1) && gen == __atomic_load_n(&generation, __ATOMIC_ACQUIRE)) {
            checked[id]++;
            missed[id] += (my_events - before) != 2;
        }
    }
    return NULL;
}

int main(void)
{
    test_skip_if_signals_break_tls();
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++) {
        pthread_create(&threads[i], NULL, worker, (void *) (intptr_t) i);
    }
    int failures = 0;
    const int rounds = test_rounds(ROUNDS);
    for (int round = 0; round < rounds; round++) {
        if (OPAL_SUCCESS != opal_init_util(NULL, NULL) ||
            OPAL_SUCCESS != opal_mem_hooks_register_release(on_event, NULL)) {
            failures++;
            break;
        }
        __atomic_add_fetch(&generation, 1, __ATOMIC_RELEASE); /* odd: installed */
        usleep(500);
        __atomic_add_fetch(&generation, 1, __ATOMIC_RELEASE); /* even: going away */
        opal_finalize_util();
    }
    stop = 1;
    unsigned long total_checked = 0, total_missed = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
        total_checked += checked[i];
        total_missed += missed[i];
    }
    CHECK(0 == failures);
    CHECK_MSG(total_checked > 0, "no call was made while the hooks were installed");
    CHECK_MSG(0 == total_missed, "%lu of %lu calls made while installed missed an event", total_missed,
              total_checked);
    printf("%lu calls checked over %d install/restore rounds\n", total_checked, rounds);
    return test_finish("concurrency_test");
}
