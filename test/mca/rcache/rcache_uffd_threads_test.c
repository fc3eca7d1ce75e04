/*
 * The userfaultfd source under the conditions that deadlocked earlier
 * designs, and under load.  A thread releasing watched memory sleeps in
 * the kernel until the reader has read its event, so the reader must not
 * wait for anything such a thread may hold:
 *
 *   lock    the release is made while the cache is busy: from inside
 *           deregister_mem and from inside an event callback of a drain
 *           (a reader that took the cache's or the registry's lock before
 *           read would wait for the sleeper forever);
 *   malloc  the release is made by "the allocator" holding its lock (this
 *           program's malloc, in front of glibc's, takes a lock that the
 *           releasing thread holds): a reader that allocated would wait;
 *   unmap   the cache's reaction to an event unmaps registered memory
 *           (deregister_mem releases another watched range), and the cache
 *           is destroyed while another thread keeps releasing watched
 *           memory: a reader that unmapped, or stopped reading before the
 *           descriptor was closed, would sleep on its own event.
 *
 * Then 8 threads register and release (raw munmap, madvise, mremap, mmap
 * MAP_FIXED, each followed by new pages at the same address) for
 * OPAL_TEST_SECONDS (default 10) seconds: no deadlock, the releases are
 * read as events, every register_mem is matched by one deregister_mem.
 * Registrations handed out after their pages' release are counted and
 * printed, not yet asserted (see the stress below).  Every wait is bounded
 * by alarm(): a deadlock fails.
 *
 * Run with OMPI_MCA_mpi_leave_pinned=1 and OMPI_MCA_rcache_base_uffd=on or
 * strict; SKIP where userfaultfd is refused.
 */
#include "opal_config.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/rcache/base/base.h"
#include "opal/memoryhooks/memory.h"
#include "opal/memoryhooks/memory_uffd.h"
#include "opal/runtime/opal.h"
#include "test/support/rcache_ops.h"
#include "test/support/test_util.h"

#define PAGE       4096
#define THREADS    8
#define SLOTS      4 /* buffers per thread */
#define SLOT_PAGES 4 /* pages per buffer */

/* ---- the "allocator", behind a lock a releasing thread can hold ---- */
static pthread_mutex_t alloc_lock = PTHREAD_MUTEX_INITIALIZER;
static int alloc_lock_armed;
static __thread int alloc_lock_holder; /* the releasing thread allocates freely */

/* Every allocation passes here: it waits while another thread holds the lock. */
static void allocator_gate(void)
{
    if (__atomic_load_n(&alloc_lock_armed, __ATOMIC_ACQUIRE) && !alloc_lock_holder) {
        pthread_mutex_lock(&alloc_lock);
        pthread_mutex_unlock(&alloc_lock);
    }
}

#if defined(__SANITIZE_ADDRESS__)
/*
 * AddressSanitizer's allocator must stay the process's (a malloc of ours in
 * front of glibc's would be called by its runtime before the runtime is
 * set up, and its blocks freed by the runtime's free): the gate runs in its
 * allocation hook instead, at every malloc and calloc just the same.
 */
/* The runtime's interface (gcc installs no header for it). */
int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void *, size_t),
                                              void (*free_hook)(const volatile void *));
static void gate_hook(const volatile void *p, size_t n)
{
    (void) p, (void) n;
    allocator_gate();
}
static void install_allocator_gate(void)
{
    __sanitizer_install_malloc_and_free_hooks(gate_hook, NULL);
}
#else
/* glibc's allocator behind the gate. */
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);

void *malloc(size_t n)
{
    allocator_gate();
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t m)
{
    allocator_gate();
    return __libc_calloc(n, m);
}

static void install_allocator_gate(void)
{
    /* Nothing to install: the definitions above are linked in front of glibc's. */
}
#endif

/* ---- the device: each registration remembers the epoch of its buffer ---- */
typedef struct {
    char *addr;
    uint64_t epoch; /* bumped at every release of the buffer's pages */
} slot_t;

typedef struct {
    mca_rcache_base_registration_t base;
    uint64_t epoch;
    slot_t *slot;
} ureg_t;

static __thread slot_t *registering; /* the slot the calling thread registers */
static long registered, deregistered;
/* Set by a scenario: deregister_mem releases this watched range too (raw). */
static char *dereg_unmaps;
static size_t dereg_unmaps_len;

