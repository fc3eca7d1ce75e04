/*
 * Which pages of this process a change to a file releases (see the
 * header).  The facts are the kernel's (mm/truncate.c, mm/shmem.c,
 * fs/hugetlbfs, fs/xfs, fs/ext4):
 *
 *  - truncation to a smaller size takes every page from the new size,
 *    rounded up to a page, to the end of the file out of every mapping of
 *    the file, shared and private, the private ones' copied pages too; the
 *    page that holds the new end stays, its tail zeroed;
 *  - a punched hole in tmpfs (memfd, /dev/shm, SysV-less shmem) and in
 *    hugetlbfs takes out of the mappings only the pages (the huge pages)
 *    wholly inside it, and not the private mappings' copied pages; a page
 *    cut by an edge of the hole is zeroed in place: it keeps its physical
 *    page, which is no release;
 *  - other filesystems differ: xfs writes back and drops the pages of the
 *    hole rounded out to its block (at least a page), cut ones included,
 *    and reads them back later into new pages; zeroing a range does as
 *    much on ext4 and xfs.  So outside tmpfs and hugetlbfs a hole is
 *    rounded out, to st_blksize when that is more than a page (an event
 *    too many costs a registration; one too few, its pages);
 *  - collapsing or inserting a range moves every page after its start.
 *
 * The pages are found in /proc/self/maps by the device (major:minor, as
 * stat's st_dev gives it, also for memfd's and /dev/shm's tmpfs) and
 * inode.  Except on btrfs, whose st_dev is a subvolume's and not the
 * device the maps show, and overlayfs, where the maps show the file
 * underneath on older kernels: there the inode alone is matched (another
 * file with its number costs an event too many; overlayfs's xino numbers
 * are not matched at all).
 */
#include "opal_config.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>

#include "opal/memoryhooks/memory_file_extents.h"
#include "opal/util/proc_maps.h"

#ifndef FALLOC_FL_PUNCH_HOLE
#    define FALLOC_FL_PUNCH_HOLE 0x02
#endif
#ifndef FALLOC_FL_COLLAPSE_RANGE
#    define FALLOC_FL_COLLAPSE_RANGE 0x08
#endif
#ifndef FALLOC_FL_ZERO_RANGE
#    define FALLOC_FL_ZERO_RANGE 0x10
#endif
#ifndef FALLOC_FL_INSERT_RANGE
#    define FALLOC_FL_INSERT_RANGE 0x20
#endif
/* Linux 6.17 (ext4): drops the range's pages as ZERO_RANGE does. */
#ifndef FALLOC_FL_WRITE_ZEROES
#    define FALLOC_FL_WRITE_ZEROES 0x80
#endif

bool opal_mem_extents_file_stat(opal_mem_file_t *file, int fd, const char *path)
{
    const int saved_errno = errno;
    file->fd = fd;
    file->path = path;
    file->fs_known = false;
    /* A null path is the caller's error (the call fails with EFAULT): stat64 may not see it. */
    const bool ok = (fd >= 0 || NULL != path) &&
                    0 == (fd >= 0 ? fstat64(fd, &file->st) : stat64(path, &file->st)) &&
                    S_ISREG(file->st.st_mode);
    errno = saved_errno;
    return ok;
}

static void file_statfs(opal_mem_file_t *file)
{
    if (file->fs_known) {
        return;
    }
    const int saved_errno = errno;
    struct statfs64 fs;
    const bool ok = 0 == (file->fd >= 0 ? fstatfs64(file->fd, &fs) : statfs64(file->path, &fs));
    file->fs_type = ok ? (unsigned long) fs.f_type : 0;
    file->fs_bsize = ok ? (unsigned long) fs.f_bsize : 0;
    file->fs_known = true;
    errno = saved_errno;
}

/* x rounded down and up to unit (a power of two), the latter capped at the end of the offsets. */
static uint64_t round_down(uint64_t x, uint64_t unit)
{
    return x & ~(unit - 1);
}

static uint64_t round_up(uint64_t x, uint64_t unit)
{
    return x > UINT64_MAX - unit ? UINT64_MAX : (x + unit - 1) & ~(unit - 1);
}

/* The unit a filesystem works in: size where it is a power of two above the page, else the page. */
static uint64_t unit_of(uint64_t size)
{
    const uint64_t page = opal_mem_hooks_page_size;
    return size > page && 0 == (size & (size - 1)) ? size : page;
}

bool opal_mem_extents_fallocate(opal_mem_file_t *file, int mode, uint64_t offset, uint64_t len,
                                uint64_t *lo, uint64_t *hi)
{
    const uint64_t end = offset > UINT64_MAX - len ? UINT64_MAX : offset + len;
    if (mode & (FALLOC_FL_COLLAPSE_RANGE | FALLOC_FL_INSERT_RANGE)) {
        *lo = round_down(offset, unit_of((uint64_t) file->st.st_blksize));
        *hi = UINT64_MAX;
        return true;
    }
    if (!(mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE | FALLOC_FL_WRITE_ZEROES))) {
        return false;
    }
    file_statfs(file);
    if ((unsigned long) TMPFS_MAGIC == file->fs_type ||
        (unsigned long) HUGETLBFS_MAGIC == file->fs_type) {
        /* The whole pages (huge pages) inside: f_bsize is hugetlbfs's huge page. */
        const uint64_t unit = unit_of((uint64_t) file->fs_bsize);
        *lo = round_up(offset, unit);
        *hi = UINT64_MAX == end ? end : round_down(end, unit);
    } else {
        const uint64_t unit = unit_of((uint64_t) file->st.st_blksize);
        *lo = round_down(offset, unit);
        *hi = round_up(end, unit);
    }
    return *lo < *hi;
}

typedef struct file_walk_t {
    uint64_t inode, lo, hi;
    unsigned int dev_major, dev_minor;
    bool any_dev;
    void (*fn)(uintptr_t start, uintptr_t end, void *arg);
    void *arg;
} file_walk_t;

static bool file_line(const opal_proc_maps_entry_t *entry, void *arg)
{
    const file_walk_t *walk = arg;
    if (entry->inode != walk->inode || (!walk->any_dev && (entry->dev_major != walk->dev_major ||
                                                           entry->dev_minor != walk->dev_minor))) {
        return true;
    }
    /* The line maps offsets [offset, offset + its length) of the file. */
    const uint64_t offset = entry->offset, len = entry->end - entry->start;
    const uint64_t from = offset > walk->lo ? offset : walk->lo;
    const uint64_t to = offset + len < walk->hi ? offset + len : walk->hi;
    if (from < to) {
        walk->fn(entry->start + (uintptr_t) (from - offset),
                 entry->start + (uintptr_t) (to - offset), walk->arg);
    }
    return true;
}

void opal_mem_extents_file_ranges(opal_mem_file_t *file, uint64_t lo, uint64_t hi,
                                  void (*fn)(uintptr_t start, uintptr_t end, void *arg), void *arg)
{
    if (lo >= hi || 0 == file->st.st_ino) {
        return;
    }
    file_statfs(file);
    file_walk_t walk = {
        .inode = (uint64_t) file->st.st_ino,
        .lo = lo,
        .hi = hi,
        .dev_major = major(file->st.st_dev),
        .dev_minor = minor(file->st.st_dev),
        .any_dev = (unsigned long) BTRFS_SUPER_MAGIC == file->fs_type ||
                   (unsigned long) OVERLAYFS_SUPER_MAGIC == file->fs_type,
        .fn = fn,
        .arg = arg,
    };
    const int saved_errno = errno;
    (void) opal_proc_maps_foreach(file_line, &walk);
    errno = saved_errno;
}
