/*
 * rcache_base_uffd=on when more watched ranges are released (raw munmap,
 * no patch sees it) than the source's ring holds before the next lookup:
 * that lookup takes the overflow as "everything released".
 *
 *   - An event callback that looks into the cache while the overflow is
 *     delivered (a callback's own lookup, which does not drain) returns:
 *     the lookup does not wait for the drain it is called from.  Bounded
 *     by alarm(): a deadlock fails.
 *   - Every registration is dropped, and the source keeps no range whose
 *     event it lost (its table would fill up to the cap).
 *   - A registration made after the overflow is watched again.
 *
 * SKIP where userfaultfd is refused.
 */
#include "opal_config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/rcache/base/base.h"
#include "opal/memoryhooks/memory.h"
#include "opal/memoryhooks/memory_uffd.h"
#include "opal/memoryhooks/memory_uffd_ring.h"
#include "opal/runtime/opal.h"
#include "test/support/test_util.h"

#define PAGE     4096
#define RELEASES (OPAL_MEM_UFFD_RING_SLOTS + 100)

static mca_rcache_base_module_t *rcache;
static long registered, deregistered;

static int dev_register(void *data, void *base, size_t size, mca_rcache_base_registration_t *reg)
{
    (void) data, (void) base, (void) size, (void) reg;
    registered++;
    return OPAL_SUCCESS;
}

static int dev_deregister(void *data, mca_rcache_base_registration_t *reg)
{
    (void) data, (void) reg;
    deregistered++;
    return OPAL_SUCCESS;
}

/* Register and drop at once: the range stays cached, and watched. */
static int cache(char *p, size_t len)
{
    mca_rcache_base_registration_t *reg;
    int rc = rcache->rcache_register(rcache, p, len, 0, MCA_RCACHE_ACCESS_LOCAL_WRITE, &reg);
    if (OPAL_SUCCESS == rc) {
        rcache->rcache_deregister(rcache, reg);
    }
    return rc;
}

/* Whether the cache still hands out a registration for [p, p+len). */
static bool cached(char *p, size_t len)
{
    mca_rcache_base_registration_t *reg = NULL;
    if (OPAL_SUCCESS != rcache->rcache_find(rcache, p, len, &reg)) {
        return false;
    }
    rcache->rcache_deregister(rcache, reg);
    return true;
}

/* A callback that looks into the cache at each event it is given (not the allocator's). */
static char *probe;
static int lookups_in_callback;

static void on_event(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) buf, (void) len, (void) cbdata;
    if (!from_alloc && NULL != __atomic_load_n(&probe, __ATOMIC_ACQUIRE)) {
        (void) cached(probe, PAGE);
        lookups_in_callback++;
    }
}

int main(int argc, char **argv)
{
    alarm(30);
    setenv("OMPI_MCA_mpi_leave_pinned", "1", 1);
    setenv("OMPI_MCA_rcache_base_uffd", "on", 1);
    const char *why = opal_mem_uffd_probe();
    if (why) {
        TEST_SKIP("the userfaultfd source cannot start here: %s", why);
    }
    CHECK(OPAL_SUCCESS == opal_init_util(&argc, &argv));
    mca_rcache_base_resources_t res = {.cache_name = "uffd-overflow",
                                       .sizeof_reg = sizeof(mca_rcache_base_registration_t),
                                       .register_mem = dev_register,
                                       .deregister_mem = dev_deregister};
    rcache = mca_rcache_base_module_create(NULL, NULL, &res);
    if (NULL == rcache) {
        fprintf(stderr, "cannot create the rcache (see above)\n");
        return 1;
    }
    CHECK(NULL != rcache->rcache_uffd);
    CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(on_event, NULL));

    /* Every other page: separate registrations, separate watched ranges. */
    char *p = mmap(NULL, 2 * RELEASES * PAGE, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(MAP_FAILED != p);
    memset(p, 1, 2 * RELEASES * PAGE);
    for (size_t i = 0; i < RELEASES; i++) {
        CHECK(OPAL_SUCCESS == cache(p + 2 * i * PAGE, PAGE));
    }
    opal_mem_uffd_stats_t st;
    opal_mem_uffd_stats(&st);
    CHECK_MSG(RELEASES == st.ranges, "%d registrations, %zu watched ranges", RELEASES, st.ranges);
    const uint64_t overflows = st.overflows;
    for (size_t i = 0; i < RELEASES; i++) {
        syscall(SYS_munmap, p + 2 * i * PAGE, PAGE); /* no patch sees it, no lookup drains */
    }

    char *q = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(MAP_FAILED != q);
    __atomic_store_n(&probe, q, __ATOMIC_RELEASE);
    CHECK(!cached(p, PAGE)); /* the drain: the overflow, delivered to on_event too */
    __atomic_store_n(&probe, NULL, __ATOMIC_RELEASE);
    CHECK_MSG(lookups_in_callback > 0, "the callback was not called");

    opal_mem_uffd_stats(&st);
    CHECK_MSG(st.overflows > overflows, "%d releases before a lookup: no overflow", RELEASES);
    size_t still = 0;
    for (size_t i = 0; i < RELEASES; i++) {
        still += cached(p + 2 * i * PAGE, PAGE);
    }
    CHECK_MSG(0 == still, "%zu registrations survived the overflow", still);
    CHECK_MSG(0 == st.ranges, "after the overflow %zu ranges whose mappings are gone are watched",
              st.ranges);

    /* Watched again: a raw release of a new registration is an event. */
    memset(q, 1, PAGE);
    CHECK(OPAL_SUCCESS == cache(q, PAGE));
    syscall(SYS_munmap, q, PAGE);
    CHECK_MSG(!cached(q, PAGE), "a registration made after the overflow is not watched");

    opal_mem_hooks_unregister_release(on_event);
    CHECK(OPAL_SUCCESS == mca_rcache_base_module_destroy(rcache));
    CHECK_MSG(registered == deregistered, "%ld register_mem, %ld deregister_mem", registered,
              deregistered);
    syscall(SYS_munmap, p, 2 * RELEASES * PAGE);
    opal_finalize_util();
    return test_finish("rcache_uffd_overflow_test");
}
