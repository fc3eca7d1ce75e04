/*
 * The self-check: every intercepted call must produce exactly one event
 * covering the pages it releases, delivered while the pages are still
 * there; the calls that release nothing must produce none.  Only events of
 * this thread count, so that other threads cannot fake a pass.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <gnu/lib-names.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/memoryhooks/memory.h"
#include "opal/memoryhooks/memory_patch.h"
#include "opal/memoryhooks/memory_ucx_feed.h"
#include "opal/tools/opal_patcher_info/selftest.h"
#include "opal/util/valgrind.h"

#pragma weak dladdr
#pragma weak dlsym
#pragma weak dlopen
#pragma weak dlclose
#pragma weak dlmopen

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif

#define SENTINEL   ((long) 0x5a5a0f0f12345678ULL) /* its low half where long has 32 bits */
#define MAX_EVENTS 256

typedef struct event_t {
    uintptr_t start, end;
    bool probe_mapped;   /* the probed page was still mapped when the event came */
    long probe_word;     /* and held this */
} event_t;

/* volatile: glibc declares munmap & co. "leaf" (never calling back into this
 * file), so without it the compiler may keep these in registers across the
 * very calls whose events fill them in. */
static volatile event_t events[MAX_EVENTS];
static volatile int num_events;
static pthread_t self_thread;
static uintptr_t probe;   /* an address the current check watches */
static size_t page;

static void record_event(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) cbdata;
    (void) from_alloc;
    if (!pthread_equal(pthread_self(), self_thread) || num_events >= MAX_EVENTS) {
        return;
    }
    volatile event_t *e = &events[num_events++];
    e->start = (uintptr_t) buf;
    e->end = e->start + len;
    e->probe_mapped = false;
    e->probe_word = 0;
    if (probe >= e->start && probe < e->end) {
        /* One byte of the page: whatever page size the kernel counts vec
         * in, it writes one entry.  qemu-user 7.2 with -p 65536 on a 4 KiB
         * host counts host pages: asked for a whole page it wrote 16 bytes
         * into this one, over the intercept's saved frame (x29, x30 on
         * aarch64), which then returned to 0. */
        unsigned char vec;
        e->probe_mapped = (0 == mincore((void *) (probe & ~(page - 1)), 1, &vec));
        if (e->probe_mapped) {
            e->probe_word = *(volatile long *) probe;
        }
    }
}

static void start_check(uintptr_t watch)
{
    num_events = 0;
    probe = watch;
}

static int report(const char *what, bool ok, const char *detail)
{
    printf("  %-34s %s%s%s\n", what, ok ? "ok" : "FAILED", detail[0] ? ": " : "", detail);
    return ok ? 0 : 1;
}

/*
 * Exactly one event overlaps [start, end), it covers it, and it came while
 * the probe still held the sentinel.
 */
static int expect_release(const char *what, uintptr_t start, uintptr_t end)
{
    int overlapping = 0;
    const volatile event_t *hit = NULL;
    for (int i = 0; i < num_events; i++) {
        if (events[i].start < end && events[i].end > start) {
            overlapping++;
            hit = &events[i];
        }
    }
    char detail[200];
    bool ok = (1 == overlapping && hit->start <= start && hit->end >= end && hit->probe_mapped &&
               SENTINEL == hit->probe_word);
    if (0 == overlapping) {
        snprintf(detail, sizeof(detail), "no event for [%#lx, %#lx)", (unsigned long) start, (unsigned long) end);
    } else if (overlapping > 1) {
        snprintf(detail, sizeof(detail), "%d events for [%#lx, %#lx), expected 1", overlapping,
                 (unsigned long) start, (unsigned long) end);
    } else {
        snprintf(detail, sizeof(detail), "event [%#lx, %#lx)%s%s", (unsigned long) hit->start,
                 (unsigned long) hit->end, hit->start <= start && hit->end >= end ? "" : " does not cover the range",
                 hit->probe_mapped && SENTINEL == hit->probe_word ? ", before the release"
                                                                   : ", but AFTER the pages were gone");
    }
    return report(what, ok, detail);
}

