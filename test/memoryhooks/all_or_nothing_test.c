/*
 * All or nothing: when one intercept cannot be installed, everything
 * already patched is undone and no support level is claimed.  We make the
 * last target (shmat) unpatchable for the overwrite component.  A claim
 * made before (API.md: it lasts until the last finalize) outlives the
 * failed setup; UCX_MEM_MMAP_HOOK_MODE=reloc makes the claim's UCX source
 * refuse, so that our patches are what fails.  And when our jump is lost
 * after setup, a callback registered then is told that no events come.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <gnu/lib-names.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"
#include "test/support/snapshot.h"
#include "test/support/test_util.h"
#include "test/support/unpatchable.h"

static void callback(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) buf, (void) len, (void) cbdata, (void) from_alloc;
}

static void late_callback(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) buf, (void) len, (void) cbdata, (void) from_alloc;
}

int main(int argc, char **argv)
{
    (void) argc;
    snapshot_bind_now(argv);
    setenv("OMPI_MCA_patcher", "overwrite", 1);
    test_unpatchable_t shmat_broken;
    test_make_unpatchable(&shmat_broken, "shmat"); /* the last target */

    setenv("UCX_MEM_MMAP_HOOK_MODE", "reloc", 1);

    snapshot_t before;
    snapshot_take(&before);
    CHECK(OPAL_SUCCESS == opal_init_util(NULL, NULL));
    CHECK(OPAL_SUCCESS == mca_patcher_base_claim("ucx"));
    CHECK(OPAL_ERR_NOT_SUPPORTED == opal_mem_hooks_register_release(callback, NULL));
    CHECK(0 == opal_mem_hooks_support_level());
    CHECK(NULL == mca_patcher_base_selected_name());
    const char *claim = mca_patcher_base_claimed_style();
    CHECK_MSG(NULL != claim && 0 == strcmp(claim, "ucx"), "the claim after the failed setup: %s",
              claim ? claim : "gone");
    CHECK_MSG(0 == snapshot_diff(&before, "after the failed setup"), "a partial installation was left behind");
    opal_finalize_util();

    /* With shmat whole again, the same process sets up fine. */
    test_make_patchable_again(&shmat_broken);
    CHECK(OPAL_SUCCESS == opal_init_util(NULL, NULL));
    CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(callback, NULL));
    CHECK(0 != opal_mem_hooks_support_level());

    /* Our jump at shmat written over after setup by code we cannot chain to:
     * events are lost from then on, and a callback registered now is told
     * so, not OPAL_SUCCESS.  Where a landing pad stays at the entry (arm64's
     * bti c or paciasp), our jump is past it and the entry's return leaves
     * it whole. */
    if (0 ==
        memcmp((const void *) shmat_broken.entry, shmat_broken.saved, sizeof(shmat_broken.saved))) {
        printf("note: our jump at shmat is past its entry here: its loss is not checked\n");
    } else {
        test_unpatchable_t jump_broken;
        test_make_unpatchable(&jump_broken, "shmat");
        const int rc = opal_mem_hooks_register_release(late_callback, NULL);
        CHECK_MSG(OPAL_ERR_NOT_SUPPORTED == rc, "register_release after our jump was lost: rc %d",
                  rc);
        CHECK(0 == opal_mem_hooks_support_level());
        test_make_patchable_again(&jump_broken);
    }
    opal_finalize_util();
    snapshot_free(&before);
    return test_finish("all_or_nothing_test");
}
