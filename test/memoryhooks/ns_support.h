/*
 * For the tests of the dlmopen namespaces' copies of libc: a namespace
 * made around libnsunmapper.so (unmapper.c), its libc's link_map, whether
 * a munmap made by its library reports an event, and a child process per
 * patcher component (OMPI_MCA_patcher).
 */
#ifndef OPAL_TEST_NS_SUPPORT_H
#define OPAL_TEST_NS_SUPPORT_H

#include <dlfcn.h>
#include <gnu/lib-names.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "opal/mca/patcher/overwrite/patcher_overwrite_arch.h"
#include "opal/memoryhooks/memory.h"
#include "test/support/test_util.h"
#include "test/support/watch.h"

/* The child's exit code when the component cannot be tested here. */
#define NS_CHILD_SKIP 77

static char ns_path[4096];

static inline void ns_set_path(void)
{
    snprintf(ns_path, sizeof(ns_path), "%s/test/memoryhooks/libnsunmapper.so",
             getenv("OPAL_TEST_BUILDDIR") ? getenv("OPAL_TEST_BUILDDIR") : ".");
}

/* The library's munmap (its namespace's libc's), or NULL. */
static inline int (*ns_munmap_of(void *handle))(void *, size_t)
{
    return (int (*)(void *, size_t)) dlsym(handle, "unmapper_munmap");
}

/* The libc of the namespace that handle was opened in, or NULL. */
static inline const struct link_map *ns_libc_of(void *handle)
{
    struct link_map *map = NULL;
    if (NULL == handle || 0 != dlinfo(handle, RTLD_DI_LINKMAP, &map) || NULL == map) {
        return NULL;
    }
    while (NULL != map->l_prev) {
        map = map->l_prev;
    }
    for (; NULL != map; map = map->l_next) {
        const char *slash = map->l_name ? strrchr(map->l_name, '/') : NULL;
        if (NULL != slash && 0 == strcmp(slash + 1, LIBC_SO)) {
            return map;
        }
    }
    return NULL;
}

/* Whether a munmap made by the library of handle's namespace reports one event. */
static inline bool ns_munmap_reports(void *handle, const char *component, const char *when)
{
    int (*fn)(void *, size_t) = ns_munmap_of(handle);
    CHECK_MSG(NULL != fn, "%s, %s: no unmapper_munmap in the namespace", component, when);
    char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(MAP_FAILED != p);
    if (NULL == fn || MAP_FAILED == p) {
        return false;
    }
    watched = (uintptr_t) p;
    events = 0;
    CHECK(0 == fn(p, 4096));
    CHECK_MSG(1 == events, "%s, %s: munmap by the namespace's library: %d events (1 expected)",
              component, when, events);
    return 1 == events;
}

/*
 * Run check(component) in a child for each component that can work here:
 * a crash is reported as such.  Returns the number of components tested
 * (the others said why not).
 */
static inline int ns_for_each_component(int (*check)(const char *component), const char *codes)
{
    static const char *const components[] = {"linux", "overwrite"};
    int tested = 0;
    for (size_t i = 0; i < sizeof(components) / sizeof(components[0]); i++) {
        if (!MCA_PATCHER_OVERWRITE_HAVE_ARCH && 0 == strcmp(components[i], "overwrite")) {
            printf("note: the overwrite component has no instructions here\n");
            continue;
        }
        fflush(stdout);
        fflush(stderr);
        const pid_t child = fork();
        if (0 == child) {
            test_failures = 0; /* the parent's checks are not the child's */
            setenv("OMPI_MCA_patcher", components[i], 1);
            const int rc = check(components[i]);
            fflush(stdout); /* _exit flushes nothing */
            _exit(rc);
        }
        int status = 0;
        if (child <= 0 || child != waitpid(child, &status, 0)) {
            CHECK_MSG(false, "%s: no child to wait for", components[i]);
            continue;
        }
        if (WIFEXITED(status) && NS_CHILD_SKIP == WEXITSTATUS(status)) {
            continue; /* it said why */
        }
        CHECK_MSG(WIFEXITED(status) && 0 == WEXITSTATUS(status), "%s: the child %s %d %s",
                  components[i], WIFSIGNALED(status) ? "was killed by signal" : "exited with",
                  WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), codes);
        tested++;
    }
    return tested;
}

#endif