static int expect_no_event(const char *what, uintptr_t start, uintptr_t end)
{
    int overlapping = 0;
    for (int i = 0; i < num_events; i++) {
        overlapping += (events[i].start < end && events[i].end > start);
    }
    char detail[120];
    snprintf(detail, sizeof(detail), "%d events for [%#lx, %#lx)", overlapping, (unsigned long) start,
             (unsigned long) end);
    return report(what, 0 == overlapping, overlapping ? detail : "no event");
}

static char *map_pages_shared(size_t n, int sharing)
{
    char *p = mmap(NULL, n * page, PROT_READ | PROT_WRITE, sharing | MAP_ANONYMOUS, -1, 0);
    if (MAP_FAILED == p) {
        perror("mmap");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        *(long *) (p + i * page) = SENTINEL;
    }
    return p;
}

static char *map_pages(size_t n)
{
    return map_pages_shared(n, MAP_PRIVATE);
}

static int check_munmap(void)
{
    char *p = map_pages(4);
    start_check((uintptr_t) p);
    munmap(p, 4 * page);
    return expect_release("munmap", (uintptr_t) p, (uintptr_t) p + 4 * page);
}

static int check_mremap(void)
{
    int failed = 0;
    char *p = map_pages(2);
    start_check((uintptr_t) p);
    char *q = mremap(p, 2 * page, 64 * page, MREMAP_MAYMOVE);
    failed += expect_release("mremap (may move)", (uintptr_t) p, (uintptr_t) p + 2 * page);
    munmap(q, 64 * page);

    p = map_pages(4);
    start_check((uintptr_t) p + page);
    mremap(p, 4 * page, page, 0);
    failed += expect_release("mremap (shrink in place)", (uintptr_t) p + page, (uintptr_t) p + 4 * page);
    munmap(p, page);

    /* MREMAP_FIXED: whatever was mapped at the destination is replaced,
     * and the old range goes (one call for each probe). */
    for (int probe_dest = 1; probe_dest >= 0; probe_dest--) {
        p = map_pages(2);
        char *dest = map_pages(2);
        char *probed = probe_dest ? dest : p;
        start_check((uintptr_t) probed);
        q = mremap(p, 2 * page, 2 * page, MREMAP_MAYMOVE | MREMAP_FIXED, dest);
        if (probe_dest && NULL == opal_patcher) {
            /* UCX 1.13's mremap hook has no destination parameter at all. */
            report("mremap (fixed: the destination)", true,
                   "not checked: UCX's events (the claim) never report it");
        } else {
            failed += expect_release(probe_dest ? "mremap (fixed: the destination)" : "mremap (fixed: the old range)",
                                     (uintptr_t) probed, (uintptr_t) probed + 2 * page);
        }
        munmap(dest, 2 * page);
        if (MAP_FAILED == q) {
            munmap(p, 2 * page);
        }
    }

    /* Room to grow in place: map 8 pages, give the upper 4 back. */
    p = map_pages(8);
    munmap(p + 4 * page, 4 * page);
    start_check((uintptr_t) p);
    q = mremap(p, 4 * page, 8 * page, 0);
    if (NULL == opal_patcher) {
        /* UCX's events (the claim): libucm reports the old range of every
         * mremap, a false positive that is safe for a cache. */
        report("mremap (grow in place)", true, "not checked: UCX reports every mremap's old range");
    } else {
        failed += expect_no_event("mremap (grow in place)", (uintptr_t) p, (uintptr_t) p + 4 * page);
    }
    munmap(p, MAP_FAILED == q ? 4 * page : 8 * page);
    return failed;
}

