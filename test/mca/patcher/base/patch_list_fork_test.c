/*
 * fork while another thread holds the module's list of patches (its
 * patch_list_mutex): here a thread walking the list (what opal_patcher_info
 * does to list the patches) is held inside the walk while the main thread
 * forks.  The child has only the forking thread; finalizing there restores
 * the patches, which takes the list's lock: it must not find the lock
 * inherited held.  For each component that can work here.
 */
#include "opal_config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_arch.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"
#include "test/support/test_util.h"

static int entered[2], release[2];

static void on_release(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) buf, (void) len, (void) cbdata, (void) from_alloc;
}

/* Called with the list's lock held: say so, then wait for the fork to be done. */
static void held_in_walk(const mca_patcher_base_patch_t *patch, bool intact, void *arg)
{
    (void) patch, (void) intact;
    int *first = arg;
    char c = 0;
    if (*first && 1 == write(entered[1], &c, 1)) {
        (void) !read(release[0], &c, 1);
    }
    *first = 0;
}

static void *walk_patches(void *arg)
{
    (void) arg;
    int first = 1;
    mca_patcher_base_foreach_patch(opal_patcher, held_in_walk, &first);
    return NULL;
}

static void check_component(const char *component)
{
    setenv("OMPI_MCA_patcher", component, 1);
    if (OPAL_SUCCESS != opal_init_util(NULL, NULL)) {
        CHECK_MSG(false, "%s: opal_init_util failed", component);
        return;
    }
    const char *name = NULL;
    if (OPAL_SUCCESS != opal_mem_hooks_register_release(on_release, NULL) ||
        NULL == (name = mca_patcher_base_selected_name()) || 0 != strcmp(name, component) ||
        NULL == opal_patcher) {
        CHECK_MSG(false, "%s: the hooks were not set up by it (%s)", component,
                  name ? name : "none");
        opal_finalize_util();
        return;
    }
    pthread_t walker;
    CHECK(0 == pthread_create(&walker, NULL, walk_patches, NULL));
    char c;
    CHECK(1 == read(entered[0], &c, 1)); /* inside the walk: the lock is held */
    const pid_t child = fork();
    if (0 == child) {
        alarm(10);
        _exit(OPAL_SUCCESS == opal_mem_hooks_unregister_release(on_release) &&
                      OPAL_SUCCESS == opal_finalize_util()
                  ? 0
                  : 2);
    }
    CHECK(1 == write(release[1], &c, 1));
    pthread_join(walker, NULL);
    char what[64];
    snprintf(what, sizeof(what), "%s: finalize in the child", component);
    test_child_ok(child, what,
                  "(SIGALRM: it hung on the list's lock, inherited held; 2: it failed)");
    CHECK(OPAL_SUCCESS == opal_mem_hooks_unregister_release(on_release));
    CHECK(OPAL_SUCCESS == opal_finalize_util());
}

int main(void)
{
    CHECK(0 == pipe(entered) && 0 == pipe(release));
    check_component("linux");
    if (MCA_PATCHER_OVERWRITE_HAVE_ARCH) {
        check_component("overwrite");
    } else {
        printf("note: the overwrite component has no instructions here: linux only\n");
    }
    return test_finish("patch_list_fork_test");
}
