/*
 * grdma's lock-free hit against invalidation and recycling: 3 threads hit
 * random ranges of a small arena (with random access flags, so registrations
 * also grow) while 3 others invalidate random pages (half of them through
 * the release event, which invalidates registrations without the lock or
 * leaves them in its released slots for the next call: several events at
 * once fill the slots, the other half through invalidate_range), under a
 * max_entries limit that keeps evicting, so registration memory is
 * recycled for other ranges
 * while readers may still be looking at it.  Every registration handed out
 * must cover the range asked, be registered (not yet deregistered), and be
 * newer than any invalidation of its pages that returned before the call
 * began.  At destroy, register_mem and deregister_mem pair exactly.  Then
 * the same without a limit over 64 Ki pages, from an empty cache: the page
 * index's table is replaced by larger ones (four times at least) while the
 * hitters walk it without the lock.  Last, one-page registrations of a
 * small arena: the registration after a release event is then often one of
 * the released page, which takes the old registration's index slot while
 * the hitters read that slot.
 */
#include "opal_config.h"

#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "opal/mca/rcache/base/base.h"
#include "opal/mca/rcache/grdma/rcache_grdma.h"
#include "opal/runtime/opal.h"
#include "test/support/rcache_mock.h"
#include "test/support/test_util.h"

#define MAX_PAGES 65536
#define HITTERS 3
#define INVALIDATORS 3
#define ITERS 200000

static mca_rcache_base_module_t *rcache;
static mock_dev_t dev;
static unsigned char *arena;
static size_t page, pages;                          /* the arena's */
static size_t max_span;                             /* pages a hitter asks at most */
static volatile uint64_t invalidated_at[MAX_PAGES]; /* mock_clock as the last invalidation began */
static volatile long bad_cover, bad_magic, stale, errors;
static volatile int stop;

static unsigned next_rand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return *s >> 8;
}

static void *hitter(void *arg)
{
    unsigned seed = (unsigned) (uintptr_t) arg;
    for (int i = 0; i < ITERS; i++) {
        size_t first = next_rand(&seed) % (pages - 2), npages = 1 + next_rand(&seed) % max_span;
        uint64_t newest = 0;
        for (size_t p = first; p < first + npages; p++) {
            uint64_t t = __atomic_load_n(&invalidated_at[p], __ATOMIC_SEQ_CST);
            newest = t > newest ? t : newest;
        }
        unsigned char *addr = arena + first * page;
        mca_rcache_base_registration_t *reg = NULL;
        int rc = next_rand(&seed) % 4
                     ? rcache->rcache_register(rcache, addr, npages * page, 0,
                                               (int32_t) (next_rand(&seed) % 3), &reg)
                     : rcache->rcache_find(rcache, addr, npages * page, &reg);
        if (OPAL_SUCCESS != rc && OPAL_ERR_NOT_FOUND != rc) {
            __atomic_add_fetch(&errors, 1, __ATOMIC_RELAXED);
        }
        if (NULL == reg) {
            continue;
        }
        mock_reg_t *r = (mock_reg_t *) reg;
        if (reg->base > addr || reg->bound < addr + npages * page - 1) {
            __atomic_add_fetch(&bad_cover, 1, __ATOMIC_RELAXED);
        }
        if (MOCK_MAGIC != r->magic) {
            __atomic_add_fetch(&bad_magic, 1, __ATOMIC_RELAXED);
        }
        if (r->registered_at < newest) {
            __atomic_add_fetch(&stale, 1, __ATOMIC_RELAXED);
        }
        rcache->rcache_deregister(rcache, reg);
    }
    return NULL;
}

static void *invalidator(void *arg)
{
    unsigned seed = (unsigned) (uintptr_t) arg;
    while (!stop) {
        size_t p = next_rand(&seed) % pages;
        /*
         * Tick first: a registration whose register_mem read an older clock
         * was indexed before this invalidation began, so it must be caught.
         */
        uint64_t now = __atomic_add_fetch(&mock_clock, 1, __ATOMIC_SEQ_CST);
        if (next_rand(&seed) & 1) {
            rcache->rcache_release(rcache, arena + p * page, page, false);
        } else {
            rcache->rcache_invalidate_range(rcache, arena + p * page, page);
        }
        uint64_t was = __atomic_load_n(&invalidated_at[p], __ATOMIC_SEQ_CST);
        while (was < now && !__atomic_compare_exchange_n(&invalidated_at[p], &was, now, false,
                                                         __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
            /* another invalidator's newer tick stays */
        }
    }
    return NULL;
}

/*
 * One run over an arena of n pages with rcache_grdma_max_entries=max_entries
 * (0: none), the hitters asking up to span pages.
 */
static void run(size_t n, size_t span, const char *max_entries, const char *what)
{
    setenv("OMPI_MCA_rcache_grdma_max_entries", max_entries, 1);
    if (OPAL_SUCCESS != opal_init_util(NULL, NULL)) {
        fprintf(stderr, "opal_init_util failed\n");
        exit(1);
    }
    pages = n;
    max_span = span;
    memset((void *) invalidated_at, 0, sizeof(invalidated_at));
    bad_cover = bad_magic = stale = errors = stop = 0;
    arena = mmap(NULL, pages * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    CHECK(MAP_FAILED != arena);
    rcache = mock_grdma(&dev);
    const unsigned bits0 = ((mca_rcache_grdma_module_t *) rcache)->index.table->bits;
    pthread_t th[HITTERS + INVALIDATORS];
    for (size_t t = HITTERS; t < HITTERS + INVALIDATORS; t++) {
        pthread_create(&th[t], NULL, invalidator, (void *) (t + 7));
    }
    for (size_t t = 0; t < HITTERS; t++) {
        pthread_create(&th[t], NULL, hitter, (void *) (t + 1));
    }
    for (size_t t = 0; t < HITTERS; t++) {
        pthread_join(th[t], NULL);
    }
    stop = 1;
    for (size_t t = HITTERS; t < HITTERS + INVALIDATORS; t++) {
        pthread_join(th[t], NULL);
    }
    CHECK_MSG(0 == bad_cover && 0 == bad_magic && 0 == stale && 0 == errors,
              "%s: not covering %ld, not registered %ld, stale %ld, errors %ld", what, bad_cover,
              bad_magic, stale, errors);
    const unsigned bits = ((mca_rcache_grdma_module_t *) rcache)->index.table->bits;
    printf("%s: the index's table went from 2^%u to 2^%u lines\n", what, bits0, bits);
    if (MAX_PAGES == n) {
        CHECK_MSG(bits >= bits0 + 4, "%s: the index grew from 2^%u to only 2^%u lines", what, bits0,
                  bits);
    }
    mock_destroy_and_check(rcache, &dev, what);
    munmap(arena, pages * page);
    opal_finalize_util();
}

int main(void)
{
    setenv("OMPI_MCA_mpi_leave_pinned", "1", 1);
    setenv("OMPI_MCA_rcache_base_release_hooks", "0", 1);
    page = (size_t) sysconf(_SC_PAGESIZE);
    run(256, 2, "48", "lock-free hits, evicting");
    run(MAX_PAGES, 2, "0", "lock-free hits, the index growing");
    run(16, 1, "0", "lock-free hits, registrations made again in their slot");
    return test_finish("rcache_lockfree_test");
}