/* MADV_REMOVE works on shared memory only: test each advice where it acts. */
static int check_madvise(int advice, const char *what)
{
    char *p = map_pages_shared(4, MADV_REMOVE == advice ? MAP_SHARED : MAP_PRIVATE);
    start_check((uintptr_t) p + page);
    madvise(p + page, 2 * page, advice);
    int failed = expect_release(what, (uintptr_t) p + page, (uintptr_t) p + 3 * page);
    start_check(0); /* a guard page (MADV_GUARD_INSTALL) faults when read */
    munmap(p, 4 * page);
    return failed;
}

/* What UCX's libucm has no hook for: with its events we have none either. */
static bool ucx_owns_hooks(const char *what)
{
    if (NULL != opal_patcher) {
        return false;
    }
    report(what, true, "not checked: UCX's libucm owns the hooks and has no hook for it");
    return true;
}

/* Two ranges in one call, watched one per call (our own pidfd; with none,
 * -1: the event comes before the kernel answers). */
static int check_process_madvise(void)
{
    if (ucx_owns_hooks("process_madvise (MADV_DONTNEED)")) {
        return 0;
    }
    static const char *const what[2] = {"process_madvise (MADV_DONTNEED, range 1)",
                                        "process_madvise (MADV_DONTNEED, range 2)"};
    int failed = 0;
    const int pidfd = (int) syscall(SYS_pidfd_open, getpid(), 0);
    for (int k = 0; k < 2; k++) {
        char *p = map_pages(4);
        struct iovec iov[2] = {{p, page}, {p + 2 * page, 2 * page}};
        start_check((uintptr_t) iov[k].iov_base);
        process_madvise(pidfd, iov, 2, MADV_DONTNEED, 0);
        failed += expect_release(what[k], (uintptr_t) iov[k].iov_base,
                                 (uintptr_t) iov[k].iov_base + iov[k].iov_len);
        start_check(0);
        process_madvise(pidfd, iov, 2, MADV_WILLNEED, 0);
        if (1 == k) {
            failed += expect_no_event("process_madvise (MADV_WILLNEED)", (uintptr_t) p,
                                      (uintptr_t) p + 4 * page);
        }
        munmap(p, 4 * page);
    }
    if (pidfd >= 0) {
        close(pidfd);
    }
    return failed;
}

