/*
 * mca_patcher_base_claim: before the delayed setup it decides what delivers
 * our events; afterwards it fails with OPAL_ERR_NOT_AVAILABLE and changes
 * nothing; an unknown style is OPAL_ERR_BAD_PARAM; it lasts until the last
 * finalize.
 *
 * With the claim "ucx", events come from UCX's handler when the build has
 * UCX and UCX's hooks see every caller (bistro mode); otherwise from the
 * linux component (test/integration/ucx_stack proves it stacks with UCX in
 * every order), unless OMPI_MCA_patcher leaves only another one.
 */
#include "opal_config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"
#include "test/support/test_util.h"
#include "test/support/watch.h"


static void check_munmap_event(const char *when)
{
    char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(MAP_FAILED != p);
    p[0] = 1;
    watched = (uintptr_t) p;
    events = 0;
    munmap(p, 4096);
    CHECK_MSG(1 == events, "%s: %d events for munmap", when, events);
}

static void count_patch(const mca_patcher_base_patch_t *patch, bool intact, void *arg)
{
    (void) patch, (void) intact;
    ++*(size_t *) arg;
}

static size_t count_patches(void)
{
    size_t n = 0;
    if (opal_patcher) {
        mca_patcher_base_foreach_patch(opal_patcher, count_patch, &n);
    }
    return n;
}

/* What the claim "ucx" must select here. */
static const char *claimed_expectation(void)
{
    const char *mode = getenv("UCX_MEM_MMAP_HOOK_MODE");
    const char *forced = getenv("OMPI_MCA_patcher");
#if OPAL_HAVE_UCX
    if (NULL == mode || 0 == strcmp(mode, "bistro")) {
        return "ucx";
    }
#else
    (void) mode;
#endif
    return forced && '^' != forced[0] && NULL == strchr(forced, ',') ? forced : "linux";
}

int main(int argc, char **argv)
{
    CHECK(OPAL_ERR_NOT_INITIALIZED == mca_patcher_base_claim("ucx"));
    if (OPAL_SUCCESS != opal_init_util(&argc, &argv)) {
        return 1;
    }
    CHECK(OPAL_ERR_BAD_PARAM == mca_patcher_base_claim("no-such-style"));
    CHECK(OPAL_ERR_BAD_PARAM == mca_patcher_base_claim(NULL));
    CHECK(NULL == mca_patcher_base_claimed_style()); /* a bad claim changes nothing */

    /* Before setup: the claim decides. */
    CHECK(OPAL_SUCCESS == mca_patcher_base_claim("ucx"));
    CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(on_release, NULL));
    const char *expect = claimed_expectation();
    const char *name = mca_patcher_base_selected_name();
    CHECK_MSG(NULL != name && 0 == strcmp(name, expect), "claimed: selected %s, expected %s",
              name ? name : "(none)", expect);
    CHECK_MSG(0 == strcmp(expect, "ucx") ? NULL == opal_patcher && 0 == count_patches()
                                         : NULL != opal_patcher && count_patches() > 0,
              "events from %s: patcher %p with %zu patches", expect, (void *) opal_patcher,
              count_patches());
    CHECK(opal_mem_hooks_support_level() & OPAL_MEMORY_MUNMAP_SUPPORT);
    check_munmap_event("claimed");

    /* After setup: refused, nothing changes. */
    const size_t patches = count_patches();
    mca_patcher_base_module_t *module = opal_patcher;
    CHECK(OPAL_ERR_NOT_AVAILABLE == mca_patcher_base_claim("ucx"));
    CHECK(OPAL_ERR_BAD_PARAM == mca_patcher_base_claim("no-such-style"));
    CHECK(name == mca_patcher_base_selected_name() && module == opal_patcher && patches == count_patches());
    check_munmap_event("after a late claim");
    CHECK(OPAL_SUCCESS == opal_mem_hooks_unregister_release(on_release));
    opal_finalize_util();

    /* The claim ends with the last finalize: a new start selects by priority. */
    if (OPAL_SUCCESS != opal_init_util(NULL, NULL)) {
        return 1;
    }
    CHECK(NULL == mca_patcher_base_claimed_style());
    CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(on_release, NULL));
    name = mca_patcher_base_selected_name();
    CHECK_MSG(NULL != name && 0 != strcmp(name, "ucx") && NULL != opal_patcher,
              "unclaimed: selected %s", name ? name : "(none)");
    check_munmap_event("unclaimed");
    opal_mem_hooks_unregister_release(on_release);
    opal_finalize_util();
    return test_finish("claim_test");
}
