/*
 * grdma semantics against a mock device, without memory hooks (release
 * events are delivered by calling the module's release entry directly):
 * reuse, access growth, find, invalidation (partial, in use, deferred from
 * the allocator), bypass, persist, limits, evict-and-retry, leave_pinned 0,
 * bounded deferred work, destroy pairing, fork.
 */
#include "opal_config.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "opal/mca/rcache/base/base.h"
#include "opal/mca/rcache/grdma/rcache_grdma.h"
#include "opal/runtime/opal.h"
#include "test/support/capture.h"
#include "test/support/rcache_mock.h"
#include "test/support/test_util.h"

static size_t page;
static unsigned char *arena; /* reserved address space: nothing else maps here */

typedef mca_rcache_base_registration_t reg_t;

static void phase_init(const char *leave_pinned, const char *max_entries)
{
    setenv("OMPI_MCA_mpi_leave_pinned", leave_pinned, 1);
    setenv("OMPI_MCA_rcache_base_release_hooks", "0", 1);
    setenv("OMPI_MCA_rcache_grdma_max_entries", max_entries, 1);
    if (OPAL_SUCCESS != opal_init_util(NULL, NULL)) {
        fprintf(stderr, "opal_init_util failed\n");
        exit(1);
    }
}

static void test_reuse_and_access(void)
{
    mock_dev_t dev;
    mca_rcache_base_module_t *m = mock_grdma(&dev);
    reg_t *a, *b, *c, *f;
    CHECK(OPAL_SUCCESS == m->rcache_register(m, arena + 100, 3 * page, 0,
                                             MCA_RCACHE_ACCESS_LOCAL_WRITE, &a));
    CHECK(a->base == arena && a->bound == arena + 4 * page - 1 && 1 == a->ref_count);
    CHECK(1 == dev.registered);
    CHECK(OPAL_SUCCESS == m->rcache_deregister(m, a));
    CHECK(0 == a->ref_count && 0 == dev.deregistered); /* left pinned */
    /* A sub-range with fewer access flags is a hit. */
    CHECK(OPAL_SUCCESS == m->rcache_register(m, arena + page, 10, 0, 0, &b));
    CHECK(a == b && 1 == dev.registered && 1 == b->ref_count);
    /* find takes a reference too. */
    CHECK(OPAL_SUCCESS == m->rcache_find(m, arena + 2 * page, page, &f));
    CHECK(f == a && 2 == a->ref_count);
    reg_t *none;
    CHECK(OPAL_ERR_NOT_FOUND == m->rcache_find(m, arena + 3 * page, 2 * page, &none));
    CHECK(NULL == none);
    /* More access: re-registered over the union; the old one becomes invalid. */
    CHECK(OPAL_SUCCESS == m->rcache_register(m, arena + page, 2 * page, 0,
                                             MCA_RCACHE_ACCESS_REMOTE_WRITE, &c));
    CHECK(c != a && 2 == dev.registered);
    CHECK(c->base == arena && c->bound == arena + 4 * page - 1);
    CHECK((c->access_flags & (MCA_RCACHE_ACCESS_LOCAL_WRITE | MCA_RCACHE_ACCESS_REMOTE_WRITE))
          == (MCA_RCACHE_ACCESS_LOCAL_WRITE | MCA_RCACHE_ACCESS_REMOTE_WRITE));
    CHECK(a->flags & MCA_RCACHE_FLAGS_INVALID);
    CHECK(0 == dev.deregistered); /* a is still referenced twice */
    m->rcache_deregister(m, b);
    m->rcache_deregister(m, f);
    CHECK(1 == dev.deregistered);
    m->rcache_deregister(m, c);
    CHECK(OPAL_ERR_BAD_PARAM == m->rcache_deregister(m, c)); /* no reference left */
    mock_destroy_and_check(m, &dev, "reuse");
}

