/*
 * On an architecture the overwrite component has no instructions for, it
 * declines cleanly: asked for alone, the first registration fails with
 * OPAL_ERR_NOT_SUPPORTED, says why (naming the machine), and patches
 * nothing; the linux component still works in the same process after a
 * fresh init.  Where it has instructions the test skips: every architecture
 * CI builds has them, so CI's distcheck builds without them
 * (--disable-overwrite-instructions).
 */
#include "opal_config.h"

#include <stdbool.h>
#include <sys/mman.h>
#include <sys/utsname.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_arch.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"
#include "test/support/capture.h"
#include "test/support/test_util.h"

static int events;

static void on_release(void *buf, size_t length, void *cbdata, bool from_alloc)
{
    events++;
}

int main(void)
{
    if (MCA_PATCHER_OVERWRITE_HAVE_ARCH) {
        TEST_SKIP("the overwrite component has instructions for this architecture (its own tests "
                  "cover it; a build configured with --disable-overwrite-instructions runs this "
                  "one)");
    }
    struct utsname u;
    CHECK(0 == uname(&u));

    setenv("OMPI_MCA_patcher", "overwrite", 1);
    CHECK(OPAL_SUCCESS == opal_init_util(NULL, NULL));
    test_capture_t cap;
    test_capture_begin(&cap);
    const int rc = opal_mem_hooks_register_release(on_release, NULL);
    const char *said = test_capture_end(&cap);
    CHECK_MSG(OPAL_ERR_NOT_SUPPORTED == rc, "rc %d", rc);
    CHECK_MSG(NULL != strstr(said, "no instruction support for") && NULL != strstr(said, u.machine),
              "the message does not say why (no instruction support for %s): %s", u.machine, said);
    CHECK(NULL == opal_patcher);
    void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(MAP_FAILED != p && 0 == munmap(p, 4096));
    CHECK_MSG(0 == events, "%d events without hooks", events);
    CHECK(OPAL_SUCCESS == opal_finalize_util());

    /* The process is not spoiled: linux works after a fresh init. */
    setenv("OMPI_MCA_patcher", "linux", 1);
    CHECK(OPAL_SUCCESS == opal_init_util(NULL, NULL));
    CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(on_release, NULL));
    p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(MAP_FAILED != p && 0 == munmap(p, 4096));
    CHECK_MSG(1 == events, "%d events with linux", events);
    CHECK(OPAL_SUCCESS == opal_mem_hooks_unregister_release(on_release));
    CHECK(OPAL_SUCCESS == opal_finalize_util());
    return test_finish("overwrite_decline_test");
}
