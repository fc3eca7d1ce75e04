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
 *    happens behind our back, also when the program asks for it (mallopt
 *    is intercepted; its value is set when we uninstall).  That is the
 *    trade-off opal_patcher_info prints.
 *
 * Only when the process uses glibc's malloc; another allocator (jemalloc,
 * tcmalloc) calls munmap/madvise through its GOT, which is patched.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <errno.h>
#include <gnu/lib-names.h>
#include <limits.h>
#include <malloc.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/mca/patcher/base/base_dl.h"
#include "opal/memoryhooks/memory_patch.h"
#include "opal/memoryhooks/memory_variants.h"
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
/* The size of a non-main arena's heap, and its alignment: 2 *
 * DEFAULT_MMAP_THRESHOLD_MAX, which is 4 MiB * sizeof(long) on 64-bit
 * targets and 512 KiB on 32-bit ones. */
#define GLIBC_HEAP_MAX_SIZE          (sizeof(long) >= 8 ? 8UL * 1024 * 1024 * sizeof(long) : 1UL << 20)
#define GLIBC_DEFAULT_TRIM_THRESHOLD (128 * 1024)

/* Each variant (memory_variants.h) chains to an allocator: the one callers
 * reach, or a namespace's copy of glibc's; glibc_chunks says whether its
 * blocks are glibc's. */
static bool installed;

/*
 * Off the common path: a chunk with the IS_MMAPPED bit set.  free keeps
 * errno (POSIX.1-2024; glibc saves it on entry, which is after this
 * runs, and GCC assumes it): a callback that changes it must not show.
 */
static __attribute__((noinline, cold)) void announce_mmapped(const opal_mem_variant_t *var,
                                                             const size_t *header)
{
    /* Another allocator behind the GOT (UCX's dlmalloc) also keeps a size
     * word there, with other meanings for its bits: believe the bit only
     * when the blocks are glibc's. */
    if (__atomic_load_n(&var->glibc_chunks, __ATOMIC_RELAXED)) {
        const int saved_errno = errno;
        uintptr_t start = (uintptr_t) header - header[0];
        size_t len = header[0] + (header[1] & ~(size_t) GLIBC_SIZE_BITS);
        opal_mem_hooks_report(start, len); /* the one-callback case inline */
        errno = saved_errno;
    }
}

/* Every free passes here: a test of one bit, then the chain. */
static inline void announce_mmapped_chunk(const opal_mem_variant_t *var, void *p)
{
    /* The header only of a block: free(NULL) has none (nor any pointer arithmetic). */
    if (NULL == p) {
        return;
    }
    const size_t *header = (const size_t *) p - 2;
    if (__builtin_expect(header[1] & GLIBC_IS_MMAPPED, 0)) {
        announce_mmapped(var, header);
    }
}

ENTRY_INLINE void free_common(opal_mem_variant_t *var, void *p)
{
    announce_mmapped_chunk(var, p);
    var->chain.free(p);
}
/* Defines intercept_free_0 .. _<NUM_VARIANTS-1>. */
DEFINE_VOID_ENTRIES(free, (void *p), (p))

/* realloc may move or shrink an mmapped chunk (mremap) or free it. */
ENTRY_INLINE void *realloc_common(opal_mem_variant_t *var, void *p, size_t size)
{
    announce_mmapped_chunk(var, p);
    return var->chain.realloc(p, size);
}
/* Defines intercept_realloc_0 .. _<NUM_VARIANTS-1>. */
DEFINE_ENTRIES(realloc, void *, (void *p, size_t size), (p, size))

ENTRY_INLINE void *reallocarray_common(opal_mem_variant_t *var, void *p, size_t n, size_t size)
{
    announce_mmapped_chunk(var, p);
    return var->chain.reallocarray(p, n, size);
}
/* Defines intercept_reallocarray_0 .. _<NUM_VARIANTS-1>. */
DEFINE_ENTRIES(reallocarray, void *, (void *p, size_t n, size_t size), (p, n, size))

