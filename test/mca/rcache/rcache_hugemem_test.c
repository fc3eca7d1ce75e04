/*
 * Huge-page memory of a cache (rcache_base_hugemem): the helper's mappings
 * start at a 2 MiB boundary, are zeroed, written through and marked for
 * transparent huge pages (MADV_HUGEPAGE), and are gone after free; and
 * grdma puts the registrations beyond its first 2.5 MiB of slabs there,
 * keeps evicting over slabs of both kinds under an entry limit, and unmaps
 * them at destroy.
 */
#include "opal_config.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "opal/mca/rcache/base/base.h"
#include "opal/mca/rcache/base/rcache_base_hugemem.h"
#include "opal/runtime/opal.h"
#include "opal/util/proc_maps.h"
#include "test/support/emulated.h"
#include "test/support/rcache_mock.h"
#include "test/support/test_util.h"

#define UNIT  MCA_RCACHE_BASE_HUGEMEM_UNIT
#define LIMIT 50000  /* rcache_grdma_max_entries */
#define COUNT 100000 /* pages registered */
/*
 * The small slabs (2.5 MiB) hold at most 40 320 registrations (63 of 64
 * bytes to a 4 KiB slab; the mock's are 128 with 64-bit pointers: 19 840);
 * below the limit none is reused yet: the registration handed out for
 * this page comes from a huge-page slab.
 */
#define DEEP 41000

static size_t page;

/* The page holding addr is mapped. */
static bool mapped(const void *addr)
{
    unsigned char vec;
    return 0 == mincore((void *) ((uintptr_t) addr & ~(uintptr_t) (page - 1)), page, &vec) ||
           ENOMEM != errno;
}

/* The mapping holding addr is marked for huge pages (MADV_HUGEPAGE: smaps' "hg"). */
static bool huge_advised(const void *addr)
{
    return opal_proc_maps_vmflag(NULL, (uintptr_t) addr, "hg");
}

/* The huge-page checks can run here (NULL), else why not. */
static const char *thp_unavailable(void)
{
    if (test_emulated()) {
        return "under the emulator /proc/self/smaps is not the guest's";
    }
    return mca_rcache_base_hugemem_unavailable();
}

static void check_helper(const char *no_thp)
{
    const size_t sizes[] = {1, UNIT - 1, UNIT, 3 * UNIT + 5};
    CHECK(NULL == mca_rcache_base_hugemem_alloc(0));
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        unsigned char *p = mca_rcache_base_hugemem_alloc(sizes[i]);
        CHECK_MSG(NULL != p, "%zu bytes", sizes[i]);
        if (NULL == p) {
            continue;
        }
        CHECK_MSG(0 == ((uintptr_t) p & (UNIT - 1)), "%p for %zu bytes", (void *) p, sizes[i]);
        size_t zero = 0;
        for (size_t b = 0; b < sizes[i]; b++) {
            zero += 0 == p[b];
        }
        CHECK_MSG(zero == sizes[i], "%zu of %zu bytes zero", zero, sizes[i]);
        memset(p, 0xa5, sizes[i]);
        if (NULL == no_thp && sizes[i] >= UNIT) { /* a huge page needs a whole unit */
            CHECK_MSG(huge_advised(p), "%zu bytes not marked for huge pages", sizes[i]);
        }
        mca_rcache_base_hugemem_free(p, sizes[i]);
        CHECK_MSG(!mapped(p) && !mapped(p + sizes[i] - 1), "%zu bytes still mapped", sizes[i]);
    }
    CHECK(NULL == mca_rcache_base_hugemem_alloc(SIZE_MAX));
    CHECK(NULL == mca_rcache_base_hugemem_alloc(SIZE_MAX - UNIT));
}

static void check_grdma(const char *no_thp)
{
    mock_dev_t dev;
    unsigned char *arena;
    mca_rcache_base_module_t *m = mock_grdma_and_pages(&dev, COUNT, &arena);
    mca_rcache_base_registration_t *reg, *deep = NULL;
    long most = 0;
    for (size_t i = 0; i < COUNT; i++) {
        CHECK(OPAL_SUCCESS == m->rcache_register(m, arena + i * page, page, 0, 0, &reg));
        CHECK(0 == ((uintptr_t) reg & 63));
        CHECK(OPAL_SUCCESS == m->rcache_deregister(m, reg));
        long cached = dev.registered - dev.deregistered;
        most = cached > most ? cached : most;
        deep = DEEP == i ? reg : deep;
    }
    /* The CLOCK walked slabs of both kinds: the limit held, and what it kept is found. */
    CHECK_MSG(COUNT == dev.registered, "%ld registered", dev.registered);
    CHECK_MSG(most <= LIMIT, "%ld cached at once, limit %d", most, LIMIT);
    CHECK_MSG(dev.registered - dev.deregistered >= LIMIT / 2, "%ld cached at the end",
              dev.registered - dev.deregistered);
    size_t found = 0;
    for (size_t i = 0; i < COUNT; i++) {
        if (OPAL_SUCCESS == m->rcache_find(m, arena + i * page, page, &reg)) {
            found += reg->base == arena + i * page;
            m->rcache_deregister(m, reg);
        }
    }
    CHECK_MSG((long) found == dev.registered - dev.deregistered, "found %zu, %ld cached", found,
              dev.registered - dev.deregistered);
    if (NULL == no_thp) {
        CHECK_MSG(huge_advised(deep), "registration %d not in memory marked for huge pages",
                  DEEP);
    }
    mock_destroy_and_check(m, &dev, "slabs of both kinds");
    CHECK_MSG(!mapped(deep), "registration %d's slab is still mapped after destroy", DEEP);
    munmap(arena, COUNT * page);
}

int main(void)
{
    char limit[32];
    snprintf(limit, sizeof(limit), "%d", LIMIT);
    setenv("OMPI_MCA_mpi_leave_pinned", "1", 1);
    setenv("OMPI_MCA_rcache_base_release_hooks", "0", 1);
    setenv("OMPI_MCA_rcache_grdma_max_entries", limit, 1);
    if (OPAL_SUCCESS != opal_init_util(NULL, NULL)) {
        fprintf(stderr, "opal_init_util failed\n");
        return 1;
    }
    page = (size_t) sysconf(_SC_PAGESIZE);
    const char *no_thp = thp_unavailable();
    check_helper(no_thp);
    check_grdma(no_thp);
    opal_finalize_util();
    if (no_thp && 0 == test_failures) {
        TEST_SKIP("the huge-page checks (the rest passed): %s", no_thp);
    }
    return test_finish("rcache_hugemem_test");
}
