/*
 * A signal handler that leaves an intercept with siglongjmp (a timeout, a
 * fault handler of a runtime): the intercept never returns, and what it
 * kept of the range it was chaining for (on its stack) is gone.  Releases
 * made afterwards, from any depth of the stack, each give their event.
 *
 * The signal is raised by the callback called for the old range of an
 * mremap(MREMAP_FIXED), when the intercept is chaining for the destination.
 */
#include "opal_config.h"

#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"
#include "test/support/test_util.h"

#define PAGE   ((size_t) sysconf(_SC_PAGESIZE))
#define DEPTHS 16

static sigjmp_buf jump_back;
static volatile int events;
static char *volatile raise_at; /* the range whose event raises the signal */

static void jumping_handler(int sig)
{
    (void) sig;
    siglongjmp(jump_back, 1);
}

static void on_release(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) len, (void) cbdata, (void) from_alloc;
    events++;
    if ((char *) buf == raise_at) {
        raise_at = NULL;
        raise(SIGUSR1);
    }
}

static __attribute__((noinline)) void remap_fixed(char *old, char *dest)
{
    mremap(old, PAGE, PAGE, MREMAP_MAYMOVE | MREMAP_FIXED, dest);
}

/* MAP_FIXED over a mapped page from depth levels further down the stack: its events. */
static __attribute__((noinline)) int map_fixed_at_depth(char *at, int depth)
{
    volatile char pad[64 * 4];
    pad[depth] = 0;
    if (depth > 0) {
        return map_fixed_at_depth(at, depth - 1) + pad[depth];
    }
    events = 0;
    CHECK(at == mmap(at, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0));
    return events;
}

int main(int argc, char **argv)
{
    if (OPAL_SUCCESS != opal_init_util(&argc, &argv)) {
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = jumping_handler;
    sigaction(SIGUSR1, &sa, NULL);
    CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(on_release, NULL));
    char *p = mmap(NULL, 4 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(MAP_FAILED != p);
    if (MAP_FAILED == p) {
        return test_finish("siglongjmp_test");
    }
    CHECK_MSG(1 == map_fixed_at_depth(p + 3 * PAGE, 0), "MAP_FIXED before any jump");
    if (0 == sigsetjmp(jump_back, 1)) {
        raise_at = p;
        remap_fixed(p, p + 2 * PAGE);
        CHECK_MSG(false, "the signal handler did not jump");
    }
    for (int depth = 0; depth < DEPTHS; depth++) {
        int n = map_fixed_at_depth(p + 3 * PAGE, depth);
        CHECK_MSG(1 == n, "MAP_FIXED at depth %d after the jump: %d events", depth, n);
    }
    CHECK(OPAL_SUCCESS == opal_mem_hooks_unregister_release(on_release));
    munmap(p, 4 * PAGE);
    opal_finalize_util();
    return test_finish("siglongjmp_test");
}
