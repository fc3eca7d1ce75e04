/*
 * For patchers that only redirect calls between objects (GOT): glibc's
 * malloc calls munmap, mremap, madvise and brk from inside libc, where no
 * GOT slot is involved.  We intercept the allocator's entry points instead
 * and announce, before calling it, what it is about to release:
 *
 *  - free/realloc/reallocarray of a chunk glibc mmapped (IS_MMAPPED in the
 *    chunk header): the whole mapping;
 *  - malloc_trim: every heap the allocator could trim (the [heap] segment
 *    and the 64 MiB-aligned heaps of the other arenas);
 *  - automatic trimming inside free: switched off with
 *    mallopt(M_TRIM_THRESHOLD, -1) while we are installed, so it never
 *    happens behind our back.  That is the trade-off opal_patcher_info
 *    prints.
 *
 * Only when the process uses glibc's malloc; another allocator (jemalloc,
 * tcmalloc) calls munmap/madvise through its GOT, which is patched.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <gnu/lib-names.h>
#include <malloc.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/memoryhooks/memory_internal.h"
#include "opal/util/output.h"
#include "opal/util/proc_maps.h"
#include "opal/util/valgrind.h"

#pragma weak dlsym
#pragma weak dlopen
#pragma weak dlclose

/* glibc's chunk header (two words) precedes the user pointer: prev_size, then size
 * with flag bits; IS_MMAPPED marks a chunk that is its own mapping, which
 * starts prev_size bytes before the header. */
#define GLIBC_IS_MMAPPED 0x2
#define GLIBC_SIZE_BITS 0x7
/* The size of a non-main arena's heap on LP64 (2 * DEFAULT_MMAP_THRESHOLD_MAX). */
#define GLIBC_HEAP_MAX_SIZE (64UL << 20)
#define GLIBC_DEFAULT_TRIM_THRESHOLD (128 * 1024)

static struct {
    void (*free)(void *);
    void *(*realloc)(void *, size_t);
    void *(*reallocarray)(void *, size_t, size_t);
    int (*malloc_trim)(size_t);
} chain;

static bool installed;
/* False when the free that slots reached is not glibc's (another hooker,
 * UCX's libucm in reloc mode, put its own allocator behind the GOT): its
 * block headers are not glibc's. */
static bool glibc_chunks;

/* Off the common path: a chunk with the IS_MMAPPED bit set. */
static __attribute__((noinline, cold)) void announce_mmapped(const size_t *header)
{
    /* Another allocator behind the GOT (UCX's dlmalloc) also keeps a size
     * word there, with other meanings for its bits: believe the bit only
     * when the blocks are glibc's. */
    if (__atomic_load_n(&glibc_chunks, __ATOMIC_RELAXED)) {
        uintptr_t start = (uintptr_t) header - header[0];
        size_t len = header[0] + (header[1] & ~(size_t) GLIBC_SIZE_BITS);
        opal_mem_hooks_dispatch(start, len, true);
    }
}

/* Every free passes here: a test of one bit, then the chain. */
static inline void announce_mmapped_chunk(void *p)
{
    const size_t *header = (const size_t *) p - 2;
    if (NULL != p && __builtin_expect(header[1] & GLIBC_IS_MMAPPED, 0)) {
        announce_mmapped(header);
    }
}

static void intercept_free(void *p)
{
    announce_mmapped_chunk(p);
    chain.free(p);
}

/* realloc may move or shrink an mmapped chunk (mremap) or free it. */
static void *intercept_realloc(void *p, size_t size)
{
    announce_mmapped_chunk(p);
    return chain.realloc(p, size);
}

static void *intercept_reallocarray(void *p, size_t n, size_t size)
{
    announce_mmapped_chunk(p);
    return chain.reallocarray(p, n, size);
}

static bool announce_trimmable(const opal_proc_maps_entry_t *entry, void *arg)
{
    bool is_heap = 0 == strcmp(entry->path_start, "[heap]");
    bool is_arena_heap = '\0' == entry->path_start[0] && 0 == entry->inode &&
                         (entry->prot & PROT_WRITE) && 0 == (entry->start & (GLIBC_HEAP_MAX_SIZE - 1));
    if (is_heap || is_arena_heap) {
        opal_mem_hooks_dispatch(entry->start, entry->end - entry->start, false);
    }
    return true;
}

