/*
 * The documented limit, proven real: a raw syscall(SYS_munmap) bypasses
 * every libc entry point, so no component sees it — while the same
 * release through munmap() is seen.
 */
#include "opal_config.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"
#include "test/support/test_util.h"

/* volatile: glibc declares munmap "leaf", so the compiler may assume the call
 * cannot change a variable of this file — but our callback does. */
static __thread volatile int events;

static void on_event(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) buf, (void) len, (void) cbdata, (void) from_alloc;
    events++;
}

int main(void)
{
    CHECK(OPAL_SUCCESS == opal_init_util(NULL, NULL));
    CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(on_event, NULL));
    void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    events = 0;
    CHECK(0 == syscall(SYS_munmap, p, 4096));
    CHECK_MSG(0 == events, "a raw system call was seen: the README's limit is out of date");
    p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    events = 0;
    CHECK(0 == munmap(p, 4096));
    CHECK(1 == events);
    opal_finalize_util();
    return test_finish("raw_syscall_limit");
}
