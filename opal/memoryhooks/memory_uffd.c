/*
 * The userfaultfd event source.  The ranges the registration cache holds
 * are registered with a userfaultfd in write-protect mode (asynchronous,
 * user faults only) for the events UNMAP, REMOVE and REMAP: the kernel
 * then reports every munmap, madvise that drops pages, mremap and
 * mmap(MAP_FIXED) over them, whoever makes the system call.  Never
 * MODE_MISSING (it breaks pinned pages) and never EVENT_FORK.
 *
 * A thread that releases watched memory sleeps in the kernel until its
 * event is READ.  So the reader thread only polls, reads and pushes the
 * ranges into a lock-free ring (memory_uffd_ring.h): it takes no lock,
 * allocates nothing and unmaps nothing, since any of those may wait for a
 * thread that waits for the reader (each deadlocked an earlier design).
 * The events reach the registry (opal_mem_hooks_dispatch) from the
 * lookups, which drain the ring first.
 *
 * The mid-read flag: the reader raises it before each read and lowers it
 * after the last push of what it read.  The kernel wakes the releasing
 * thread only after our read took its event, so that thread, and any that
 * synchronizes with it afterwards, sees the flag raised or the range in
 * the ring: a drain that waits for the flag to fall misses no event
 * released before it.  What only strict closes: a thread that maps the
 * same address while the releasing thread is still asleep (the kernel
 * queues the event after the pages are gone).
 */
#include "opal_config.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/memoryhooks/memory_registry.h"
#include "opal/memoryhooks/memory_uffd.h"
#include "opal/memoryhooks/memory_uffd_ring.h"
#include "opal/util/output.h"

/* Newer than the Debian 12 kernel headers (linux-libc-dev 6.1). */
#ifndef UFFD_USER_MODE_ONLY
#    define UFFD_USER_MODE_ONLY 1 /* Linux 5.11: no kernel-mode faults, allowed unprivileged */
#endif
#ifndef UFFD_FEATURE_WP_ASYNC
#    define UFFD_FEATURE_WP_ASYNC (1 << 15) /* Linux 6.7: the kernel resolves WP faults itself */
#endif

#define FEATURES                                                                    \
    (UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | \
     UFFD_FEATURE_EVENT_REMAP)
#define READ_BATCH 16

typedef struct {
    uintptr_t start, end;
} range_t;

static opal_mem_uffd_ring_t ring;
static int started;  /* read without the lock by drain (acquire) */
static int mid_read; /* the reader read, or is about to, and has not pushed it all */
/* Drains deliver one at a time (drain_lock); draining is raised while one
 * holds events it took and has not delivered yet (see uffd_drain). */
static pthread_mutex_t drain_lock = PTHREAD_MUTEX_INITIALIZER;
static int draining;
static int uffd = -1, stop_fd = -1;
static pthread_t reader;
static uint64_t events, overflows, refused;

/* The subscribed ranges, sorted and merged (lock).  The reader never looks. */
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static range_t *table;
static size_t table_n, table_cap;
static uintptr_t table_low, table_high; /* the table's span, for a lock-free "not ours" */
static bool atfork_done;

static int open_uffd(const char **reason)
{
    int fd = (int) syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
    if (fd < 0) {
        *reason =
            ENOSYS == errno ? "no userfaultfd system call in this kernel"
            : EPERM == errno
                ? "userfaultfd refused (EPERM: a seccomp filter such as Docker's default, or a "
                  "security module)"
            : EINVAL == errno ? "the kernel is older than 5.11 (no UFFD_USER_MODE_ONLY)"
                              : "userfaultfd failed";
        return -1;
    }
    struct uffdio_api api = {.api = UFFD_API, .features = FEATURES};
    if (0 != ioctl(fd, UFFDIO_API, &api)) {
        *reason = "the kernel lacks UFFD_FEATURE_WP_ASYNC (Linux 6.7) or the UNMAP, REMOVE and "
                  "REMAP events";
        close(fd);
        return -1;
    }
    return fd;
}

