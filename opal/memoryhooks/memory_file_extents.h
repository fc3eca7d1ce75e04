/*
 * Which pages of this process a change to a file releases (for the
 * intercepts of ftruncate, truncate and fallocate in memory_intercepts.c).
 * The kernel takes a file's released pages out of every mapping of the
 * file, wherever it is mapped: such a call names offsets of the file,
 * never addresses.  Hook-path rules: no allocation, no lock, errno kept.
 */
#ifndef OPAL_MEMORYHOOKS_MEMORY_FILE_EXTENTS_H
#define OPAL_MEMORYHOOKS_MEMORY_FILE_EXTENTS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "opal/memoryhooks/memory_registry.h"

/* The file a call changes: its fd, or with fd < 0 its path. */
typedef struct opal_mem_file_t {
    int fd;
    const char *path;
    struct stat64 st;
    unsigned long fs_type; /* statfs's f_type and f_bsize, read when first needed */
    unsigned long fs_bsize;
    bool fs_known;
} opal_mem_file_t;

/* fstat (or stat) the file: whether it is a regular file, the only kind whose pages a call can
 * release (what the others are given fails). */
bool opal_mem_extents_file_stat(opal_mem_file_t *file, int fd,
                                const char *path) OPAL_MEM_HOOKS_HIDDEN;

/*
 * The offsets [*lo, *hi) of the file that fallocate(mode, offset, len)
 * takes out of its mappings: false when it takes none (only punching a
 * hole, zeroing, collapsing and inserting a range do; allocating, as
 * posix_fallocate does, never).
 */
bool opal_mem_extents_fallocate(opal_mem_file_t *file, int mode, uint64_t offset, uint64_t len,
                                uint64_t *lo, uint64_t *hi) OPAL_MEM_HOOKS_HIDDEN;

/*
 * Call fn(start, end, arg) for each range of this process's address space
 * that maps offsets [lo, hi) of the file, in address order: the lines of
 * /proc/self/maps with the file's device and inode.
 */
void opal_mem_extents_file_ranges(opal_mem_file_t *file, uint64_t lo, uint64_t hi,
                                  void (*fn)(uintptr_t start, uintptr_t end, void *arg),
                                  void *arg) OPAL_MEM_HOOKS_HIDDEN;

#endif