/* glibc's header of a non-main arena's heap, at its start: its arena, the
 * heap before it, the size in use and the size made read-write. */
typedef struct glibc_heap_info_t {
    void *arena;
    uintptr_t prev;
    size_t size, mprotect_size;
} glibc_heap_info_t;

/*
 * Where a non-main arena's heap starts in an anonymous read-write line, or
 * 0.  Heaps start at a multiple of their maximum size: a line that starts
 * there is taken as one (as it always was).  An anonymous mapping with the
 * same flags right below a heap (MAP_NORESERVE, like glibc's own heaps,
 * JVMs, Go) merges with it into a line that starts lower: then the first
 * such multiple in the line is one if a heap header there is plausible.
 */
static uintptr_t arena_heap_in(const opal_proc_maps_entry_t *entry)
{
    if ('\0' != entry->path_start[0] || 0 != entry->inode || !(entry->prot & PROT_WRITE)) {
        return 0;
    }
    const uintptr_t at = (entry->start + GLIBC_HEAP_MAX_SIZE - 1) & ~(GLIBC_HEAP_MAX_SIZE - 1);
    if (at == entry->start) {
        return at;
    }
    if (at >= entry->end || entry->end - at < opal_mem_hooks_page_size) {
        return 0;
    }
    const glibc_heap_info_t *heap = (const glibc_heap_info_t *) at;
    const bool plausible = heap->size <= heap->mprotect_size && 0 != heap->mprotect_size &&
                           heap->mprotect_size <= entry->end - at &&
                           0 == (heap->mprotect_size & (opal_mem_hooks_page_size - 1)) &&
                           0 == (heap->prev & (GLIBC_HEAP_MAX_SIZE - 1));
    return plausible ? at : 0;
}

static bool announce_trimmable(const opal_proc_maps_entry_t *entry, void *arg)
{
    /* The brk heap: "[heap]" in the kernel's maps, and the mapping that
     * ends at the program break (qemu-user's emulated maps name it not). */
    const uintptr_t brk_end = *(const uintptr_t *) arg;
    const bool is_heap = 0 == strcmp(entry->path_start, "[heap]") ||
                         (entry->start < brk_end && brk_end <= entry->end);
    const uintptr_t from = is_heap ? entry->start : arena_heap_in(entry);
    if (0 != from) {
        opal_mem_hooks_dispatch(from, entry->end - from, false);
    }
    return true;
}

/* A namespace's copy trims its own heaps: announcing every heap of the
 * process is more than needed, never less. */
static int malloc_trim_common(opal_mem_variant_t *var, size_t pad)
{
    /* Outside the allocator's lock yet: from_alloc is false. */
    uintptr_t brk_end = (uintptr_t) syscall(SYS_brk, 0);
    opal_proc_maps_foreach(announce_trimmable, &brk_end);
    return var->chain.malloc_trim(pad);
}
/* Defines intercept_malloc_trim_0 .. _<NUM_VARIANTS-1>. */
DEFINE_ENTRIES(malloc_trim, int, (size_t pad), (pad))

/* The trim threshold the program asked for while trimming is held off. */
static int program_trim_threshold = GLIBC_DEFAULT_TRIM_THRESHOLD;

/* A number glibc takes for a size, up to end (a tunable's ':' or the string's end); -1 if none. */
static long long trim_number(const char *text, char end)
{
    char *stop = NULL;
    const unsigned long long n = NULL != text ? strtoull(text, &stop, 0) : 0;
    if (NULL == text || stop == text || (*stop != end && *stop != '\0')) {
        return -1;
    }
    return n > INT_MAX ? INT_MAX : (long long) n;
}

/*
 * The threshold glibc started with: the tunable glibc.malloc.trim_threshold
 * (GLIBC_TUNABLES), else its older name MALLOC_TRIM_THRESHOLD_, else the
 * default.  One a program set with mallopt before our setup cannot be read
 * back: the default (or the environment's) comes back at the last finalize.
 */
