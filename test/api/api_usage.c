/*
 * A program outside the project: it compiles against the INSTALLED headers
 * with exactly the names of the documented public API and links with pkg-config's flags
 * (contrib/test-all.sh builds and runs it after `make install`).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include <opal/constants.h>
#include <opal/mca/patcher/base/base.h>
#include <opal/mca/patcher/patcher.h>
#include <opal/mca/rcache/base/base.h>
#include <opal/mca/rcache/rcache.h>
#include <opal/memoryhooks/memory.h>
#include <opal/runtime/opal.h>

static volatile int releases; /* volatile: munmap is declared "leaf" */

static void on_release(void *buf, size_t length, void *cbdata, bool from_alloc)
{
    (void) buf, (void) length, (void) cbdata, (void) from_alloc;
    releases++;
}

typedef struct my_reg_t {
    mca_rcache_base_registration_t base;
    int handle;
} my_reg_t;

static int registered;

static int my_register(void *reg_data, void *base, size_t size, mca_rcache_base_registration_t *reg)
{
    (void) reg_data, (void) base, (void) size;
    ((my_reg_t *) reg)->handle = ++registered;
    return OPAL_SUCCESS;
}

static int my_deregister(void *reg_data, mca_rcache_base_registration_t *reg)
{
    (void) reg_data, (void) reg;
    registered--;
    return OPAL_SUCCESS;
}

int main(int argc, char **argv)
{
    const int codes[] = {OPAL_SUCCESS, OPAL_ERROR, OPAL_ERR_BAD_PARAM, OPAL_ERR_NOT_FOUND,
                         OPAL_ERR_NOT_SUPPORTED, OPAL_ERR_OUT_OF_RESOURCE, OPAL_ERR_NOT_AVAILABLE};
    (void) codes;
    mca_patcher_base_patch_symbol_fn_t ps = NULL;
    mca_patcher_base_patch_address_fn_t pa = NULL;
    (void) ps, (void) pa;

    int failed = 0;
    if (OPAL_SUCCESS != opal_init_util(&argc, &argv)) {
        return 1;
    }
    failed += (NULL != opal_patcher || NULL != mca_patcher_base_selected_name());
    failed += (OPAL_ERR_BAD_PARAM != mca_patcher_base_claim("no-such-style"));
    failed += (OPAL_SUCCESS != opal_mem_hooks_register_release(on_release, NULL));
    int level = opal_mem_hooks_support_level();
    failed += !(level & OPAL_MEMORY_FREE_SUPPORT) || !(level & OPAL_MEMORY_MUNMAP_SUPPORT);
    (void) OPAL_MEMORY_CHUNK_SUPPORT;
    printf("selected: %s\n", mca_patcher_base_selected_name());
    failed += (OPAL_ERR_NOT_AVAILABLE != mca_patcher_base_claim("ucx"));

    void *p = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    mca_rcache_base_resources_t resources = {
        .cache_name = "api", .reg_data = NULL, .sizeof_reg = sizeof(my_reg_t),
        .register_mem = my_register, .deregister_mem = my_deregister,
    };
    mca_rcache_base_module_t *rcache = mca_rcache_base_module_create(NULL, NULL, &resources);
    failed += (NULL == rcache);
    if (rcache) {
        mca_rcache_base_registration_t *reg = NULL, *found = NULL;
        failed += (OPAL_SUCCESS != rcache->rcache_register(rcache, p, 4096, 0, MCA_RCACHE_ACCESS_LOCAL_WRITE, &reg));
        failed += (NULL == reg || reg->ref_count < 1 || reg->base != (unsigned char *) p ||
                   reg->bound < (unsigned char *) p + 4095 || NULL == reg->rcache);
        (void) reg->alloc_base, (void) reg->flags, (void) reg->access_flags;
        failed += (OPAL_SUCCESS != rcache->rcache_find(rcache, p, 4096, &found) || found != reg);
        failed += (OPAL_SUCCESS != rcache->rcache_deregister(rcache, reg));
        if (found) {
            rcache->rcache_deregister(rcache, found);
        }
        rcache->rcache_invalidate_range(rcache, p, 4096);
        (void) MCA_RCACHE_FLAGS_CACHE_BYPASS, (void) MCA_RCACHE_FLAGS_PERSIST, (void) MCA_RCACHE_FLAGS_INVALID;
        (void) MCA_RCACHE_ACCESS_REMOTE_READ, (void) MCA_RCACHE_ACCESS_REMOTE_WRITE, (void) MCA_RCACHE_ACCESS_ANY;
        failed += (OPAL_SUCCESS != mca_rcache_base_module_destroy(rcache));
        failed += (0 != registered);
    }
    releases = 0;
    munmap(p, 1 << 16);
    failed += (releases < 1);
    opal_mem_hooks_release_hook(p, 4096, false);
    failed += (OPAL_SUCCESS != opal_mem_hooks_unregister_release(on_release));
    failed += (OPAL_SUCCESS != opal_finalize_util());
    printf("api_usage: %s\n", failed ? "FAILED" : "passed");
    return failed ? 1 : 0;
}
