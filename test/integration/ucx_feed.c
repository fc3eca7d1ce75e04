/*
 * Our hooks feeding UCX (memory_ucx_feed.c): with UCX_MEM_MMAP_HOOK_MODE=none
 * libucm installs no hooks and refuses UCM_EVENT_VM_UNMAPPED handlers; when
 * our patcher owns the hooks we declare the event external to libucm and
 * hand it every release, so that UCX's handlers see them.
 *
 * One child per case and component (linux, overwrite; CI forces one):
 *   ucx-first  libucs+libucm loaded (RTLD_GLOBAL), then our setup, then
 *              UCX's handler: accepted, sees exactly each munmap'ed range
 *              and free() of a large block; after our last finalize the
 *              event is no longer external (a new handler is refused)
 *   ucx-late   our setup, then libucm loaded; the next check point
 *              (support_level) starts the feed
 *   off        opal_mem_hooks_ucx_feed=0: UCX's handler is refused or sees
 *              nothing (the feed is what delivers)
 *   own-hooks  UCX's default mode (its own hooks on): no feed, UCX's
 *              handler sees each munmap once, not twice
 */
#include "opal_config.h"

#include <stdio.h>
#include <string.h>

#include "test/support/test_util.h"

#if OPAL_HAVE_UCX
#    include <dlfcn.h>
#    include <stdbool.h>
#    include <stdint.h>
#    include <sys/mman.h>
#    include <sys/wait.h>
#    include <ucm/api/ucm.h>
#    include <unistd.h>

#    include "opal/constants.h"
#    include "opal/memoryhooks/memory.h"
#    include "opal/memoryhooks/memory_ucx_feed.h"
#    include "opal/runtime/opal.h"
#    include "test/support/ucx_events.h"

/* A second handler, only offered after our finalize (and refused then). */
static void ucx_late_handler(ucm_event_type_t type, ucm_event_t *event, void *arg)
{
    (void) type, (void) event, (void) arg;
}

/* Load UCX, or skip. */
static void load_ucx_or_skip(void)
{
    if (!load_ucx()) {
        TEST_SKIP("libucm/libucs (with ucm_set_event_handler, ucm_unset_event_handler, "
                  "ucm_global_opts) cannot be loaded: %s", dlerror());
    }
}

/* munmap of 4 pages: UCX's handler sees it exactly once, with that range. */
static void check_munmap(const char *when)
{
    char *p = map_pages(4);
    watch(p, 4 * 4096);
    munmap(p, 4 * 4096);
    CHECK_MSG(1 == ucx_hits && (uintptr_t) p == ucx_first_start && 4 * 4096 == ucx_first_len,
              "%s: munmap(%p, %d): UCX's handler saw %d events, the first [%#lx, +%lu)", when,
              (void *) p, 4 * 4096, ucx_hits, (unsigned long) ucx_first_start,
              (unsigned long) ucx_first_len);
    CHECK_MSG(our_hits > 0, "%s: munmap: our callback saw no event", when);
}

/* free() of a block the allocator mmapped: UCX's handler sees it. */
static void check_free(const char *when)
{
#    ifndef __SANITIZE_ADDRESS__ /* ASan's allocator keeps freed blocks (quarantine) */
    const size_t big = 64UL << 20;
    char *p = malloc(big);
    memset(p, 1, big);
    watch(p, big);
    const uintptr_t block = (uintptr_t) p;
    free(p);
    CHECK_MSG(ucx_hits > 0 && ucx_first_start <= block && ucx_first_start + ucx_first_len >= block + big,
              "%s: free of a %zu-byte block at %#lx: UCX's handler saw %d events, the first "
              "[%#lx, +%lu)", when, big, (unsigned long) block, ucx_hits,
              (unsigned long) ucx_first_start, (unsigned long) ucx_first_len);
    CHECK_MSG(our_hits > 0, "%s: free: our callback saw no event", when);
#    else
    (void) when;
#    endif
}

/* The feed delivers: ucx-first and ucx-late. */
static void run_feed(bool late)
{
    if (!late) {
        load_ucx_or_skip();
    }
    CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(our_callback, NULL));
    if (late) {
        CHECK_MSG(!opal_mem_hooks_ucx_fed(), "fed before libucm was loaded");
        load_ucx_or_skip();
        /* A check point (as rcache creation and registration are). */
        CHECK(0 != (opal_mem_hooks_support_level() & OPAL_MEMORY_MUNMAP_SUPPORT));
    }
    CHECK_MSG(UCM_MMAP_HOOK_NONE == ucm_opts->mmap_hook_mode, "libucm's hook mode is %d, not none",
              (int) ucm_opts->mmap_hook_mode);
    CHECK_MSG(opal_mem_hooks_ucx_fed(), "our hooks do not feed UCX");
    ucs_status_t st = set_handler(UCM_EVENT_VM_UNMAPPED, 0, ucx_handler, NULL);
    CHECK_MSG(UCS_OK == st, "ucm_set_event_handler(UCM_EVENT_VM_UNMAPPED) with the feed: %d", (int) st);
    if (UCS_OK == st) {
        check_munmap("fed");
        check_free("fed");
        unset_handler(UCM_EVENT_VM_UNMAPPED, ucx_handler, NULL);
    }
    CHECK(OPAL_SUCCESS == opal_mem_hooks_unregister_release(our_callback));
    opal_finalize_util();
    /* The event is no longer external: libucm, without hooks, refuses again. */
    CHECK_MSG(!opal_mem_hooks_ucx_fed(), "still feeding after the last finalize");
    st = set_handler(UCM_EVENT_VM_UNMAPPED, 0, ucx_late_handler, NULL);
    CHECK_MSG(UCS_OK != st, "after our finalize libucm still accepts a handler without hooks");
    if (UCS_OK == st) {
        unset_handler(UCM_EVENT_VM_UNMAPPED, ucx_late_handler, NULL);
    }
}

