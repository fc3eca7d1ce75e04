/*
 * UCX's memory hooks (libucm) and ours in one process: every release event
 * must reach both UCX's UCM_EVENT_VM_UNMAPPED handler and our callback.
 *
 * The parent runs one child per combination, because the hook mode is read
 * from the environment when libucm initializes and because hooks stay in a
 * process: UCX_MEM_MMAP_HOOK_MODE (reloc, bistro; none: UCX sees nothing,
 * ours must still see every event), our component (linux,
 * overwrite) or the claim, and the order:
 *   ucx-first   libucm loaded and UCX's handler installed, then our setup
 *   ours-first  libucm loaded, our setup, then UCX's handler
 *   ucx-late    our setup, then libucm/libucs loaded (dlopen): our events
 *               arrive as soon as that dlopen returns; then the handler
 * Every child also checks that a lookup of "munmap" through dlsym
 * (RTLD_NEXT and RTLD_DEFAULT) made after our setup still produces events.
 *
 * libucm is loaded with dlopen (not linked): "ucx-late" needs it absent at
 * setup, and the same binary serves every order.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <ucm/api/ucm.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"
#include "test/support/test_util.h"
#include "test/support/ucx_events.h"

static bool ucx_blind; /* UCX_MEM_MMAP_HOOK_MODE=none */

static void install_ucx(void)
{
    ucs_status_t st = set_handler(UCM_EVENT_VM_UNMAPPED, 0, ucx_handler, NULL);
    CHECK_MSG(UCS_OK == st || ucx_blind, "ucm_set_event_handler: %d", (int) st);
}

static void install_ours(bool claim)
{
    if (claim) {
        CHECK(OPAL_SUCCESS == mca_patcher_base_claim("ucx"));
    }
    CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(our_callback, NULL));
}

static void expect_both(const char *what)
{
    CHECK_MSG((ucx_hits > 0 || ucx_blind) && our_hits > 0, "%s: UCX's handler saw %d events, ours %d",
              what, ucx_hits, our_hits);
}

/* A function pointer from dlsym bypasses UCX's GOT hooks (reloc mode):
 * only ours are required to see calls through it. */
static void expect_ours(const char *what)
{
    CHECK_MSG(our_hits > 0, "%s: our callback saw no event (UCX's handler: %d)", what, ucx_hits);
}