static int starting_trim_threshold(void)
{
    static const char tunable[] = "glibc.malloc.trim_threshold=";
    const char *tunables = getenv("GLIBC_TUNABLES");
    const char *at = NULL != tunables ? strstr(tunables, tunable) : NULL;
    long long n = NULL != at ? trim_number(at + sizeof(tunable) - 1, ':') : -1;
    if (n < 0) {
        n = trim_number(getenv("MALLOC_TRIM_THRESHOLD_"), '\0');
    }
    return n < 0 ? GLIBC_DEFAULT_TRIM_THRESHOLD : (int) n;
}

/*
 * A trim threshold would let free shrink the heap from inside libc, where
 * no GOT slot sees it: trimming stays off, and the base namespace's
 * allocator gets the program's value when we uninstall.
 */
static int mallopt_common(opal_mem_variant_t *var, int param, int value)
{
    if (M_TRIM_THRESHOLD != param) {
        return var->chain.mallopt(param, value);
    }
    if (&opal_mem_variants[VARIANT_GLOBAL] == var) {
        __atomic_store_n(&program_trim_threshold, value, __ATOMIC_RELAXED);
    }
    return var->chain.mallopt(M_TRIM_THRESHOLD, -1);
}
/* Defines intercept_mallopt_0 .. _<NUM_VARIANTS-1>. */
DEFINE_ENTRIES(mallopt, int, (int param, int value), (param, value))

typedef struct alloc_target_t {
    const char *name;
    uintptr_t entry[NUM_VARIANTS];
    size_t chain; /* its chain in a variant: offsetof(opal_mem_variant_t, ...) */
} alloc_target_t;

#define ALLOC_TARGET(fn) {#fn, ENTRY_ADDRESSES(fn), offsetof(opal_mem_variant_t, chain.fn)}

static const alloc_target_t alloc_targets[] = {
    ALLOC_TARGET(free),
    ALLOC_TARGET(realloc),
    ALLOC_TARGET(reallocarray),
    ALLOC_TARGET(malloc_trim),
    ALLOC_TARGET(mallopt),
};
#define NUM_ALLOC_TARGETS (sizeof(alloc_targets) / sizeof(alloc_targets[0]))

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

/* The free that the libraries' calls reach (past a program's canonical PLT entry: base_dl.h). */
static void *free_reached(void)
{
    return (void *) mca_patcher_base_dl_past_plt_entry((uintptr_t) dlsym(RTLD_DEFAULT, "free"),
                                                       "free", (uintptr_t) dlsym);
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
    bool same = dlsym(libc, "free") == free_reached();
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
    opal_mem_variant_t *global = &opal_mem_variants[VARIANT_GLOBAL];
    /* Set before free can reach the intercept; cleared below if the chain
     * turns out to be another allocator. */
    __atomic_store_n(&global->glibc_chunks, true, __ATOMIC_RELAXED);
    for (size_t i = 0; i < NUM_ALLOC_TARGETS; i++) {
        const alloc_target_t *t = &alloc_targets[i];
        int rc = opal_patcher->patch_symbol(t->name, t->entry[VARIANT_GLOBAL],
                                            (uintptr_t *) opal_mem_variant_chain(global, t->chain));
        if (OPAL_SUCCESS != rc || NULL == *opal_mem_variant_chain(global, t->chain)) {
            opal_output("cannot intercept %s: %s", t->name,
                        OPAL_SUCCESS != rc ? opal_strerror(rc) : "no definition to chain to");
            return OPAL_SUCCESS != rc ? rc : OPAL_ERR_NOT_FOUND;
        }
    }
    if (NULL != glibc_free && (void *) global->chain.free != glibc_free) {
        __atomic_store_n(&global->glibc_chunks, false, __ATOMIC_RELAXED);
        opal_output_verbose(opal_patcher_base_framework.framework_verbose, 1,
                            "free reaches another allocator than glibc's (%p, not %p): its "
                            "blocks are not announced by the allocator intercepts",
                            (void *) global->chain.free, glibc_free);
    }
    /* Through the chain: our own mallopt may reach the intercept (linked into
     * the program, we share its GOT), which would take -1 for the program's. */
    program_trim_threshold = starting_trim_threshold();
    global->chain.mallopt(M_TRIM_THRESHOLD, -1);
    installed = true;
    return OPAL_SUCCESS;
}

