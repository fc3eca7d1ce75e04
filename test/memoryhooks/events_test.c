/*
 * Events beyond the self-test: a library dlopened after setup, a callback
 * that itself unmaps, munmap from a signal handler that interrupted an
 * event, callbacks registered and unregistered while events fire, and API
 * misuse.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"
#include "test/support/test_util.h"

#define PAGE ((size_t) sysconf(_SC_PAGESIZE)) /* the runtime one: 64 KiB on many ppc64le */

/* Events of this thread only.  volatile: glibc declares munmap and friends
 * "leaf" (they never call back into this file), which our hooks make
 * untrue, so the compiler must not keep these in registers across calls. */
static __thread volatile int my_events;
static __thread volatile uintptr_t my_last_start, my_last_end;
static __thread volatile bool my_last_from_alloc;

static void on_event(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) cbdata;
    my_events++;
    my_last_start = (uintptr_t) buf;
    my_last_end = (uintptr_t) buf + len;
    my_last_from_alloc = from_alloc;
}

static char *map(size_t len)
{
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return MAP_FAILED == p ? NULL : p;
}

static void test_dlopened_library(void)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/test/memoryhooks/libunmapper.so", getenv("OPAL_TEST_BUILDDIR"));
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    CHECK_MSG(lib, "dlopen %s: %s", path, dlerror());
    if (!lib) {
        return;
    }
    int (*unmap)(void *, size_t) = (int (*)(void *, size_t)) dlsym(lib, "unmapper_munmap");
    char *p = map(3 * PAGE);
    my_events = 0;
    CHECK(0 == unmap(p, 3 * PAGE));
    CHECK_MSG(1 == my_events, "%d events for munmap from a library loaded after setup", my_events);
    CHECK(my_last_start == (uintptr_t) p && my_last_end == (uintptr_t) p + 3 * PAGE);
    CHECK(my_last_from_alloc);
    dlclose(lib);
}

/* A callback that unmaps something itself, once. */
static char *spare;
static volatile int nested_events;

static void unmapping_callback(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) len, (void) cbdata, (void) from_alloc;
    if ((char *) buf == spare) {
        nested_events++;
    } else if (spare && !nested_events) {
        munmap(spare, PAGE);
    }
}

static void test_callback_unmaps(void)
{
    CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(unmapping_callback, NULL));
    spare = map(PAGE);
    char *p = map(PAGE);
    nested_events = 0;
    my_events = 0;
    munmap(p, PAGE);
    CHECK_MSG(1 == nested_events, "the callback's own munmap gave %d events", nested_events);
    CHECK(2 == my_events); /* ours: the outer release and the nested one */
    spare = NULL;
    CHECK(OPAL_SUCCESS == opal_mem_hooks_unregister_release(unmapping_callback));
}

/* munmap from a signal handler that interrupted an event. */
static char *signal_page;
static volatile int in_handler;

static void handler(int sig)
{
    (void) sig;
    in_handler = 1;
    munmap(signal_page, PAGE);
}

static void raising_callback(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) len, (void) cbdata, (void) from_alloc;
    if (signal_page && (char *) buf != signal_page && !in_handler) {
        raise(SIGUSR1);
    }
}

static void test_signal_during_event(void)
{
    struct sigaction sa = {.sa_handler = handler};
    sigaction(SIGUSR1, &sa, NULL);
    CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(raising_callback, NULL));
    signal_page = map(PAGE);
    char *p = map(PAGE);
    my_events = 0;
    munmap(p, PAGE);
    CHECK(in_handler);
    CHECK_MSG(2 == my_events, "%d events (expected the interrupted one and the handler's)", my_events);
    signal_page = NULL;
    CHECK(OPAL_SUCCESS == opal_mem_hooks_unregister_release(raising_callback));
}

/* Register and unregister while two threads make events: after unregister
 * returns, the callback never runs. */
static volatile int forbidden, stop, violations;

static void guarded_callback(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) buf, (void) len, (void) cbdata, (void) from_alloc;
    if (forbidden) {
        __atomic_add_fetch(&violations, 1, __ATOMIC_RELAXED);
    }
}

static void *churn(void *arg)
{
    (void) arg;
    while (!stop) {
        char *p = map(2 * PAGE);
        madvise(p, PAGE, MADV_DONTNEED);
        munmap(p, 2 * PAGE);
    }
    return NULL;
}

static void test_register_while_firing(void)
{
    pthread_t threads[2];
    stop = 0;
    for (int i = 0; i < 2; i++) {
        pthread_create(&threads[i], NULL, churn, NULL);
    }
    for (int i = 0; i < 2000; i++) {
        forbidden = 0;
        CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(guarded_callback, NULL));
        usleep(i % 7);
        CHECK(OPAL_SUCCESS == opal_mem_hooks_unregister_release(guarded_callback));
        forbidden = 1;
    }
    usleep(1000);
    stop = 1;
    for (int i = 0; i < 2; i++) {
        pthread_join(threads[i], NULL);
    }
    CHECK_MSG(0 == violations, "a callback ran %d times after unregister returned", violations);
}

static void test_misuse(void)
{
    CHECK(OPAL_ERR_BAD_PARAM == opal_mem_hooks_register_release(NULL, NULL));
    CHECK(OPAL_ERR_BAD_PARAM == opal_mem_hooks_register_release(on_event, NULL)); /* twice */
    CHECK(OPAL_ERR_NOT_FOUND == opal_mem_hooks_unregister_release(guarded_callback));
    /* An injected event reaches the callbacks, rounded to the runtime page size. */
    const uintptr_t page = (uintptr_t) sysconf(_SC_PAGESIZE);
    my_events = 0;
    opal_mem_hooks_release_hook((void *) (uintptr_t) 0x10010, 10, false);
    CHECK(1 == my_events && (0x10010 & ~(page - 1)) == my_last_start &&
          (0x10010 & ~(page - 1)) + page == my_last_end && !my_last_from_alloc);
}

int main(void)
{
    CHECK(OPAL_SUCCESS == opal_init_util(NULL, NULL));
    CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(on_event, NULL));
    int level = opal_mem_hooks_support_level();
    CHECK((level & (OPAL_MEMORY_FREE_SUPPORT | OPAL_MEMORY_MUNMAP_SUPPORT)) ==
          (OPAL_MEMORY_FREE_SUPPORT | OPAL_MEMORY_MUNMAP_SUPPORT));
    test_dlopened_library();
    test_callback_unmaps();
    test_signal_during_event();
    test_register_while_firing();
    test_misuse();
    CHECK(OPAL_SUCCESS == opal_mem_hooks_unregister_release(on_event));
    opal_finalize_util();
    return test_finish("events_test");
}
