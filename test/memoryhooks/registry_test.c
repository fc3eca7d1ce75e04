/*
 * The callback registry on its own (memory_registry.c is this program's
 * only source of the library): what each callback receives from dispatch,
 * report and release_hook; duplicates and a full table refused; callbacks
 * called in slot order, a freed slot taken again; reentrancy (an event
 * dispatched from inside a callback, a callback removing itself); and the
 * removal promise: when remove returns, the callback runs in no thread and
 * is not called again, under threads that dispatch all the time.
 */
#include "opal_config.h"

#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/memoryhooks/memory_registry.h"
#include "test/support/test_util.h"

/* A debug build's internal checks print through opal_output (not linked here). */
void opal_output(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

#define MAX_CALLS 64

/* What the callbacks saw, in order (main thread only, but for the threaded cases). */
typedef struct {
    char who;
    uintptr_t start;
    size_t len;
    bool from_alloc;
} call_t;
static call_t calls[MAX_CALLS];
static int ncalls;

static void record(char who, void *buf, size_t len, bool from_alloc)
{
    if (ncalls < MAX_CALLS) {
        calls[ncalls++] = (call_t){who, (uintptr_t) buf, len, from_alloc};
    }
}

/* The same body under several addresses: the registry tells callbacks by address. */
#define RECORDING_CALLBACK(fn)                                           \
    static void fn(void *buf, size_t len, void *cbdata, bool from_alloc) \
    {                                                                    \
        record(*(const char *) cbdata, buf, len, from_alloc);            \
    }
RECORDING_CALLBACK(cb_a)
RECORDING_CALLBACK(cb_b)
RECORDING_CALLBACK(cb_c)
RECORDING_CALLBACK(cb_d)

static char name_a = 'a', name_b = 'b', name_c = 'c', name_d = 'd';

/* What the last finalize does: clear every slot, then drain each. */
static void remove_all(void)
{
    const int slots = opal_mem_hooks_registry_clear_all();
    for (int i = 0; i < slots; i++) {
        opal_mem_hooks_registry_drain(i);
    }
}
static uintptr_t page;

/* The callbacks' names in the order they were called, e.g. "abc". */
static const char *order(void)
{
    static char s[MAX_CALLS + 1];
    for (int i = 0; i < ncalls; i++) {
        s[i] = calls[i].who;
    }
    s[ncalls] = '\0';
    return s;
}

static void test_delivery(void)
{
    CHECK(OPAL_SUCCESS == opal_mem_hooks_registry_add(cb_a, &name_a));
    /* dispatch rounds the length up to pages and passes from_alloc and cbdata. */
    ncalls = 0;
    opal_mem_hooks_dispatch(16 * page, page + 1, false);
    CHECK(1 == ncalls && 'a' == calls[0].who && 16 * page == calls[0].start &&
          2 * page == calls[0].len && !calls[0].from_alloc);
    /* report: the intercepts' one-callback path, always from_alloc. */
    ncalls = 0;
    opal_mem_hooks_report(32 * page, 3);
    CHECK(1 == ncalls && 32 * page == calls[0].start && page == calls[0].len &&
          calls[0].from_alloc);
    /* release_hook: the start down to its page, the end up to its page. */
    ncalls = 0;
    opal_mem_hooks_release_hook((void *) (8 * page + 100), page, true);
    CHECK(1 == ncalls && 8 * page == calls[0].start && 2 * page == calls[0].len &&
          calls[0].from_alloc);
    ncalls = 0;
    opal_mem_hooks_release_hook((void *) (8 * page + 100), 0, true);
    CHECK_MSG(0 == ncalls, "an empty range was reported");

    /* Two callbacks: report takes the dispatch path, each is called once. */
    CHECK(OPAL_SUCCESS == opal_mem_hooks_registry_add(cb_b, &name_b));
    ncalls = 0;
    opal_mem_hooks_report(32 * page, page);
    CHECK_MSG(0 == strcmp("ab", order()), "order %s", order());
    CHECK(calls[1].from_alloc && page == calls[1].len);

    CHECK(OPAL_ERR_BAD_PARAM == opal_mem_hooks_registry_add(cb_a, &name_b));
    CHECK(-1 == opal_mem_hooks_registry_clear(cb_c));
    CHECK(-1 == opal_mem_hooks_registry_clear(NULL));
    remove_all();
    CHECK(0 == opal_mem_hooks_slots_used);
    ncalls = 0;
    opal_mem_hooks_dispatch(page, page, true);
    CHECK(0 == ncalls);
}

/* 64 distinct functions: one per slot. */
/* clang-format off */
#define FILLER(n) \
    static void filler_##n(void *b, size_t l, void *d, bool f) { (void) b, (void) l, (void) d, (void) f; }
#define FILLERS8(n) FILLER(n##0) FILLER(n##1) FILLER(n##2) FILLER(n##3) \
    FILLER(n##4) FILLER(n##5) FILLER(n##6) FILLER(n##7)
FILLERS8(0) FILLERS8(1) FILLERS8(2) FILLERS8(3) FILLERS8(4) FILLERS8(5) FILLERS8(6) FILLERS8(7)
#define FILLER_ADDR(n) filler_##n,
#define FILLER_ADDRS8(n) FILLER_ADDR(n##0) FILLER_ADDR(n##1) FILLER_ADDR(n##2) FILLER_ADDR(n##3) \
    FILLER_ADDR(n##4) FILLER_ADDR(n##5) FILLER_ADDR(n##6) FILLER_ADDR(n##7)
static opal_mem_hooks_callback_fn_t *const fillers[OPAL_MEM_HOOKS_MAX_CALLBACKS] = {
    FILLER_ADDRS8(0) FILLER_ADDRS8(1) FILLER_ADDRS8(2) FILLER_ADDRS8(3)
    FILLER_ADDRS8(4) FILLER_ADDRS8(5) FILLER_ADDRS8(6) FILLER_ADDRS8(7)};
/* clang-format on */

static void test_capacity(void)
{
    int added = 0;
    for (int i = 0; i < OPAL_MEM_HOOKS_MAX_CALLBACKS; i++) {
        added += OPAL_SUCCESS == opal_mem_hooks_registry_add(fillers[i], NULL);
    }
    CHECK(OPAL_MEM_HOOKS_MAX_CALLBACKS == added);
    CHECK(OPAL_ERR_OUT_OF_RESOURCE == opal_mem_hooks_registry_add(cb_a, &name_a));
    /* A freed slot is free again. */
    opal_mem_hooks_registry_remove(fillers[10]);
    CHECK(OPAL_SUCCESS == opal_mem_hooks_registry_add(cb_a, &name_a));
    ncalls = 0;
    opal_mem_hooks_dispatch(page, page, false);
    CHECK(1 == ncalls);
    remove_all();
}

static void test_order(void)
{
    opal_mem_hooks_registry_add(cb_a, &name_a);
    opal_mem_hooks_registry_add(cb_b, &name_b);
    opal_mem_hooks_registry_add(cb_c, &name_c);
    ncalls = 0;
    opal_mem_hooks_dispatch(page, page, false);
    CHECK_MSG(0 == strcmp("abc", order()), "order %s", order());
    opal_mem_hooks_registry_remove(cb_b);
    ncalls = 0;
    opal_mem_hooks_dispatch(page, page, false);
    CHECK_MSG(0 == strcmp("ac", order()), "order %s after removing b", order());
    /* The lowest free slot: d takes b's place. */
    opal_mem_hooks_registry_add(cb_d, &name_d);
    ncalls = 0;
    opal_mem_hooks_dispatch(page, page, false);
    CHECK_MSG(0 == strcmp("adc", order()), "order %s after adding d", order());
    remove_all();
}

/* Reentrancy: a callback that releases more pages itself, once. */
static int nested_done;
static void cb_nesting(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    record('n', buf, len, from_alloc);
    (void) cbdata;
    if (!nested_done) {
        nested_done = 1;
        opal_mem_hooks_dispatch(64 * page, page, true);
    }
}

/* A callback that takes itself out (as a consumer tearing down on its last event may). */
static void cb_self_removing(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    record('s', buf, len, from_alloc);
    (void) cbdata;
    opal_mem_hooks_registry_remove(cb_self_removing); /* must not wait for itself */
}

static void test_reentrancy(void)
{
    opal_mem_hooks_registry_add(cb_nesting, NULL);
    opal_mem_hooks_registry_add(cb_b, &name_b);
    ncalls = 0;
    opal_mem_hooks_dispatch(page, page, false);
    /* The inner event reaches every callback, itself included, before the outer goes on. */
    CHECK_MSG(0 == strcmp("nnbb", order()), "order %s", order());
    CHECK(4 == ncalls && page == calls[0].start && 64 * page == calls[1].start &&
          64 * page == calls[2].start && page == calls[3].start);
    remove_all();

    opal_mem_hooks_registry_add(cb_self_removing, NULL);
    opal_mem_hooks_registry_add(cb_b, &name_b);
    ncalls = 0;
    opal_mem_hooks_dispatch(page, page, false);
    CHECK_MSG(0 == strcmp("sb", order()), "order %s", order());
    ncalls = 0;
    opal_mem_hooks_dispatch(page, page, false);
    CHECK_MSG(0 == strcmp("b", order()), "order %s after the self-removal", order());
    remove_all();
}

/* A callback held inside until told to leave. */
static volatile int held_inside, let_go;
static void cb_held(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) buf, (void) len, (void) cbdata, (void) from_alloc;
    __atomic_store_n(&held_inside, 1, __ATOMIC_SEQ_CST);
    while (!__atomic_load_n(&let_go, __ATOMIC_SEQ_CST)) {
        sched_yield();
    }
    __atomic_store_n(&held_inside, 0, __ATOMIC_SEQ_CST);
}

static void *dispatch_once(void *arg)
{
    (void) arg;
    opal_mem_hooks_dispatch(page, page, false);
    return NULL;
}

static volatile int remove_returned;
static void *remove_held(void *arg)
{
    (void) arg;
    opal_mem_hooks_registry_remove(cb_held);
    __atomic_store_n(&remove_returned, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

static void test_remove_waits(void)
{
    opal_mem_hooks_registry_add(cb_held, NULL);
    pthread_t in, out;
    pthread_create(&in, NULL, dispatch_once, NULL);
    while (!__atomic_load_n(&held_inside, __ATOMIC_SEQ_CST)) {
        sched_yield();
    }
    pthread_create(&out, NULL, remove_held, NULL);
    while (NULL != __atomic_load_n(&opal_mem_hooks_slots[0].func, __ATOMIC_SEQ_CST)) {
        sched_yield();
    }
    /* Cleared but still running: its slot is not free for another callback. */
    CHECK(OPAL_SUCCESS == opal_mem_hooks_registry_add(cb_a, &name_a));
    CHECK_MSG(cb_a != opal_mem_hooks_slots[0].func, "the slot of a running callback was reused");
    usleep(200 * 1000);
    CHECK_MSG(!remove_returned, "remove returned while the callback was running");
    __atomic_store_n(&let_go, 1, __ATOMIC_SEQ_CST);
    pthread_join(out, NULL);
    CHECK(remove_returned && !held_inside);
    pthread_join(in, NULL);
    remove_all();
}

/*
 * Threads dispatch without pause while the main thread adds and removes a
 * callback: after each removal returns, the callback must never run.
 */
#define THREADS 3
#define ROUNDS  2000
static volatile int alive, stop, late_calls, started;
static unsigned long stress_calls;

static void cb_stress(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) buf, (void) len, (void) cbdata, (void) from_alloc;
    if (!__atomic_load_n(&alive, __ATOMIC_SEQ_CST)) {
        __atomic_add_fetch(&late_calls, 1, __ATOMIC_RELAXED);
    }
    __atomic_add_fetch(&stress_calls, 1, __ATOMIC_RELAXED);
}

static void *dispatcher(void *arg)
{
    (void) arg;
    __atomic_add_fetch(&started, 1, __ATOMIC_SEQ_CST);
    while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
        opal_mem_hooks_dispatch(page, page, false);
    }
    return NULL;
}

/* ROUNDS, then on (up to a hundred times as many) while no dispatcher reached the callback. */
static bool more_rounds(int r)
{
    return r < ROUNDS ||
           (0 == __atomic_load_n(&stress_calls, __ATOMIC_RELAXED) && r < 100 * ROUNDS);
}

static void test_remove_under_dispatch(void)
{
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) {
        pthread_create(&t[i], NULL, dispatcher, NULL);
    }
    /* On a loaded machine the rounds may all pass before a dispatcher ran
     * at all (no call: nothing tested): start when they run, and go on
     * past ROUNDS until one has reached the callback (more_rounds). */
    while (__atomic_load_n(&started, __ATOMIC_SEQ_CST) < THREADS) {
        sched_yield();
    }
    int r;
    for (r = 0; more_rounds(r); r++) {
        __atomic_store_n(&alive, 1, __ATOMIC_SEQ_CST);
        opal_mem_hooks_registry_add(cb_stress, NULL);
        /* Another callback in the other slot now and then: both dispatch paths. */
        if (r & 1) {
            opal_mem_hooks_registry_add(fillers[0], NULL);
        }
        sched_yield();
        opal_mem_hooks_registry_remove(cb_stress);
        __atomic_store_n(&alive, 0, __ATOMIC_SEQ_CST);
        opal_mem_hooks_registry_remove(fillers[0]);
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
    }
    CHECK_MSG(0 == late_calls, "%d calls after their removal returned", late_calls);
    CHECK_MSG(stress_calls > 0, "the dispatching threads never reached the callback");
    printf("registry_test: %lu calls in %d rounds of add and remove\n", stress_calls, r);
    remove_all();
}

int main(void)
{
    opal_mem_hooks_registry_init();
    page = opal_mem_hooks_page_size;
    CHECK(page == (uintptr_t) sysconf(_SC_PAGESIZE));
    test_delivery();
    test_capacity();
    test_order();
    test_reentrancy();
    test_remove_waits();
    test_remove_under_dispatch();
    return test_finish("registry_test");
}