/*
 * A namespace's copy of glibc: the calls that reach its allocator go to
 * variant v, chaining to it.  Its automatic trimming is turned off too.
 */
int opal_mem_hooks_patch_alloc_copy(opal_mem_variant_t *variant,
                                    uintptr_t (*lookup)(const char *name, void *arg), void *arg)
{
    mca_patcher_base_module_t *patcher = opal_patcher;
    const int v = opal_mem_variant_index(variant);
    if (opal_valgrind_replaces_malloc()) {
        return OPAL_SUCCESS; /* its blocks are valgrind's, in every namespace */
    }
    __atomic_store_n(&variant->glibc_chunks, true, __ATOMIC_RELAXED);
    for (size_t i = 0; i < NUM_ALLOC_TARGETS; i++) {
        const alloc_target_t *t = &alloc_targets[i];
        uintptr_t def = lookup(t->name, arg);
        if (0 == def) {
            continue;
        }
        /* The chain before the first slot points to the entry. */
        __atomic_store_n(opal_mem_variant_chain(variant, t->chain), (void *) def, __ATOMIC_RELEASE);
        int rc = patcher->patch_definition(t->name, def, t->entry[v]);
        if (OPAL_SUCCESS != rc) {
            opal_mem_hooks_unpatch_alloc_copy(variant, false);
            return rc;
        }
    }
    int (*copy_mallopt)(int, int) = (int (*)(int, int)) lookup("mallopt", arg);
    if (NULL != copy_mallopt) {
        copy_mallopt(M_TRIM_THRESHOLD, -1);
    }
    return OPAL_SUCCESS;
}

static bool patch_to_variant(mca_patcher_base_patch_t *patch, void *arg)
{
    const int v = opal_mem_variant_index(arg);
    for (size_t i = 0; i < NUM_ALLOC_TARGETS; i++) {
        if (patch->patch_value == alloc_targets[i].entry[v]) {
            return true;
        }
    }
    return false;
}

bool opal_mem_hooks_alloc_patch_of(mca_patcher_base_patch_t *patch,
                                   const opal_mem_variant_t *variant)
{
    return patch_to_variant(patch, (void *) variant);
}

void opal_mem_hooks_unpatch_alloc_copy(opal_mem_variant_t *variant, bool unloaded)
{
    mca_patcher_base_module_t *patcher = opal_patcher;
    for (size_t i = 0; i < NUM_ALLOC_TARGETS; i++) {
        patcher->patch_retire(alloc_targets[i].entry[opal_mem_variant_index(variant)]);
    }
    if (unloaded) {
        mca_patcher_base_forget_patches(patcher, patch_to_variant, variant);
    } else {
        mca_patcher_base_restore_patches(patcher, patch_to_variant, variant);
    }
}

void opal_mem_hooks_uninstall_alloc_intercepts(void)
{
    /* The GOT slots come back with the patcher's restore; here only the
     * allocator's setting.  Chains stay valid for threads still inside. */
    if (installed) {
        opal_mem_variants[VARIANT_GLOBAL].chain.mallopt(
            M_TRIM_THRESHOLD, __atomic_load_n(&program_trim_threshold, __ATOMIC_RELAXED));
        installed = false;
    }
}

const char *opal_mem_hooks_alloc_tradeoff(void)
{
    return installed ? "glibc malloc: free/realloc/malloc_trim intercepted to announce "
                       "libc-internal releases; automatic heap trimming is off "
                       "(M_TRIM_THRESHOLD=-1, also when the program sets it: its value, or "
                       "the environment's, is applied at the last finalize) and glibc's dynamic "
                       "mmap threshold is frozen; "
                       "a non-main arena heap freed entirely is unmapped unseen"
                     : NULL;
}
