/*
 * All or nothing: when one intercept cannot be installed, everything
 * already patched is undone and no support level is claimed.  We make the
 * last target (shmat) unpatchable for the overwrite component by putting a
 * `ret` at its entry first — the relocator must decline it.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <gnu/lib-names.h>
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

static void callback(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) buf, (void) len, (void) cbdata, (void) from_alloc;
}

static void write_byte(uintptr_t at, unsigned char byte)
{
    uintptr_t page = at & ~(uintptr_t) 4095;
    mprotect((void *) page, 8192, PROT_READ | PROT_WRITE | PROT_EXEC);
    *(volatile unsigned char *) at = byte;
    mprotect((void *) page, 8192, PROT_READ | PROT_EXEC);
}

int main(int argc, char **argv)
{
    (void) argc;
    snapshot_bind_now(argv);
    setenv("OMPI_MCA_patcher", "overwrite", 1);
    void *libc = dlopen(LIBC_SO, RTLD_LAZY | RTLD_NOLOAD);
    uintptr_t shmat_entry = (uintptr_t) dlsym(libc, "shmat");
    unsigned char saved = *(unsigned char *) shmat_entry;
    write_byte(shmat_entry, 0xc3); /* ret */

    snapshot_t before;
    snapshot_take(&before);
    CHECK(OPAL_SUCCESS == opal_init_util(NULL, NULL));
    CHECK(OPAL_ERR_NOT_SUPPORTED == opal_mem_hooks_register_release(callback, NULL));
    CHECK(0 == opal_mem_hooks_support_level());
    CHECK(NULL == mca_patcher_base_selected_name());
    CHECK_MSG(0 == snapshot_diff(&before, "after the failed setup"), "a partial installation was left behind");
    opal_finalize_util();

    /* With shmat whole again, the same process sets up fine. */
    write_byte(shmat_entry, saved);
    CHECK(OPAL_SUCCESS == opal_init_util(NULL, NULL));
    CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(callback, NULL));
    CHECK(0 != opal_mem_hooks_support_level());
    opal_finalize_util();
    snapshot_free(&before);
    dlclose(libc);
    return test_finish("all_or_nothing_test");
}
