/*
 * mpi_leave_pinned when the memory hooks cannot be installed (here: one of
 * libc's functions made unpatchable for the overwrite component):
 *   1   creation fails, with a message that names the parameter;
 *  -1   (auto) creation succeeds and the cache keeps nothing: every
 *       deregister really deregisters;
 *   0   needs no hooks at all.
 */
#include "opal_config.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/rcache/base/base.h"
#include "opal/runtime/opal.h"
#include "test/support/rcache_mock.h"
#include "test/support/capture.h"
#include "test/support/test_util.h"
#include "test/support/unpatchable.h"

static mock_dev_t dev;

static mca_rcache_base_module_t *create(const char *leave_pinned, const char **message)
{
    static test_capture_t cap;
    setenv("OMPI_MCA_mpi_leave_pinned", leave_pinned, 1);
    mca_rcache_base_resources_t resources = {
        .cache_name = "leave_pinned_test", .reg_data = &dev, .sizeof_reg = sizeof(mock_reg_t),
        .register_mem = mock_register, .deregister_mem = mock_deregister,
    };
    CHECK(OPAL_SUCCESS == opal_init_util(NULL, NULL));
    test_capture_begin(&cap);
    mca_rcache_base_module_t *rcache = mca_rcache_base_module_create("grdma", NULL, &resources);
    *message = test_capture_end(&cap);
    return rcache;
}

/* Register and drop one page twice: with a cache, register_mem runs once. */
static long registrations_for_two_uses(mca_rcache_base_module_t *rcache)
{
    static char buf[8192] __attribute__((aligned(4096)));
    long before = dev.registered;
    for (int i = 0; i < 2; i++) {
        mca_rcache_base_registration_t *reg = NULL;
        CHECK(OPAL_SUCCESS == rcache->rcache_register(rcache, buf, 4096, 0, MCA_RCACHE_ACCESS_ANY, &reg));
        CHECK(OPAL_SUCCESS == rcache->rcache_deregister(rcache, reg));
    }
    return dev.registered - before;
}

/* The cache registers `expected` times for two uses, then is destroyed. */
static void use_and_destroy(mca_rcache_base_module_t *rcache, long expected, const char *what)
{
    CHECK_MSG(NULL != rcache, "%s: no cache", what);
    if (rcache) {
        CHECK_MSG(expected == registrations_for_two_uses(rcache), "%s", what);
        CHECK(OPAL_SUCCESS == mca_rcache_base_module_destroy(rcache));
    }
}

int main(void)
{
    setenv("OMPI_MCA_patcher", "overwrite", 1);
    test_unpatchable_t broken;
    test_make_unpatchable(&broken, "shmat");

    const char *msg;
    mca_rcache_base_module_t *rcache = create("1", &msg);
    CHECK_MSG(NULL == rcache, "mpi_leave_pinned=1 created a cache without hooks");
    CHECK_MSG(strstr(msg, "mpi_leave_pinned"), "message was: %s", msg);
    opal_finalize_util();

    use_and_destroy(create("-1", &msg), 2, "auto leave_pinned cached without hooks");
    opal_finalize_util();

    use_and_destroy(create("0", &msg), 2, "leave_pinned=0 cached");
    opal_finalize_util();

    /* Hooks available again: leave_pinned=1 caches. */
    test_make_patchable_again(&broken);
    use_and_destroy(create("1", &msg), 1, "leave_pinned=1 did not cache");
    opal_finalize_util();
    CHECK(dev.registered == dev.deregistered && 0 == dev.bad_dereg);
    return test_finish("rcache_leave_pinned_test");
}
