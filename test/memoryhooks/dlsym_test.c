/*
 * Looking up "the original" munmap after our hooks are in does not bypass
 * them: a call through the pointer still produces exactly one event.  Run
 * with each component (OMPI_MCA_patcher).  The ways:
 *
 *  - from the program: dlsym with RTLD_NEXT, RTLD_DEFAULT and a handle of
 *    libc; dlvsym with each of those and munmap's version;
 *  - from a library loaded after setup: dlsym and dlvsym, RTLD_NEXT and
 *    RTLD_DEFAULT;
 *  - from a library in a dlmopen namespace (its own copy of libc): the same,
 *    also from one that calls munmap nowhere itself;
 *
 * and a version libc does not define fails as it does without us.
 */
#define _GNU_SOURCE
#include "opal_config.h"

#include <dlfcn.h>
#include <gnu/lib-names.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"
#include "test/support/test_util.h"
#include "test/support/watch.h"

/* The version of glibc's munmap on this architecture (its first glibc port). */
#if defined(__x86_64__)
#    define MUNMAP_VERSION "GLIBC_2.2.5"
#elif defined(__aarch64__) || (defined(__powerpc64__) && __LITTLE_ENDIAN__)
#    define MUNMAP_VERSION "GLIBC_2.17"
#elif defined(__riscv) && __riscv_xlen == 64
#    define MUNMAP_VERSION "GLIBC_2.27"
#elif defined(__i386__)
#    define MUNMAP_VERSION "GLIBC_2.0"
#else
#    error "dlsym_test: the version of glibc's munmap on this architecture is not known"
#endif

static const char *component;

static void *map_page(void)
{
    char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (MAP_FAILED == p) {
        TEST_SKIP("cannot map a page");
    }
    p[0] = 1;
    watched = (uintptr_t) p;
    events = 0;
    return p;
}

typedef int (*munmap_fn_t)(void *, size_t);

/* One page unmapped through fn: exactly one event. */
static void check_fn(munmap_fn_t fn, const char *way)
{
    CHECK_MSG(NULL != fn, "%s: %s found nothing: %s", component, way, dlerror());
    if (fn) {
        void *p = map_page();
        CHECK(0 == fn(p, 4096));
        CHECK_MSG(1 == events, "%s: munmap from %s: %d events", component, way, events);
    }
}

/* The same through a library's own lookup (unmapper.c). */
static void check_lib(void *lib, const char *where)
{
    int (*lookup)(void *, size_t,
                  int) = (int (*)(void *, size_t, int)) dlsym(lib, "unmapper_lookup_munmap");
    int (*vlookup)(void *, size_t, int,
                   const char *) = (int (*)(void *, size_t, int,
                                            const char *)) dlsym(lib, "unmapper_lookup_versioned");
    CHECK(NULL != lookup && NULL != vlookup);
    for (int next = 0; lookup && vlookup && next < 2; next++) {
        for (int versioned = 0; versioned < 2; versioned++) {
            void *p = map_page();
            int rc = versioned ? vlookup(p, 4096, next, MUNMAP_VERSION) : lookup(p, 4096, next);
            CHECK(0 == rc);
            CHECK_MSG(1 == events, "%s: munmap from %s(%s, \"munmap\"%s) in %s: %d events",
                      component, versioned ? "dlvsym" : "dlsym",
                      next ? "RTLD_NEXT" : "RTLD_DEFAULT", versioned ? ", " MUNMAP_VERSION : "",
                      where, events);
        }
    }
}

int main(int argc, char **argv)
{
    char path[4096], bad_version_error[512] = "";
    const char *builddir = getenv("OPAL_TEST_BUILDDIR") ? getenv("OPAL_TEST_BUILDDIR") : ".";
    void *libc = dlopen(LIBC_SO, RTLD_LAZY | RTLD_NOLOAD);
    if (NULL == libc) {
        TEST_SKIP("no %s loaded", LIBC_SO);
    }
    /* Without us: a version libc does not define. */
    CHECK(NULL == dlvsym(libc, "munmap", "GLIBC_0.0"));
    snprintf(bad_version_error, sizeof(bad_version_error), "%s", dlerror() ? "" : "(none)");
    if (OPAL_SUCCESS != opal_init_util(&argc, &argv) ||
        OPAL_SUCCESS != opal_mem_hooks_register_release(on_release, NULL)) {
        return 1;
    }
    component = mca_patcher_base_selected_name();

    /* From the program. */
    check_fn((munmap_fn_t) dlsym(RTLD_NEXT, "munmap"), "dlsym(RTLD_NEXT) in the program");
    check_fn((munmap_fn_t) dlsym(RTLD_DEFAULT, "munmap"), "dlsym(RTLD_DEFAULT) in the program");
    check_fn((munmap_fn_t) dlsym(libc, "munmap"), "dlsym(libc's handle) in the program");
    check_fn((munmap_fn_t) dlvsym(libc, "munmap", MUNMAP_VERSION),
             "dlvsym(libc's handle) in the program");
    check_fn((munmap_fn_t) dlvsym(RTLD_DEFAULT, "munmap", MUNMAP_VERSION),
             "dlvsym(RTLD_DEFAULT) in the program");
    check_fn((munmap_fn_t) dlvsym(RTLD_NEXT, "munmap", MUNMAP_VERSION),
             "dlvsym(RTLD_NEXT) in the program");
    /* The version asked for is honoured. */
    CHECK_MSG(NULL == dlvsym(libc, "munmap", "GLIBC_0.0"),
              "%s: dlvsym found munmap in a version libc "
              "does not define",
              component);
    const char *err = dlerror();
    CHECK_MSG(NULL != err && '\0' == bad_version_error[0],
              "%s: dlvsym of an undefined version: no error "
              "(without us: %s)",
              component, bad_version_error[0] ? bad_version_error : "an error");

    /* From a library loaded after setup. */
    snprintf(path, sizeof(path), "%s/test/memoryhooks/libunmapper.so", builddir);
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    CHECK_MSG(NULL != lib, "dlopen %s: %s", path, dlerror());
    if (lib) {
        check_lib(lib, "a library loaded after setup");
        dlclose(lib);
    }

    /* From a library in a dlmopen namespace, bound to the namespace's libc;
     * first one that names munmap in no GOT slot (libnslookup). */
    static const char *const ns_libs[] = {"libnslookup.so", "libnsunmapper.so"};
    if (OPAL_MEM_HOOKS_NUM_VARIANTS < 3) {
        printf("note: a build with %d variants patches no dlmopen namespace's libc: its "
               "libraries not tested\n", OPAL_MEM_HOOKS_NUM_VARIANTS);
    }
    for (int i = 0; i < 2 && OPAL_MEM_HOOKS_NUM_VARIANTS >= 3; i++) {
        snprintf(path, sizeof(path), "%s/test/memoryhooks/%s", builddir, ns_libs[i]);
        void *ns = dlmopen(LM_ID_NEWLM, path, RTLD_NOW);
        CHECK_MSG(NULL != ns, "dlmopen %s: %s", path, dlerror());
        if (ns) {
            char where[128];
            snprintf(where, sizeof(where), "%s in a dlmopen namespace", ns_libs[i]);
            check_lib(ns, where);
            dlclose(ns);
        }
    }
    dlclose(libc);
    opal_mem_hooks_unregister_release(on_release);
    opal_finalize_util();
    return test_finish("dlsym_test");
}