static int dev_register(void *data, void *base, size_t size, mca_rcache_base_registration_t *reg)
{
    (void) data, (void) base, (void) size;
    ureg_t *r = (ureg_t *) reg;
    r->slot = registering;
    r->epoch = registering ? __atomic_load_n(&registering->epoch, __ATOMIC_ACQUIRE) : 0;
    __atomic_add_fetch(&registered, 1, __ATOMIC_RELAXED);
    return OPAL_SUCCESS;
}

static int dev_deregister(void *data, mca_rcache_base_registration_t *reg)
{
    (void) data, (void) reg;
    char *p = __atomic_exchange_n(&dereg_unmaps, NULL, __ATOMIC_ACQ_REL);
    if (p) {
        syscall(SYS_munmap, p, dereg_unmaps_len);
    }
    __atomic_add_fetch(&deregistered, 1, __ATOMIC_RELAXED);
    return OPAL_SUCCESS;
}

static mca_rcache_base_module_t *rcache;

static char *map_pages(size_t pages)
{
    char *p = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (MAP_FAILED == p) {
        return NULL;
    }
    memset(p, 1, pages * PAGE);
    return p;
}

/* ---- lock ---- */
static char *cb_unmaps;
static int cb_calls;

static void on_event(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) buf, (void) len, (void) cbdata, (void) from_alloc;
    char *p = __atomic_exchange_n(&cb_unmaps, NULL, __ATOMIC_ACQ_REL);
    if (p) {
        cb_calls++;
        syscall(SYS_munmap, p, PAGE); /* inside a drain, inside the registry's dispatch */
    }
}

static void scenario_lock(void)
{
    /* From inside deregister_mem (called by the cache's reaction to an event). */
    char *a = map_pages(1), *b = map_pages(1);
    CHECK(OPAL_SUCCESS == test_rcache_cache(rcache, a, PAGE) &&
          OPAL_SUCCESS == test_rcache_cache(rcache, b, PAGE));
    dereg_unmaps_len = PAGE;
    __atomic_store_n(&dereg_unmaps, b, __ATOMIC_RELEASE);
    syscall(SYS_munmap, a, PAGE);
    CHECK_MSG(!test_rcache_cached(rcache, a, PAGE),
              "lock: a raw munmap left its registration cached");
    CHECK_MSG(NULL == dereg_unmaps, "lock: deregister_mem was not called");
    CHECK_MSG(!test_rcache_cached(rcache, b, PAGE),
              "lock: a munmap inside deregister_mem was not seen");

    /* From inside an event callback, while the drain dispatches. */
    a = map_pages(1), b = map_pages(1);
    CHECK(OPAL_SUCCESS == test_rcache_cache(rcache, a, PAGE) &&
          OPAL_SUCCESS == test_rcache_cache(rcache, b, PAGE));
    CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(on_event, NULL));
    __atomic_store_n(&cb_unmaps, b, __ATOMIC_RELEASE);
    syscall(SYS_munmap, a, PAGE);
    CHECK(!test_rcache_cached(rcache, a, PAGE));
    CHECK_MSG(1 == cb_calls, "lock: the event callback ran %d times", cb_calls);
    CHECK_MSG(!test_rcache_cached(rcache, b, PAGE),
              "lock: a munmap inside an event callback was not seen");
    opal_mem_hooks_unregister_release(on_event);
    printf("lock: no deadlock\n");
}

/* ---- malloc ---- */
static void *malloc_user(void *arg)
{
    (void) arg;
    free(malloc(64)); /* waits for the "allocator" lock */
    return NULL;
}

static void scenario_malloc(void)
{
    char *a = map_pages(2);
    CHECK(OPAL_SUCCESS == test_rcache_cache(rcache, a, 2 * PAGE));
    pthread_mutex_lock(&alloc_lock);
    alloc_lock_holder = 1;
    __atomic_store_n(&alloc_lock_armed, 1, __ATOMIC_RELEASE);
    pthread_t t;
    pthread_create(&t, NULL, malloc_user, NULL);
    usleep(50000); /* it waits for the lock meanwhile, as a reader that allocated would */
    /* The allocator releases pages while holding its lock. */
    syscall(SYS_madvise, a, PAGE, MADV_DONTNEED);
    syscall(SYS_munmap, a + PAGE, PAGE);
    __atomic_store_n(&alloc_lock_armed, 0, __ATOMIC_RELEASE);
    alloc_lock_holder = 0;
    pthread_mutex_unlock(&alloc_lock);
    pthread_join(t, NULL);
    CHECK_MSG(!test_rcache_cached(rcache, a, 2 * PAGE),
              "malloc: releases under the allocator's lock were not seen");
    syscall(SYS_munmap, a, PAGE);
    printf("malloc: no deadlock\n");
}

