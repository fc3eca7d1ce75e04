/*
 * A library with its own system call layer, loaded with dlopen, releases
 * memory that our cache holds: munmap and madvise(MADV_DONTNEED) that never
 * enter our libc.  uffd_go.sh loads a Go library (-buildmode=c-shared: the
 * Go runtime's syscall package, as Go releases its heap), uffd_musl.sh one
 * linked statically with musl (musl's own munmap and madvise).  Each
 * exports foreign_munmap and foreign_madvise_dontneed.  With
 * rcache_base_uffd=on the registrations are dropped; run with
 * --expect-stale and the source off, they stay (the negative control: no
 * patch can see these calls).
 *
 * Usage: uffd_foreign_test LIBRELEASER.so WHO [--expect-stale]
 *   WHO names the library's runtime in the messages (Go, musl).
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "opal/mca/rcache/base/base.h"
#include "opal/memoryhooks/memory_uffd.h"
#include "opal/runtime/opal.h"
#include "test/support/rcache_noop.h"
#include "test/support/test_util.h"

#define PAGE 4096

static mca_rcache_base_module_t *rc;

static bool cached(char *p)
{
    mca_rcache_base_registration_t *reg = NULL;
    if (OPAL_SUCCESS != rc->rcache_find(rc, p, PAGE, &reg)) {
        return false;
    }
    rc->rcache_deregister(rc, reg);
    return true;
}

static char *cache_page(void)
{
    char *p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    mca_rcache_base_registration_t *reg;
    p[0] = 1;
    CHECK(OPAL_SUCCESS == rc->rcache_register(rc, p, PAGE, 0, MCA_RCACHE_ACCESS_LOCAL_WRITE, &reg));
    rc->rcache_deregister(rc, reg);
    CHECK(cached(p));
    return p;
}

int main(int argc, char **argv)
{
    alarm(60);
    if (argc < 3) {
        fprintf(stderr, "usage: uffd_foreign_test LIBRELEASER.so WHO [--expect-stale]\n");
        return 1;
    }
    const char *who = argv[2];
    bool expect_stale = argc > 3 && 0 == strcmp(argv[3], "--expect-stale");
    const char *why = expect_stale ? NULL : opal_mem_uffd_probe();
    if (why) {
        TEST_SKIP("the userfaultfd source cannot start here: %s", why);
    }
    void *lib = dlopen(argv[1], RTLD_NOW);
    if (NULL == lib) {
        fprintf(stderr, "cannot load the %s library %s: %s\n", who, argv[1], dlerror());
        return 1;
    }
    int (*foreign_munmap)(void *, size_t) = (int (*)(void *, size_t)) dlsym(lib, "foreign_munmap");
    int (*foreign_dontneed)(void *, size_t) =
        (int (*)(void *, size_t)) dlsym(lib, "foreign_madvise_dontneed");
    if (NULL == foreign_munmap || NULL == foreign_dontneed) {
        fprintf(stderr, "%s exports no foreign_munmap/foreign_madvise_dontneed\n", argv[1]);
        return 1;
    }
    CHECK(OPAL_SUCCESS == opal_init_util(&argc, &argv));
    mca_rcache_base_resources_t res = rcache_noop_resources("uffd-foreign");
    rc = mca_rcache_base_module_create(NULL, NULL, &res);
    if (NULL == rc || (!expect_stale && NULL == rc->rcache_uffd)) {
        fprintf(stderr, "no cache with the userfaultfd source (see above)\n");
        return 1;
    }
    char *a = cache_page(), *b = cache_page();
    CHECK(0 == foreign_munmap(a, PAGE));
    CHECK(0 == foreign_dontneed(b, PAGE));
    bool a_cached = cached(a), b_cached = cached(b);
    printf("%s munmap: %s; %s madvise(MADV_DONTNEED): %s\n", who,
           a_cached ? "still cached" : "dropped", who, b_cached ? "still cached" : "dropped");
    if (expect_stale) {
        CHECK_MSG(a_cached && b_cached,
                  "the negative control saw the %s releases: the test cannot fail", who);
    } else {
        CHECK_MSG(!a_cached, "a munmap by %s left its registration cached", who);
        CHECK_MSG(!b_cached, "a madvise by %s left its registration cached", who);
    }
    mca_rcache_base_module_destroy(rc);
    opal_finalize_util();
    return test_finish(expect_stale ? "uffd_foreign_test (negative control)" : "uffd_foreign_test");
}
