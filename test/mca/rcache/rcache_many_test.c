/*
 * Many registrations in one grdma module: 100 000 one-page registrations
 * (thousands of slabs, the page index's table grown by many rehashes),
 * every one found again, half of them invalidated (never found again, the
 * other half still found), and every register_mem paired with one
 * deregister_mem at destroy.
 */
#include "opal_config.h"

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "opal/mca/rcache/base/base.h"
#include "opal/runtime/opal.h"
#include "test/support/rcache_mock.h"
#include "test/support/test_util.h"

#define COUNT 100000

int main(void)
{
    setenv("OMPI_MCA_mpi_leave_pinned", "1", 1);
    setenv("OMPI_MCA_rcache_base_release_hooks", "0", 1);
    if (OPAL_SUCCESS != opal_init_util(NULL, NULL)) {
        fprintf(stderr, "opal_init_util failed\n");
        return 1;
    }
    size_t page = (size_t) sysconf(_SC_PAGESIZE);
    mock_dev_t dev;
    unsigned char *arena;
    mca_rcache_base_module_t *m = mock_grdma_and_pages(&dev, COUNT, &arena);
    mca_rcache_base_registration_t *reg;
    for (size_t i = 0; i < COUNT; i++) {
        CHECK(OPAL_SUCCESS == m->rcache_register(m, arena + i * page, page, 0, 0, &reg));
        CHECK(OPAL_SUCCESS == m->rcache_deregister(m, reg));
    }
    CHECK_MSG(COUNT == dev.registered, "%ld registered", dev.registered);
    size_t found = 0;
    for (size_t i = 0; i < COUNT; i++) {
        if (OPAL_SUCCESS == m->rcache_find(m, arena + i * page, page, &reg)) {
            found += reg->base == arena + i * page;
            m->rcache_deregister(m, reg);
        }
    }
    CHECK_MSG(COUNT == found, "found %zu of %d", found, COUNT);
    CHECK(OPAL_SUCCESS == m->rcache_invalidate_range(m, arena, COUNT / 2 * page));
    CHECK_MSG(COUNT / 2 == dev.deregistered, "%ld deregistered", dev.deregistered);
    found = 0;
    for (size_t i = 0; i < COUNT; i++) {
        if (OPAL_SUCCESS == m->rcache_find(m, arena + i * page, page, &reg)) {
            found += i >= COUNT / 2;
            m->rcache_deregister(m, reg);
        }
    }
    CHECK_MSG(COUNT / 2 == found, "found %zu of the %d not invalidated", found, COUNT / 2);
    mock_destroy_and_check(m, &dev, "many registrations");
    munmap(arena, COUNT * page);
    opal_finalize_util();
    return test_finish("rcache_many_test");
}
