/*
 * patch_symbol of the linux component on what it cannot redirect: a
 * variable (its GOT slots hold the address that loads and stores use, not
 * a call target; writing the intercept there would make every access read
 * or write our code), a name nothing defines, and bad arguments.  Each is
 * declined, nothing is recorded, and the slots are as before.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/runtime/opal.h"
#include "test/support/helper_libs.h"
#include "test/support/test_util.h"

static int intercept(void)
{
    return -1;
}

/* Count the records of the variable's slots. */
static void count_record(const mca_patcher_base_patch_t *patch, bool intact, void *arg)
{
    (void) intact;
    *(int *) arg += NULL != patch->patch_symbol &&
                    0 == strcmp(patch->patch_symbol, "opal_test_variable");
}

int main(void)
{
    test_helper_mkdir("opal_got_decline");
    test_write_file(test_helper_dir, "var.c",
                    "int opal_test_variable = 42;\n"
                    "int read_variable(void) { return opal_test_variable; }\n");
    test_helper_compile("libvar.so", "var.c", "");
    void *lib = test_helper_open("libvar.so", RTLD_NOW | RTLD_GLOBAL);
    int (*read_variable)(void) = NULL == lib ? NULL : (int (*)(void)) dlsym(lib, "read_variable");
    if (NULL == read_variable) {
        CHECK_MSG(0, "libvar.so lacks read_variable");
        return test_finish("got_decline_test");
    }
    CHECK(42 == read_variable());

    setenv("OMPI_MCA_patcher", "linux", 1);
    CHECK(OPAL_SUCCESS == opal_init_util(NULL, NULL));
    if (OPAL_SUCCESS != mca_patcher_base_select() || NULL == opal_patcher) {
        CHECK_MSG(0, "the linux component was not selected");
        return test_finish("got_decline_test");
    }
    uintptr_t chain = 0;

    /* A variable (read through a GLOB_DAT slot of its own library). */
    int rc = opal_patcher->patch_symbol("opal_test_variable", (uintptr_t) intercept, &chain);
    CHECK_MSG(OPAL_ERR_NOT_SUPPORTED == rc, "a variable: %d", rc);
    CHECK_MSG(42 == read_variable(), "the variable reads %d through its GOT slot", read_variable());

    /* Nothing defines it; bad arguments. */
    CHECK(OPAL_ERR_NOT_FOUND ==
          opal_patcher->patch_symbol("opal_no_such_symbol", (uintptr_t) intercept, &chain));
    CHECK(OPAL_ERR_BAD_PARAM == opal_patcher->patch_symbol(NULL, (uintptr_t) intercept, &chain));
    CHECK(OPAL_ERR_BAD_PARAM == opal_patcher->patch_symbol("", (uintptr_t) intercept, &chain));
    CHECK(OPAL_ERR_BAD_PARAM == opal_patcher->patch_symbol("munmap", 0, &chain));
    CHECK(OPAL_ERR_BAD_PARAM == opal_patcher->patch_symbol("munmap", (uintptr_t) intercept, NULL));
    char longname[256];
    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    CHECK(OPAL_ERR_BAD_PARAM ==
          opal_patcher->patch_symbol(longname, (uintptr_t) intercept, &chain));

    int records = 0;
    mca_patcher_base_foreach_patch(opal_patcher, count_record, &records);
    CHECK_MSG(0 == records, "%d slots of the variable patched", records);

    CHECK(OPAL_SUCCESS == opal_finalize_util());
    CHECK(42 == read_variable());
    dlclose(lib);
    test_helper_cleanup();
    return test_finish("got_decline_test");
}