static void test_invalidation(void)
{
    mock_dev_t dev;
    mca_rcache_base_module_t *m = mock_grdma(&dev);
    reg_t *a, *b, *held;
    /* Partial overlap: one byte of the last page invalidates the whole registration. */
    m->rcache_register(m, arena, 4 * page, 0, 0, &a);
    m->rcache_deregister(m, a);
    m->rcache_invalidate_range(m, arena + 4 * page - 1, 1);
    CHECK(1 == dev.deregistered); /* unused, not from the allocator: at once */
    CHECK(OPAL_SUCCESS == m->rcache_register(m, arena, page, 0, 0, &b));
    CHECK(2 == dev.registered);
    m->rcache_deregister(m, b);

    /* In use: never found again, invalid by the next call, deregistered with the last reference. */
    m->rcache_register(m, arena + 8 * page, page, 0, 0, &held);
    m->rcache_release(m, arena + 8 * page, page, false);
    CHECK(OPAL_ERR_NOT_FOUND == m->rcache_find(m, arena + 8 * page, 1, &b));
    CHECK(held->flags & MCA_RCACHE_FLAGS_INVALID);
    long before = dev.deregistered;
    m->rcache_deregister(m, held);
    CHECK(before + 1 == dev.deregistered);

    /* From the allocator: invalid at once, deregistered at the next call. */
    m->rcache_register(m, arena + 16 * page, 2 * page, 0, 0, &a);
    m->rcache_deregister(m, a);
    before = dev.deregistered;
    mock_in_alloc = 1;
    m->rcache_release(m, arena + 17 * page, page, true);
    mock_in_alloc = 0;
    CHECK(before == dev.deregistered && (a->flags & MCA_RCACHE_FLAGS_INVALID));
    CHECK(OPAL_ERR_NOT_FOUND == m->rcache_find(m, arena + 16 * page, page, &b));
    CHECK(before + 1 == dev.deregistered);

    /*
     * Not from the allocator either, the event's pages holding the whole
     * registration: marked in the index, the registration itself untouched
     * by the event; deregistered at the next call.
     */
    m->rcache_register(m, arena + 24 * page, page, 0, 0, &a);
    m->rcache_deregister(m, a);
    before = dev.deregistered;
    m->rcache_release(m, arena + 24 * page, page, false);
    CHECK(before == dev.deregistered && !(a->flags & MCA_RCACHE_FLAGS_INVALID));
    CHECK(OPAL_ERR_NOT_FOUND == m->rcache_find(m, arena + 24 * page, page, &b));
    CHECK(before + 1 == dev.deregistered);
    /*
     * The same, the next call a registration of those pages: a new one in
     * the old one's index slot, the old one deregistered; the new one is
     * found, counted once, and a release of its pages reaches it.
     */
    mca_rcache_grdma_module_t *g = (mca_rcache_grdma_module_t *) m;
    m->rcache_register(m, arena + 28 * page, page, 0, 0, &a);
    m->rcache_deregister(m, a);
    long made = dev.registered;
    size_t entries = g->cached_entries;
    before = dev.deregistered;
    m->rcache_release(m, arena + 28 * page, page, false);
    CHECK(OPAL_SUCCESS == m->rcache_register(m, arena + 28 * page, page, 0, 0, &b));
    CHECK(made + 1 == dev.registered && before + 1 == dev.deregistered);
    CHECK(a != b && entries == g->cached_entries &&
          entries == mca_rcache_base_pgindex_size(&g->index));
    m->rcache_deregister(m, b);
    CHECK(OPAL_SUCCESS == m->rcache_find(m, arena + 28 * page, page, &a) && a == b);
    m->rcache_deregister(m, a);
    m->rcache_release(m, arena + 28 * page, page, false);
    CHECK(OPAL_ERR_NOT_FOUND == m->rcache_find(m, arena + 28 * page, page, &a));
    CHECK(before + 2 == dev.deregistered && entries - 1 == g->cached_entries);

    /* A release that misses every registration changes nothing. */
    m->rcache_register(m, arena + 20 * page, page, 0, 0, &a);
    m->rcache_deregister(m, a);
    m->rcache_release(m, arena + 21 * page, page, true);
    CHECK(OPAL_SUCCESS == m->rcache_find(m, arena + 20 * page, page, &b) && a == b);
    m->rcache_deregister(m, b);

    /*
     * Deferred work stays bounded: a million releases (from the allocator
     * and not) without a call in between allocate nothing, and the next call
     * deregisters what they invalidated.
     */
    long cached = dev.registered - dev.deregistered;
    for (int i = 0; i < 64; i++) {
        m->rcache_register(m, arena + (64 + i) * page, page, 0, 0, &a);
        m->rcache_deregister(m, a);
    }
    struct mallinfo2 heap0 = mallinfo2();
    for (int i = 0; i < 1000000; i++) {
        m->rcache_release(m, arena + (64 + i % 128) * page, page, i & 1);
    }
    struct mallinfo2 heap1 = mallinfo2();
    CHECK_MSG(heap0.uordblks == heap1.uordblks && heap0.hblkhd == heap1.hblkhd,
              "a million release events took %zd bytes of heap",
              (ssize_t) (heap1.uordblks + heap1.hblkhd - heap0.uordblks - heap0.hblkhd));
    CHECK(OPAL_ERR_NOT_FOUND == m->rcache_find(m, arena + 64 * page, page, &b));
    CHECK(dev.registered - dev.deregistered == cached);
    mock_destroy_and_check(m, &dev, "invalidation");
}