const char *opal_mem_uffd_probe(void)
{
    const char *reason = NULL;
    int fd = open_uffd(&reason);
    if (fd >= 0) {
        close(fd);
    }
    return reason;
}

/* A quarter of the VMA limit: each watched range may split off two VMAs. */
static size_t vma_cap(void)
{
    long limit = 65530;
    int fd = open("/proc/sys/vm/max_map_count", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        char buf[32] = {0};
        if (read(fd, buf, sizeof(buf) - 1) > 0) {
            limit = strtol(buf, NULL, 10);
        }
        close(fd);
    }
    return limit >= 64 ? (size_t) limit / 4 : 16;
}

/*
 * Resolve a write-protect fault: none should come (no page is ever
 * write-protected, and WP_ASYNC resolves them in the kernel), but a
 * faulting thread would sleep until resolved.  An ioctl: no lock, no
 * allocation.
 */
static void resolve_fault(const struct uffd_msg *msg)
{
    const uintptr_t mask = opal_mem_hooks_page_size - 1;
    struct uffdio_writeprotect wp = {.range = {.start = msg->arg.pagefault.address & ~mask,
                                               .len = opal_mem_hooks_page_size},
                                     .mode = 0};
    (void) ioctl(uffd, UFFDIO_WRITEPROTECT, &wp);
}

/*
 * The ranges of an event, each handed to sink; none for a fault.  Bit 0 of
 * a start (page aligned) says the mapping went too (UNMAP, REMAP: the
 * kernel no longer watches it); REMOVE (madvise) keeps the mapping, and
 * its watch.  Bit 1 marks where REMAP moved the pages: the kernel watches
 * them there, in no range of ours, and the drain takes that watch back.
 */
#define GONE  ((uintptr_t) 1)
#define MOVED ((uintptr_t) 2)
static void msg_ranges(const struct uffd_msg *msg, void (*sink)(uintptr_t start, uintptr_t len))
{
    switch (msg->event) {
    case UFFD_EVENT_UNMAP:
    case UFFD_EVENT_REMOVE:
        if (msg->arg.remove.end > msg->arg.remove.start) {
            sink(msg->arg.remove.start | (UFFD_EVENT_UNMAP == msg->event ? GONE : 0),
                 msg->arg.remove.end - msg->arg.remove.start);
        }
        break;
    case UFFD_EVENT_REMAP:
        if (msg->arg.remap.len > 0) {
            sink(msg->arg.remap.from | GONE, msg->arg.remap.len);
            sink(msg->arg.remap.to | MOVED, msg->arg.remap.len);
        }
        break;
    case UFFD_EVENT_PAGEFAULT:
        resolve_fault(msg);
        break;
    default:
        break;
    }
}

/* One nonblocking read; each event's ranges handed to sink.  The count read, 0: none queued. */
static int read_events(void (*sink)(uintptr_t start, uintptr_t len))
{
    struct uffd_msg msg[READ_BATCH];
    ssize_t got = read(uffd, msg, sizeof(msg));
    if (got <= 0) {
        return 0;
    }
    int n = (int) (got / (ssize_t) sizeof(msg[0]));
    __atomic_add_fetch(&events, (uint64_t) n, __ATOMIC_RELAXED);
    for (int i = 0; i < n; i++) {
        msg_ranges(&msg[i], sink);
    }
    return n;
}

static void push(uintptr_t start, uintptr_t len)
{
    if (!opal_mem_uffd_ring_push(&ring, start, len)) {
        __atomic_add_fetch(&overflows, 1, __ATOMIC_RELAXED);
    }
}

static void table_remove(uintptr_t start, uintptr_t end, bool kernel);
static void table_clear(void);
static void table_unwatch_outside(uintptr_t start, uintptr_t end);