static void check_events(const char *when)
{
    char what[128];
    char *p = map_pages(4);
    watch(p, 4 * 4096);
    munmap(p, 4 * 4096);
    snprintf(what, sizeof(what), "%s: munmap", when);
    expect_both(what);

    p = map_pages(4);
    char *fence = mmap(p + 4 * 4096, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    watch(p, 4 * 4096);
    char *q = mremap(p, 4 * 4096, 64 * 4096, MREMAP_MAYMOVE);
    snprintf(what, sizeof(what), "%s: mremap (moving)", when);
    expect_both(what);
    munmap(MAP_FAILED == q ? p : q, MAP_FAILED == q ? 4 * 4096 : 64 * 4096);
    if (MAP_FAILED != fence) {
        munmap(fence, 4096);
    }

    p = map_pages(4);
    watch(p, 4 * 4096);
    madvise(p, 4 * 4096, MADV_DONTNEED);
    snprintf(what, sizeof(what), "%s: madvise (MADV_DONTNEED)", when);
    expect_both(what);
    munmap(p, 4 * 4096);

#ifndef __SANITIZE_ADDRESS__ /* ASan's allocator keeps freed blocks (quarantine) */
    const size_t big = 64UL << 20;
    p = malloc(big);
    memset(p, 1, big);
    watch(p, big);
    free(p);
    snprintf(what, sizeof(what), "%s: free (mmapped block)", when);
    expect_both(what);
#endif

    /* A library that looks up "the original" after our hooks are in. */
    int (*next_munmap)(void *, size_t) = (int (*)(void *, size_t)) dlsym(RTLD_NEXT, "munmap");
    int (*default_munmap)(void *, size_t) = (int (*)(void *, size_t)) dlsym(RTLD_DEFAULT, "munmap");
    CHECK(NULL != next_munmap && NULL != default_munmap);
    if (next_munmap && default_munmap) {
        p = map_pages(2);
        watch(p, 2 * 4096);
        next_munmap(p, 2 * 4096);
        snprintf(what, sizeof(what), "%s: munmap through dlsym(RTLD_NEXT)", when);
        expect_ours(what);
        p = map_pages(2);
        watch(p, 2 * 4096);
        default_munmap(p, 2 * 4096);
        snprintf(what, sizeof(what), "%s: munmap through dlsym(RTLD_DEFAULT)", when);
        expect_ours(what);
    }
}

/* One combination, in this (child) process. */
static int run_child(const char *order, bool claim)
{
    const char *mode = getenv("UCX_MEM_MMAP_HOOK_MODE");
    ucx_blind = NULL != mode && 0 == strcmp(mode, "none");
    if (OPAL_SUCCESS != opal_init_util(NULL, NULL)) {
        return 1;
    }
    const bool late = 0 == strcmp(order, "ucx-late");
    if (!late && !load_ucx()) {
        TEST_SKIP("libucm/libucs cannot be loaded: %s", dlerror());
    }
    if (0 == strcmp(order, "ucx-first")) {
        install_ucx();
        install_ours(claim);
    } else {
        install_ours(claim);
        if (late && !load_ucx()) {
            TEST_SKIP("libucm/libucs cannot be loaded: %s", dlerror());
        }
        if (late) {
            /* Before any call of ours: UCX's constructor wrote over our
             * jumps (bistro), and its dlopen put them back in front. */
            char *p = map_pages(1);
            watch(p, 4096);
            munmap(p, 4096);
            CHECK_MSG(our_hits > 0, "right after UCX was loaded: our callback saw no event");
        }
        install_ucx();
    }
    if (claim) {
        /* UCX's events where its hooks see every caller (bistro); its
         * reloc mode misses pointers from dlsym, none sees nothing: the
         * linux component then. */
        const char *forced = getenv("OMPI_MCA_patcher"); /* the only component opened */
        const char *expect = mode && 0 != strcmp(mode, "bistro") ? (forced ? forced : "linux") : "ucx";
        const char *name = mca_patcher_base_selected_name();
        CHECK_MSG(NULL != name && 0 == strcmp(name, expect), "selected %s with the claim, not %s",
                  name ? name : "(none)", expect);
    }
    /* A consumer that loaded UCX after our setup asks: jumps that UCX
     * wrote over ours are noticed here (and ours put back in front). */
    CHECK_MSG(0 != (opal_mem_hooks_support_level() & OPAL_MEMORY_MUNMAP_SUPPORT),
              "support level %#x", opal_mem_hooks_support_level());
    check_events("after both installed");
    /* Another dlopen (UCX re-patches everything it knows after each). */
    void *h = dlopen("libm.so.6", RTLD_NOW);
    check_events("after a later dlopen");
    if (h) {
        dlclose(h);
    }
    unset_handler(UCM_EVENT_VM_UNMAPPED, ucx_handler, NULL);
    opal_mem_hooks_unregister_release(our_callback);
    opal_finalize_util();
    /* Whatever UCX captured of ours must still be callable. */
    h = dlopen("libm.so.6", RTLD_NOW);
    if (h) {
        dlclose(h);
    }
    char *p = map_pages(1);
    munmap(p, 4096);
    return test_finish(order);
}

int main(int argc, char **argv)
{
    if (argc > 2 && 0 == strcmp(argv[1], "--child")) {
        return run_child(argv[2], argc > 3 && 0 == strcmp(argv[3], "claim"));
    }
    static const char *const modes[] = {"reloc", "bistro", "none"};
    static const char *const components[] = {"linux", "overwrite", "claim"};
    static const char *const orders[] = {"ucx-first", "ours-first", "ucx-late"};
    const char *forced = getenv("OMPI_MCA_patcher");
    int failed = 0, ran = 0;
    for (size_t m = 0; m < 3; m++) {
        for (size_t c = 0; c < 3; c++) {
            /* CI forces one component: test that one (and the claim). */
            if (forced && 2 != c && 0 != strcmp(forced, components[c])) {
                continue;
            }
            /* Where overwrite has no instructions it declines (overwrite_decline_test). */
            if (!OPAL_PATCHER_OVERWRITE_HAVE_ARCH && 0 == strcmp(components[c], "overwrite")) {
                continue;
            }
            for (size_t o = 0; o < 3; o++) {
                fflush(stdout);
                pid_t pid = fork();
                if (0 == pid) {
                    setenv("UCX_MEM_MMAP_HOOK_MODE", modes[m], 1);
#ifdef __SANITIZE_ADDRESS__
                    /* In reloc mode UCX puts its malloc behind the GOT, and its
                     * free keeps blocks it did not allocate: LeakSanitizer
                     * would report every block freed after that. */
                    if (0 == strcmp(modes[m], "reloc")) {
                        char opts[512];
                        const char *asan = getenv("ASAN_OPTIONS");
                        snprintf(opts, sizeof(opts), "%s%sdetect_leaks=0", asan ? asan : "",
                                 asan && asan[0] ? ":" : "");
                        setenv("ASAN_OPTIONS", opts, 1);
                    }
#endif
                    if (2 != c) {
                        setenv("OMPI_MCA_patcher", components[c], 1);
                    }
                    execl("/proc/self/exe", argv[0], "--child", orders[o], 2 == c ? "claim" : "",
                          (char *) NULL);
                    _exit(127);
                }
                int status;
                waitpid(pid, &status, 0);
                const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                printf("mode %-6s %-9s %-10s: %s\n", modes[m], components[c], orders[o],
                       0 == rc ? "ok" : 77 == rc ? "skipped" : "FAILED");
                if (77 == rc) {
                    return 77;
                }
                failed += (0 != rc);
                ran++;
            }
        }
    }
    printf("%d combinations, %d failed\n", ran, failed);
    return failed ? 1 : 0;
}
