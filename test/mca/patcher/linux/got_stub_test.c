/*
 * A program built without PIE that takes free's address in its code has a
 * canonical PLT entry for it: the loader resolves the address of free to
 * that entry everywhere (dlsym(RTLD_DEFAULT) finds it too), while a PLT
 * slot of a library binds past it, to glibc's free.  The linux component
 * must take a library's free slot that is still lazily bound to reach
 * glibc's free, the chain of its hook, and redirect it: judged to reach
 * "another copy" (the entry), it was left alone, and the library's calls
 * to free escaped the hook.
 *
 * This program is built with -fno-pie -no-pie; where its code takes the
 * address through the GOT all the same (no canonical entry), it skips.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/runtime/opal.h"
#include "test/support/helper_libs.h"
#include "test/support/linux_hooks.h"
#include "test/support/test_util.h"

/* Written by the code below: non-PIC code puts free's address in it. */
void (*volatile free_address)(void *);

static void (*free_chain)(void *);
static int intercepted;

static void free_intercept(void *p)
{
    intercepted++;
    free_chain(p);
}

int main(void)
{
    if (NULL != getenv("LD_BIND_NOW")) {
        TEST_SKIP("LD_BIND_NOW is set: no slot is lazily bound");
    }
    free_address = free;
    test_require_own_plt_entry((void *) free_address, (void *) main, "free");
    test_helper_mkdir("opal_got_stub");
    test_write_file(test_helper_dir, "freer.c",
                    "#include <stdlib.h>\n"
                    "void release(void *p) { free(p); }\n");
    test_helper_compile("libfreer.so", "freer.c", "-Wl,-z,lazy");
    /* Loaded before setup, release() not called yet: its free slot is lazy. */
    void *lib = test_helper_open("libfreer.so", RTLD_LAZY);
    void (*release)(void *) = NULL == lib ? NULL : (void (*)(void *)) dlsym(lib, "release");
    if (NULL == release) {
        CHECK_MSG(0, "libfreer.so lacks release");
        return test_finish("got_stub_test");
    }

    setenv("OMPI_MCA_patcher", "linux", 1);
    CHECK(OPAL_SUCCESS == opal_init_util(NULL, NULL));
    if (OPAL_SUCCESS != mca_patcher_base_select() || NULL == opal_patcher) {
        CHECK_MSG(0, "the linux component was not selected");
        return test_finish("got_stub_test");
    }
    /* Where the library is linked into this program (a static build), its
     * own calls to free during the patch come through the slot it wrote. */
    free_chain = (void (*)(void *)) dlsym(RTLD_NEXT, "free");
    uintptr_t chain = 0;
    CHECK(OPAL_SUCCESS == opal_patcher->patch_symbol("free", (uintptr_t) free_intercept, &chain));
    free_chain = (void (*)(void *)) chain;
    CHECK_MSG(0 != chain && chain != (uintptr_t) free_address,
              "the chain is the program's PLT entry (%p)", (void *) chain);

    intercepted = 0;
    release(malloc(64));
    CHECK_MSG(1 == intercepted, "free in libfreer.so (lazily bound) reached the intercept %d times",
              intercepted);
    intercepted = 0;
    free_address(malloc(64));
    CHECK_MSG(1 == intercepted,
              "free through the program's PLT entry reached the intercept %d times", intercepted);

    CHECK(OPAL_SUCCESS == opal_finalize_util());
    dlclose(lib);
    test_helper_cleanup();
    return test_finish("got_stub_test");
}