/* The event this thread is delivering, [start, end); end 0: none.
 * initial-exec: no allocation on first touch. */
static __thread uintptr_t delivering_start __attribute__((tls_model("initial-exec")));
static __thread uintptr_t delivering_end __attribute__((tls_model("initial-exec")));

/*
 * To the registry, marked as ours: the callbacks' unsubscribe of this range
 * is not done (the event is late: its pages may have been mapped and
 * subscribed again since), and a callback's own lookup does not drain
 * (this thread holds drain_lock).  A callback's own release of other pages
 * is a patch event like any other: unsubscribed, or the kernel would
 * report it a second time.
 */
static void deliver(uintptr_t start, uintptr_t len)
{
    delivering_start = start;
    delivering_end = start + len;
    opal_mem_hooks_dispatch(start, len, false);
    delivering_end = 0;
}

/*
 * A lookup delivers an event: the range leaves the table first (the
 * kernel forgot a range whose pages are gone), waiting for the lock: a
 * lookup holds nothing a subscriber could wait for.
 */
static void dispatch(uintptr_t start, uintptr_t len)
{
    const uintptr_t mask = opal_mem_hooks_page_size - 1;
    const uintptr_t marks = start & mask;
    start &= ~mask;
    if (marks) {
        pthread_mutex_lock(&table_lock);
        if (__atomic_load_n(&started, __ATOMIC_RELAXED)) {
            if (marks & MOVED) {
                table_unwatch_outside(start, start + len);
            } else {
                table_remove(start, start + len, false);
            }
        }
        pthread_mutex_unlock(&table_lock);
    }
    if (!(marks & MOVED)) { /* moved pages are no release */
        deliver(start, len);
    }
}

/*
 * The ring overflowed: some ranges were not kept, so everything counts as
 * released.  The table cannot tell which of its ranges went with a lost
 * event, so it is emptied first (waiting for the lock, as dispatch does):
 * a range subscribed before belongs to a registration that the delivery
 * invalidates (a cache subscribes what it already holds), one subscribed
 * after is watched, and stays so (the callbacks do not unsubscribe).
 */
static void dispatch_all(void)
{
    pthread_mutex_lock(&table_lock);
    if (__atomic_load_n(&started, __ATOMIC_RELAXED)) {
        table_clear();
    }
    pthread_mutex_unlock(&table_lock);
    deliver(0, UINTPTR_MAX & ~(opal_mem_hooks_page_size - 1));
}

/*
 * The reader: poll, read, push; nothing else.  It keeps reading until it
 * is told to stop, and at the stop reads what is queued; the descriptor is
 * closed after it ends (which wakes any thread still waiting).
 */
static void *reader_main(void *arg)
{
    (void) arg;
    struct pollfd pfd[2] = {{.fd = uffd, .events = POLLIN}, {.fd = stop_fd, .events = POLLIN}};
    bool stop = false;
    while (!stop) {
        int ready = poll(pfd, 2, -1);
        stop = ready > 0 && (pfd[1].revents & POLLIN);
        __atomic_store_n(&mid_read, 1, __ATOMIC_SEQ_CST);
        /* One batch per round (the flag falls between rounds, so drains never wait
         * long); at the stop, everything queued. */
        while (read_events(push) > 0 && stop) {
        }
        __atomic_store_n(&mid_read, 0, __ATOMIC_SEQ_CST);
    }
    return NULL;
}

/* The child has the descriptor but not the reader, and its memory is not watched. */
static void atfork_child(void)
{
    if (__atomic_load_n(&started, __ATOMIC_RELAXED)) {
        __atomic_store_n(&started, 0, __ATOMIC_RELEASE);
        close(uffd);
        close(stop_fd);
        uffd = stop_fd = -1;
        table_n = 0;
        table_low = table_high = 0;
    }
    pthread_mutex_init(&table_lock, NULL);
    pthread_mutex_init(&drain_lock, NULL);
    draining = 0;
    /* The parent's reader may have forked us between a read and its last
     * push: no reader here lowers the flag, and a source started in the
     * child would wait for it at every drain. */
    mid_read = 0;
}

