/*
 * A program built without PIE that takes free's address has a canonical
 * PLT entry for it, and dlsym(RTLD_DEFAULT, "free") finds that entry, not
 * glibc's free.  The memory hooks took that to mean another allocator was
 * in use and installed no allocator intercepts under the linux component:
 * free of a block glibc had mapped (libc's own munmap, which no GOT slot
 * sees) then gave no event.  Built with -fno-pie -no-pie; where the
 * program takes the address through the GOT all the same, it skips.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

#include "opal/constants.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"
#include "test/support/linux_hooks.h"
#include "test/support/test_util.h"

#define BLOCK_SIZE (4u << 20) /* above the mmap threshold: a mapping of its own */

/* Written by the code below: non-PIC code puts free's address in it. */
void (*volatile free_address)(void *);

static volatile uintptr_t block_low, block_high;
static volatile int covered;

static void on_release(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) cbdata, (void) from_alloc;
    const uintptr_t start = (uintptr_t) buf, end = start + len;
    if (start <= block_low && end >= block_high) {
        covered++;
    }
}

int main(int argc, char **argv)
{
    if (NULL != getenv("OPAL_TEST_SANITIZER")) {
        TEST_SKIP("a sanitizer's allocator keeps freed blocks (its quarantine) and maps its own");
    }
    free_address = free;
    test_require_own_plt_entry((void *) free_address, (void *) main, "free");
    if (OPAL_SUCCESS != opal_init_util(&argc, &argv)) {
        return 1;
    }
    CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(on_release, NULL));
    char *block = malloc(BLOCK_SIZE);
    CHECK(NULL != block);
    if (NULL != block) {
        block[0] = 1;
        block_low = (uintptr_t) block;
        block_high = (uintptr_t) block + BLOCK_SIZE;
        free_address(block);
        CHECK_MSG(1 == covered, "%d events covered the freed block of %u bytes", covered,
                  BLOCK_SIZE);
    }
    CHECK(OPAL_SUCCESS == opal_mem_hooks_unregister_release(on_release));
    opal_finalize_util();
    return test_finish("nonpie_free_test");
}
