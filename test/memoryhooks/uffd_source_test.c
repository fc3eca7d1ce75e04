/*
 * The userfaultfd source on its own: the ring (one producer, three
 * consumers: every value taken exactly once; a full ring raises overflow),
 * then the source fed by raw system calls that no patch sees (munmap,
 * madvise DONTNEED, mremap, mmap MAP_FIXED): each is an event, delivered
 * by a drain in the releasing thread right after the call returns (the
 * mid-read flag), and an unsubscribed range is none (also where a raw
 * mremap moved subscribed pages); an overflow leaves no range behind.
 * SKIP where userfaultfd is refused, with the reason.
 */
#include "opal_config.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/memoryhooks/memory.h"
#include "opal/memoryhooks/memory_uffd.h"
#include "opal/memoryhooks/memory_uffd_ring.h"
#include "opal/runtime/opal.h"
#include "test/support/test_util.h"

#define PAGE        4096
#define RING_VALUES 2000000

static opal_mem_uffd_ring_t test_ring;
static unsigned char *seen;
static int producer_done;

static void *consumer(void *arg)
{
    (void) arg;
    opal_mem_uffd_range_t r;
    for (;;) {
        if (opal_mem_uffd_ring_pop(&test_ring, &r)) {
            if (r.start < RING_VALUES && r.len == r.start * 3 + 1) {
                __atomic_add_fetch(&seen[r.start], 1, __ATOMIC_RELAXED);
            } else {
                __atomic_add_fetch(&seen[0], 100, __ATOMIC_RELAXED); /* torn: fails below */
            }
        } else if (__atomic_load_n(&producer_done, __ATOMIC_ACQUIRE) &&
                   opal_mem_uffd_ring_empty(&test_ring)) {
            return NULL;
        }
    }
}

static void test_ring_threads(void)
{
    seen = calloc(RING_VALUES, 1);
    pthread_t c[3];
    for (int i = 0; i < 3; i++) {
        pthread_create(&c[i], NULL, consumer, NULL);
    }
    for (uintptr_t v = 0; v < RING_VALUES; v++) {
        while (!opal_mem_uffd_ring_push(&test_ring, v, v * 3 + 1)) {
            (void) opal_mem_uffd_ring_take_overflow(&test_ring); /* we retry: not lost */
        }
    }
    __atomic_store_n(&producer_done, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < 3; i++) {
        pthread_join(c[i], NULL);
    }
    size_t bad = 0;
    for (size_t v = 0; v < RING_VALUES; v++) {
        bad += 1 != seen[v];
    }
    CHECK_MSG(0 == bad, "%zu of %d values not taken exactly once", bad, RING_VALUES);
    free(seen);
}

static void test_ring_overflow(void)
{
    memset(&test_ring, 0, sizeof(test_ring));
    for (uintptr_t v = 0; v < OPAL_MEM_UFFD_RING_SLOTS; v++) {
        CHECK(opal_mem_uffd_ring_push(&test_ring, v, 1));
    }
    CHECK(!opal_mem_uffd_ring_take_overflow(&test_ring));
    CHECK(!opal_mem_uffd_ring_push(&test_ring, 7, 1));
    CHECK(opal_mem_uffd_ring_take_overflow(&test_ring));
    CHECK(!opal_mem_uffd_ring_take_overflow(&test_ring)); /* taken once */
    opal_mem_uffd_range_t r;
    CHECK(opal_mem_uffd_ring_pop(&test_ring, &r) && 0 == r.start);
}

/* Events inside [watch_lo, watch_hi) only: the patcher reports our libc calls too. */
static uintptr_t watch_lo, watch_hi;
static volatile int hits;
static volatile uintptr_t hit_start, hit_len;

static void on_event(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) cbdata;
    (void) from_alloc;
    uintptr_t s = (uintptr_t) buf;
    if (s < watch_hi && s + len > watch_lo) {
        hits++;
        hit_start = s;
        hit_len = len;
    }
}

static char *map_watched(size_t len)
{
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (MAP_FAILED == p) {
        return NULL;
    }
    memset(p, 1, len);
    watch_lo = (uintptr_t) p;
    watch_hi = watch_lo + len;
    return p;
}

