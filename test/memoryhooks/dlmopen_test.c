/*
 * dlmopen into a new namespace brings a copy of libc of its own: releases
 * made there produce events too, with each component (OMPI_MCA_patcher):
 *
 *  - munmap called by a library of the namespace (and a failing one sets
 *    the errno the namespace's code reads);
 *  - free() of a large block by the namespace's malloc (which unmaps it
 *    from inside its libc);
 *
 * for a namespace made before our setup and for ones made after it, again
 * after dlclose and a new dlmopen (the copy loaded anew, often at the same
 * place), and after finalize nothing is left patched in a copy still
 * loaded.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <errno.h>
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

#define BIG (1 << 20) /* above glibc's mmap threshold: a mapping of its own */

typedef struct {
    void *handle;
    int (*munmap)(void *, size_t);
    int (*munmap_errno)(void *, size_t);
    void *(*alloc)(size_t);
    void (*free)(void *);
} ns_lib_t;

static char path[4096];

static bool open_ns(ns_lib_t *lib)
{
    lib->handle = dlmopen(LM_ID_NEWLM, path, RTLD_NOW);
    CHECK_MSG(NULL != lib->handle, "dlmopen %s: %s", path, dlerror());
    if (NULL == lib->handle) {
        return false;
    }
    lib->munmap = (int (*)(void *, size_t)) dlsym(lib->handle, "unmapper_munmap");
    lib->munmap_errno = (int (*)(void *, size_t)) dlsym(lib->handle, "unmapper_munmap_errno");
    lib->alloc = (void *(*) (size_t)) dlsym(lib->handle, "unmapper_alloc");
    lib->free = (void (*)(void *)) dlsym(lib->handle, "unmapper_free");
    CHECK(NULL != lib->munmap && NULL != lib->munmap_errno && NULL != lib->alloc &&
          NULL != lib->free);
    return NULL != lib->munmap && NULL != lib->munmap_errno && NULL != lib->alloc &&
           NULL != lib->free;
}

/* The first bytes of munmap in the namespace's libc. */
static void copy_munmap_bytes(ns_lib_t *lib, unsigned char out[16])
{
    Lmid_t lmid = LM_ID_BASE;
    memset(out, 0, 16);
    if (0 == dlinfo(lib->handle, RTLD_DI_LMID, &lmid)) {
        void *libc = dlmopen(lmid, LIBC_SO, RTLD_LAZY | RTLD_NOLOAD);
        void *fn = libc ? dlsym(libc, "munmap") : NULL;
        if (fn) {
            memcpy(out, fn, 16);
        }
        if (libc) {
            dlclose(libc);
        }
    }
}

static void check_ns(const char *component, const char *when, ns_lib_t *lib)
{
    char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(MAP_FAILED != p);
    if (MAP_FAILED != p) {
        watched = (uintptr_t) p;
        events = 0;
        CHECK(0 == lib->munmap(p, 4096));
        CHECK_MSG(1 == events, "%s, %s: munmap by a library of the namespace: %d events", component,
                  when, events);
    }

    /* A failing munmap sets the errno the namespace's code reads: its copy's. */
    int err = lib->munmap_errno((char *) &path + 1, 4096);
    CHECK_MSG(EINVAL == err,
              "%s, %s: munmap of an unaligned address in the namespace: errno %d there, "
              "not EINVAL",
              component, when, err);

    char *big = lib->alloc(BIG);
    CHECK(NULL != big);
    if (NULL != big) {
        memset(big, 1, BIG);
        watched = (uintptr_t) big + BIG / 2;
        events = 0;
        lib->free(big);
        CHECK_MSG(1 == events, "%s, %s: free() of a %d-byte block by the namespace's malloc: %d events",
                  component, when, BIG, events);
    }
}

int main(int argc, char **argv)
{
    /* One copy variant per namespace patched at once (memory_variants.h). */
    if (OPAL_MEM_HOOKS_NUM_VARIANTS < 4) {
        TEST_SKIP("a build with %d variants (--with-mem-hooks-variants) cannot patch the libc "
                  "of the 2 namespaces this test makes at once", OPAL_MEM_HOOKS_NUM_VARIANTS);
    }
    snprintf(path, sizeof(path), "%s/test/memoryhooks/libnsunmapper.so",
             getenv("OPAL_TEST_BUILDDIR") ? getenv("OPAL_TEST_BUILDDIR") : ".");
    if (OPAL_SUCCESS != opal_init_util(&argc, &argv)) {
        return 1;
    }
    ns_lib_t before, after;
    unsigned char orig[16], now[16];
    if (!open_ns(&before)) {
        return test_finish("dlmopen_test");
    }
    copy_munmap_bytes(&before, orig);
    if (OPAL_SUCCESS != opal_mem_hooks_register_release(on_release, NULL)) {
        TEST_SKIP("memory hooks cannot be installed here");
    }
    const char *component = mca_patcher_base_selected_name();

    check_ns(component, "namespace made before setup", &before);
    for (int round = 0; round < 3; round++) {
        char when[64];
        snprintf(when, sizeof(when), "namespace made after setup, round %d", round);
        if (open_ns(&after)) {
            check_ns(component, when, &after);
            dlclose(after.handle);
        }
    }

    opal_mem_hooks_unregister_release(on_release);
    opal_finalize_util();
    copy_munmap_bytes(&before, now);
    CHECK_MSG(0 == memcmp(orig, now, sizeof(orig)),
              "%s: munmap of the namespace's libc not restored after finalize", component);
    dlclose(before.handle);
    return test_finish("dlmopen_test");
}
