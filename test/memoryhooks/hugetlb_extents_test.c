/*
 * The kernel rounds a hugetlb mapping's lengths up to its huge page; each
 * call that replaces or releases one reports the whole huge page, however
 * short the length given (memory_extents.c):
 *
 *  - mmap(MAP_FIXED | MAP_HUGETLB) and mmap(MAP_FIXED) of a hugetlbfs file
 *    (memfd_create's MFD_HUGETLB) of one small page replace a huge page;
 *  - shmdt of a SHM_HUGETLB segment of one small page detaches a huge page,
 *    and shmat(SHM_REMAP) of it replaces one;
 *  - mremap(MREMAP_FIXED) of a hugetlb mapping, lengths of one small page,
 *    moves a huge page away and replaces one at the destination;
 *  - a hole punched in a hugetlbfs file takes only the huge pages wholly
 *    inside it: none for a hole that cuts two, the first for one over it.
 *
 * Each needs free huge pages: as root the test adds what it needs to
 * /proc/sys/vm/nr_hugepages (and puts the count back), else it skips.
 * Skipped under qemu-user, which passes the host's smaps through (where
 * the intercept of mremap learns a mapping's page size).
 */
#include "opal_config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"
#include "test/support/emulated.h"
#include "test/support/ranges.h"
#include "test/support/test_util.h"

#define PAGE        ((size_t) sysconf(_SC_PAGESIZE))
#define HUGE_NEEDED 4 /* the most any one case holds at once is 2 */

static size_t huge; /* the default huge page size */

/* A number from /proc/meminfo ("Name:   123 kB" in bytes; a count as it is), or 0. */
static unsigned long meminfo(const char *name, unsigned long unit)
{
    char line[256];
    unsigned long value = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    while (f && fgets(line, sizeof(line), f)) {
        if (0 == strncmp(line, name, strlen(name))) {
            value = strtoul(line + strlen(name), NULL, 10) * unit;
        }
    }
    if (f) {
        fclose(f);
    }
    return value;
}

static const char nr_path[] = "/proc/sys/vm/nr_hugepages";
static long nr_before = -1, nr_set = -1;

static long read_nr(void)
{
    long n = -1;
    FILE *f = fopen(nr_path, "r");
    if (f && 1 != fscanf(f, "%ld", &n)) {
        n = -1;
    }
    if (f) {
        fclose(f);
    }
    return n;
}

static bool write_nr(long n)
{
    FILE *f = fopen(nr_path, "w");
    bool ok = f && fprintf(f, "%ld\n", n) > 0;
    return f && 0 == fclose(f) && ok;
}

/* The count as it was, unless someone else changed it meanwhile. */
static void put_nr_back(void)
{
    if (nr_before >= 0 && read_nr() == nr_set) {
        (void) write_nr(nr_before);
    }
}

static void get_huge_pages(void)
{
    if (test_emulated()) {
        TEST_SKIP("under qemu-user /proc/self/smaps is the host's: a guest mapping's huge page "
                  "cannot be read there");
    }
    huge = meminfo("Hugepagesize:", 1024);
    if (0 == huge) {
        TEST_SKIP("no hugetlb pages in this kernel (no Hugepagesize in /proc/meminfo)");
    }
    const unsigned long free_pages = meminfo("HugePages_Free:", 1);
    if (free_pages >= HUGE_NEEDED) {
        return;
    }
    nr_before = read_nr();
    nr_set = nr_before + (long) (HUGE_NEEDED - free_pages);
    if (nr_before < 0 || !write_nr(nr_set)) {
        TEST_SKIP("%lu free huge pages of the %d needed, and %s cannot be raised (%s): run as root",
                  free_pages, HUGE_NEEDED, nr_path, strerror(errno));
    }
    atexit(put_nr_back);
    if (meminfo("HugePages_Free:", 1) < HUGE_NEEDED) {
        TEST_SKIP("the kernel found %lu free huge pages of the %d asked (memory too fragmented)",
                  meminfo("HugePages_Free:", 1), HUGE_NEEDED);
    }
}

/* A huge-page-aligned stretch of n huge pages, small pages, written. */
static char *aligned_small_pages(size_t n)
{
    char *p = mmap(NULL, (n + 1) * huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                   0);
    CHECK(MAP_FAILED != p);
    if (MAP_FAILED == p) {
        return NULL;
    }
    char *aligned = (char *) (((uintptr_t) p + huge - 1) & ~(uintptr_t) (huge - 1));
    memset(aligned, 1, n * huge);
    return aligned;
}

static void check_huge_reported(const char *what, const void *at)
{
    CHECK_MSG(test_ranges_cover((uintptr_t) at, (uintptr_t) at + huge),
              "%s: the huge page at %p not reported (%d events, the first %zu bytes)", what, at,
              test_nranges, test_nranges ? (size_t) (test_range_end[0] - test_range_start[0]) : 0);
}

static void test_mmap_fixed_hugetlb(void)
{
    char *p = aligned_small_pages(1);
    if (NULL == p) {
        return;
    }
    test_nranges = 0;
    void *q = mmap(p, PAGE, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_HUGETLB, -1, 0);
    CHECK_MSG(q == p, "mmap(MAP_FIXED | MAP_HUGETLB): %s", strerror(errno));
    check_huge_reported("mmap(MAP_FIXED | MAP_HUGETLB) of one small page", p);
    munmap(p, huge);
}

