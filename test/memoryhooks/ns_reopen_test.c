/*
 * A namespace closed and made again where the check of the API did not
 * see it gone (here: through the unwatched dlmopen and dlclose the patcher
 * hands out; in a program, a close and a new dlmopen racing with the
 * check), its copy of libc loaded anew with the same link_map at the same
 * base.  That copy is fresh, unpatched code: the next call of the API must
 * patch it, so that a munmap made there reports its event.  The linux
 * component (GOT slots) took it for the old copy, whose slots it does not
 * check, and left it unpatched.  With each component, in a child.
 */
#include "opal_config.h"

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/mca/patcher/base/base_dl.h"
#include "opal/runtime/opal.h"
#include "test/memoryhooks/ns_support.h"

/* Attempts at landing the new copy where the old one was. */
#define TRIES 50

static int check(const char *component)
{
#if !defined(DLFO_STRUCT_HAS_EH_DBASE)
    /* The extent of a copy comes from _dl_find_object (glibc 2.35). */
    if (0 == strcmp(component, "linux")) {
        printf("note: linux: glibc before 2.35 has no _dl_find_object: a copy loaded anew at "
               "the same place is taken for the old one (a known limit)\n");
        return NS_CHILD_SKIP;
    }
#endif
    if (OPAL_SUCCESS != opal_init_util(NULL, NULL)) {
        return 2;
    }
    if (OPAL_SUCCESS != opal_mem_hooks_register_release(on_release, NULL)) {
        printf("note: %s: memory hooks cannot be installed here\n", component);
        return NS_CHILD_SKIP;
    }
    mca_patcher_base_loader_t unwatched = {NULL, NULL, NULL};
    if (OPAL_SUCCESS != mca_patcher_base_watch_loader(&unwatched)) {
        printf("note: %s: the loader is not watched: no copy is patched\n", component);
        return NS_CHILD_SKIP;
    }
    void *handle = dlmopen(LM_ID_NEWLM, ns_path, RTLD_NOW);
    CHECK_MSG(NULL != handle, "%s: dlmopen %s: %s", component, ns_path, dlerror());
    if (NULL == handle || !ns_munmap_reports(handle, component, "namespace made after setup")) {
        return 1;
    }
    const struct link_map *old_map = ns_libc_of(handle);
    const uintptr_t old_base = old_map ? old_map->l_addr : 0;
    int tries = 0;
    const struct link_map *map = NULL;
    do {
        unwatched.dlclose(handle);
        handle = unwatched.dlmopen(LM_ID_NEWLM, ns_path, RTLD_NOW);
        map = ns_libc_of(handle);
    } while (NULL != handle && (map != old_map || map->l_addr != old_base) && ++tries < TRIES);
    CHECK_MSG(NULL != handle, "%s: dlmopen %s again: %s", component, ns_path, dlerror());
    if (NULL == handle) {
        return 1;
    }
    if (NULL == map || map != old_map || map->l_addr != old_base) {
        printf("note: %s: in %d tries the namespace's libc was never loaded again with the same "
               "link_map at the same base\n",
               component, TRIES);
        return NS_CHILD_SKIP;
    }
    printf("%s: the namespace's libc loaded again at the same place after %d tries\n", component,
           tries + 1);
    (void) opal_mem_hooks_support_level(); /* a call of the API: its check */
    ns_munmap_reports(handle, component, "libc loaded anew at the same place");
    dlclose(handle);
    opal_mem_hooks_unregister_release(on_release);
    opal_finalize_util();
    return test_failures ? 1 : 0;
}

int main(void)
{
    if (OPAL_MEM_HOOKS_NUM_VARIANTS < 3) {
        TEST_SKIP("a build with %d variants (--with-mem-hooks-variants) patches no namespace's "
                  "libc",
                  OPAL_MEM_HOOKS_NUM_VARIANTS);
    }
    ns_set_path();
    if (0 == ns_for_each_component(check, "")) {
        TEST_SKIP("no component could load the namespace's libc again at the same place");
    }
    return test_finish("ns_reopen_test");
}
