/*
 * The variants of our intercepts (memory_variants.c owns them): one entry
 * point per patched definition of a function, so that each chains to its
 * own previous code.  A process may hold several definitions of munmap:
 *
 *   variant 0   the definition callers reach (an interposer's, or libc's)
 *   variant 1   libc's own, when an interposer is in front of it
 *   2 .. N-1    one per copy of libc in a dlmopen namespace (glibc makes
 *               16 namespaces at most: the base one and 15 others)
 *
 * Everything a variant needs is in its opal_mem_variant_t: what each of
 * its entry points chains to, which functions it patched, whether its
 * allocator's blocks are glibc's, and for a copy the libc it serves.
 *
 * N, OPAL_MEM_HOOKS_NUM_VARIANTS, is a build parameter (configure
 * --with-mem-hooks-variants=N, 2..17, default 17): a 2-variant debug
 * build has two entry points per function to step through, and patches
 * no namespace's copy of libc (it says so when one appears).
 *
 * The entry points are generated: DEFINE_ENTRIES(fn, ...) defines
 * intercept_<fn>_0 .. intercept_<fn>_<N-1> (intercept_munmap_0 ...), each
 * calling fn_common(&opal_mem_variants[v], args) with its own constant v;
 * each DEFINE_ENTRIES line names the entry points it defines.
 * ENTRY_ADDRESSES(fn) lists them for an initializer.
 */
#ifndef OPAL_MEMORYHOOKS_MEMORY_VARIANTS_H
#define OPAL_MEMORYHOOKS_MEMORY_VARIANTS_H

#include <link.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "opal/memoryhooks/memory_registry.h"

#if OPAL_MEM_HOOKS_NUM_VARIANTS < 2 || OPAL_MEM_HOOKS_NUM_VARIANTS > 17
#    error "OPAL_MEM_HOOKS_NUM_VARIANTS must be 2 .. 17"
#endif
#define NUM_VARIANTS OPAL_MEM_HOOKS_NUM_VARIANTS

#define VARIANT_GLOBAL     0
#define VARIANT_LIBC       1
#define VARIANT_FIRST_COPY 2

/* The functions memory_intercepts.c intercepts (its targets[]). */
#define OPAL_MEM_HOOKS_NUM_TARGETS 17

typedef struct opal_mem_variant_t {
    /*
     * What each entry point of the variant calls to reach the code that
     * calls reached before it (a GOT slot's previous value, a trampoline):
     * stored before the patch goes live, kept after it is undone for the
     * threads still inside.
     */
    struct {
        int (*munmap)(void *, size_t);
        void *(*mremap)(void *, size_t, size_t, int, ...);
        int (*madvise)(void *, size_t, int);
        ssize_t (*process_madvise)(int, const struct iovec *, size_t, int, unsigned);
        int (*remap_file_pages)(void *, size_t, int, size_t, int);
        void *(*mmap)(void *, size_t, int, int, int, off_t);
        /* A chain of its own also where mmap64 is mmap (LP64), as for
         * ftruncate64 below: an interposer of mmap alone leaves mmap64 to
         * libc, whose chain would replace the interposer's in one slot. */
        void *(*mmap64)(void *, size_t, int, int, int, off64_t);
        int (*brk)(void *);
        void *(*sbrk)(intptr_t);
        int (*shmdt)(const void *);
        void *(*shmat)(int, const void *, int);
        int (*ftruncate)(int, off_t);
        int (*truncate)(const char *, off_t);
        int (*fallocate)(int, int, off_t, off_t);
        /* Chains of their own also where they are the same functions as the
         * above (LP64): the definition an interposer of ftruncate alone
         * leaves to ftruncate64 is libc's, whose chain would replace the
         * interposer's in a shared slot. */
        int (*ftruncate64)(int, off64_t);
        int (*truncate64)(const char *, off64_t);
        int (*fallocate64)(int, int, off64_t, off64_t);
        /* The allocator's entry points (for a GOT patcher). */
        void (*free)(void *);
        void *(*realloc)(void *, size_t);
        void *(*reallocarray)(void *, size_t, size_t);
        int (*malloc_trim)(size_t);
        int (*mallopt)(int, int);
    } chain;
    /* The functions an address-based patcher patched for the variant, per
     * target of memory_intercepts.c (0: none, or an alias of another). */
    uintptr_t patched[OPAL_MEM_HOOKS_NUM_TARGETS];
    /* The blocks its allocator entry points see are glibc's: false when
     * the free that slots reached is another allocator (UCX's libucm in
     * reloc mode puts its own behind the GOT). */
    bool glibc_chunks;
    /* A copy variant: the namespace's libc it is patched into (NULL: the
     * variant is free), and its load address then (a map reused for
     * another load differs).  Guarded by the hooks' lock. */
    const struct link_map *copy_map;
    uintptr_t copy_base;
    /* Its copy was unloaded (seen by a watched dlclose, under the
     * patcher's loader lock): the same map and base may be a new load. */
    bool copy_unloaded;
} opal_mem_variant_t;

/* Hidden: the entries reach their variant with one PC-relative load. */
extern opal_mem_variant_t opal_mem_variants[NUM_VARIANTS] OPAL_MEM_HOOKS_HIDDEN;