/* One raw release of the middle pages of a fresh subscribed range: one event, there. */
static void check_release(const char *what, int how)
{
    char *p = map_watched(8 * PAGE);
    CHECK(OPAL_SUCCESS == opal_mem_uffd_source.subscribe(p, 8 * PAGE));
    hits = 0;
    long rc = -1;
    switch (how) {
    case 0:
        rc = syscall(SYS_munmap, p + 2 * PAGE, 2 * PAGE);
        break;
    case 1:
        rc = syscall(SYS_madvise, p + 2 * PAGE, 2 * PAGE, MADV_DONTNEED);
        break;
    case 2: {
        void *to = mmap(NULL, 2 * PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        rc = (long) syscall(SYS_mremap, p + 2 * PAGE, 2 * PAGE, 2 * PAGE,
                            MREMAP_MAYMOVE | MREMAP_FIXED, to) == (long) to
                 ? 0
                 : -1;
        syscall(SYS_munmap, to, 2 * PAGE);
        break;
    }
    case 3:
        rc = (long) test_raw_mmap(p + 2 * PAGE, 2 * PAGE, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED) == (long) (p + 2 * PAGE)
                 ? 0
                 : -1;
        break;
    }
    CHECK_MSG(0 == rc, "%s failed", what);
    /* No sleep, no retry: the mid-read flag makes the event visible now. */
    opal_mem_uffd_source.drain(false);
    CHECK_MSG(hits >= 1, "%s of subscribed memory: no event", what);
    CHECK_MSG(hits < 1 || (hit_start <= (uintptr_t) p + 2 * PAGE &&
                           hit_start + hit_len >= (uintptr_t) p + 4 * PAGE),
              "%s: event [%#lx, +%#lx) does not cover the pages", what, (unsigned long) hit_start,
              (unsigned long) hit_len);
    opal_mem_uffd_source.unsubscribe(p, 8 * PAGE);
    syscall(SYS_munmap, p, 8 * PAGE);
    opal_mem_uffd_source.drain(true);
}

/*
 * More releases than the ring holds before a drain: the drain reports
 * everything released, and the source forgets the ranges whose events it
 * lost (the kernel forgot them with their mappings), or they would stay in
 * its table, counted against the cap, for as long as the process lives.
 */
static void test_overflow(void)
{
    const size_t n = OPAL_MEM_UFFD_RING_SLOTS + 100;
    /* Every other page: ranges that do not touch stay separate entries. */
    char *p = map_watched(2 * n * PAGE);
    CHECK(NULL != p);
    opal_mem_uffd_stats_t st;
    opal_mem_uffd_stats(&st);
    const size_t before = st.ranges;
    const uint64_t overflows = st.overflows;
    for (size_t i = 0; i < n; i++) {
        CHECK(OPAL_SUCCESS == opal_mem_uffd_source.subscribe(p + 2 * i * PAGE, PAGE));
    }
    opal_mem_uffd_stats(&st);
    CHECK_MSG(before + n == st.ranges, "%zu separate pages are %zu ranges", n, st.ranges - before);
    for (size_t i = 0; i < n; i++) {
        syscall(SYS_munmap, p + 2 * i * PAGE, PAGE); /* each waits for the read, none drained */
    }
    hits = 0;
    opal_mem_uffd_source.drain(false);
    opal_mem_uffd_stats(&st);
    CHECK_MSG(st.overflows > overflows, "%zu releases without a drain: no overflow", n);
    CHECK_MSG(hits >= 1, "an overflow: no event");
    CHECK_MSG(before == st.ranges, "after an overflow %zu ranges whose mappings are gone stay",
              st.ranges - before);
    syscall(SYS_munmap, p, 2 * n * PAGE);
    opal_mem_uffd_source.drain(true);
}

static void test_source(void)
{
    const char *reason = NULL;
    CHECK(OPAL_SUCCESS == opal_mem_uffd_source.start(&reason));
    CHECK(OPAL_MEMORY_MUNMAP_SUPPORT == opal_mem_uffd_source.support_level());
    check_release("syscall(SYS_munmap)", 0);
    check_release("syscall(SYS_madvise, MADV_DONTNEED)", 1);
    check_release("syscall(SYS_mremap)", 2);
    check_release("syscall(SYS_mmap, MAP_FIXED)", 3);

    /* Pages a raw mremap moved elsewhere are not watched there (never subscribed). */
    char *m = map_watched(2 * PAGE);
    char *to = mmap(NULL, 2 * PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(OPAL_SUCCESS == opal_mem_uffd_source.subscribe(m, 2 * PAGE));
    CHECK((long) to ==
          (long) syscall(SYS_mremap, m, 2 * PAGE, 2 * PAGE, MREMAP_MAYMOVE | MREMAP_FIXED, to));
    opal_mem_uffd_source.drain(false);
    watch_lo = (uintptr_t) to;
    watch_hi = watch_lo + 2 * PAGE;
    hits = 0;
    syscall(SYS_munmap, to, 2 * PAGE);
    opal_mem_uffd_source.drain(true);
    CHECK_MSG(0 == hits, "a munmap where a raw mremap moved subscribed pages: %d events", hits);

    /* The handshake, many times: each release is delivered by the very next drain. */
    char *p = map_watched(2 * PAGE);
    int missed = 0;
    for (int i = 0; i < 2000; i++) {
        CHECK(OPAL_SUCCESS == opal_mem_uffd_source.subscribe(p, 2 * PAGE));
        hits = 0;
        syscall(SYS_madvise, p, PAGE, MADV_DONTNEED);
        opal_mem_uffd_source.drain(false);
        missed += 0 == hits;
    }
    CHECK_MSG(0 == missed, "%d of 2000 releases not delivered by the next drain", missed);

    /* Unsubscribed: the kernel says nothing. */
    opal_mem_uffd_source.unsubscribe(p, 2 * PAGE);
    hits = 0;
    syscall(SYS_munmap, p, 2 * PAGE);
    opal_mem_uffd_source.drain(true);
    CHECK_MSG(0 == hits, "%d events for an unsubscribed range", hits);

    /* Adjacent subscriptions merge; a middle unsubscribe splits. */
    p = map_watched(4 * PAGE);
    opal_mem_uffd_stats_t st;
    opal_mem_uffd_stats(&st);
    size_t before = st.ranges;
    for (int i = 0; i < 4; i++) {
        CHECK(OPAL_SUCCESS == opal_mem_uffd_source.subscribe(p + i * PAGE, PAGE));
    }
    opal_mem_uffd_stats(&st);
    CHECK_MSG(before + 1 == st.ranges, "4 adjacent pages are %zu ranges", st.ranges - before);
    CHECK(st.cap > 1000);
    opal_mem_uffd_source.unsubscribe(p + PAGE, PAGE);
    opal_mem_uffd_stats(&st);
    CHECK_MSG(before + 2 == st.ranges, "a middle unsubscribe left %zu ranges", st.ranges - before);
    hits = 0;
    syscall(SYS_munmap, p + PAGE, PAGE); /* not watched any more */
    opal_mem_uffd_source.drain(true);
    CHECK(0 == hits);
    /* The pages on both sides of the hole are still watched. */
    hits = 0;
    syscall(SYS_munmap, p, 4 * PAGE);
    opal_mem_uffd_source.drain(true);
    CHECK_MSG(hits >= 1, "the release of the pages around an unsubscribed one: %d events", hits);

    test_overflow();

    /* A release sleeping for the reader at stop: stop still returns, the thread wakes. */
    opal_mem_uffd_source.stop();
    CHECK(0 == opal_mem_uffd_source.support_level());
    CHECK(OPAL_SUCCESS != opal_mem_uffd_source.subscribe(p, PAGE));
}

int main(int argc, char **argv)
{
    alarm(120);
    test_ring_threads();
    test_ring_overflow();
    const char *why = opal_mem_uffd_probe();
    if (why) {
        printf("ring tests passed\n");
        TEST_SKIP("userfaultfd source: %s", why);
    }
    CHECK(OPAL_SUCCESS == opal_init_util(&argc, &argv));
    CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(on_event, NULL));
    test_source();
    opal_mem_hooks_unregister_release(on_event);
    opal_finalize_util();
    return test_finish("uffd_source_test");
}