static void test_bypass_persist_destroy(void)
{
    mock_dev_t dev;
    mca_rcache_base_module_t *m = mock_grdma(&dev);
    reg_t *a, *b, *p, *q, *held, *deferred;
    m->rcache_register(m, arena, page, MCA_RCACHE_FLAGS_CACHE_BYPASS, 0, &a);
    m->rcache_register(m, arena, page, MCA_RCACHE_FLAGS_CACHE_BYPASS, 0, &b);
    CHECK(a != b && 2 == dev.registered);
    m->rcache_deregister(m, a);
    CHECK(1 == dev.deregistered);
    m->rcache_deregister(m, b);
    CHECK(2 == dev.deregistered);
    /* A bypass registration is never found by a cached lookup either. */
    m->rcache_register(m, arena + page, page, MCA_RCACHE_FLAGS_CACHE_BYPASS, 0, &a);
    CHECK(OPAL_ERR_NOT_FOUND == m->rcache_find(m, arena + page, page, &b));
    m->rcache_deregister(m, a);

    m->rcache_register(m, arena + 4 * page, page, MCA_RCACHE_FLAGS_PERSIST, 0, &p);
    m->rcache_deregister(m, p);
    m->rcache_register(m, arena + 4 * page, page, 0, 0, &q);
    CHECK(p == q);
    m->rcache_deregister(m, q);
    /* Destroy with one registration in use and one deferred. */
    m->rcache_register(m, arena + 6 * page, page, 0, 0, &held);
    m->rcache_register(m, arena + 8 * page, page, 0, 0, &deferred);
    m->rcache_deregister(m, deferred);
    m->rcache_release(m, arena + 8 * page, page, true);
    mock_destroy_and_check(m, &dev, "bypass/persist/destroy");
}

static void test_evict_and_retry(const char *what);

/* Runs with rcache_grdma_max_entries=4. */
static void test_limits(void)
{
    mock_dev_t dev;
    mca_rcache_base_module_t *m = mock_grdma(&dev);
    reg_t *r[8], *p, *q;
    m->rcache_register(m, arena + 100 * page, page, MCA_RCACHE_FLAGS_PERSIST, 0, &p);
    m->rcache_deregister(m, p);
    for (int i = 0; i < 8; i++) {
        m->rcache_register(m, arena + i * 2 * page, page, 0, 0, &r[i]);
        m->rcache_deregister(m, r[i]);
    }
    CHECK_MSG(9 - 4 == dev.deregistered, "%ld deregistered", dev.deregistered);
    /* The oldest went; the newest stay; PERSIST is never evicted. */
    CHECK(OPAL_ERR_NOT_FOUND == m->rcache_find(m, arena, page, &q));
    CHECK(OPAL_SUCCESS == m->rcache_find(m, arena + 14 * page, page, &q) && q == r[7]);
    m->rcache_deregister(m, q);
    CHECK(OPAL_SUCCESS == m->rcache_find(m, arena + 100 * page, page, &q) && q == p);
    m->rcache_deregister(m, q);
    mock_destroy_and_check(m, &dev, "limits");

    /* CLOCK: a registration hit since the hand last passed gets a second
     * chance; an untouched one of the same age goes instead. */
    m = mock_grdma(&dev);
    for (int i = 0; i < 5; i++) { /* the fifth evicts the first: the hand has gone round */
        m->rcache_register(m, arena + i * 2 * page, page, 0, 0, &r[i]);
        m->rcache_deregister(m, r[i]);
    }
    CHECK(OPAL_SUCCESS == m->rcache_register(m, arena + 2 * page, page, 0, 0, &q) && q == r[1]);
    m->rcache_deregister(m, q);
    m->rcache_register(m, arena + 10 * page, page, 0, 0, &r[5]);
    m->rcache_deregister(m, r[5]);
    CHECK_MSG(OPAL_SUCCESS == m->rcache_find(m, arena + 2 * page, page, &q),
              "the registration hit since the last eviction was evicted");
    if (NULL != q) {
        m->rcache_deregister(m, q);
    }
    CHECK(OPAL_ERR_NOT_FOUND == m->rcache_find(m, arena + 4 * page, page, &q));
    mock_destroy_and_check(m, &dev, "clock");

    /* Over the limits with every registration in use: a sweep of the hand
     * that found nothing unused is not repeated for each new registration
     * (a sweep clears the RECENT bit of every one it passes: a hit's
     * stays) until a reference drops to none; that registration then goes,
     * and so does each one dropped while the cache is over the limits. */
    m = mock_grdma(&dev);
    for (int i = 0; i < 6; i++) { /* the fifth and sixth over the limit: nothing to evict */
        m->rcache_register(m, arena + i * 2 * page, page, 0, 0, &r[i]);
    }
    CHECK(OPAL_SUCCESS == m->rcache_register(m, arena, page, 0, 0, &q) && q == r[0]);
    m->rcache_register(m, arena + 12 * page, page, 0, 0, &r[6]);
    CHECK_MSG(r[0]->flags & MCA_RCACHE_GRDMA_RECENT,
              "a sweep that found every registration in use ran again for the next one");
    CHECK(7 == dev.registered && 0 == dev.deregistered);
    m->rcache_deregister(m, q);
    m->rcache_deregister(m, r[3]);
    CHECK_MSG(1 == dev.deregistered, "%ld deregistered after a drop to none over the limits",
              dev.deregistered);
    CHECK(OPAL_ERR_NOT_FOUND == m->rcache_find(m, arena + 6 * page, page, &q));
    for (int i = 0; i < 7; i++) {
        if (3 != i) {
            m->rcache_deregister(m, r[i]);
        }
    }
    CHECK_MSG(7 - 4 == dev.deregistered, "%ld deregistered with all unused", dev.deregistered);
    mock_destroy_and_check(m, &dev, "limits, all in use");

    test_evict_and_retry("evict-and-retry, limited");
}

