/*
 * A library loaded with RTLD_DEEPBIND whose own dependency brings an
 * allocator (malloc and free of its own), its PLT still lazily bound when
 * the hooks go in: glibc binds its free to that dependency's (the object's
 * own scope comes first), so the linux component must leave that slot
 * alone, as it does for one bound already.  Sending it to glibc's free
 * hands glibc a block of the other allocator (with a real one: heap
 * corruption).  The same library loaded without RTLD_DEEPBIND binds free
 * to glibc's, and that slot is ours.
 *
 * The helper libraries are compiled by the test (as in got_test).
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"
#include "test/support/helper_libs.h"
#include "test/support/linux_hooks.h"
#include "test/support/test_util.h"

static void build_libraries(void)
{
    /* An allocator of its own, counting its frees; its blocks are glibc's,
     * so a free sent to glibc's is counted missing, not a crash. */
    test_write_file(test_helper_dir, "myalloc.c",
                    "#include <stddef.h>\n"
                    "extern void *__libc_malloc(size_t);\n"
                    "extern void __libc_free(void *);\n"
                    "int myalloc_frees;\n"
                    "void *malloc(size_t n) { return __libc_malloc(n); }\n"
                    "void free(void *p) { myalloc_frees++; __libc_free(p); }\n");
    test_write_file(test_helper_dir, "plugin.c",
                    "#include <stdlib.h>\n"
                    "int roundtrip(void) { void *p = malloc(64); free(p); return NULL != p; }\n");
    test_helper_compile("libmyalloc.so", "myalloc.c", "-Wl,-soname,libmyalloc.so");
    test_helper_compile("libplugin.so", "plugin.c",
                        "-Wl,-z,lazy -L. -lmyalloc -Wl,-rpath,'$ORIGIN'");
    test_helper_compile("libplugin2.so", "plugin.c",
                        "-Wl,-z,lazy -L. -lmyalloc -Wl,-rpath,'$ORIGIN'");
}

static void on_release(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) buf, (void) len, (void) cbdata, (void) from_alloc;
}

int main(void)
{
    if (NULL != getenv("OPAL_TEST_SANITIZER")) {
        TEST_SKIP("a sanitizer runtime refuses RTLD_DEEPBIND");
    }
    if (NULL != getenv("LD_BIND_NOW")) {
        TEST_SKIP("LD_BIND_NOW is set: no slot is lazily bound");
    }
    test_helper_mkdir("opal_got_deepbind");
    build_libraries();

    /* Loaded before setup, nothing called yet: every PLT slot still lazy. */
    void *deep = test_helper_open("libplugin.so", RTLD_LAZY | RTLD_LOCAL | RTLD_DEEPBIND);
    void *local = test_helper_open("libplugin2.so", RTLD_LAZY | RTLD_LOCAL);
    void *myalloc = test_helper_open("libmyalloc.so", RTLD_LAZY | RTLD_NOLOAD);
    if (NULL == deep || NULL == local || NULL == myalloc) {
        return test_finish("got_deepbind_test");
    }
    int (*deep_roundtrip)(void) = (int (*)(void)) dlsym(deep, "roundtrip");
    int (*local_roundtrip)(void) = (int (*)(void)) dlsym(local, "roundtrip");
    int *frees = (int *) dlsym(myalloc, "myalloc_frees");
    if (NULL == deep_roundtrip || NULL == local_roundtrip || NULL == frees) {
        CHECK_MSG(0, "the helper libraries lack their symbols");
        return test_finish("got_deepbind_test");
    }

    if (!test_hooks_by_linux(on_release)) {
        return test_finish("got_deepbind_test");
    }

    /* RTLD_DEEPBIND: malloc and free both bind to libmyalloc's. */
    int before = *frees;
    CHECK(1 == deep_roundtrip());
    CHECK_MSG(before + 1 == *frees,
              "the RTLD_DEEPBIND library's free reached another allocator than its own "
              "dependency's (%d of 1 frees counted there)",
              *frees - before);
    /* Without it, glibc's: libmyalloc's is not reached. */
    before = *frees;
    CHECK(1 == local_roundtrip());
    CHECK_MSG(before == *frees, "the RTLD_LOCAL library's free reached its dependency's");

    CHECK(OPAL_SUCCESS == opal_mem_hooks_unregister_release(on_release));
    CHECK(OPAL_SUCCESS == opal_finalize_util());
    dlclose(myalloc);
    dlclose(local);
    dlclose(deep);
    test_helper_cleanup();
    return test_finish("got_deepbind_test");
}
