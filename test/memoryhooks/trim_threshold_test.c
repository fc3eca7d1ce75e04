/*
 * A program that sets glibc's trim threshold itself after our setup: free
 * then shrinks the heap from inside libc (its own sbrk), which a GOT
 * patcher cannot see.  Either the heap does not shrink, or an event
 * covers what it gave back.
 */
#include "opal_config.h"

#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
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

int main(int argc, char **argv)
{
    if (OPAL_SUCCESS != opal_init_util(&argc, &argv)) {
        return 1;
    }
    const uintptr_t page = (uintptr_t) sysconf(_SC_PAGESIZE);
    CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(on_release, NULL));
    mallopt(M_TRIM_THRESHOLD, 64 * 1024);
    char *blocks[BLOCKS];
    for (int i = 0; i < BLOCKS; i++) {
        blocks[i] = malloc(BLOCK_SIZE);
        blocks[i][0] = 1;
    }
    const uintptr_t grown = (uintptr_t) sbrk(0);
    heap_high = (grown + page - 1) & ~(page - 1);
    for (int i = BLOCKS - 1; i >= 0; i--) {
        free(blocks[i]);
    }
    const uintptr_t after = (uintptr_t) sbrk(0);
    if (after < grown) {
        const uintptr_t gone = (after + page - 1) & ~(page - 1);
        CHECK_MSG(seen_low <= gone && seen_high >= heap_high,
                  "the heap shrank from %#lx to %#lx; events covered [%#lx, %#lx)",
                  (unsigned long) grown, (unsigned long) after, (unsigned long) seen_low,
                  (unsigned long) seen_high);
    }
    CHECK(OPAL_SUCCESS == opal_mem_hooks_unregister_release(on_release));
    opal_finalize_util();
    return test_finish("trim_threshold_test");
}
