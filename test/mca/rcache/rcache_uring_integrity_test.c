/*
 * End-to-end proof that no cached registration outlives its pages, with
 * io_uring fixed buffers as the device: register a buffer through the
 * rcache (leave_pinned), READ_FIXED known data into it and check it at the
 * program's address; release the memory one way; get new memory at the
 * SAME address; register again and READ_FIXED new data.  A stale
 * registration makes the kernel write into the old pages and the program
 * does not see the new data: the silent corruption RDMA users meet.
 *
 * Usage: rcache_uring_integrity_test [--raw] [--expect-stale]
 *   default        every release way must keep the data intact
 *   --raw          the releases no patch sees instead (syscall(SYS_munmap),
 *                  SYS_madvise DONTNEED, SYS_mremap, SYS_mmap MAP_FIXED):
 *                  intact only with the userfaultfd source (rcache_base_uffd
 *                  on or strict; SKIP where userfaultfd is refused)
 *   --expect-stale the negative control (run with mpi_leave_pinned=1 and
 *                  rcache_base_release_hooks=0, or --raw without the
 *                  source): the test must SEE the corruption, proving it
 *                  can fail
 * With rcache_base_verify_frames=1 the sanitizer's count is checked too:
 * zero normally, non-zero in the negative control.
 */
#include "opal_config.h"

#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "opal/mca/rcache/base/base.h"
#include "opal/mca/rcache/base/rcache_base_device_uring.h"
#include "opal/memoryhooks/memory.h"
#include "opal/memoryhooks/memory_uffd.h"
#include "opal/runtime/opal.h"
#include "test/support/test_util.h"

#define SIZE (256 * 1024) /* above glibc's mmap threshold */

static struct io_uring ring;
static mca_rcache_base_device_uring_t dev;
static mca_rcache_base_module_t *rcache;
static int src_fd; /* memfd holding the data to read */
static size_t page;

/* Fill the source with a pattern of 'seed' and READ_FIXED it into buf through the rcache. */
static int read_fixed(unsigned char *buf, unsigned seed)
{
    static unsigned char pattern[SIZE];
    for (size_t i = 0; i < SIZE; i++) {
        pattern[i] = (unsigned char) (seed * 131 + i * 7 + (i >> 12));
    }
    if (SIZE != pwrite(src_fd, pattern, SIZE, 0)) {
        return -1;
    }
    mca_rcache_base_registration_t *reg;
    int rc = rcache->rcache_register(rcache, buf, SIZE, 0, MCA_RCACHE_ACCESS_LOCAL_WRITE, &reg);
    if (OPAL_SUCCESS != rc) {
        fprintf(stderr, "rcache_register: %s\n", opal_strerror(rc));
        return -1;
    }
    struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
    io_uring_prep_read_fixed(sqe, src_fd, buf, SIZE, 0,
                             ((mca_rcache_base_device_uring_reg_t *) reg)->buf_index);
    io_uring_submit(&ring);
    struct io_uring_cqe *cqe;
    io_uring_wait_cqe(&ring, &cqe);
    int res = cqe->res;
    io_uring_cqe_seen(&ring, cqe);
    rcache->rcache_deregister(rcache, reg);
    if (SIZE != res) {
        fprintf(stderr, "READ_FIXED: %d\n", res);
        return -1;
    }
    return 0 == memcmp(buf, pattern, SIZE) ? 1 : 0; /* 1 intact, 0 stale */
}

/*
 * Allocate with 'alloc' until it returns address 'want' (keeping the misses
 * meanwhile).  An address, not a pointer: the old block is gone.
 */
static void *again_at(uintptr_t want, void *(*alloc)(void))
{
    void *miss[64];
    int n = 0;
    void *p = alloc();
    while (p && (uintptr_t) p != want && n < 64) {
        miss[n++] = p;
        p = alloc();
    }
    while (n > 0) {
        free(miss[--n]);
    }
    return (uintptr_t) p == want ? p : (free(p), NULL);
}

