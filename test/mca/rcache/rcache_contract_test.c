/*
 * The registration cache's public contract at its edges (API.md,
 * "Registration cache"), against a mock device, without memory hooks:
 *   - a range that runs past the end of the address space is refused with
 *     OPAL_ERR_BAD_PARAM: no registration with its bound below its base,
 *     no register_mem of a wrapped size, no invalidation that silently
 *     did nothing; a range ending at the last byte is a range, unless its
 *     pages are the whole address space (a size of 0);
 *   - CACHE_BYPASS with PERSIST is still never cached: deregistered with
 *     its last reference, never found; refused by the device, it leaves
 *     the cache's accounting as it was (rcache_grdma_max_bytes);
 *   - resources whose sizeof_reg no object can have fail the creation,
 *     saying so (it was a division by zero);
 *   - with mpi_leave_pinned 0 the cache keeps nothing after the last
 *     reference, PERSIST or not: it has no release hooks, so what it kept
 *     would be handed out again over pages unmapped and mapped anew.
 */
#include "opal_config.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/rcache/base/base.h"
#include "opal/runtime/opal.h"
#include "test/support/capture.h"
#include "test/support/rcache_mock.h"
#include "test/support/test_util.h"

typedef mca_rcache_base_registration_t reg_t;

static size_t page;
static unsigned char *arena; /* reserved address space: nothing else maps here */

static void phase_init(const char *leave_pinned, const char *max_bytes)
{
    setenv("OMPI_MCA_mpi_leave_pinned", leave_pinned, 1);
    setenv("OMPI_MCA_rcache_grdma_max_bytes", max_bytes, 1);
    setenv("OMPI_MCA_rcache_base_release_hooks", "0", 1);
    if (OPAL_SUCCESS != opal_init_util(NULL, NULL)) {
        fprintf(stderr, "opal_init_util failed\n");
        exit(1);
    }
}

/* register of [addr, addr + size) is refused, and nothing reaches the device. */
static void check_refused(mca_rcache_base_module_t *m, mock_dev_t *dev, void *addr, size_t size,
                          uint32_t flags)
{
    reg_t *reg = (reg_t *) &reg; /* anything but NULL */
    long before = dev->registered;
    int rc = m->rcache_register(m, addr, size, flags, 0, &reg);
    CHECK_MSG(OPAL_ERR_BAD_PARAM == rc && NULL == reg && before == dev->registered,
              "register(%p, %#zx, flags %#x): rc %d, %s, %ld register_mem", addr, size, flags, rc,
              reg ? "a registration" : "none", dev->registered - before);
    if (OPAL_SUCCESS == rc && reg) {
        m->rcache_deregister(m, reg);
    }
}

static void test_wrapping_ranges(void)
{
    mock_dev_t dev;
    mca_rcache_base_module_t *m = mock_grdma(&dev);
    reg_t *a, *f;
    CHECK(OPAL_SUCCESS == m->rcache_register(m, arena, page, 0, 0, &a));
    CHECK(OPAL_SUCCESS == m->rcache_deregister(m, a));

    check_refused(m, &dev, arena + page, SIZE_MAX, 0);
    check_refused(m, &dev, arena + 2 * page, (size_t) 0 - page, 0);
    check_refused(m, &dev, arena + 2 * page, (size_t) 0 - page, MCA_RCACHE_FLAGS_CACHE_BYPASS);
    /* Up to the last byte from page 0: its pages are the whole address space, a size of 0. */
    check_refused(m, &dev, (void *) 16, (size_t) 0 - 16, 0);

    /* Refused, not "done": the registration at arena is still cached. */
    int rc = m->rcache_invalidate_range(m, arena, SIZE_MAX);
    CHECK_MSG(OPAL_ERR_BAD_PARAM == rc, "invalidate_range(%p, SIZE_MAX): rc %d", (void *) arena,
              rc);
    CHECK(OPAL_SUCCESS == m->rcache_find(m, arena, page, &f) && f == a);
    CHECK(OPAL_SUCCESS == m->rcache_deregister(m, f));

    /* The last page of the address space, up to its last byte, is a range like any other. */
    unsigned char *top = (unsigned char *) (UINTPTR_MAX - page + 1);
    reg_t *t = NULL;
    CHECK(OPAL_SUCCESS == m->rcache_register(m, top + 10, page - 10, 0, 0, &t));
    CHECK(NULL != t && top == t->base && (unsigned char *) UINTPTR_MAX == t->bound);
    if (t) {
        CHECK(OPAL_SUCCESS == m->rcache_deregister(m, t));
    }
    long before = dev.deregistered;
    CHECK(OPAL_SUCCESS == m->rcache_invalidate_range(m, top, page));
    CHECK(before + 1 == dev.deregistered);
    mock_destroy_and_check(m, &dev, "wrapping ranges");
}

