/*
 * Huge-page memory: see the header.  The mapping is made a unit larger
 * than asked and trimmed to its aligned part (the trims are munmap calls
 * like any other: the hooks report them, and they cover nothing cached).
 */
#include "opal_config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "opal/mca/rcache/base/rcache_base_hugemem.h"

#define UNIT MCA_RCACHE_BASE_HUGEMEM_UNIT

/* Whole pages: the last 2 MiB unit may be a part of one (small pages there). */
static size_t mapped_size(size_t bytes, size_t page)
{
    return (bytes + page - 1) & ~(page - 1);
}

void *mca_rcache_base_hugemem_alloc(size_t bytes)
{
    size_t page = (size_t) sysconf(_SC_PAGESIZE), size = mapped_size(bytes, page);
    if (0 == bytes || size < bytes || size + UNIT < size) {
        return NULL;
    }
    /* One unit more than needed, then the slack on both sides given back: aligned. */
    char *map = mmap(NULL, size + UNIT - page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
    if (MAP_FAILED == map) {
        return NULL;
    }
    char *p = (char *) (((uintptr_t) map + UNIT - 1) & ~(uintptr_t) (UNIT - 1));
    if (p > map) {
        munmap(map, (size_t) (p - map));
    }
    if (map + size + UNIT - page > p + size) {
        munmap(p + size, (size_t) (map + size + UNIT - page - (p + size)));
    }
#ifdef MADV_HUGEPAGE
    (void) madvise(p, size, MADV_HUGEPAGE); /* EINVAL where the kernel has no THP: small pages */
#endif
    /*
     * Populated now: a structure read before it is written (an index
     * probed before its insert) would otherwise fault twice per page, the
     * zero page then a copy.  Written by hand only where the kernel does
     * not know the advice (before 5.14: EINVAL); any other error fails the
     * allocation here rather than a fault later.
     */
#ifdef MADV_POPULATE_WRITE
    if (0 == madvise(p, size, MADV_POPULATE_WRITE)) {
        return p;
    }
    if (EINVAL != errno) {
        munmap(p, size);
        return NULL;
    }
#endif
    for (size_t off = 0; off < size; off += page) {
        ((volatile char *) p)[off] = 0;
    }
    return p;
}

void mca_rcache_base_hugemem_free(void *p, size_t bytes)
{
    if (p) {
        munmap(p, mapped_size(bytes, (size_t) sysconf(_SC_PAGESIZE)));
    }
}

const char *mca_rcache_base_hugemem_unavailable(void)
{
    char mode[128] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (NULL == f) {
        return "this kernel has no transparent huge pages (no /sys/kernel/mm/transparent_hugepage)";
    }
    bool read = NULL != fgets(mode, sizeof(mode), f);
    fclose(f);
    if (read && (strstr(mode, "[always]") || strstr(mode, "[madvise]"))) {
        return NULL;
    }
    return "transparent huge pages are off (/sys/kernel/mm/transparent_hugepage/enabled)";
}