static int intercept_malloc_trim(size_t pad)
{
    /* Outside the allocator's lock yet: from_alloc is false. */
    opal_proc_maps_foreach(announce_trimmable, NULL);
    return chain.malloc_trim(pad);
}

static const struct {
    const char *name;
    void *entry;
    void **chain;
} alloc_targets[] = {
    {"free", (void *) intercept_free, (void **) &chain.free},
    {"realloc", (void *) intercept_realloc, (void **) &chain.realloc},
    {"reallocarray", (void *) intercept_reallocarray, (void **) &chain.reallocarray},
    {"malloc_trim", (void *) intercept_malloc_trim, (void **) &chain.malloc_trim},
};

/* libc's own free, or NULL when it cannot be told (static executable). */
static void *libc_free(void)
{
    if (NULL == dlsym || NULL == dlopen) {
        return NULL;
    }
    void *libc = dlopen(LIBC_SO, RTLD_LAZY | RTLD_NOLOAD);
    void *fn = libc ? dlsym(libc, "free") : NULL;
    if (libc) {
        dlclose(libc);
    }
    return fn;
}

/* Is glibc's malloc the one callers reach?  (valgrind redirects malloc to
 * its own without changing what dlsym says.) */
static bool glibc_malloc_in_use(void)
{
    if (opal_valgrind_replaces_malloc()) {
        return false;
    }
    if (NULL == dlsym || NULL == dlopen) {
        return true; /* static executable: libc's allocator is linked in */
    }
    void *libc = dlopen(LIBC_SO, RTLD_LAZY | RTLD_NOLOAD);
    if (NULL == libc) {
        return false;
    }
    bool same = dlsym(libc, "free") == dlsym(RTLD_DEFAULT, "free");
    dlclose(libc);
    return same;
}

/* What opal_mem_hooks_alloc_inspect() found. */
static bool glibc_in_use;
static void *glibc_free;

void opal_mem_hooks_alloc_inspect(void)
{
    glibc_in_use = glibc_malloc_in_use();
    glibc_free = glibc_in_use ? libc_free() : NULL;
}

int opal_mem_hooks_install_alloc_intercepts(void)
{
    if (!glibc_in_use) {
        return OPAL_SUCCESS;
    }
    /* Set before free can reach the intercept; cleared below if the chain
     * turns out to be another allocator. */
    __atomic_store_n(&glibc_chunks, true, __ATOMIC_RELAXED);
    for (size_t i = 0; i < sizeof(alloc_targets) / sizeof(alloc_targets[0]); i++) {
        int rc = opal_patcher->patch_symbol(alloc_targets[i].name, (uintptr_t) alloc_targets[i].entry,
                                            (uintptr_t *) alloc_targets[i].chain);
        if (OPAL_SUCCESS != rc || NULL == *alloc_targets[i].chain) {
            opal_output("cannot intercept %s: %s", alloc_targets[i].name,
                        OPAL_SUCCESS != rc ? opal_strerror(rc) : "no definition to chain to");
            return OPAL_SUCCESS != rc ? rc : OPAL_ERR_NOT_FOUND;
        }
    }
    if (NULL != glibc_free && (void *) chain.free != glibc_free) {
        __atomic_store_n(&glibc_chunks, false, __ATOMIC_RELAXED);
        opal_output_verbose(opal_patcher_base_framework.framework_verbose, 1,
                            "free reaches another allocator than glibc's (%p, not %p): its "
                            "blocks are not announced by the allocator intercepts",
                            (void *) chain.free, glibc_free);
    }
    mallopt(M_TRIM_THRESHOLD, -1);
    installed = true;
    return OPAL_SUCCESS;
}

void opal_mem_hooks_uninstall_alloc_intercepts(void)
{
    /* The GOT slots come back with the patcher's restore; here only the
     * allocator's setting.  Chains stay valid for threads still inside. */
    if (installed) {
        mallopt(M_TRIM_THRESHOLD, GLIBC_DEFAULT_TRIM_THRESHOLD);
        installed = false;
    }
}

const char *opal_mem_hooks_alloc_tradeoff(void)
{
    return installed ? "glibc malloc: free/realloc/malloc_trim intercepted to announce "
                       "libc-internal releases; automatic heap trimming is off "
                       "(M_TRIM_THRESHOLD=-1) and glibc's dynamic mmap threshold is frozen; "
                       "a non-main arena heap freed entirely is unmapped unseen"
                     : NULL;
}
