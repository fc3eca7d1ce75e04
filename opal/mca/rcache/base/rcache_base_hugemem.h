/*
 * Memory for a cache's large, long-lived structures (page index tables of
 * 2 MiB and more, grdma's registration slabs past its first 2.5 MiB):
 * mappings that start at a 2 MiB boundary and are marked MADV_HUGEPAGE, so
 * that the kernel backs them with transparent huge pages where its policy
 * allows ("always" or "madvise" in /sys/kernel/mm/transparent_hugepage;
 * with "never", or on a kernel without them, they are small pages as any
 * mapping).  A cache of 1e5-1e6 registrations reads these lines at
 * random over tens of thousands of 4 KiB pages, more than a TLB holds, and
 * filling the cache paid a page fault every few dozen registrations.  The price:
 * the last unit of a mapping is resident whole once touched, and where
 * the kernel must compact memory to find a huge page (its "defrag"
 * setting), the allocation waits for it.
 */
#ifndef OPAL_MCA_RCACHE_BASE_RCACHE_BASE_HUGEMEM_H
#define OPAL_MCA_RCACHE_BASE_RCACHE_BASE_HUGEMEM_H

#include <stddef.h>

#define MCA_RCACHE_BASE_HUGEMEM_UNIT ((size_t) 1 << 21)

/*
 * bytes (rounded up to whole pages), zeroed and populated (written once
 * now, so that no page faults when first used); NULL if out of memory.
 */
void *mca_rcache_base_hugemem_alloc(size_t bytes);
/* A mapping from alloc, with the bytes asked for then. */
void mca_rcache_base_hugemem_free(void *p, size_t bytes);

/*
 * NULL when the kernel may back such memory with huge pages (its policy
 * "always" or "madvise"), else why not (for opal_patcher_info).
 */
const char *mca_rcache_base_hugemem_unavailable(void);

#endif
