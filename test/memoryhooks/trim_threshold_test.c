/*
 * A program that sets glibc's trim threshold itself after our setup: free
 * then shrinks the heap from inside libc (its own sbrk), which a GOT
 * patcher cannot see.  Either the heap does not shrink, or an event
 * covers what it gave back.
 */
#include "opal_config.h"

#include <malloc.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"
#include "test/support/test_util.h"

#define BLOCKS     20
#define BLOCK_SIZE 100000 /* under the mmap threshold: from the heap */

/* The union of the events below the heap's top (the heap is below every mmap). */
static volatile uintptr_t heap_high, seen_low = UINTPTR_MAX, seen_high;

static void on_release(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) cbdata, (void) from_alloc;
    const uintptr_t start = (uintptr_t) buf, end = start + len;
    if (start < heap_high) {
        seen_low = start < seen_low ? start : seen_low;
        seen_high = end > seen_high ? end : seen_high;
    }
}

/* Allocate BLOCKS blocks, then free them: the heap's top in between and after. */
static void grow_and_free(uintptr_t *grown, uintptr_t *after)
{
    char *blocks[BLOCKS];
    for (int i = 0; i < BLOCKS; i++) {
        blocks[i] = malloc(BLOCK_SIZE);
        blocks[i][0] = 1;
    }
    const uintptr_t page = (uintptr_t) sysconf(_SC_PAGESIZE);
    *grown = (uintptr_t) sbrk(0);
    heap_high = (*grown + page - 1) & ~(page - 1); /* on_release's bound */
    for (int i = BLOCKS - 1; i >= 0; i--) {
        free(blocks[i]);
    }
    *after = (uintptr_t) sbrk(0);
}

/* Whether free trims the heap. */
static bool heap_shrinks(void)
{
    uintptr_t grown, after;
    grow_and_free(&grown, &after);
    return after < grown;
}

/*
 * The linux component (which turns trimming off) set up and finished in a
 * program that never calls mallopt: glibc's own threshold must be back.
 * Our own mallopt call once reached our intercept where the library is
 * linked into the program (one GOT), which took its -1 for the program's.
 */
static void check_restored_without_mallopt(void)
{
    const char *was = getenv("OMPI_MCA_patcher");
    char *saved = was ? strdup(was) : NULL;
    setenv("OMPI_MCA_patcher", "linux", 1);
    CHECK(OPAL_SUCCESS == opal_init_util(NULL, NULL));
    CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(on_release, NULL));
    CHECK(OPAL_SUCCESS == opal_mem_hooks_unregister_release(on_release));
    opal_finalize_util();
    if (saved) {
        setenv("OMPI_MCA_patcher", saved, 1);
        free(saved);
    } else {
        unsetenv("OMPI_MCA_patcher");
    }
    CHECK_MSG(heap_shrinks(), "after the last finalize free no longer trims the heap");
}

/*
 * The same in a program started with a threshold in its environment
 * (MALLOC_TRIM_THRESHOLD_, 1 GiB: no trimming here): that one must be back,
 * not glibc's default.  Run as a new process, since glibc reads it at start.
 */
#define ENV_THRESHOLD "1073741824"

static void env_threshold_child(void)
{
    CHECK_MSG(!heap_shrinks(), "free trims the heap under MALLOC_TRIM_THRESHOLD_=" ENV_THRESHOLD);
    setenv("OMPI_MCA_patcher", "linux", 1);
    CHECK(OPAL_SUCCESS == opal_init_util(NULL, NULL));
    CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(on_release, NULL));
    CHECK(OPAL_SUCCESS == opal_mem_hooks_unregister_release(on_release));
    opal_finalize_util();
    CHECK_MSG(!heap_shrinks(), "after the last finalize free trims the heap: glibc's default "
                               "threshold put back, not the environment's (" ENV_THRESHOLD ")");
    exit(test_failures ? 1 : 0);
}

static void check_environment_threshold_kept(char *self)
{
    fflush(NULL);
    const pid_t pid = fork();
    if (0 == pid) {
        setenv("MALLOC_TRIM_THRESHOLD_", ENV_THRESHOLD, 1);
        char *args[] = {self, "--env-threshold", NULL};
        test_execv("/proc/self/exe", args);
        _exit(3);
    }
    test_child_ok(pid, "a program started with MALLOC_TRIM_THRESHOLD_", "(3: exec failed)");
}

int main(int argc, char **argv)
{
    if (NULL != getenv("OPAL_TEST_SANITIZER")) {
        TEST_SKIP("a sanitizer's allocator neither grows nor trims the heap");
    }
    if (2 == argc && 0 == strcmp(argv[1], "--env-threshold")) {
        env_threshold_child();
    }
    check_restored_without_mallopt();
    check_environment_threshold_kept(argv[0]);
    if (OPAL_SUCCESS != opal_init_util(&argc, &argv)) {
        return 1;
    }
    const uintptr_t page = (uintptr_t) sysconf(_SC_PAGESIZE);
    CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(on_release, NULL));
    mallopt(M_TRIM_THRESHOLD, 64 * 1024);
    uintptr_t grown, after;
    grow_and_free(&grown, &after);
    if (after < grown) {
        const uintptr_t gone = (after + page - 1) & ~(page - 1);
        CHECK_MSG(seen_low <= gone && seen_high >= heap_high,
                  "the heap shrank from %#lx to %#lx; events covered [%#lx, %#lx)",
                  (unsigned long) grown, (unsigned long) after, (unsigned long) seen_low,
                  (unsigned long) seen_high);
    }
    CHECK(OPAL_SUCCESS == opal_mem_hooks_unregister_release(on_release));
    opal_finalize_util();

    /* After the last finalize the program's threshold is in force again. */
    CHECK_MSG(heap_shrinks(), "after the last finalize free no longer trims the heap");
    return test_finish("trim_threshold_test");
}