/* Runs with rcache_grdma_max_bytes set, far above what it caches. */
static void test_bypass_persist(void)
{
    mock_dev_t dev;
    mca_rcache_base_module_t *m = mock_grdma(&dev);
    const uint32_t both = MCA_RCACHE_FLAGS_CACHE_BYPASS | MCA_RCACHE_FLAGS_PERSIST;
    reg_t *a, *f;
    CHECK(OPAL_SUCCESS == m->rcache_register(m, arena + 4 * page, page, both, 0, &a));
    CHECK(OPAL_ERR_NOT_FOUND == m->rcache_find(m, arena + 4 * page, page, &f));
    CHECK(OPAL_SUCCESS == m->rcache_deregister(m, a));
    CHECK_MSG(1 == dev.deregistered, "bypass and persist: %ld deregistered at the last release",
              dev.deregistered);

    /* Refused: then a one-page registration stays cached, well under the limit. */
    dev.refuse = 1;
    CHECK(OPAL_ERROR == m->rcache_register(m, arena + 8 * page, 4 * page, both, 0, &a));
    dev.refuse = 0;
    CHECK(OPAL_SUCCESS == m->rcache_register(m, arena + 16 * page, page, 0, 0, &a));
    CHECK(OPAL_SUCCESS == m->rcache_deregister(m, a));
    f = NULL;
    CHECK_MSG(OPAL_SUCCESS == m->rcache_find(m, arena + 16 * page, page, &f) && f == a,
              "a refused bypass and persist registration: the next cached one was evicted");
    if (f) {
        CHECK(OPAL_SUCCESS == m->rcache_deregister(m, f));
    }
    mock_destroy_and_check(m, &dev, "bypass and persist");
}

static void test_huge_sizeof_reg(void)
{
    static const size_t sizes[] = {SIZE_MAX, SIZE_MAX - 62, (size_t) PTRDIFF_MAX + 1};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        mock_dev_t dev = {0};
        mca_rcache_base_resources_t res;
        mock_resources(&dev, &res);
        res.sizeof_reg = sizes[i];
        test_capture_t cap;
        test_capture_begin(&cap);
        mca_rcache_base_module_t *m = mca_rcache_base_module_create("grdma", NULL, &res);
        const char *msg = test_capture_end(&cap);
        CHECK_MSG(NULL == m && strstr(msg, "sizeof_reg"), "sizeof_reg %#zx: %s, said: %s",
                  sizes[i], m ? "created" : "refused", msg);
        if (m) {
            mca_rcache_base_module_destroy(m);
        }
    }
}

/* Runs with mpi_leave_pinned 0. */
static void test_no_leave_pinned_persist(void)
{
    mock_dev_t dev;
    mca_rcache_base_module_t *m = mock_grdma(&dev);
    reg_t *p, *q;
    CHECK(OPAL_SUCCESS == m->rcache_register(m, arena + 20 * page, page, MCA_RCACHE_FLAGS_PERSIST,
                                             0, &p));
    CHECK(OPAL_SUCCESS == m->rcache_deregister(m, p));
    CHECK_MSG(1 == dev.deregistered, "leave_pinned 0: PERSIST kept (%ld deregistered)",
              dev.deregistered);
    CHECK(OPAL_ERR_NOT_FOUND == m->rcache_find(m, arena + 20 * page, page, &q));
    CHECK(OPAL_SUCCESS == m->rcache_register(m, arena + 20 * page, page, 0, 0, &q));
    CHECK_MSG(2 == dev.registered, "leave_pinned 0: a PERSIST registration handed out again");
    CHECK(OPAL_SUCCESS == m->rcache_deregister(m, q));
    mock_destroy_and_check(m, &dev, "leave_pinned 0 and persist");
}

int main(void)
{
    page = (size_t) sysconf(_SC_PAGESIZE);
    arena = mmap(NULL, 64 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (MAP_FAILED == arena) {
        TEST_SKIP("cannot reserve 64 pages of address space");
    }

    phase_init("1", "16m");
    test_wrapping_ranges();
    test_bypass_persist();
    test_huge_sizeof_reg();
    opal_finalize_util();

    phase_init("0", "0");
    test_no_leave_pinned_persist();
    opal_finalize_util();
    return test_finish("rcache_contract_test");
}