/*
 * Out of device resources: evict unused ones and retry; with everything in
 * use the failure reaches the caller, and once they are unused again the
 * next failure evicts again.
 */
static void test_evict_and_retry(const char *what)
{
    mock_dev_t dev;
    reg_t *r[8];
    mca_rcache_base_module_t *m = mock_grdma(&dev);
    dev.capacity = 3;
    for (int i = 0; i < 3; i++) {
        m->rcache_register(m, arena + i * 2 * page, page, 0, 0, &r[i]);
        m->rcache_deregister(m, r[i]);
    }
    CHECK(OPAL_SUCCESS == m->rcache_register(m, arena + 40 * page, page, 0, 0, &r[3]));
    CHECK(4 == dev.registered && 1 == dev.deregistered);
    m->rcache_register(m, arena + 42 * page, page, 0, 0, &r[4]);
    m->rcache_register(m, arena + 44 * page, page, 0, 0, &r[5]);
    CHECK(OPAL_ERR_OUT_OF_RESOURCE == m->rcache_register(m, arena + 46 * page, page, 0, 0, &r[6]));
    CHECK(NULL == r[6]);
    for (int i = 3; i < 6; i++) {
        m->rcache_deregister(m, r[i]);
    }
    CHECK_MSG(OPAL_SUCCESS == m->rcache_register(m, arena + 48 * page, page, 0, 0, &r[6]),
              "%s: nothing evicted once the registrations in use were unused again", what);
    if (NULL != r[6]) {
        m->rcache_deregister(m, r[6]);
    }
    mock_destroy_and_check(m, &dev, what);
}

/* Runs with mpi_leave_pinned=0. */
static void test_no_leave_pinned(void)
{
    mock_dev_t dev;
    mca_rcache_base_module_t *m = mock_grdma(&dev);
    reg_t *a, *b;
    m->rcache_register(m, arena, page, 0, 0, &a);
    m->rcache_register(m, arena, page, 0, 0, &b);
    CHECK(a == b && 1 == dev.registered); /* shared while in use */
    m->rcache_deregister(m, a);
    m->rcache_deregister(m, b);
    CHECK(1 == dev.deregistered);
    m->rcache_register(m, arena, page, 0, 0, &a);
    CHECK(2 == dev.registered);
    m->rcache_deregister(m, a);
    mock_destroy_and_check(m, &dev, "leave_pinned 0");
}

