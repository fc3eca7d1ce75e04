/*
 * 8 threads register, find and deregister while 2 others replace the same
 * memory (mmap MAP_FIXED, munmap) and free large blocks, with the real
 * memory hooks.  deregister_mem itself frees a large block, so a release
 * hook fires inside it: were it called under the cache lock, or were the
 * hook to wait for a lock held across the allocator, this would deadlock
 * (caught by alarm).  No stale hit: after a release returns, a find on its
 * range never yields a registration made before it.  An 11th thread
 * creates and destroys modules all along (the release callback walks the
 * live modules meanwhile, without a lock): each one hears of the release
 * of a page it registered, and pairs every register_mem with a
 * deregister_mem.
 */
#include "opal_config.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "opal/mca/rcache/base/base.h"
#include "opal/runtime/opal.h"
#include "test/support/rcache_mock.h"
#include "test/support/test_util.h"

#define SLOTS 32
#define SLOT_SIZE (64 * 1024)
#define ITERS 20000

static mca_rcache_base_module_t *rcache;
static mock_dev_t dev;
static unsigned char *region;
static volatile long stale_hits, errors;

static unsigned next_rand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return *s >> 8;
}

static void *worker(void *arg)
{
    unsigned seed = (unsigned) (uintptr_t) arg;
    for (int i = 0; i < ITERS; i++) {
        unsigned slot = next_rand(&seed) % SLOTS;
        size_t off = next_rand(&seed) % (SLOT_SIZE / 2), len = 1 + next_rand(&seed) % (SLOT_SIZE / 2);
        mca_rcache_base_registration_t *reg = NULL;
        int rc;
        if (next_rand(&seed) % 4) {
            rc = rcache->rcache_register(rcache, region + slot * SLOT_SIZE + off, len, 0,
                                         (int32_t) (next_rand(&seed) % 3), &reg);
        } else {
            rc = rcache->rcache_find(rcache, region + slot * SLOT_SIZE + off, len, &reg);
            rc = OPAL_ERR_NOT_FOUND == rc ? OPAL_SUCCESS : rc;
        }
        if (OPAL_SUCCESS != rc) {
            __atomic_add_fetch(&errors, 1, __ATOMIC_RELAXED);
        }
        if (0 == i % 64) {
            free(malloc(200000 + next_rand(&seed) % 100000));
        }
        if (reg) {
            rcache->rcache_deregister(rcache, reg);
        }
    }
    return NULL;
}

#define CHURNS 2000
static volatile long churn_missed, churn_unpaired;

static void *churner(void *arg)
{
    (void) arg;
    for (int i = 0; i < CHURNS; i++) {
        mock_dev_t d = {0};
        mca_rcache_base_resources_t r;
        mock_resources(&d, &r);
        mca_rcache_base_module_t *m = mca_rcache_base_module_create(NULL, NULL, &r);
        unsigned char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (NULL == m || MAP_FAILED == p) {
            __atomic_add_fetch(&errors, 1, __ATOMIC_RELAXED);
            break;
        }
        mca_rcache_base_registration_t *reg;
        if (OPAL_SUCCESS == m->rcache_register(m, p, 4096, 0, 0, &reg)) {
            m->rcache_deregister(m, reg);
        }
        munmap(p, 4096);
        if (OPAL_SUCCESS == m->rcache_find(m, p, 4096, &reg)) {
            __atomic_add_fetch(&churn_missed, 1, __ATOMIC_RELAXED);
            m->rcache_deregister(m, reg);
        }
        mca_rcache_base_module_destroy(m);
        if (d.registered != d.deregistered || 0 != d.bad_dereg) {
            __atomic_add_fetch(&churn_unpaired, 1, __ATOMIC_RELAXED);
        }
    }
    return NULL;
}

static void *releaser(void *arg)
{
    unsigned seed = (unsigned) (uintptr_t) arg;
    for (int i = 0; i < ITERS / 4; i++) {
        unsigned slot = next_rand(&seed) % SLOTS;
        unsigned char *p = region + slot * SLOT_SIZE;
        uint64_t now = __atomic_add_fetch(&mock_clock, 1, __ATOMIC_SEQ_CST);
        if (next_rand(&seed) % 2) {
            mmap(p, SLOT_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        } else {
            madvise(p, SLOT_SIZE, MADV_DONTNEED);
        }
        mca_rcache_base_registration_t *reg;
        if (OPAL_SUCCESS == rcache->rcache_find(rcache, p, SLOT_SIZE / 4, &reg)) {
            if (((mock_reg_t *) reg)->registered_at < now) {
                __atomic_add_fetch(&stale_hits, 1, __ATOMIC_RELAXED);
            }
            rcache->rcache_deregister(rcache, reg);
        }
        free(malloc(300000));
    }
    return NULL;
}

int main(void)
{
    setenv("OMPI_MCA_mpi_leave_pinned", "1", 0);
    if (OPAL_SUCCESS != opal_init_util(NULL, NULL)) {
        return 1;
    }
    mca_rcache_base_resources_t res;
    mock_resources(&dev, &res);
    dev.dereg_frees = 1;
    rcache = mca_rcache_base_module_create(NULL, NULL, &res);
    if (NULL == rcache) {
        fprintf(stderr, "cannot create the rcache\n");
        return 1;
    }
    if (!rcache->rcache_hooked) {
        TEST_SKIP("no memory hooks here: nothing to race against");
    }
    region = mmap(NULL, SLOTS * SLOT_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                  -1, 0);
    alarm(300); /* a deadlock fails the test instead of hanging it */
    pthread_t t[11];
    for (uintptr_t i = 0; i < 11; i++) {
        pthread_create(&t[i], NULL, i < 8 ? worker : i < 10 ? releaser : churner, (void *) (i * 7919 + 1));
    }
    for (int i = 0; i < 11; i++) {
        pthread_join(t[i], NULL);
    }
    CHECK_MSG(0 == churn_missed, "%ld modules made and destroyed meanwhile missed a release",
              churn_missed);
    CHECK_MSG(0 == churn_unpaired, "%ld modules made and destroyed meanwhile did not pair "
              "register_mem with deregister_mem", churn_unpaired);
    CHECK_MSG(0 == stale_hits, "%ld stale hits", stale_hits);
    CHECK_MSG(0 == errors, "%ld failed calls", errors);
    mock_destroy_and_check(rcache, &dev, "threads");
    printf("%ld registrations\n", dev.registered);
    munmap(region, SLOTS * SLOT_SIZE);
    opal_finalize_util();
    return test_finish("rcache_threads_test");
}