static void *alloc_big(void)
{
    return malloc(SIZE);
}

static void *map_at(void *addr)
{
    void *p = mmap(addr, SIZE, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | (addr ? MAP_FIXED_NOREPLACE : 0), -1, 0);
    return MAP_FAILED == p ? NULL : p;
}

/*
 * Each way: acquire a buffer, return it; release it and get new memory at
 * the same address, return that (NULL: could not get the same address).
 */
typedef struct way_t {
    const char *name;
    unsigned char *(*acquire)(void);
    unsigned char *(*release_and_reacquire)(unsigned char *buf);
    void (*dispose)(unsigned char *buf);
} way_t;

static unsigned char *acq_mmap(void)
{
    return map_at(NULL);
}
static void disp_munmap(unsigned char *b)
{
    munmap(b, SIZE);
}
static unsigned char *rel_munmap(unsigned char *b)
{
    munmap(b, SIZE);
    return map_at(b);
}
static unsigned char *rel_madvise(unsigned char *b)
{
    madvise(b, SIZE, MADV_DONTNEED);
    return b;
}
static unsigned char *rel_map_fixed(unsigned char *b)
{
    void *p = mmap(b, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    return MAP_FAILED == p ? NULL : p;
}

/* A fixed mmap threshold: glibc would otherwise raise it at the first free and
 * serve the next block from the heap, never at the same address. */
static unsigned char *acq_malloc(void)
{
    mallopt(M_MMAP_THRESHOLD, SIZE / 2);
    return malloc(SIZE);
}
static void disp_free(unsigned char *b)
{
    free(b);
}
static unsigned char *rel_free(unsigned char *b)
{
    uintptr_t addr = (uintptr_t) b;
    free(b);
    return again_at(addr, alloc_big);
}
static unsigned char *rel_realloc(unsigned char *b)
{
    /* Grow far enough that the block moves (mremap or copy); b is released. */
    uintptr_t addr = (uintptr_t) b;
    unsigned char *moved = realloc(b, 64 * SIZE);
    if ((uintptr_t) moved == addr) {
        return moved; /* grew in place: same pages, still a valid test of a hit */
    }
    unsigned char *again = again_at(addr, alloc_big);
    free(moved);
    return again;
}

/* Heap (brk) memory: glibc trims the top of the heap with a negative sbrk. */
static unsigned char *acq_heap(void)
{
    mallopt(M_MMAP_THRESHOLD, 64 * SIZE);
    mallopt(M_TRIM_THRESHOLD, SIZE / 2);
    return malloc(SIZE);
}
static unsigned char *rel_trim(unsigned char *b)
{
    uintptr_t addr = (uintptr_t) b;
    free(b);
    malloc_trim(0);
    return again_at(addr, alloc_big);
}

static int shm_id = -1;
static unsigned char *acq_shm(void)
{
    shm_id = shmget(IPC_PRIVATE, SIZE, IPC_CREAT | 0600);
    void *p = shm_id < 0 ? (void *) -1 : shmat(shm_id, NULL, 0);
    if (shm_id >= 0) {
        shmctl(shm_id, IPC_RMID, NULL); /* gone once detached */
    }
    return (void *) -1 == p ? NULL : p;
}
static unsigned char *rel_shmdt(unsigned char *b)
{
    shmdt(b);
    shm_id = shmget(IPC_PRIVATE, SIZE, IPC_CREAT | 0600);
    void *p = shm_id < 0 ? (void *) -1 : shmat(shm_id, b, 0);
    if (shm_id >= 0) {
        shmctl(shm_id, IPC_RMID, NULL);
    }
    return (void *) -1 == p ? NULL : p;
}
static void disp_shmdt(unsigned char *b)
{
    shmdt(b);
}

/* The releases only our patcher intercepts (no peer does). */
#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#define MADV_GUARD_REMOVE  103
#endif
static unsigned char *rel_process_madvise(unsigned char *b)
{
    const int pidfd = (int) syscall(SYS_pidfd_open, getpid(), 0);
    struct iovec iov = {b, SIZE};
    /* Linux 6.13 and later take MADV_DONTNEED from a process for itself. */
    ssize_t done = pidfd < 0 ? -1 : process_madvise(pidfd, &iov, 1, MADV_DONTNEED, 0);
    if (pidfd >= 0) {
        close(pidfd);
    }
    return SIZE == done ? b : NULL;
}
static unsigned char *rel_guard(unsigned char *b)
{
    /* The guard replaces the pages; removing it leaves new zero pages (Linux 6.13). */
    if (0 != madvise(b, SIZE, MADV_GUARD_INSTALL)) {
        return NULL;
    }
    return 0 == madvise(b, SIZE, MADV_GUARD_REMOVE) ? b : NULL;
}
static unsigned char *acq_file(void)
{
    int fd = memfd_create("rcache-integrity-file", 0);
    void *p = fd < 0 || 0 != ftruncate(fd, 2 * SIZE)
                  ? MAP_FAILED
                  : mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (fd >= 0) {
        close(fd);
    }
    return MAP_FAILED == p ? NULL : p;
}
static unsigned char *rel_remap_file_pages(unsigned char *b)
{
    /* The file's second half over the range: other pages at the same address. */
    return 0 == remap_file_pages(b, SIZE, 0, SIZE / page, 0) ? b : NULL;
}

/* The same releases as system calls of our own: no libc entry point, no patch. */
static unsigned char *rel_raw_munmap(unsigned char *b)
{
    syscall(SYS_munmap, b, SIZE);
    return map_at(b);
}
static unsigned char *rel_raw_madvise(unsigned char *b)
{
    syscall(SYS_madvise, b, SIZE, MADV_DONTNEED);
    return b;
}
static unsigned char *rel_raw_mremap(unsigned char *b)
{
    /* Move the pages away (to a reservation of our own), then map new ones here. */
    void *to = mmap(NULL, SIZE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    long moved = syscall(SYS_mremap, b, SIZE, SIZE, MREMAP_MAYMOVE | MREMAP_FIXED, to);
    if (moved != (long) to) {
        return NULL;
    }
    syscall(SYS_munmap, to, SIZE);
    return map_at(b);
}
static unsigned char *rel_raw_map_fixed(unsigned char *b)
{
    long p = test_raw_mmap(b, SIZE, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED);
    return p == (long) b ? b : NULL;
}

static const way_t raw_ways[] = {
    {"syscall(SYS_munmap)", acq_mmap, rel_raw_munmap, disp_munmap},
    {"syscall(SYS_madvise)", acq_mmap, rel_raw_madvise, disp_munmap},
    {"syscall(SYS_mremap)", acq_mmap, rel_raw_mremap, disp_munmap},
    {"syscall(SYS_mmap, FIXED)", acq_mmap, rel_raw_map_fixed, disp_munmap},
};

static const way_t ways[] = {
    {"munmap", acq_mmap, rel_munmap, disp_munmap},
    {"madvise(MADV_DONTNEED)", acq_mmap, rel_madvise, disp_munmap},
    {"mmap(MAP_FIXED)", acq_mmap, rel_map_fixed, disp_munmap},
    {"shmdt", acq_shm, rel_shmdt, disp_shmdt},
    {"free", acq_malloc, rel_free, disp_free},
    {"realloc", acq_malloc, rel_realloc, disp_free},
    {"malloc_trim", acq_heap, rel_trim, disp_free},
    {"process_madvise", acq_mmap, rel_process_madvise, disp_munmap},
    {"madvise(GUARD_INSTALL)", acq_mmap, rel_guard, disp_munmap},
    {"remap_file_pages", acq_file, rel_remap_file_pages, disp_munmap},
};

int main(int argc, char **argv)
{
    bool raw = argc > 1 && 0 == strcmp(argv[1], "--raw");
    bool expect_stale = argc > 1 && 0 == strcmp(argv[argc - 1], "--expect-stale");
    page = (size_t) sysconf(_SC_PAGESIZE);
    if (OPAL_SUCCESS != opal_init_util(&argc, &argv)) {
        fprintf(stderr, "opal_init_util failed\n");
        return 1;
    }
    if (0 != io_uring_queue_init(8, &ring, 0)) {
        TEST_SKIP("io_uring is not available here (kernel or seccomp)");
    }
    int rc = mca_rcache_base_device_uring_init(&dev, &ring, 64);
    if (OPAL_ERR_NOT_SUPPORTED == rc) {
        TEST_SKIP("the kernel has no sparse io_uring buffer tables (needs 5.19)");
    }
    CHECK(OPAL_SUCCESS == rc);
    src_fd = memfd_create("rcache-integrity", 0);
    CHECK(src_fd >= 0);
    mca_rcache_base_resources_t res;
    mca_rcache_base_device_uring_resources(&dev, &res);
    const char *uffd_off = raw && !expect_stale ? opal_mem_uffd_probe() : NULL;
    if (uffd_off) {
        TEST_SKIP("the userfaultfd source cannot start here: %s", uffd_off);
    }
    rcache = mca_rcache_base_module_create(NULL, NULL, &res);
    if (NULL == rcache) {
        fprintf(stderr, "cannot create the rcache (see above)\n");
        return 1;
    }
    if (!expect_stale && !rcache->rcache_hooked) {
        TEST_SKIP("leave_pinned is not in effect with memory hooks here (no patcher can work)");
    }

    unsigned stale = 0, tested = 0;
    const way_t *list = raw ? raw_ways : ways;
    size_t nways = raw ? sizeof(raw_ways) / sizeof(raw_ways[0]) : sizeof(ways) / sizeof(ways[0]);
    for (size_t w = 0; w < nways; w++) {
        const way_t *way = &list[w];
        unsigned char *buf = way->acquire();
        if (NULL == buf) {
            printf("%-24s could not allocate: not tested\n", way->name);
            continue;
        }
        int first = read_fixed(buf, 2 * (unsigned) w + 1);
        CHECK_MSG(1 == first, "%s: first read", way->name);
        unsigned char *again = way->release_and_reacquire(buf);
        if (NULL == again) {
            printf("%-24s did not get the same address back: not tested\n", way->name);
            continue;
        }
        memset(again, 0, SIZE); /* the program's own view of its new memory */
        int second = read_fixed(again, 2 * (unsigned) w + 2);
        tested++;
        stale += 0 == second;
        printf("%-24s %s\n", way->name, 1 == second ? "intact" : 0 == second ? "STALE" : "error");
        CHECK_MSG(second >= 0, "%s: second read failed", way->name);
        if (!expect_stale) {
            CHECK_MSG(1 == second, "%s: stale registration: READ_FIXED wrote into the old pages",
                      way->name);
        }
        way->dispose(again);
        /* Without hooks (negative control) the next way must not start from our stale entry. */
        rcache->rcache_invalidate_range(rcache, again, SIZE);
    }
    CHECK(tested >= 3);
    uint64_t caught = mca_rcache_base_frames_mismatches();
    if (expect_stale) {
        CHECK_MSG(stale > 0, "the negative control saw no corruption: the test cannot fail");
        if (mca_rcache_base_verify_frames) {
            CHECK_MSG(caught > 0, "the sanitizer caught none of %u stale hits", stale);
        }
    } else {
        CHECK_MSG(0 == caught, "the sanitizer reported %llu stale hits", (unsigned long long) caught);
    }
    printf("%u of %u release ways stale, %llu caught by the frame sanitizer\n", stale, tested,
           (unsigned long long) caught);
    mca_rcache_base_module_destroy(rcache);
    mca_rcache_base_device_uring_fini(&dev);
    io_uring_queue_exit(&ring);
    opal_finalize_util();
    return test_finish(expect_stale ? "rcache_uring_integrity_test (negative control)"
                                    : "rcache_uring_integrity_test");
}