/* ---- unmap ---- */
static int churn_stop;
static bool rcache_gone;
static pthread_mutex_t gone_lock = PTHREAD_MUTEX_INITIALIZER;

/* Caches pages while the cache exists, and releases them (raw) until told to stop. */
static void *churn(void *arg)
{
    (void) arg;
    while (!__atomic_load_n(&churn_stop, __ATOMIC_ACQUIRE)) {
        char *p = map_pages(1);
        if (NULL == p) {
            continue;
        }
        pthread_mutex_lock(&gone_lock);
        if (!rcache_gone) {
            test_rcache_cache(rcache, p, PAGE);
        }
        pthread_mutex_unlock(&gone_lock);
        syscall(SYS_munmap, p, PAGE); /* concurrent with the teardown */
    }
    return NULL;
}

static void scenario_unmap(void)
{
    char *a = map_pages(1), *b = map_pages(1);
    CHECK(OPAL_SUCCESS == test_rcache_cache(rcache, a, PAGE) &&
          OPAL_SUCCESS == test_rcache_cache(rcache, b, PAGE));
    dereg_unmaps_len = PAGE;
    __atomic_store_n(&dereg_unmaps, b, __ATOMIC_RELEASE);
    syscall(SYS_madvise, a, PAGE, MADV_DONTNEED);
    CHECK(!test_rcache_cached(rcache, a, PAGE));
    CHECK_MSG(!test_rcache_cached(rcache, b, PAGE),
              "unmap: deregister_mem's release of watched memory not seen");
    syscall(SYS_munmap, a, PAGE);
    printf("unmap: no deadlock\n");
}

/* ---- 8 threads ---- */
static double seconds;
static long stale_hits, foreign_hits, releases, rounds;

/*
 * New pages at the slot's address once its old ones are gone.  Never
 * MAP_FIXED over a hole: another thread's mmap (the cache's own slabs) may
 * have taken it meanwhile; then the slot moves.
 */
static void refill(slot_t *s, size_t len)
{
    long p = test_raw_mmap(s->addr, len, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE);
    if (p != (long) s->addr) {
        if (p != -1) {
            syscall(SYS_munmap, p, len); /* an old kernel took the hint elsewhere */
        }
        s->addr = map_pages(SLOT_PAGES);
    }
}

static void release_slot(slot_t *s, unsigned how)
{
    const size_t len = SLOT_PAGES * PAGE;
    /* Bumped before the release: a registration made after it carries the new epoch. */
    __atomic_add_fetch(&s->epoch, 1, __ATOMIC_ACQ_REL);
    switch (how % 4) {
    case 0:
        syscall(SYS_munmap, s->addr, len);
        refill(s, len);
        break;
    case 1:
        syscall(SYS_madvise, s->addr, len, MADV_DONTNEED);
        break;
    case 2: {
        long to = test_raw_mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS);
        syscall(SYS_mremap, s->addr, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, to);
        refill(s, len);
        syscall(SYS_munmap, to, len);
        break;
    }
    case 3: /* over our own pages: no hole */
        test_raw_mmap(s->addr, len, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED);
        break;
    }
    memset(s->addr, 2, len); /* new pages, present */
    __atomic_add_fetch(&releases, 1, __ATOMIC_RELAXED);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + 1e-9 * (double) ts.tv_nsec;
}

static void *worker(void *arg)
{
    unsigned seed = (unsigned) (uintptr_t) arg;
    slot_t slots[SLOTS];
    for (int i = 0; i < SLOTS; i++) {
        slots[i].addr = map_pages(SLOT_PAGES);
        slots[i].epoch = 0;
    }
    const double end = now() + seconds;
    long n = 0;
    while (now() < end) {
        slot_t *s = &slots[rand_r(&seed) % SLOTS];
        mca_rcache_base_registration_t *reg;
        registering = s;
        int rc = rcache->rcache_register(rcache, s->addr, SLOT_PAGES * PAGE, 0,
                                         MCA_RCACHE_ACCESS_LOCAL_WRITE, &reg);
        registering = NULL;
        if (OPAL_SUCCESS == rc) {
            ureg_t *r = (ureg_t *) reg;
            if (r->slot != s) {
                __atomic_add_fetch(&foreign_hits, 1, __ATOMIC_RELAXED);
            } else if (r->epoch != __atomic_load_n(&s->epoch, __ATOMIC_ACQUIRE)) {
                __atomic_add_fetch(&stale_hits, 1, __ATOMIC_RELAXED);
            }
            rcache->rcache_deregister(rcache, reg);
        }
        if (0 == rand_r(&seed) % 3) {
            release_slot(s, (unsigned) rand_r(&seed));
        }
        n++;
    }
    for (int i = 0; i < SLOTS; i++) {
        munmap(slots[i].addr, SLOT_PAGES * PAGE);
    }
    __atomic_add_fetch(&rounds, n, __ATOMIC_RELAXED);
    return NULL;
}

