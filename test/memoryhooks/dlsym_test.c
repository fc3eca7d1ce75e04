/*
 * Looking up "the original" munmap with dlsym after our hooks are in does
 * not bypass them: a call through the pointer still produces our event.
 * Lookups from the program and from a library loaded after setup, with
 * RTLD_NEXT and RTLD_DEFAULT (run with each component: OMPI_MCA_patcher).
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"
#include "test/support/test_util.h"
#include "test/support/watch.h"


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

int main(int argc, char **argv)
{
    if (OPAL_SUCCESS != opal_init_util(&argc, &argv) ||
        OPAL_SUCCESS != opal_mem_hooks_register_release(on_release, NULL)) {
        return 1;
    }
    const char *component = mca_patcher_base_selected_name();

    /* From the program. */
    static const struct {
        const char *what;
        void *handle;
    } lookups[] = {{"RTLD_NEXT", RTLD_NEXT}, {"RTLD_DEFAULT", RTLD_DEFAULT}};
    for (int i = 0; i < 2; i++) {
        munmap_fn_t fn = (munmap_fn_t) dlsym(lookups[i].handle, "munmap");
        CHECK(NULL != fn);
        if (fn) {
            void *p = map_page();
            CHECK(0 == fn(p, 4096));
            CHECK_MSG(1 == events, "%s: munmap from dlsym(%s) in the program: %d events", component,
                      lookups[i].what, events);
        }
    }

    /* From a library loaded after setup. */
    char path[4096];
    snprintf(path, sizeof(path), "%s/test/memoryhooks/libunmapper.so",
             getenv("OPAL_TEST_BUILDDIR") ? getenv("OPAL_TEST_BUILDDIR") : ".");
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    CHECK_MSG(NULL != lib, "dlopen %s: %s", path, dlerror());
    int (*lookup)(void *, size_t, int) = lib ? (int (*)(void *, size_t, int)) dlsym(lib, "unmapper_lookup_munmap") : NULL;
    CHECK(NULL != lookup || NULL == lib);
    for (int next = 0; lookup && next < 2; next++) {
        void *p = map_page();
        CHECK(0 == lookup(p, 4096, next));
        CHECK_MSG(1 == events, "%s: munmap from dlsym(%s) in a library loaded after setup: %d events",
                  component, next ? "RTLD_NEXT" : "RTLD_DEFAULT", events);
    }
    if (lib) {
        dlclose(lib);
    }
    opal_mem_hooks_unregister_release(on_release);
    opal_finalize_util();
    return test_finish("dlsym_test");
}
