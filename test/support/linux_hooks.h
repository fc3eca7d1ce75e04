/*
 * For the tests of the linux component's corner cases: the hooks set up
 * by that component, and a program built without PIE whose canonical PLT
 * entry for a function the test needs.
 */
#ifndef OPAL_TEST_LINUX_HOOKS_H
#define OPAL_TEST_LINUX_HOOKS_H

#include <dlfcn.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"
#include "test/support/test_util.h"

/* opal_init_util and cb registered, by the linux component; false (a failure said) otherwise. */
static inline bool test_hooks_by_linux(opal_mem_hooks_callback_fn_t *cb)
{
    setenv("OMPI_MCA_patcher", "linux", 1);
    CHECK(OPAL_SUCCESS == opal_init_util(NULL, NULL));
    const int rc = opal_mem_hooks_register_release(cb, NULL);
    const char *name = mca_patcher_base_selected_name();
    if (OPAL_SUCCESS != rc || NULL == name || 0 != strcmp(name, "linux")) {
        CHECK_MSG(0, "the hooks were not set up by the linux component (%d, %s)", rc,
                  name ? name : "none");
        return false;
    }
    return true;
}

/*
 * Skip unless fn, a function's address as this program's own code takes
 * it (built -fno-pie -no-pie), is a PLT entry of the program: where the
 * code takes the address through the GOT all the same, there is none.
 */
static inline void test_require_own_plt_entry(const void *fn, const void *in_program,
                                              const char *name)
{
    Dl_info info, self;
    if (0 == dladdr(fn, &info) || 0 == dladdr(in_program, &self) ||
        info.dli_fbase != self.dli_fbase) {
        TEST_SKIP("%s's address taken by the program is not a PLT entry of its own (%s)", name,
                  info.dli_fname ? info.dli_fname : "no object");
    }
}

#endif
