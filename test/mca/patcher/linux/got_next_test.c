/*
 * An interposer of foo (libinterp, which depends on the library it wraps,
 * libtarget) finds the definition after its own with dlsym(RTLD_NEXT) at
 * its first call, made after our setup.  Its foo is the chain of our hook
 * of foo (libuser is bound to it); a library loaded with RTLD_DEEPBIND
 * (libdeep) is bound to libtarget's foo, so that definition is recorded
 * too, and a dlsym result equal to it is replaced by the intercept.  Not
 * for the interposer: the intercept calls the interposer, which would call
 * the intercept again, for ever.  Any other caller still gets the
 * intercept.
 *
 * The helper libraries are compiled by the test (as in got_test).
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/runtime/opal.h"
#include "test/support/helper_libs.h"
#include "test/support/test_util.h"

static void build_libraries(void)
{
    test_write_file(test_helper_dir, "target.c", "int foo(int x) { return x + 1; }\n");
    test_write_file(test_helper_dir, "interp.c",
                    "#define _GNU_SOURCE\n"
                    "#include <dlfcn.h>\n"
                    "static int depth; /* called again from below: -1000000 */\n"
                    "int foo(int x)\n"
                    "{\n"
                    "    static int (*next)(int);\n"
                    "    if (!next) next = (int (*)(int)) dlsym(RTLD_NEXT, \"foo\");\n"
                    "    if (!next || depth > 0) return -1000000;\n"
                    "    depth++;\n"
                    "    int r = next(x);\n"
                    "    depth--;\n"
                    "    return r + 10;\n"
                    "}\n");
    test_write_file(test_helper_dir, "user.c",
                    "extern int foo(int);\n"
                    "int user_call(int x) { return foo(x); }\n");
    test_helper_compile("libtarget.so", "target.c", "-Wl,-soname,libtarget.so");
    /* Its dependency on libtarget must stay although it uses nothing of it. */
    test_helper_compile("libinterp.so", "interp.c",
                        "-Wl,--no-as-needed -L. -ltarget -Wl,-rpath,'$ORIGIN' -ldl");
    test_helper_compile("libuser.so", "user.c", "-Wl,-z,now");
    test_helper_compile("libdeep.so", "user.c", "-Wl,-z,now -L. -ltarget -Wl,-rpath,'$ORIGIN'");
}

static int (*chain)(int);

static int intercept(int x)
{
    return chain(x) + 1000;
}

int main(void)
{
    if (NULL != getenv("OPAL_TEST_SANITIZER")) {
        TEST_SKIP("a sanitizer runtime refuses RTLD_DEEPBIND");
    }
    test_helper_mkdir("opal_got_next");
    build_libraries();
    /* Global: libinterp, then libtarget after it.  libuser binds to the
     * interposer's foo, libdeep (its own scope first) to libtarget's. */
    void *interp = test_helper_open("libinterp.so", RTLD_NOW | RTLD_GLOBAL);
    void *user = test_helper_open("libuser.so", RTLD_NOW);
    void *deep = test_helper_open("libdeep.so", RTLD_NOW | RTLD_DEEPBIND);
    void *target = test_helper_open("libtarget.so", RTLD_NOW | RTLD_NOLOAD);
    if (NULL == interp || NULL == user || NULL == deep || NULL == target) {
        return test_finish("got_next_test");
    }
    int (*user_call)(int) = (int (*)(int)) dlsym(user, "user_call");
    void *interp_foo = dlsym(interp, "foo"), *target_foo = dlsym(target, "foo");
    if (NULL == user_call || NULL == interp_foo || NULL == target_foo) {
        CHECK_MSG(0, "the helper libraries lack their symbols");
        return test_finish("got_next_test");
    }

    setenv("OMPI_MCA_patcher", "linux", 1);
    CHECK(OPAL_SUCCESS == opal_init_util(NULL, NULL));
    if (OPAL_SUCCESS != mca_patcher_base_select() || NULL == opal_patcher) {
        CHECK_MSG(0, "the linux component was not selected");
        return test_finish("got_next_test");
    }
    uintptr_t c = 0;
    CHECK(OPAL_SUCCESS == opal_patcher->patch_symbol("foo", (uintptr_t) intercept, &c));
    chain = (int (*)(int)) c;
    CHECK_MSG((void *) c == interp_foo, "the chain is %p, not the interposer's foo %p", (void *) c,
              interp_foo);

    /* The intercept, the interposer, and libtarget's foo once each. */
    const int r = user_call(1);
    CHECK_MSG(1012 == r, "user_call(1) gives %d%s", r,
              r < 0 ? ": dlsym(RTLD_NEXT) led the interposer back to itself" : "");
    /* Our own lookup of the recorded definition still gets the intercept. */
    CHECK_MSG(dlsym(target, "foo") == (void *) intercept,
              "dlsym(libtarget, foo) by the program gives %p, not the intercept %p",
              dlsym(target, "foo"), (void *) intercept);

    CHECK(OPAL_SUCCESS == opal_finalize_util());
    dlclose(target);
    dlclose(deep);
    dlclose(user);
    dlclose(interp);
    test_helper_cleanup();
    return test_finish("got_next_test");
}