/* opal_mem_hooks_ucx_feed=0: nothing reaches UCX's handler. */
static void run_off(void)
{
    load_ucx_or_skip();
    CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(our_callback, NULL));
    CHECK_MSG(!opal_mem_hooks_ucx_fed(), "feeding UCX although opal_mem_hooks_ucx_feed=0");
    ucs_status_t st = set_handler(UCM_EVENT_VM_UNMAPPED, 0, ucx_handler, NULL);
    if (UCS_OK == st) {
        char *p = map_pages(4);
        watch(p, 4 * 4096);
        munmap(p, 4 * 4096);
        CHECK_MSG(0 == ucx_hits, "UCX's handler saw %d events without the feed", ucx_hits);
        CHECK(our_hits > 0);
        unset_handler(UCM_EVENT_VM_UNMAPPED, ucx_handler, NULL);
    }
    opal_mem_hooks_unregister_release(our_callback);
    opal_finalize_util();
}

/* UCX's own hooks on: no feed, so no event twice. */
static void run_own_hooks(void)
{
    load_ucx_or_skip();
    CHECK_MSG(UCS_OK == set_handler(UCM_EVENT_VM_UNMAPPED, 0, ucx_handler, NULL),
              "UCX refuses a handler in its default hook mode (%d)", (int) ucm_opts->mmap_hook_mode);
    CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(our_callback, NULL));
    CHECK(0 != (opal_mem_hooks_support_level() & OPAL_MEMORY_MUNMAP_SUPPORT));
    CHECK_MSG(!opal_mem_hooks_ucx_fed(), "feeding UCX although its own hooks (mode %d) are on",
              (int) ucm_opts->mmap_hook_mode);
    check_munmap("UCX's own hooks");
    unset_handler(UCM_EVENT_VM_UNMAPPED, ucx_handler, NULL);
    opal_mem_hooks_unregister_release(our_callback);
    opal_finalize_util();
}

static int run_child(const char *scenario)
{
    if (OPAL_SUCCESS != opal_init_util(NULL, NULL)) {
        return 1;
    }
    if (0 == strcmp(scenario, "ucx-first") || 0 == strcmp(scenario, "ucx-late")) {
        run_feed(0 == strcmp(scenario, "ucx-late"));
    } else if (0 == strcmp(scenario, "off")) {
        run_off();
    } else {
        run_own_hooks();
    }
    return test_finish(scenario);
}

int main(int argc, char **argv)
{
    if (argc > 2 && 0 == strcmp(argv[1], "--child")) {
        return run_child(argv[2]);
    }
    static const char *const components[] = {"linux", "overwrite"};
    static const char *const scenarios[] = {"ucx-first", "ucx-late", "off", "own-hooks"};
    const char *forced = getenv("OMPI_MCA_patcher");
    int failed = 0, ran = 0;
    for (size_t c = 0; c < 2; c++) {
        /* Where overwrite has no instructions it declines (overwrite_decline_test). */
        if ((forced && 0 != strcmp(forced, components[c])) ||
            (!OPAL_PATCHER_OVERWRITE_HAVE_ARCH && 0 == strcmp(components[c], "overwrite"))) {
            continue;
        }
        for (size_t s = 0; s < 4; s++) {
            fflush(stdout);
            pid_t pid = fork();
            if (0 == pid) {
                setenv("OMPI_MCA_patcher", components[c], 1);
                if (0 == strcmp(scenarios[s], "own-hooks")) {
                    unsetenv("UCX_MEM_MMAP_HOOK_MODE");
                } else {
                    setenv("UCX_MEM_MMAP_HOOK_MODE", "none", 1);
                }
                if (0 == strcmp(scenarios[s], "off")) {
                    setenv("OMPI_MCA_opal_mem_hooks_ucx_feed", "0", 1);
                }
                execl("/proc/self/exe", argv[0], "--child", scenarios[s], (char *) NULL);
                _exit(127);
            }
            int status;
            waitpid(pid, &status, 0);
            const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            printf("%-9s %-10s: %s\n", components[c], scenarios[s],
                   0 == rc ? "ok" : 77 == rc ? "skipped" : "FAILED");
            if (77 == rc) {
                return 77;
            }
            failed += (0 != rc);
            ran++;
        }
    }
    if (0 == ran) {
        TEST_SKIP("OMPI_MCA_patcher=%s names neither linux nor overwrite", forced);
    }
    printf("%d cases, %d failed\n", ran, failed);
    return failed ? 1 : 0;
}

#else

int main(void)
{
    TEST_SKIP("not built with UCX (configure found no libucm; install libucx-dev or give --with-ucx)");
}

#endif