static int uffd_start(const char **reason)
{
    if (__atomic_load_n(&started, __ATOMIC_RELAXED)) {
        return OPAL_SUCCESS;
    }
    uffd = open_uffd(reason);
    if (uffd < 0) {
        return OPAL_ERR_NOT_AVAILABLE;
    }
    table_cap = vma_cap();
    table = malloc(table_cap * sizeof(*table));
    stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    memset(&ring, 0, sizeof(ring));
    sigset_t all, old;
    sigfillset(&all);
    /* The reader runs no signal handler: it blocks every signal from birth. */
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = NULL != table && stop_fd >= 0 ? pthread_create(&reader, NULL, reader_main, NULL) : -1;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (0 != rc) {
        *reason = "cannot create the userfaultfd reader thread";
        free(table);
        table = NULL;
        if (stop_fd >= 0) {
            close(stop_fd);
        }
        close(uffd);
        uffd = stop_fd = -1;
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    pthread_setname_np(reader, "opal-uffd");
    if (!atfork_done && 0 == pthread_atfork(NULL, NULL, atfork_child)) {
        atfork_done = true;
    }
    table_n = 0;
    __atomic_store_n(&started, 1, __ATOMIC_RELEASE);
    return OPAL_SUCCESS;
}

static void uffd_stop(void)
{
    pthread_mutex_lock(&table_lock);
    if (!__atomic_load_n(&started, __ATOMIC_RELAXED)) {
        pthread_mutex_unlock(&table_lock);
        return;
    }
    __atomic_store_n(&started, 0, __ATOMIC_RELEASE);
    /* No new events for our ranges; the reader still reads what is queued. */
    table_clear();
    pthread_mutex_unlock(&table_lock);
    uint64_t one = 1;
    if (sizeof(one) != write(stop_fd, &one, sizeof(one))) {
        opal_output("memory hooks: cannot stop the userfaultfd reader");
        abort(); /* joining would hang: say so instead */
    }
    pthread_join(reader, NULL);
    /* Closing releases the context: a thread still waiting on an event wakes. */
    close(uffd);
    close(stop_fd);
    uffd = stop_fd = -1;
    free(table);
    table = NULL;
    memset(&ring, 0, sizeof(ring)); /* what is left was for the caches that are gone */
}

static int uffd_support_level(void)
{
    return __atomic_load_n(&started, __ATOMIC_ACQUIRE) ? OPAL_MEMORY_MUNMAP_SUPPORT : 0;
}

/* The first entry that ends at or after addr (adjacent counts: it merges). */
static size_t table_find(uintptr_t addr)
{
    size_t lo = 0, hi = table_n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (table[mid].end < addr) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

static void table_span(void)
{
    __atomic_store_n(&table_low, table_n ? table[0].start : 0, __ATOMIC_RELAXED);
    __atomic_store_n(&table_high, table_n ? table[table_n - 1].end : 0, __ATOMIC_RELAXED);
}

static int uffd_subscribe(void *addr, size_t len)
{
    uintptr_t start = (uintptr_t) addr, end = start + len;
    int rc = OPAL_SUCCESS;
    pthread_mutex_lock(&table_lock);
    if (!__atomic_load_n(&started, __ATOMIC_RELAXED) || 0 == len) {
        pthread_mutex_unlock(&table_lock);
        return OPAL_ERR_NOT_AVAILABLE;
    }
    size_t i = table_find(start), j = i;
    while (j < table_n && table[j].start <= end) {
        j++;
    }
    /* Registered with the kernel even when the table covers it: the table may
     * still hold a range whose pages went (its event not yet drained, or an
     * unsubscribe that did not get the lock), and the new pages are not watched. */
    if (table_n - (j - i) + 1 > table_cap) {
        if (0 == __atomic_fetch_add(&refused, 1, __ATOMIC_RELAXED)) {
            opal_output("memory hooks: userfaultfd watches at most %zu ranges (a quarter of "
                        "vm.max_map_count); more registrations are covered by the patcher only",
                        table_cap);
        }
        rc = OPAL_ERR_OUT_OF_RESOURCE;
    } else {
        struct uffdio_register reg = {.range = {.start = start, .len = len},
                                      .mode = UFFDIO_REGISTER_MODE_WP};
        rc = 0 == ioctl(uffd, UFFDIO_REGISTER, &reg) ? OPAL_SUCCESS : OPAL_ERROR;
    }
    if (OPAL_SUCCESS == rc) {
        range_t merged = {start, end};
        if (j > i) {
            merged.start = table[i].start < start ? table[i].start : start;
            merged.end = table[j - 1].end > end ? table[j - 1].end : end;
        }
        memmove(&table[i + 1], &table[j], (table_n - j) * sizeof(*table));
        table[i] = merged;
        table_n = table_n - (j - i) + 1;
        table_span();
    }
    pthread_mutex_unlock(&table_lock);
    return rc;
}

static void unregister(uintptr_t start, uintptr_t end)
{
    struct uffdio_range r = {.start = start, .len = end - start};
    (void) ioctl(uffd, UFFDIO_UNREGISTER, &r); /* a range already gone is no error of ours */
}

/*
 * Take [start, end) out of the table (lock held); with kernel, out of the
 * kernel's registration too (a range already gone needs no ioctl).
 */
static void table_remove(uintptr_t start, uintptr_t end, bool kernel)
{
    size_t i = table_find(start + 1), j = i; /* entries that overlap, not merely touch */
    while (j < table_n && table[j].start < end) {
        j++;
    }
    if (j == i + 1 && table[i].start < start && table[i].end > end) {
        if (table_n < table_cap) { /* a split needs one more entry; without one, keep watching */
            if (kernel) {
                unregister(start, end);
            }
            memmove(&table[i + 2], &table[i + 1], (table_n - i - 1) * sizeof(*table));
            table[i + 1] = (range_t){end, table[i].end};
            table[i].end = start;
            table_n++;
        }
    } else if (j > i) {
        for (size_t k = i; kernel && k < j; k++) {
            unregister(table[k].start > start ? table[k].start : start,
                       table[k].end < end ? table[k].end : end);
        }
        /* The first and last may keep a part outside the range. */
        range_t keep[2];
        size_t nkeep = 0;
        if (table[i].start < start) {
            keep[nkeep++] = (range_t){table[i].start, start};
        }
        if (table[j - 1].end > end) {
            keep[nkeep++] = (range_t){end, table[j - 1].end};
        }
        memmove(&table[i + nkeep], &table[j], (table_n - j) * sizeof(*table));
        memcpy(&table[i], keep, nkeep * sizeof(*table));
        table_n = table_n - (j - i) + nkeep;
    }
    table_span();
}

/*
 * The kernel's watch off the parts of [start, end) that the table does not
 * hold (lock held): pages that a raw mremap moved there, still watched, whose
 * release would make its thread wait for our reader and be reported twice
 * (the patch's event, then the kernel's).  What the table holds was
 * subscribed since, and stays.
 */
static void table_unwatch_outside(uintptr_t start, uintptr_t end)
{
    uintptr_t from = start;
    for (size_t k = table_find(start + 1); k < table_n && table[k].start < end; k++) {
        if (table[k].start > from) {
            unregister(from, table[k].start);
        }
        from = table[k].end;
    }
    if (from < end) {
        unregister(from, end);
    }
}

/* Every range out of the table and the kernel's registration (lock held). */
static void table_clear(void)
{
    for (size_t i = 0; i < table_n; i++) {
        unregister(table[i].start, table[i].end);
    }
    table_n = 0;
    table_span();
}

/*
 * Called on the release path (maybe inside the allocator, maybe in a
 * signal handler): never waits for the lock.  What it does not take out
 * is reported by the kernel instead, one round trip later.
 */
static void uffd_unsubscribe(void *addr, size_t len)
{
    uintptr_t start = (uintptr_t) addr, end = start + len;
    if ((start >= delivering_start && end <= delivering_end) ||
        end <= __atomic_load_n(&table_low, __ATOMIC_RELAXED) ||
        start >= __atomic_load_n(&table_high, __ATOMIC_RELAXED) ||
        0 != pthread_mutex_trylock(&table_lock)) {
        return;
    }
    if (__atomic_load_n(&started, __ATOMIC_RELAXED)) {
        table_remove(start, end, true);
    }
    pthread_mutex_unlock(&table_lock);
}

/*
 * Deliver what the reader pushed; first wait for the batch it may be
 * pushing (see the mid-read flag above).  With strict, first read what the
 * kernel has queued, here (the reader may be asleep in poll).
 *
 * An event taken from the ring (or read here) by one drain is invisible to
 * the others until that drain has delivered it: a thread whose release
 * was taken by another thread's drain would find the ring empty and hit
 * its own stale registration.  So a drain delivers under drain_lock with
 * draining raised, and a drain that finds the ring empty returns at once
 * only when no other drain is delivering; otherwise it waits for the lock.
 * Raised before the first take (seq_cst, as the take's compare-and-swap):
 * a drain that sees a slot taken sees the flag.  Waiting is safe: drains
 * run with no rcache lock held, and a delivery's callbacks take only the
 * rcache's own lock.  A callback's own lookup (inside a delivery) does
 * not drain: the events still queued wait for the next lookup.
 */
static void uffd_drain(bool strict)
{
    if (!__atomic_load_n(&started, __ATOMIC_ACQUIRE) || 0 != delivering_end) {
        return;
    }
    /* Never long: with the flag up the reader only reads (nonblocking) and pushes. */
    while (__atomic_load_n(&mid_read, __ATOMIC_SEQ_CST)) {
        sched_yield();
    }
    if (__builtin_expect(!strict && opal_mem_uffd_ring_empty(&ring) &&
                             !__atomic_load_n(&draining, __ATOMIC_SEQ_CST),
                         1)) {
        return;
    }
    pthread_mutex_lock(&drain_lock);
    __atomic_store_n(&draining, 1, __ATOMIC_SEQ_CST);
    if (strict) {
        while (read_events(dispatch) > 0) {
        }
    }
    if (opal_mem_uffd_ring_take_overflow(&ring)) {
        dispatch_all();
    }
    opal_mem_uffd_range_t r;
    while (opal_mem_uffd_ring_pop(&ring, &r)) {
        dispatch(r.start, r.len);
    }
    __atomic_store_n(&draining, 0, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&drain_lock);
}

void opal_mem_uffd_stats(opal_mem_uffd_stats_t *stats)
{
    pthread_mutex_lock(&table_lock);
    stats->started = __atomic_load_n(&started, __ATOMIC_RELAXED);
    stats->cap = table_cap;
    stats->ranges = table_n;
    pthread_mutex_unlock(&table_lock);
    stats->events = __atomic_load_n(&events, __ATOMIC_RELAXED);
    stats->overflows = __atomic_load_n(&overflows, __ATOMIC_RELAXED);
    stats->refused = __atomic_load_n(&refused, __ATOMIC_RELAXED);
}

const opal_mem_source_t opal_mem_uffd_source = {
    .name = "userfaultfd",
    .start = uffd_start,
    .support_level = uffd_support_level,
    .check = NULL,
    .stop = uffd_stop,
    .subscribe = uffd_subscribe,
    .unsubscribe = uffd_unsubscribe,
    .drain = uffd_drain,
};
