/*
 * A Go library (built with -buildmode=c-shared, loaded with dlopen) releases
 * memory that our cache holds through the Go runtime's own system call
 * layer: munmap and madvise(MADV_DONTNEED) that never enter libc, as Go's
 * runtime releases its heap.  With rcache_base_uffd=on the registrations
 * are dropped; run with --expect-stale and the source off, they stay (the
 * negative control: no patch can see these calls).
 *
 * Run by uffd_go.sh (linux patcher, see there).
 * Usage: uffd_go_test LIBRELEASER.so [--expect-stale]
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
#include "test/support/test_util.h"

#define PAGE 4096

static int reg_noop(void *d, void *b, size_t s, mca_rcache_base_registration_t *r)
{
    (void) d, (void) b, (void) s, (void) r;
    return OPAL_SUCCESS;
}
static int dereg_noop(void *d, mca_rcache_base_registration_t *r)
{
    (void) d, (void) r;
    return OPAL_SUCCESS;
}

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
    bool expect_stale = argc > 2 && 0 == strcmp(argv[2], "--expect-stale");
    if (argc < 2) {
        fprintf(stderr, "usage: uffd_go_test LIBRELEASER.so [--expect-stale]\n");
        return 1;
    }
    const char *why = expect_stale ? NULL : opal_mem_uffd_probe();
    if (why) {
        TEST_SKIP("the userfaultfd source cannot start here: %s", why);
    }
    void *go = dlopen(argv[1], RTLD_NOW);
    if (NULL == go) {
        TEST_SKIP("cannot load the Go library %s: %s", argv[1], dlerror());
    }
    int (*go_munmap)(void *, size_t) = (int (*)(void *, size_t)) dlsym(go, "GoMunmap");
    int (*go_dontneed)(void *, size_t) = (int (*)(void *, size_t)) dlsym(go, "GoMadviseDontneed");
    CHECK(go_munmap && go_dontneed);
    CHECK(OPAL_SUCCESS == opal_init_util(&argc, &argv));
    mca_rcache_base_resources_t res = {.cache_name = "uffd-go",
                                       .sizeof_reg = sizeof(mca_rcache_base_registration_t),
                                       .register_mem = reg_noop,
                                       .deregister_mem = dereg_noop};
    rc = mca_rcache_base_module_create(NULL, NULL, &res);
    if (NULL == rc || (!expect_stale && NULL == rc->rcache_uffd)) {
        fprintf(stderr, "no cache with the userfaultfd source (see above)\n");
        return 1;
    }
    char *a = cache_page(), *b = cache_page();
    CHECK(0 == go_munmap(a, PAGE));
    CHECK(0 == go_dontneed(b, PAGE));
    bool a_cached = cached(a), b_cached = cached(b);
    printf("Go munmap: %s; Go madvise(MADV_DONTNEED): %s\n", a_cached ? "still cached" : "dropped",
           b_cached ? "still cached" : "dropped");
    if (expect_stale) {
        CHECK_MSG(a_cached && b_cached,
                  "the negative control saw the Go releases: the test cannot fail");
    } else {
        CHECK_MSG(!a_cached, "a munmap by Go's runtime left its registration cached");
        CHECK_MSG(!b_cached, "a madvise by Go's runtime left its registration cached");
    }
    mca_rcache_base_module_destroy(rc);
    opal_finalize_util();
    return test_finish(expect_stale ? "uffd_go_test (negative control)" : "uffd_go_test");
}