static void test_fork(void)
{
    mock_dev_t dev;
    mca_rcache_base_module_t *m = mock_grdma(&dev);
    reg_t *a, *b;
    m->rcache_register(m, arena, page, 0, 0, &a);
    m->rcache_deregister(m, a);
    fflush(NULL);
    pid_t pid = fork();
    if (0 == pid) {
        int bad = 0;
        long parent_regs = dev.registered;
        if (OPAL_ERR_NOT_FOUND != m->rcache_find(m, arena, page, &b)) {
            bad |= 1;
        }
        m->rcache_register(m, arena, page, 0, 0, &b);
        /* (a's memory may be reused for b: compare owners, not pointers) */
        bad |= (((mock_reg_t *) b)->owner_pid != (int) getpid()
                || dev.registered != parent_regs + 1) << 1;
        m->rcache_deregister(m, b);
        mca_rcache_base_module_destroy(m);
        /* Only the child's own registration was deregistered here. */
        bad |= (1 != dev.deregistered || 0 != dev.bad_dereg) << 2;
        _exit(bad);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK_MSG(WIFEXITED(status) && 0 == WEXITSTATUS(status), "child status 0x%x", status);
    CHECK(OPAL_SUCCESS == m->rcache_find(m, arena, page, &b) && b == a);
    m->rcache_deregister(m, b);
    mock_destroy_and_check(m, &dev, "fork");
}

static void test_bad_input(void)
{
    mca_rcache_base_resources_t res = {0};
    CHECK(NULL == mca_rcache_base_module_create("grdma", NULL, &res));
    mock_dev_t dev;
    mock_resources(&dev, &res);
    CHECK(NULL == mca_rcache_base_module_create("nosuch", NULL, &res));
    res.sizeof_reg = 8;
    CHECK(NULL == mca_rcache_base_module_create(NULL, NULL, &res));
    mca_rcache_base_module_t *m = mock_grdma(&dev);
    CHECK(OPAL_SUCCESS == mca_rcache_base_module_destroy(m));
    CHECK(OPAL_ERR_NOT_FOUND == mca_rcache_base_module_destroy(m));
}

int main(void)
{
    page = (size_t) sysconf(_SC_PAGESIZE);
    arena = mmap(NULL, 256 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    CHECK(MAP_FAILED != arena);

    phase_init("1", "0");
    test_reuse_and_access();
    test_invalidation();
    test_bypass_persist_destroy();
    test_fork();
    test_bad_input();
    test_evict_and_retry("evict-and-retry");
    /* The default component is grdma. */
    mock_dev_t dev;
    mca_rcache_base_resources_t res;
    mock_resources(&dev, &res);
    memset(&dev, 0, sizeof(dev));
    mca_rcache_base_module_t *m = mca_rcache_base_module_create(NULL, NULL, &res);
    CHECK(m && 0 == strcmp("grdma", m->super.module_component->mca_component_name));
    /* Left for the last finalize to destroy. */
    reg_t *a;
    m->rcache_register(m, arena, page, 0, 0, &a);
    m->rcache_deregister(m, a);
    opal_finalize_util();
    CHECK(1 == dev.registered && 1 == dev.deregistered);

    phase_init("1", "4");
    test_limits();
    opal_finalize_util();

    phase_init("0", "0");
    test_no_leave_pinned();
    opal_finalize_util();

    /* The synonym works too. */
    unsetenv("OMPI_MCA_mpi_leave_pinned");
    setenv("OMPI_MCA_opal_leave_pinned", "0", 1);
    opal_init_util(NULL, NULL);
    test_no_leave_pinned();
    opal_finalize_util();
    unsetenv("OMPI_MCA_opal_leave_pinned");

    /* A bad value fails the first creation, naming the parameter and the value. */
    static const char *bad[][2] = {{"OMPI_MCA_mpi_leave_pinned", "5"},
                                   {"OMPI_MCA_rcache_grdma_max_bytes", "lots"},
                                   {"OMPI_MCA_rcache_base_verify_frames", "7"}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setenv(bad[i][0], bad[i][1], 1);
        CHECK(OPAL_SUCCESS == opal_init_util(NULL, NULL));
        mock_resources(&dev, &res);
        test_capture_t cap;
        test_capture_begin(&cap);
        m = mca_rcache_base_module_create(NULL, NULL, &res);
        const char *msg = test_capture_end(&cap);
        CHECK_MSG(NULL == m, "%s=%s accepted", bad[i][0], bad[i][1]);
        CHECK_MSG(strstr(msg, bad[i][0] + strlen("OMPI_MCA_")) && strstr(msg, bad[i][1]),
                  "message for %s=%s: %s", bad[i][0], bad[i][1], msg);
        opal_finalize_util();
        unsetenv(bad[i][0]);
    }

    return test_finish("rcache_grdma_test");
}
