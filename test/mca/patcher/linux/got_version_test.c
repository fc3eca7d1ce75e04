/*
 * Two versions of one symbol in one library, foo@V1 (1) and foo@@V2 (2):
 * one library bound to each (libold was linked when the library had V1
 * only).  patch_symbol("foo") chains to the version that the first of them
 * reaches; the other library's slot reaches another function, not another
 * path to the chain, and must be left alone: funnelled through the
 * intercept, its calls would run the other version's code.  dlvsym of that
 * version is not mapped to the intercept either.
 *
 * The helper libraries are compiled by the test (as in got_test).
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <stdint.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/runtime/opal.h"
#include "test/support/helper_libs.h"
#include "test/support/test_util.h"

static void build_libraries(void)
{
    test_write_file(test_helper_dir, "ver1.c", "int foo(void) { return 1; }\n");
    test_write_file(test_helper_dir, "ver1.map", "V1 { global: foo; local: *; };\n");
    test_write_file(test_helper_dir, "ver2.c",
                    "int foo_v1(void) { return 1; }\n"
                    "int foo_v2(void) { return 2; }\n"
                    "__asm__(\".symver foo_v1, foo@V1\");\n"
                    "__asm__(\".symver foo_v2, foo@@V2\");\n");
    test_write_file(test_helper_dir, "ver2.map",
                    "V1 { global: foo; local: *; };\n"
                    "V2 { global: foo; } V1;\n");
    test_write_file(test_helper_dir, "old.c",
                    "extern int foo(void);\n"
                    "int old_call(void) { return foo(); }\n");
    test_write_file(test_helper_dir, "new.c",
                    "extern int foo(void);\n"
                    "int new_call(void) { return foo(); }\n");
    /* libold is linked against the library of V1 only, libnew against the
     * one that replaces it; both bound at load. */
    test_helper_compile("libver.so", "ver1.c",
                        "-Wl,--version-script=ver1.map -Wl,-soname,libver.so");
    test_helper_compile("libold.so", "old.c", "-Wl,-z,now -L. -lver -Wl,-rpath,'$ORIGIN'");
    test_helper_compile("libver.so", "ver2.c",
                        "-Wl,--version-script=ver2.map -Wl,-soname,libver.so");
    test_helper_compile("libnew.so", "new.c", "-Wl,-z,now -L. -lver -Wl,-rpath,'$ORIGIN'");
}

static int (*chain)(void);

static int intercept(void)
{
    return chain() + 1000;
}

int main(void)
{
    test_helper_mkdir("opal_got_version");
    build_libraries();
    void *old = test_helper_open("libold.so", RTLD_NOW);
    void *new = test_helper_open("libnew.so", RTLD_NOW);
    void *ver = test_helper_open("libver.so", RTLD_NOW | RTLD_NOLOAD);
    if (NULL == old || NULL == new || NULL == ver) {
        return test_finish("got_version_test");
    }
    int (*old_call)(void) = (int (*)(void)) dlsym(old, "old_call");
    int (*new_call)(void) = (int (*)(void)) dlsym(new, "new_call");
    void *v1 = dlvsym(ver, "foo", "V1"), *v2 = dlvsym(ver, "foo", "V2");
    if (NULL == old_call || NULL == new_call || NULL == v1 || NULL == v2 || v1 == v2) {
        CHECK_MSG(0, "the helper libraries lack their symbols or versions");
        return test_finish("got_version_test");
    }
    CHECK(1 == old_call() && 2 == new_call());

    setenv("OMPI_MCA_patcher", "linux", 1);
    CHECK(OPAL_SUCCESS == opal_init_util(NULL, NULL));
    if (OPAL_SUCCESS != mca_patcher_base_select() || NULL == opal_patcher) {
        CHECK_MSG(0, "the linux component was not selected");
        return test_finish("got_version_test");
    }
    uintptr_t c = 0;
    CHECK(OPAL_SUCCESS == opal_patcher->patch_symbol("foo", (uintptr_t) intercept, &c));
    chain = (int (*)(void)) c;
    if ((void *) c != v1 && (void *) c != v2) {
        CHECK_MSG(0, "the chain %p is neither version (V1 %p, V2 %p)", (void *) c, v1, v2);
        return test_finish("got_version_test");
    }
    /* The library bound to the chain's version is intercepted, the other not. */
    const bool chain_v1 = (void *) c == v1;
    const int old_r = old_call(), new_r = new_call();
    CHECK_MSG(old_r == (chain_v1 ? 1001 : 1) && new_r == (chain_v1 ? 2 : 1002),
              "old_call (foo@V1) gives %d, new_call (foo@V2) %d, the chain being foo@%s", old_r,
              new_r, chain_v1 ? "V1" : "V2");
    void *other = dlvsym(ver, "foo", chain_v1 ? "V2" : "V1");
    CHECK_MSG(other == (chain_v1 ? v2 : v1), "dlvsym of the other version gives %p (intercept %p)",
              other, (void *) intercept);

    CHECK(OPAL_SUCCESS == opal_finalize_util());
    CHECK(1 == old_call() && 2 == new_call());
    dlclose(new);
    dlclose(old);
    test_helper_cleanup();
    return test_finish("got_version_test");
}