/* Other pages of the file over the middle two of four. */
static int check_remap_file_pages(void)
{
    if (ucx_owns_hooks("remap_file_pages")) {
        return 0;
    }
    int fd = memfd_create("opal_patcher_info", 0);
    if (fd < 0 || 0 != ftruncate(fd, 8 * page)) {
        return report("remap_file_pages", false, "no memfd");
    }
    char *p = mmap(NULL, 4 * page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (MAP_FAILED == p) {
        return report("remap_file_pages", false, "cannot map the memfd");
    }
    *(long *) (p + page) = SENTINEL;
    start_check((uintptr_t) p + page);
    remap_file_pages(p + page, 2 * page, 0, 4, 0);
    int failed = expect_release("remap_file_pages", (uintptr_t) p + page, (uintptr_t) p + 3 * page);
    munmap(p, 4 * page);
    return failed;
}

/* A memfd's pages released from its mapping by a call on the file: a punched hole, a shrink. */
static int check_file_release(void)
{
    if (ucx_owns_hooks("fallocate, ftruncate")) {
        return 0;
    }
    int fd = memfd_create("opal_patcher_info", 0);
    if (fd < 0 || 0 != ftruncate(fd, 4 * page)) {
        return report("fallocate, ftruncate", false, "no memfd");
    }
    char *p = mmap(NULL, 4 * page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (MAP_FAILED == p) {
        close(fd);
        return report("fallocate, ftruncate", false, "cannot map the memfd");
    }
    for (size_t i = 0; i < 4; i++) {
        *(long *) (p + i * page) = SENTINEL;
    }
    start_check((uintptr_t) p + page);
    fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, page, page);
    int failed = expect_release("fallocate (FALLOC_FL_PUNCH_HOLE)", (uintptr_t) p + page,
                                (uintptr_t) p + 2 * page);
    start_check((uintptr_t) p + 2 * page);
    ftruncate(fd, 2 * page);
    failed += expect_release("ftruncate (shrinking)", (uintptr_t) p + 2 * page,
                             (uintptr_t) p + 4 * page);
    start_check(0);
    ftruncate(fd, 4 * page);
    failed += expect_no_event("ftruncate (growing)", (uintptr_t) p, (uintptr_t) p + 4 * page);
    munmap(p, 4 * page);
    close(fd);
    return failed;
}

static int check_mmap(void)
{
    int failed = 0;
    char *p = map_pages(4);
    start_check((uintptr_t) p);
    mmap(p, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    failed += expect_release("mmap (MAP_FIXED over pages)", (uintptr_t) p, (uintptr_t) p + 2 * page);
    munmap(p, 4 * page);

    /* mmap64 (another function where off_t has 32 bits: i386): the event,
     * and the 64-bit file offset passed on whole (the page holding 'B'). */
    int fd = memfd_create("opal_patcher_info", 0);
    if (fd >= 0 && 0 == ftruncate(fd, 2 * page) && 1 == pwrite(fd, "B", 1, page)) {
        p = map_pages(2);
        start_check((uintptr_t) p);
        char *r = mmap64(p, page, PROT_READ, MAP_SHARED | MAP_FIXED, fd, (off64_t) page);
        failed += expect_release("mmap64 (MAP_FIXED over pages)", (uintptr_t) p,
                                 (uintptr_t) p + page);
        const bool at_offset = r == p && 'B' == r[0];
        failed += report("mmap64 (a file offset)", at_offset,
                         at_offset ? "" : "the mapping does not show the page at the offset given");
        munmap(p, 2 * page);
    }
    if (fd >= 0) {
        close(fd);
    }

    start_check(0);
    p = mmap(NULL, 256 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    failed += expect_no_event("mmap (new PROT_NONE reservation)", (uintptr_t) p, (uintptr_t) p + 256 * page);
    munmap(p + 128 * page, 128 * page);
    start_check(0);
    char *q = mmap(p + 128 * page, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    failed += expect_no_event("mmap (MAP_FIXED_NOREPLACE)", (uintptr_t) q, (uintptr_t) q + page);
    munmap(p, 129 * page);
    return failed;
}

static uintptr_t align_up(uintptr_t x)
{
    return (x + page - 1) & ~(page - 1);
}

static int check_brk(void)
{
    int failed = 0;
    uintptr_t cur = (uintptr_t) sbrk(0);
    start_check(0);
    if ((void *) -1 == sbrk(4 * page)) {
        return report("sbrk", false, "cannot grow the heap");
    }
    failed += expect_no_event("sbrk (grow)", cur, cur + 4 * page);
    *(long *) align_up(cur) = SENTINEL;
    start_check(align_up(cur));
    sbrk(-(intptr_t) (4 * page));
    failed += expect_release("sbrk (shrink)", align_up(cur), align_up(cur + 4 * page));

    brk((void *) (cur + 4 * page));
    *(long *) align_up(cur) = SENTINEL;
    start_check(align_up(cur));
    brk((void *) cur);
    failed += expect_release("brk (shrink)", align_up(cur), align_up(cur + 4 * page));

    /* brk(NULL) only asks where the break is. */
    start_check(0);
    brk(NULL);
    failed += expect_no_event("brk (NULL: a query)", 0, align_up(cur));
    return failed;
}

static int check_shm(void)
{
    int failed = 0;
    int id = shmget(IPC_PRIVATE, 4 * page, IPC_CREAT | 0600);
    if (id < 0) {
        return report("shmdt", false, "shmget failed");
    }
    char *p = shmat(id, NULL, 0);
    *(long *) p = SENTINEL;
    start_check((uintptr_t) p);
    shmdt(p);
    failed += expect_release("shmdt", (uintptr_t) p, (uintptr_t) p + 4 * page);

    char *m = map_pages(4);
    start_check((uintptr_t) m);
    p = shmat(id, m, SHM_REMAP);
    failed += expect_release("shmat (SHM_REMAP over pages)", (uintptr_t) m, (uintptr_t) m + 4 * page);
    if ((void *) -1 != p) {
        shmdt(p);
    }
    shmctl(id, IPC_RMID, NULL);
    return failed;
}

static bool glibc_malloc(void)
{
    if (opal_valgrind_replaces_malloc()) {
        return false; /* valgrind's own malloc answers, whatever dlsym says */
    }
    if (NULL == dlsym || NULL == dlopen) {
        return true;
    }
    void *libc = dlopen(LIBC_SO, RTLD_LAZY | RTLD_NOLOAD);
    bool same = libc && dlsym(libc, "free") == dlsym(RTLD_DEFAULT, "free");
    if (libc) {
        dlclose(libc);
    }
    return same;
}

static int check_allocator(void)
{
    int failed = 0;
    const size_t big = 64UL << 20; /* above glibc's largest dynamic mmap threshold */
    char *p = malloc(big);
    for (size_t off = 0; off < big; off += page) {
        p[off] = 1;
    }
    uintptr_t first = align_up((uintptr_t) p), last = ((uintptr_t) p + big) & ~(page - 1);
    *(long *) first = SENTINEL;
    start_check(first);
    free(p);
    failed += expect_release("free (mmapped block)", first, last);

    /* realloc that must move: a mapping right behind the block blocks growth. */
    p = malloc(big);
    first = align_up((uintptr_t) p);
    last = ((uintptr_t) p + big) & ~(page - 1);
    *(long *) first = SENTINEL;
    char *fence = mmap((void *) align_up((uintptr_t) p + big), page, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    start_check(first);
    char *q = realloc(p, 2 * big);
    failed += expect_release("realloc (moving a large block)", first, last);
    free(q);
    if (MAP_FAILED != fence) {
        munmap(fence, page);
    }

    /* A heap block, kept from the top by a guard behind it, freed and then
     * trimmed: its pages are reported once, by whichever call releases
     * them (malloc_trim's madvise, or a heap shrink). */
    mallopt(M_MMAP_THRESHOLD, 4 << 20);
    const size_t mid = 1 << 20;
    char *block = malloc(mid);
    char *guard = malloc(64 << 10); /* too big for tcache and fastbins: from the top */
    const char *what = guard > block ? "malloc_trim (free heap block)" : "free + malloc_trim (heap block)";
    memset(block, 1, mid);
    uintptr_t middle = align_up((uintptr_t) block + mid / 2);
    *(long *) middle = SENTINEL;
    start_check(middle);
    free(block);
    malloc_trim(0);
    failed += expect_release(what, middle, middle + page);
    free(guard);
    return failed;
}

/*
 * The copy of libc that dlmopen brings into a new namespace has its own
 * allocator and its own munmap: free() of a large block there must
 * produce an event too.
 */
static int check_namespace(void)
{
    if (NULL == opal_patcher) {
        return report("free (a dlmopen namespace's libc)", true,
                      "not checked: UCX's events (the claim) do not come from other namespaces");
    }
    if (OPAL_MEM_HOOKS_NUM_VARIANTS < 3) {
        return report("free (a dlmopen namespace's libc)", true,
                      "not checked: a build with 2 variants (--with-mem-hooks-variants) patches "
                      "no namespace's libc");
    }
    void *ns = NULL != dlmopen ? dlmopen(LM_ID_NEWLM, LIBC_SO, RTLD_NOW | RTLD_LOCAL) : NULL;
    void *(*ns_malloc)(size_t) = ns ? (void *(*) (size_t)) dlsym(ns, "malloc") : NULL;
    void (*ns_free)(void *) = ns ? (void (*)(void *)) dlsym(ns, "free") : NULL;
    if (NULL == ns_malloc || NULL == ns_free) {
        printf("  (namespace check skipped: no dlmopen of %s here%s%s)\n", LIBC_SO,
               NULL != dlmopen ? ": " : "", NULL != dlmopen ? dlerror() : "");
        if (ns) {
            dlclose(ns);
        }
        return 0;
    }
    const size_t big = 64UL << 20;
    char *p = ns_malloc(big);
    int failed = 0;
    if (NULL != p) {
        uintptr_t first = align_up((uintptr_t) p), last = ((uintptr_t) p + big) & ~(page - 1);
        *(long *) first = SENTINEL;
        start_check(first);
        ns_free(p);
        failed = expect_release("free (a dlmopen namespace's libc)", first, last);
    }
    dlclose(ns);
    return failed;
}

/* Bytes no longer ours (not intact): another hooker patched over us (it owns the hook now). */
static void print_patch(const mca_patcher_base_patch_t *patch, bool intact, void *arg)
{
    (void) arg;
    Dl_info info = {0};
    if (dladdr) {
        dladdr((void *) patch->patch_orig, &info);
    }
    printf("  %-14s at %#lx in %s: %s%s\n", patch->patch_symbol ? patch->patch_symbol : "(address)",
           (unsigned long) patch->patch_orig, info.dli_fname ? info.dli_fname : "the executable",
           patch->patch_how ? patch->patch_how : "",
           intact ? "" : " [patched over by another hooker]");
}

void opal_patcher_info_print_patches(void)
{
    mca_patcher_base_module_t *patcher = opal_patcher;
    if (NULL == patcher) {
        return;
    }
    printf("Patches applied:\n");
    mca_patcher_base_foreach_patch(patcher, print_patch, NULL);
    if (patcher->patch_limits) {
        printf("Limits of %s: %s\n", mca_patcher_base_selected_name(), patcher->patch_limits);
    }
    const char *tradeoff = opal_mem_hooks_alloc_tradeoff();
    if (tradeoff) {
        printf("Trade-off: %s\n", tradeoff);
    }
}

int opal_patcher_info_selftest(void)
{
    page = (size_t) sysconf(_SC_PAGESIZE);
    self_thread = pthread_self();
    int rc = opal_mem_hooks_register_release(record_event, NULL);
    if (OPAL_SUCCESS != rc) {
        printf("Self-test: the memory hooks could not be set up: %s\n", opal_strerror(rc));
        return -1;
    }
    printf("Selected: %s (support level %#x)\n", mca_patcher_base_selected_name(),
           opal_mem_hooks_support_level());
    /* Who owns the hooks: our patches, or UCX's (the claim "ucx"). */
    printf("Events from: %s%s\n", mca_patcher_base_selected_name(),
           NULL == opal_patcher ? " (UCX's libucm owns the hooks; nothing patched by us)" : "");
    if (opal_mem_hooks_ucx_fed()) {
        printf("UCX's UCM_EVENT_VM_UNMAPPED: fed by us (libucm's own mmap hooks are off; each of "
               "our events goes to ucm_vm_munmap)\n");
    }
    opal_patcher_info_print_patches();

    printf("Events:\n");
    int failed = check_munmap() + check_mremap() +
                 check_madvise(MADV_DONTNEED, "madvise (MADV_DONTNEED)") +
                 check_madvise(MADV_FREE, "madvise (MADV_FREE)") +
                 check_madvise(MADV_REMOVE, "madvise (MADV_REMOVE)") + check_mmap() + check_brk() +
                 check_shm() + check_process_madvise() + check_remap_file_pages() +
                 check_file_release();
    if (!ucx_owns_hooks("madvise (MADV_GUARD_INSTALL)")) {
        failed += check_madvise(MADV_GUARD_INSTALL, "madvise (MADV_GUARD_INSTALL)");
    }
    if (glibc_malloc()) {
        failed += check_allocator() + check_namespace();
    } else {
        printf("  (allocator checks skipped: free() is not glibc's)\n");
    }
    opal_mem_hooks_unregister_release(record_event);
    printf("Self-test: %s (%d failed)\n", failed ? "FAILED" : "passed", failed);
    return failed;
}
