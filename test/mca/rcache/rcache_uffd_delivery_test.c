/*
 * How the userfaultfd source's events reach the callbacks, with
 * rcache_base_uffd=on.
 *
 * Once: a callback that releases cached memory with libc's munmap while a
 * kernel event is delivered to it (a patch event, inside a lookup) hears
 * of that release once, as every callback must; the kernel does not
 * report it a second time.
 *
 * An overflow: more watched ranges are released (raw munmap, no patch
 * sees it) than the source's ring holds before the next lookup, which
 * takes the overflow as "everything released".
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
#include "test/support/rcache_ops.h"
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

/*
 * The callback: counts the events covering 'victim'; releases it (libc)
 * at the event for 'trigger'; looks into the cache at each event while
 * 'probe' is set (events not the allocator's).
 */
static char *victim, *trigger, *probe;
static int victim_events, lookups_in_callback;

static bool covers(void *buf, size_t len, const char *p)
{
    return NULL != p && (uintptr_t) buf <= (uintptr_t) p && (uintptr_t) buf + len > (uintptr_t) p;
}

static void on_event(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) cbdata;
    victim_events += covers(buf, len, victim);
    if (covers(buf, len, trigger)) {
        trigger = NULL;
        munmap(victim, PAGE);
    }
    if (!from_alloc && NULL != __atomic_load_n(&probe, __ATOMIC_ACQUIRE)) {
        (void) test_rcache_cached(rcache, probe, PAGE);
        lookups_in_callback++;
    }
}

static char *map_page(void)
{
    char *p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(MAP_FAILED != p);
    memset(p, 1, PAGE);
    return p;
}

static void test_once(void)
{
    char *t = map_page(), *v = map_page(), *other = map_page();
    CHECK(OPAL_SUCCESS == test_rcache_cache(rcache, t, PAGE) &&
          OPAL_SUCCESS == test_rcache_cache(rcache, v, PAGE));
    victim = v;
    trigger = t;
    syscall(SYS_munmap, t, PAGE); /* the kernel's event: delivered at the next lookup */
    CHECK(!test_rcache_cached(rcache, other, PAGE));
    CHECK_MSG(NULL == trigger, "the raw munmap of a cached page: no event");
    CHECK(!test_rcache_cached(rcache, other, PAGE));
    CHECK_MSG(1 == victim_events, "a munmap made in a callback reported %d times", victim_events);
    CHECK_MSG(!test_rcache_cached(rcache, v, PAGE),
              "a munmap made in a callback left its registration cached");
    victim = NULL;
    munmap(other, PAGE);
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
    test_once();

    /* Every other page: separate registrations, separate watched ranges. */
    char *p = mmap(NULL, 2 * RELEASES * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    CHECK(MAP_FAILED != p);
    memset(p, 1, 2 * RELEASES * PAGE);
    for (size_t i = 0; i < RELEASES; i++) {
        CHECK(OPAL_SUCCESS == test_rcache_cache(rcache, p + 2 * i * PAGE, PAGE));
    }
    opal_mem_uffd_stats_t st;
    opal_mem_uffd_stats(&st);
    CHECK_MSG(RELEASES == st.ranges, "%d registrations, %zu watched ranges", RELEASES, st.ranges);
    const uint64_t overflows = st.overflows;
    for (size_t i = 0; i < RELEASES; i++) {
        syscall(SYS_munmap, p + 2 * i * PAGE, PAGE); /* no patch sees it, no lookup drains */
    }

    char *q = map_page();
    __atomic_store_n(&probe, q, __ATOMIC_RELEASE);
    CHECK(!test_rcache_cached(rcache, p,
                              PAGE)); /* the drain: the overflow, delivered to on_event too */
    __atomic_store_n(&probe, NULL, __ATOMIC_RELEASE);
    CHECK_MSG(lookups_in_callback > 0, "the callback was not called");

    opal_mem_uffd_stats(&st);
    CHECK_MSG(st.overflows > overflows, "%d releases before a lookup: no overflow", RELEASES);
    size_t still = 0;
    for (size_t i = 0; i < RELEASES; i++) {
        still += test_rcache_cached(rcache, p + 2 * i * PAGE, PAGE);
    }
    CHECK_MSG(0 == still, "%zu registrations survived the overflow", still);
    CHECK_MSG(0 == st.ranges, "after the overflow %zu ranges whose mappings are gone are watched",
              st.ranges);

    /* Watched again: a raw release of a new registration is an event. */
    CHECK(OPAL_SUCCESS == test_rcache_cache(rcache, q, PAGE));
    syscall(SYS_munmap, q, PAGE);
    CHECK_MSG(!test_rcache_cached(rcache, q, PAGE),
              "a registration made after the overflow is not watched");

    opal_mem_hooks_unregister_release(on_event);
    CHECK(OPAL_SUCCESS == mca_rcache_base_module_destroy(rcache));
    CHECK_MSG(registered == deregistered, "%ld register_mem, %ld deregister_mem", registered,
              deregistered);
    syscall(SYS_munmap, p, 2 * RELEASES * PAGE);
    opal_finalize_util();
    return test_finish("rcache_uffd_delivery_test");
}