/* The variant's number: the suffix of its entry points. */
static inline int opal_mem_variant_index(const opal_mem_variant_t *variant)
{
    return (int) (variant - opal_mem_variants);
}

/* A variant's chain at offset (offsetof(opal_mem_variant_t, chain.fn)): for tables of targets. */
static inline void **opal_mem_variant_chain(opal_mem_variant_t *variant, size_t offset)
{
    return (void **) ((char *) variant + offset);
}

/*
 * The copy variants (hooks' lock held).  take: a free one for the libc at
 * map, or NULL when none is left; copy_of: the one patched into map where
 * it is loaded now, or NULL; put: free it (its patches undone or forgotten
 * by the caller; its chains stay for threads still inside).
 */
opal_mem_variant_t *opal_mem_variant_take_copy(const struct link_map *map);
opal_mem_variant_t *opal_mem_variant_copy_of(const struct link_map *map);
void opal_mem_variant_put_copy(opal_mem_variant_t *variant);

/* X(v, ...) for v = 0 .. NUM_VARIANTS-1, each v a literal. */
#define VARIANTS_1(X, ...)  X(0, __VA_ARGS__)
#define VARIANTS_2(X, ...)  VARIANTS_1(X, __VA_ARGS__) X(1, __VA_ARGS__)
#define VARIANTS_3(X, ...)  VARIANTS_2(X, __VA_ARGS__) X(2, __VA_ARGS__)
#define VARIANTS_4(X, ...)  VARIANTS_3(X, __VA_ARGS__) X(3, __VA_ARGS__)
#define VARIANTS_5(X, ...)  VARIANTS_4(X, __VA_ARGS__) X(4, __VA_ARGS__)
#define VARIANTS_6(X, ...)  VARIANTS_5(X, __VA_ARGS__) X(5, __VA_ARGS__)
#define VARIANTS_7(X, ...)  VARIANTS_6(X, __VA_ARGS__) X(6, __VA_ARGS__)
#define VARIANTS_8(X, ...)  VARIANTS_7(X, __VA_ARGS__) X(7, __VA_ARGS__)
#define VARIANTS_9(X, ...)  VARIANTS_8(X, __VA_ARGS__) X(8, __VA_ARGS__)
#define VARIANTS_10(X, ...) VARIANTS_9(X, __VA_ARGS__) X(9, __VA_ARGS__)
#define VARIANTS_11(X, ...) VARIANTS_10(X, __VA_ARGS__) X(10, __VA_ARGS__)
#define VARIANTS_12(X, ...) VARIANTS_11(X, __VA_ARGS__) X(11, __VA_ARGS__)
#define VARIANTS_13(X, ...) VARIANTS_12(X, __VA_ARGS__) X(12, __VA_ARGS__)
#define VARIANTS_14(X, ...) VARIANTS_13(X, __VA_ARGS__) X(13, __VA_ARGS__)
#define VARIANTS_15(X, ...) VARIANTS_14(X, __VA_ARGS__) X(14, __VA_ARGS__)
#define VARIANTS_16(X, ...) VARIANTS_15(X, __VA_ARGS__) X(15, __VA_ARGS__)
#define VARIANTS_17(X, ...) VARIANTS_16(X, __VA_ARGS__) X(16, __VA_ARGS__)
#define VARIANTS_OF(n, X, ...)   VARIANTS_##n(X, __VA_ARGS__)
#define VARIANTS_EXPAND(n, X, ...) VARIANTS_OF(n, X, __VA_ARGS__)
#define FOR_EACH_VARIANT(X, ...) VARIANTS_EXPAND(OPAL_MEM_HOOKS_NUM_VARIANTS, X, __VA_ARGS__)

#define UNPAREN(...) __VA_ARGS__
#define DEFINE_ENTRY(v, fn, ret, params, args)                                                     \
    static ret intercept_##fn##_##v params                                                         \
    {                                                                                              \
        return fn##_common(&opal_mem_variants[v], UNPAREN args);                                   \
    }
#define DEFINE_ENTRIES(fn, ret, params, args) FOR_EACH_VARIANT(DEFINE_ENTRY, fn, ret, params, args)
/* For a function returning nothing (free). */
#define DEFINE_VOID_ENTRY(v, fn, params, args)                                                     \
    static void intercept_##fn##_##v params                                                        \
    {                                                                                              \
        fn##_common(&opal_mem_variants[v], UNPAREN args);                                          \
    }
#define DEFINE_VOID_ENTRIES(fn, params, args) FOR_EACH_VARIANT(DEFINE_VOID_ENTRY, fn, params, args)
/*
 * For the body (fn_common) of a hot intercept: inlined into each entry, so
 * that its variant is a constant there (each chain one PC-relative load)
 * and the chain call a tail jump.  With 17 callers GCC keeps one
 * out-of-line copy instead, which cost munmap 12 more instructions
 * (bench/hooks).
 */
#define ENTRY_INLINE static inline __attribute__((always_inline))
#define ENTRY_ADDRESS(v, fn) (uintptr_t) &intercept_##fn##_##v,
#define ENTRY_ADDRESSES(fn) {FOR_EACH_VARIANT(ENTRY_ADDRESS, fn)}

#endif