static void test_mmap_fixed_hugetlbfs_file(void)
{
    const int fd = memfd_create("hugetlb_extents", MFD_HUGETLB | MFD_CLOEXEC);
    CHECK_MSG(fd >= 0, "memfd_create(MFD_HUGETLB): %s", strerror(errno));
    char *p = fd >= 0 && 0 == ftruncate(fd, (off_t) huge) ? aligned_small_pages(1) : NULL;
    if (NULL != p) {
        test_nranges = 0;
        void *q = mmap(p, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
        CHECK_MSG(q == p, "mmap(MAP_FIXED) of a hugetlbfs file: %s", strerror(errno));
        check_huge_reported("mmap(MAP_FIXED) of one small page of a hugetlbfs file", p);
        munmap(p, huge);
    }
    if (fd >= 0) {
        close(fd);
    }
}

/* A hole in a hugetlbfs file takes only the huge pages wholly inside it (memory_file_extents.c). */
static void test_punch_hugetlbfs_file(void)
{
    const int fd = memfd_create("hugetlb_extents_hole", MFD_HUGETLB | MFD_CLOEXEC);
    CHECK_MSG(fd >= 0, "memfd_create(MFD_HUGETLB): %s", strerror(errno));
    char *p = MAP_FAILED;
    if (fd >= 0 && 0 == ftruncate(fd, (off_t) (2 * huge))) {
        p = mmap(NULL, 2 * huge, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        CHECK_MSG(MAP_FAILED != p, "mmap of a hugetlbfs file: %s", strerror(errno));
    }
    if (MAP_FAILED != p) {
        memset(p, 4, 2 * huge);
        test_nranges = 0;
        const int cut = fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t) PAGE,
                                  (off_t) huge);
        CHECK_MSG(0 == cut, "fallocate(PUNCH_HOLE) in a hugetlbfs file: %s", strerror(errno));
        CHECK_MSG(0 == test_nranges,
                  "a hole that cuts two huge pages and holds none: %d events, the first [%#lx, "
                  "%#lx)",
                  test_nranges, (unsigned long) test_range_start[0],
                  (unsigned long) test_range_end[0]);
        test_nranges = 0;
        CHECK(0 == fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t) huge));
        CHECK_MSG(1 == test_nranges && (uintptr_t) p == test_range_start[0] &&
                      (uintptr_t) p + huge == test_range_end[0],
                  "a hole over the first huge page: %d events, the first [%#lx, %#lx), not "
                  "[%p, %p)",
                  test_nranges, (unsigned long) test_range_start[0],
                  (unsigned long) test_range_end[0], (void *) p, (void *) (p + huge));
        munmap(p, 2 * huge);
    }
    if (fd >= 0) {
        close(fd);
    }
}

static void test_shm_hugetlb(void)
{
    const int id = shmget(IPC_PRIVATE, PAGE, IPC_CREAT | SHM_HUGETLB | 0600);
    CHECK_MSG(id >= 0, "shmget(SHM_HUGETLB): %s", strerror(errno));
    if (id < 0) {
        return;
    }
    char *p = shmat(id, NULL, 0);
    CHECK_MSG((void *) -1 != p, "shmat: %s", strerror(errno));
    if ((void *) -1 != p) {
        memset(p, 2, huge);
        test_nranges = 0;
        CHECK(0 == shmdt(p));
        check_huge_reported("shmdt of a SHM_HUGETLB segment of one small page", p);
    }
    char *d = aligned_small_pages(1);
    if (NULL != d) {
        test_nranges = 0;
        CHECK_MSG(d == shmat(id, d, SHM_REMAP), "shmat(SHM_REMAP): %s", strerror(errno));
        check_huge_reported("shmat(SHM_REMAP) of a SHM_HUGETLB segment of one small page", d);
        shmdt(d);
        munmap(d, huge);
    }
    (void) shmctl(id, IPC_RMID, NULL);
}

static void test_mremap_hugetlb(void)
{
    char *h = aligned_small_pages(1), *d = aligned_small_pages(1);
    if (NULL == h || NULL == d) {
        return;
    }
    CHECK(h == mmap(h, huge, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_HUGETLB, -1, 0));
    memset(h, 3, huge);
    test_nranges = 0;
    void *moved = mremap(h, PAGE, PAGE, MREMAP_MAYMOVE | MREMAP_FIXED, d);
    CHECK_MSG(moved == d, "mremap of a hugetlb mapping: %s", strerror(errno));
    check_huge_reported("mremap(MREMAP_FIXED) of a hugetlb mapping, its old huge page", h);
    check_huge_reported("mremap(MREMAP_FIXED) of a hugetlb mapping, the destination", d);
    munmap(d, huge);
}

int main(void)
{
    get_huge_pages();
    CHECK(OPAL_SUCCESS == opal_init_util(NULL, NULL));
    CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(test_ranges_record, NULL));
    test_mmap_fixed_hugetlb();
    test_mmap_fixed_hugetlbfs_file();
    test_shm_hugetlb();
    test_mremap_hugetlb();
    test_punch_hugetlbfs_file();
    CHECK(OPAL_SUCCESS == opal_mem_hooks_unregister_release(test_ranges_record));
    opal_finalize_util();
    return test_finish("hugetlb_extents_test");
}
