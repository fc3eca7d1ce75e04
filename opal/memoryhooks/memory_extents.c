/*
 * How far a release reaches where the kernel goes further than the call's
 * arguments (see the header).  The facts are the kernel's (mm/mmap.c,
 * mm/mremap.c, ipc/shm.c, mm/mmap.c's brk), read here from /proc:
 *
 *  - mmap rounds the length up to the huge page for MAP_HUGETLB (the size
 *    in the flags' MAP_HUGE_SHIFT bits, else the default one) and for a file
 *    on hugetlbfs (its block size); MAP_FIXED replaces all of that, and
 *    refuses an address that is not aligned to that huge page;
 *  - mremap rounds both lengths up to the huge page of a hugetlb mapping;
 *  - shmat maps the whole segment, and a SHM_HUGETLB segment's mapping is
 *    its size rounded up to the huge page (the segment does not say which
 *    size: the default one is assumed, where addr is aligned to it);
 *  - shmdt finds the first SysV mapping at or above addr whose offset in its
 *    segment is its distance from addr, and detaches it with every other
 *    fragment of the same segment at that distance (munmap and mprotect
 *    leave fragments): also when the one at addr is gone, and whatever
 *    the segment's permissions (no IPC_STAT needed);
 *  - brk below the heap's start moves nothing (glibc's brk then returns 0).
 *    The start is read from /proc/self/stat, where an emulator (valgrind,
 *    qemu-user) shows its own numbers: then none is believed.
 */
#include "opal_config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "opal/memoryhooks/memory_extents.h"
#include "opal/util/proc_maps.h"

#ifndef MAP_HUGETLB
#    define MAP_HUGETLB 0x40000
#endif
#ifndef MAP_HUGE_SHIFT
#    define MAP_HUGE_SHIFT 26
#endif
#define MAP_HUGE_LOG_MASK 0x3f

uintptr_t opal_mem_extents_heap_start = 0;
size_t opal_mem_extents_huge_page = 0;
/* The smallest huge page of any size the kernel offers (0: none). */
static size_t smallest_huge_page = 0;

/* The start of a /proc file into buf, a string (empty when it cannot be read). */
static void read_start(const char *path, char *buf, size_t size)
{
    ssize_t n = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        n = read(fd, buf, size - 1);
        close(fd);
    }
    buf[n > 0 ? n : 0] = '\0';
}

/* Field 'wanted' (1-based, as proc(5) numbers them) of /proc/self/stat, or 0. */
static uintptr_t self_stat_field(int wanted)
{
    char buf[1024];
    read_start("/proc/self/stat", buf, sizeof(buf));
    /* The command (field 2) is in parentheses and may hold spaces and ')': the last ')' ends it. */
    char *p = strrchr(buf, ')');
    for (int field = 2; p && field < wanted; field++) {
        p = strchr(p + 1, ' ');
    }
    return p ? (uintptr_t) strtoull(p + 1, NULL, 10) : 0;
}

/* "Hugepagesize:    2048 kB" in /proc/meminfo, or 0. */
static size_t meminfo_huge_page(void)
{
    char buf[4096];
    read_start("/proc/meminfo", buf, sizeof(buf));
    const char *p = strstr(buf, "Hugepagesize:");
    return p ? (size_t) strtoul(p + 13, NULL, 10) << 10 : 0;
}

/*
 * The smallest of the sizes in /sys/kernel/mm/hugepages ("hugepages-64kB",
 * "hugepages-2048kB", ...; the default one need not be the smallest).  With
 * hugetlb but no sysfs to read it from: the small page, so that every
 * address is taken for a possible huge one.
 */
