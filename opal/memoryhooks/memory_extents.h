/*
 * How far a release reaches where the kernel goes further than the call's
 * arguments say (memory_extents.c): a hugetlb mapping's lengths are rounded
 * up to its huge page, shmdt detaches every fragment of the segment it
 * finds, and brk never moves below the heap's start.  For the intercepts
 * (memory_intercepts.c), on their cold paths; hook-path rules: no
 * allocation, no lock, errno kept.
 */
#ifndef OPAL_MEMORYHOOKS_MEMORY_EXTENTS_H
#define OPAL_MEMORYHOOKS_MEMORY_EXTENTS_H

#include <stddef.h>
#include <stdint.h>

#include "opal/memoryhooks/memory_registry.h"

/* Read what the extents need from /proc (the default huge page, the heap's start): at install. */
void opal_mem_extents_init(void) OPAL_MEM_HOOKS_HIDDEN;

/* The length mmap(MAP_FIXED) at addr replaces: len, up to the huge page of MAP_HUGETLB or a
 * hugetlbfs fd (asked of the fd only where addr is aligned to some huge page). */
size_t opal_mem_extents_mmap_len(uintptr_t addr, size_t len, int flags,
                                 int fd) OPAL_MEM_HOOKS_HIDDEN;

/* The default huge page size (0: no hugetlb here, or not known). */
extern size_t opal_mem_extents_huge_page OPAL_MEM_HOOKS_HIDDEN;

void opal_mem_extents_mremap_huge(uintptr_t old, size_t *old_size,
                                  size_t *new_size) OPAL_MEM_HOOKS_HIDDEN;

/*
 * mremap's lengths as the kernel takes them: rounded up to the huge page
 * when old is in a hugetlb mapping.  Only an address aligned to a huge
 * page can start one, and only lengths that are not whole huge pages
 * change: the smaps lookup (tens of us) is left to those.  (A mapping of
 * pages larger than the default one, 1 GiB, with lengths in whole default
 * pages is missed.)
 */
static inline void opal_mem_extents_mremap_lens(uintptr_t old, size_t *old_size, size_t *new_size)
{
    const size_t unit = opal_mem_extents_huge_page;
    if (__builtin_expect(0 != unit && 0 == (old & (unit - 1)) &&
                             0 != ((*old_size | *new_size) & (unit - 1)),
                         0)) {
        opal_mem_extents_mremap_huge(old, old_size, new_size);
    }
}

/* The length shmat(SHM_REMAP) at addr replaces for a segment of size bytes. */
size_t opal_mem_extents_shmat_len(uintptr_t addr, size_t size) OPAL_MEM_HOOKS_HIDDEN;

/* The end of what shmdt(addr) detaches (addr: nothing, or not known). */
uintptr_t opal_mem_extents_shmdt_end(uintptr_t addr) OPAL_MEM_HOOKS_HIDDEN;

/* The lowest address the break can move to (0: not known). */
extern uintptr_t opal_mem_extents_heap_start OPAL_MEM_HOOKS_HIDDEN;

#endif
