/*
 * malloc_trim gives back the free chunks of every arena's heap (madvise
 * from inside libc, which a GOT patcher does not see: the intercept
 * announces the heaps it finds in /proc/self/maps).  A heap of another
 * thread's arena starts at a multiple of 64 MiB (1 MiB on 32-bit targets);
 * an anonymous mapping with the same flags right below it (MAP_NORESERVE,
 * as glibc's own heaps, JVMs and Go use) merges with it into one maps line
 * that starts lower.  The free chunks' pages must still be covered by an
 * event.
 */
#include "opal_config.h"

#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"
#include "test/support/ranges.h"
#include "test/support/test_util.h"

#ifndef MAP_FIXED_NOREPLACE
#    define MAP_FIXED_NOREPLACE 0x100000
#endif

#define PAGE        ((size_t) sysconf(_SC_PAGESIZE))
/* glibc's HEAP_MAX_SIZE: 64 MiB on 64-bit targets, 1 MiB on 32-bit ones. */
#define HEAP_ALIGN  ((uintptr_t) (sizeof(long) >= 8 ? 64 << 20 : 1 << 20))
#define CHUNKS      8
#define CHUNK_BYTES (32 * 1024) /* under the mmap threshold: from the thread's arena */

static char *chunks[CHUNKS];

/* In a new thread (a new arena): chunks allocated, every other one freed. */
static void *fill_arena(void *arg)
{
    (void) arg;
    for (int i = 0; i < CHUNKS; i++) {
        chunks[i] = malloc(CHUNK_BYTES);
        memset(chunks[i], 1, CHUNK_BYTES);
    }
    for (int i = 0; i < CHUNKS; i += 2) {
        free(chunks[i]);
    }
    return NULL;
}

int main(void)
{
    if (NULL != getenv("OPAL_TEST_SANITIZER")) {
        TEST_SKIP("a sanitizer's allocator has no glibc arenas");
    }
    CHECK(OPAL_SUCCESS == opal_init_util(NULL, NULL));
    CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(test_ranges_record, NULL));
    pthread_t thread;
    CHECK(0 == pthread_create(&thread, NULL, fill_arena, NULL) && 0 == pthread_join(thread, NULL));
    if ((uintptr_t) chunks[2] < (uintptr_t) sbrk(0)) {
        TEST_SKIP("the thread's chunks came from the main arena (the brk heap)");
    }
    const uintptr_t heap = (uintptr_t) chunks[2] & ~(HEAP_ALIGN - 1);
    void *below = mmap((void *) (heap - 16 * PAGE), 16 * PAGE, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (below != (void *) (heap - 16 * PAGE)) {
        TEST_SKIP("the 16 pages below the thread's heap (%#lx) are taken", (unsigned long) heap);
    }
    memset(below, 2, 16 * PAGE);
    test_nranges = 0;
    malloc_trim(0);
    /* The pages inside a freed chunk are what glibc's trim gives back. */
    const uintptr_t start = ((uintptr_t) chunks[2] + PAGE) & ~(PAGE - 1);
    const uintptr_t end = ((uintptr_t) chunks[2] + CHUNK_BYTES - PAGE) & ~(PAGE - 1);
    CHECK_MSG(test_ranges_cover(start, end),
              "malloc_trim: the free chunk's pages [%#lx, %#lx) of the heap at %#lx, merged "
              "with a mapping below it, not covered (%d events)",
              (unsigned long) start, (unsigned long) end, (unsigned long) heap, test_nranges);
    munmap(below, 16 * PAGE);
    CHECK(OPAL_SUCCESS == opal_mem_hooks_unregister_release(test_ranges_record));
    opal_finalize_util();
    return test_finish("malloc_trim_test");
}
