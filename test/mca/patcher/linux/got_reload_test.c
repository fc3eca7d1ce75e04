/*
 * The library that holds a hook's chain is unloaded (dlclose, watched):
 * the intercept can no longer call it.  The hook is retired: a library
 * bound to another definition (libother, to libalt's), whose slot was
 * given to the intercept, gets its slot back, and the library loaded again
 * (libcaller and its libtarget, placed elsewhere) keeps its own: both reach
 * a live definition, past the intercept.  Before, each call jumped to the
 * old chain's address.
 *
 * The page of the old chain is kept mapped without access, so that a call
 * there faults even where the loader would place the new copy at the old
 * address.  Each call runs in a child, so that a fault is reported.
 *
 * The helper libraries are compiled by the test (as in got_test).
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/runtime/opal.h"
#include "test/support/helper_libs.h"
#include "test/support/test_util.h"

#ifndef MAP_FIXED_NOREPLACE
#    define MAP_FIXED_NOREPLACE 0x100000 /* Linux 4.17; older kernels take a hint */
#endif

static void build_libraries(void)
{
    test_write_file(test_helper_dir, "target.c", "int got_target(int x) { return x + 1; }\n");
    test_write_file(test_helper_dir, "alt.c", "int got_target(int x) { return x + 2; }\n");
    test_write_file(test_helper_dir, "caller.c",
                    "extern int got_target(int);\n"
                    "int call(int x) { return got_target(x); }\n");
    test_helper_compile("libtarget.so", "target.c", "-Wl,-soname,libtarget.so");
    test_helper_compile("libalt.so", "alt.c", "-Wl,-soname,libalt.so");
    test_helper_compile("libcaller.so", "caller.c", "-Wl,-z,now -L. -ltarget -Wl,-rpath,'$ORIGIN'");
    test_helper_compile("libother.so", "caller.c", "-Wl,-z,now -L. -lalt -Wl,-rpath,'$ORIGIN'");
}

typedef int (*call_fn_t)(int);

static call_fn_t chain;

static int intercept(int x)
{
    return chain(x) + 1000;
}

/* fn(1) in a child must give want. */
static void check_call(const char *what, call_fn_t fn, int want)
{
    const pid_t pid = fork();
    if (0 == pid) {
        _exit(want == fn(1) ? 0 : 1);
    }
    test_child_ok(pid, what, "(1: another result; SIGSEGV: the call reached the unloaded chain)");
}

/* The function call of the library name, opened. */
static call_fn_t open_call(const char *name, void **handle)
{
    *handle = test_helper_open(name, RTLD_NOW);
    call_fn_t fn = NULL == *handle ? NULL : (call_fn_t) dlsym(*handle, "call");
    if (NULL == fn) {
        CHECK_MSG(0, "%s has no call", name);
        exit(test_finish("got_reload_test"));
    }
    return fn;
}

/* Keep the page of addr mapped, without access; false if it cannot be. */
static bool reserve_page(uintptr_t addr)
{
    const uintptr_t page = addr & ~((uintptr_t) sysconf(_SC_PAGESIZE) - 1);
    void *p = mmap((void *) page, 1, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                   -1, 0);
    if ((void *) page == p) {
        return true;
    }
    if (MAP_FAILED != p) {
        munmap(p, 1);
    }
    return false;
}

int main(void)
{
    test_helper_mkdir("opal_got_reload");
    build_libraries();
    void *caller, *other;
    call_fn_t call = open_call("libcaller.so", &caller);
    call_fn_t other_call = open_call("libother.so", &other);

    setenv("OMPI_MCA_patcher", "linux", 1);
    CHECK(OPAL_SUCCESS == opal_init_util(NULL, NULL));
    if (OPAL_SUCCESS != mca_patcher_base_select() || NULL == opal_patcher) {
        CHECK_MSG(0, "the linux component was not selected");
        return test_finish("got_reload_test");
    }
    uintptr_t c = 0;
    CHECK(OPAL_SUCCESS == opal_patcher->patch_symbol("got_target", (uintptr_t) intercept, &c));
    chain = (call_fn_t) c;
    /* Both through the intercept to libtarget's, the chain. */
    CHECK_MSG(1002 == call(1) && 1002 == other_call(1), "call(1) %d, other_call(1) %d", call(1),
              other_call(1));

    dlclose(caller); /* libtarget with it */
    Dl_info info;
    if (0 != dladdr((void *) c, &info) || !reserve_page(c)) {
        TEST_SKIP("the chain's page %p is still mapped after the dlclose", (void *) c);
    }
    check_call("other_call(1) after the dlclose, libalt's", other_call, 3);
    call = open_call("libcaller.so", &caller);
    check_call("call(1) of libcaller loaded again, the new libtarget's", call, 2);

    CHECK(OPAL_SUCCESS == opal_finalize_util());
    dlclose(caller);
    dlclose(other);
    test_helper_cleanup();
    return test_finish("got_reload_test");
}
