/*
 * Variants of an intercept: one entry point per patched definition of a
 * function, so that each chains to its own previous code.  Variant 0 is
 * the definition callers reach, 1 libc's own when an interposer is in
 * front of it, then one per copy of libc in a dlmopen namespace (glibc
 * makes 16 namespaces at most: the base one and 15 others).
 *
 * The entry points are generated: DEFINE_ENTRIES(fn, ret, (params), (args))
 * defines intercept_fn_0 .. intercept_fn_16, each calling
 * fn_common(v, args); ENTRY_ADDRESSES(fn) lists them for an initializer.
 */
#ifndef OPAL_MEMORYHOOKS_MEMORY_VARIANTS_H
#define OPAL_MEMORYHOOKS_MEMORY_VARIANTS_H

#include "opal/memoryhooks/memory_patch.h"

#define VARIANT_GLOBAL 0
#define VARIANT_LIBC 1
#define NUM_VARIANTS (OPAL_MEM_HOOKS_FIRST_COPY_VARIANT + OPAL_MEM_HOOKS_MAX_COPIES)

#define FOR_EACH_VARIANT(X, ...)                                                                   \
    X(0, __VA_ARGS__) X(1, __VA_ARGS__) X(2, __VA_ARGS__) X(3, __VA_ARGS__) X(4, __VA_ARGS__)     \
    X(5, __VA_ARGS__) X(6, __VA_ARGS__) X(7, __VA_ARGS__) X(8, __VA_ARGS__) X(9, __VA_ARGS__)     \
    X(10, __VA_ARGS__) X(11, __VA_ARGS__) X(12, __VA_ARGS__) X(13, __VA_ARGS__)                   \
    X(14, __VA_ARGS__) X(15, __VA_ARGS__) X(16, __VA_ARGS__)
#define UNPAREN(...) __VA_ARGS__
#define DEFINE_ENTRY(v, fn, ret, params, args) \
    static ret intercept_##fn##_##v params { return fn##_common(v, UNPAREN args); }
#define DEFINE_ENTRIES(fn, ret, params, args) FOR_EACH_VARIANT(DEFINE_ENTRY, fn, ret, params, args)
/* For a function returning nothing (free). */
#define DEFINE_VOID_ENTRY(v, fn, params, args) \
    static void intercept_##fn##_##v params { fn##_common(v, UNPAREN args); }
#define DEFINE_VOID_ENTRIES(fn, params, args) FOR_EACH_VARIANT(DEFINE_VOID_ENTRY, fn, params, args)
/*
 * For the body (fn_common) of a hot intercept: inlined into each entry, so
 * that v is a constant there and the chain call a tail jump.  With 17
 * callers GCC keeps one out-of-line copy instead, which cost munmap 12
 * more instructions (bench/hooks).
 */
#define ENTRY_INLINE static inline __attribute__((always_inline))
#define ENTRY_ADDRESS(v, fn) (uintptr_t) &intercept_##fn##_##v,
#define ENTRY_ADDRESSES(fn) {FOR_EACH_VARIANT(ENTRY_ADDRESS, fn)}

#endif