static void stress(void)
{
    opal_mem_uffd_stats_t before, after;
    opal_mem_uffd_stats(&before);
    pthread_t t[THREADS];
    for (uintptr_t i = 0; i < THREADS; i++) {
        pthread_create(&t[i], NULL, worker, (void *) (i + 1));
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
    }
    opal_mem_uffd_stats(&after);
    printf("8 threads, %.0f s: %ld lookups, %ld releases, %llu events read, %ld stale hits, "
           "%ld hits of another thread's old registration\n",
           seconds, rounds, releases, (unsigned long long) (after.events - before.events),
           stale_hits, foreign_hits);
    /*
     * A registration handed out after its buffer's release by the same
     * thread: an event lost (before drains delivered one at a time, about
     * a thousand per 10 s here, when one thread's drain took another's
     * release from the ring and had not delivered it yet).  Another
     * thread's old registration at an address it mapped again: what only
     * strict closes (the event queued after the new mapping was made).
     */
    CHECK_MSG(0 == stale_hits, "%ld registrations handed out after their release", stale_hits);
    if (MCA_RCACHE_BASE_UFFD_STRICT == mca_rcache_base_uffd) {
        CHECK_MSG(0 == foreign_hits, "strict: %ld hits of another thread's old registration",
                  foreign_hits);
    }
    CHECK_MSG(releases > 100, "only %ld releases in %.0f s", releases, seconds);
    /* Every release of a cached (watched) buffer is an event; a few were not cached yet. */
    CHECK_MSG(after.events - before.events >= (uint64_t) releases / 2,
              "%llu events for %ld releases", (unsigned long long) (after.events - before.events),
              releases);
}

int main(int argc, char **argv)
{
    const char *s = getenv("OPAL_TEST_SECONDS");
    seconds = s ? atof(s) : 10;
    setvbuf(stdout, NULL, _IONBF, 0);
    alarm((unsigned) seconds + 60);
    install_allocator_gate();
    CHECK(OPAL_SUCCESS == opal_init_util(&argc, &argv));
    mca_rcache_base_resources_t res = {.cache_name = "uffd-threads",
                                       .sizeof_reg = sizeof(ureg_t),
                                       .register_mem = dev_register,
                                       .deregister_mem = dev_deregister};
    /* Created first: a bad rcache_base_uffd is refused, naming it, even
     * where the source cannot start. */
    rcache = mca_rcache_base_module_create(NULL, NULL, &res);
    const char *why = opal_mem_uffd_probe();
    if (why) {
        TEST_SKIP("the userfaultfd source cannot start here: %s", why);
    }
    if (NULL == rcache) {
        fprintf(stderr, "cannot create the rcache (see above)\n");
        return 1;
    }
    if (NULL == rcache->rcache_uffd) {
        TEST_SKIP(
            "run with OMPI_MCA_mpi_leave_pinned=1 and OMPI_MCA_rcache_base_uffd=on or strict");
    }
    printf("rcache_base_uffd=%s\n", mca_rcache_base_uffd_names[mca_rcache_base_uffd]);
    scenario_lock();
    scenario_malloc();
    scenario_unmap();
    stress();

    /* Teardown while another thread keeps releasing watched memory. */
    pthread_t t;
    pthread_create(&t, NULL, churn, NULL);
    usleep(200000);
    pthread_mutex_lock(&gone_lock);
    rcache_gone = true;
    pthread_mutex_unlock(&gone_lock);
    CHECK(OPAL_SUCCESS == mca_rcache_base_module_destroy(rcache));
    __atomic_store_n(&churn_stop, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    opal_mem_uffd_stats_t st;
    opal_mem_uffd_stats(&st);
    CHECK_MSG(!st.started, "the source still runs after its last cache was destroyed");
    CHECK_MSG(registered == deregistered, "%ld register_mem, %ld deregister_mem", registered,
              deregistered);
    printf("teardown under releases: no deadlock\n");
    opal_finalize_util();
    return test_finish("rcache_uffd_threads_test");
}
