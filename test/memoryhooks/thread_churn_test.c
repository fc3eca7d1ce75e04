/*
 * A registration stays valid while it is in use, whatever other threads do
 * with the address space around it; a real release is never missed.
 *
 * The main thread keeps a registration of a buffer (rcache with a mock
 * register_mem), writes and reads through it, and looks it up again and
 * again: it must stay the same registration, never invalidated, with no
 * new register_mem.  Meanwhile churn threads create and join threads in a
 * loop (pthread_create maps stacks with PROT_NONE guards, glibc unmaps
 * cached stacks) and allocate and free blocks of every size (heap growth
 * and trimming, mmapped blocks).  Every few rounds the main thread also
 * registers a second buffer, unmaps it, and checks that the release was
 * seen: the registration is gone and registering again calls register_mem.
 */
#include "opal_config.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/rcache/base/base.h"
#include "opal/runtime/opal.h"
#include "test/support/rcache_mock.h"
#include "test/support/test_util.h"

#define BUF_SIZE (1 << 20)
#define ROUNDS 4000
#define CHURNERS 3

static mock_dev_t dev;
static volatile int stop;
static volatile long churned; /* threads created and joined by the churners */
#define MIN_CHURN 2000

static void *idle_thread(void *arg)
{
    return arg;
}

static void *churn(void *arg)
{
    unsigned seed = (unsigned) (uintptr_t) arg;
    while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
        pthread_t t;
        if (0 == pthread_create(&t, NULL, idle_thread, NULL)) {
            pthread_join(t, NULL);
            __atomic_add_fetch(&churned, 1, __ATOMIC_RELAXED);
        }
        seed = seed * 1103515245u + 12345u;
        size_t size = (size_t) 16 << ((seed >> 8) % 20); /* 16 B .. 8 MiB */
        char *p = malloc(size);
        if (p) {
            p[0] = p[size - 1] = 1;
            free(p);
        }
    }
    return NULL;
}

static unsigned char *map(size_t size)
{
    unsigned char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (MAP_FAILED == p) {
        TEST_SKIP("cannot map %zu bytes", size);
    }
    return p;
}

int main(int argc, char **argv)
{
    setenv("OMPI_MCA_mpi_leave_pinned", "1", 1);
    if (OPAL_SUCCESS != opal_init_util(&argc, &argv)) {
        return 1;
    }
    mca_rcache_base_resources_t resources;
    mock_resources(&dev, &resources);
    mca_rcache_base_module_t *rcache = mca_rcache_base_module_create(NULL, NULL, &resources);
    if (NULL == rcache) {
        fprintf(stderr, "cannot create the rcache\n");
        return 1;
    }

    unsigned char *buf = map(BUF_SIZE);
    mca_rcache_base_registration_t *in_use = NULL;
    CHECK(OPAL_SUCCESS == rcache->rcache_register(rcache, buf, BUF_SIZE, 0, MCA_RCACHE_ACCESS_ANY, &in_use));
    const long registered_before = dev.registered;

    pthread_t churners[CHURNERS];
    for (int i = 0; i < CHURNERS; i++) {
        pthread_create(&churners[i], NULL, churn, (void *) (uintptr_t) (i + 1));
    }
    long spurious = 0, missed = 0, corrupt = 0;
    /* At least ROUNDS rounds, and as many as the churn needs to be real. */
    long rounds = 0, releases = 0;
    for (int round = 0; round < ROUNDS || __atomic_load_n(&churned, __ATOMIC_RELAXED) < MIN_CHURN;
         round++, rounds++) {
        /* Use the registration: write and read through it. */
        const size_t off = ((size_t) round * 4096 + 8) % BUF_SIZE;
        buf[off] = (unsigned char) round;
        corrupt += buf[off] != (unsigned char) round;
        mca_rcache_base_registration_t *again = NULL;
        if (OPAL_SUCCESS == rcache->rcache_register(rcache, buf + off, 64, 0, MCA_RCACHE_ACCESS_LOCAL_WRITE,
                                                    &again)) {
            spurious += again != in_use;
            rcache->rcache_deregister(rcache, again);
        }
        spurious += 0 != (in_use->flags & MCA_RCACHE_FLAGS_INVALID);

        if (0 == round % 100) {
            releases++;
            /* A real release in the middle of the churn must be seen. */
            unsigned char *gone = map(16 * 4096);
            mca_rcache_base_registration_t *reg = NULL, *found = NULL;
            if (OPAL_SUCCESS == rcache->rcache_register(rcache, gone, 16 * 4096, 0, MCA_RCACHE_ACCESS_ANY, &reg)) {
                rcache->rcache_deregister(rcache, reg);
            }
            munmap(gone, 16 * 4096);
            if (OPAL_SUCCESS == rcache->rcache_find(rcache, gone, 16 * 4096, &found) && NULL != found) {
                missed++;
                rcache->rcache_deregister(rcache, found);
            }
        }
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < CHURNERS; i++) {
        pthread_join(churners[i], NULL);
    }
    CHECK_MSG(0 == spurious, "the in-use registration was replaced or invalidated %ld times", spurious);
    CHECK_MSG(0 == missed, "%ld releases were missed (registration still found)", missed);
    CHECK_MSG(0 == corrupt, "%ld reads through the registration differed", corrupt);
    CHECK_MSG(dev.registered == registered_before + releases,
              "register_mem called %ld times, expected %ld", dev.registered - registered_before, releases);
    printf("%ld rounds, %ld releases checked, %ld threads created and joined meanwhile\n", rounds,
           releases, churned);
    rcache->rcache_deregister(rcache, in_use);
    mock_destroy_and_check(rcache, &dev, "thread churn");
    munmap(buf, BUF_SIZE);
    opal_finalize_util();
    return test_finish("thread_churn_test");
}