static size_t smallest_huge(size_t default_huge)
{
    DIR *dir = default_huge ? opendir("/sys/kernel/mm/hugepages") : NULL;
    if (NULL == dir) {
        return default_huge ? (size_t) sysconf(_SC_PAGESIZE) : 0;
    }
    size_t smallest = default_huge;
    for (struct dirent *e; NULL != (e = readdir(dir));) {
        unsigned long kib;
        if (1 == sscanf(e->d_name, "hugepages-%lukB", &kib) && 0 != kib &&
            (size_t) kib << 10 < smallest) {
            smallest = (size_t) kib << 10;
        }
    }
    closedir(dir);
    return smallest;
}

void opal_mem_extents_init(void)
{
    const int saved_errno = errno;
    /* start_brk (field 47, Linux 3.5), believed only where the break we see
     * lies above it: an emulator that keeps the program's break itself
     * (valgrind, qemu-user) shows its own process's numbers, or none. */
    const uintptr_t start_brk = self_stat_field(47);
    opal_mem_extents_heap_start = start_brk <= (uintptr_t) syscall(SYS_brk, 0) ? start_brk : 0;
    opal_mem_extents_huge_page = meminfo_huge_page();
    smallest_huge_page = smallest_huge(opal_mem_extents_huge_page);
    errno = saved_errno;
}

static size_t round_up(size_t len, size_t unit)
{
    return unit ? (len + unit - 1) & ~(unit - 1) : len;
}

size_t opal_mem_extents_mmap_len(uintptr_t addr, size_t len, int flags, int fd)
{
    if (flags & MAP_ANONYMOUS) {
        if (!(flags & MAP_HUGETLB)) {
            return len;
        }
        const int log = (flags >> MAP_HUGE_SHIFT) & MAP_HUGE_LOG_MASK;
        return round_up(len, log ? (size_t) 1 << log : opal_mem_extents_huge_page);
    }
    /* hugetlbfs takes a MAP_FIXED address only where it is aligned to the
     * file's huge page: one that no huge page size divides is a small-page
     * file's, and the hook path makes no fstatfs for it. */
    const size_t unit = smallest_huge_page;
    if (0 == unit || 0 != (addr & (unit - 1))) {
        return len;
    }
    const int saved_errno = errno;
    struct statfs fs;
    const bool huge = 0 == fstatfs(fd, &fs) &&
                      (unsigned long) HUGETLBFS_MAGIC == (unsigned long) fs.f_type;
    errno = saved_errno;
    return huge ? round_up(len, (size_t) fs.f_bsize) : len;
}

void opal_mem_extents_mremap_huge(uintptr_t old, size_t *old_size, size_t *new_size)
{
    const int saved_errno = errno;
    const size_t page = opal_proc_maps_page_size(NULL, old);
    errno = saved_errno;
    if (page > opal_mem_hooks_page_size) {
        *old_size = round_up(*old_size, page);
        *new_size = round_up(*new_size, page);
    }
}

size_t opal_mem_extents_shmat_len(uintptr_t addr, size_t size)
{
    const size_t unit = opal_mem_extents_huge_page;
    return unit && 0 == (addr & (unit - 1)) ? round_up(size, unit) : size;
}

typedef struct shmdt_walk_t {
    uintptr_t addr, end;
    uint64_t shmid; /* a SysV mapping's inode column */
    bool found;
} shmdt_walk_t;

static bool shmdt_fragment(const opal_proc_maps_entry_t *entry, void *arg)
{
    shmdt_walk_t *walk = arg;
    if (entry->start >= walk->addr && 0 == strncmp(entry->path_start, "/SYSV", 5) &&
        entry->start - walk->addr == entry->offset &&
        (!walk->found || entry->inode == walk->shmid)) {
        walk->found = true;
        walk->shmid = entry->inode;
        walk->end = entry->end;
    }
    return true;
}

uintptr_t opal_mem_extents_shmdt_end(uintptr_t addr)
{
    shmdt_walk_t walk = {.addr = addr, .end = addr};
    const int saved_errno = errno;
    (void) opal_proc_maps_foreach(shmdt_fragment, &walk);
    errno = saved_errno;
    return walk.end;
}
