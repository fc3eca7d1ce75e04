/*
 * Calling a function so that it takes the call as made by the code that
 * called our intercept.  Not part of the installed API.
 *
 * glibc's dlopen, dlmopen, dlsym and dlvsym judge their caller by their own
 * return address (the object it lies in: its namespace, DT_RPATH/DT_RUNPATH,
 * $ORIGIN, the chain of objects that loaded it, its scope for RTLD_DEFAULT
 * and RTLD_NEXT).  An intercept that simply calls them is judged as itself.
 * A tail jump would keep the caller's return address but leave no way back
 * for the work that must follow the call (patching what was just loaded).
 *
 * So the call goes out with a return address inside the caller's object: a
 * return instruction of that object (a "return gadget") that sends control
 * back to us, to return to the caller from there.  The loader sees an
 * address of the caller's object, exactly as without us, and does its whole
 * search itself.  Where that cannot be done (no architecture support, a
 * shadow stack that would reject the return), the caller is told so and
 * does something else.
 *
 * One file per architecture (patcher_base_call_as_<arch>.c) provides
 * mca_patcher_base_call_as_arch.
 */
#ifndef OPAL_MCA_PATCHER_BASE_BASE_CALL_AS_H
#define OPAL_MCA_PATCHER_BASE_BASE_CALL_AS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Arguments of a call made this way, at most. */
#define MCA_PATCHER_BASE_CALL_AS_MAX_ARGS 3

typedef struct mca_patcher_base_call_as_arch_t {
    const char *name;
    /*
     * The return gadget that ends the function whose code starts at
     * 'code' (the standard epilogue of _init/_fini: unwinders find no
     * frame information there and stop cleanly), or NULL.
     */
    const unsigned char *(*epilogue_gadget)(const unsigned char *code, size_t len);
    /* Any return gadget in [code, code+len), or NULL. */
    const unsigned char *(*any_gadget)(const unsigned char *code, size_t len);
    /* Why such calls cannot be made in this process (a shadow stack), or NULL. */
    const char *(*unavailable)(void);
    /* fn(a0, a1, a2), returning to gadget first and from there to us. */
    uintptr_t (*call_via)(uintptr_t gadget, uintptr_t fn, uintptr_t a0, uintptr_t a1, uintptr_t a2);
} mca_patcher_base_call_as_arch_t;

#if defined(__x86_64__) || defined(__aarch64__) || defined(__i386__) || \
    (defined(__powerpc64__) && defined(__LITTLE_ENDIAN__)) ||           \
    (defined(__riscv) && 64 == __riscv_xlen)
#    define MCA_PATCHER_BASE_CALL_AS_ARCH (&mca_patcher_base_call_as_arch)
extern const mca_patcher_base_call_as_arch_t mca_patcher_base_call_as_arch;
#else
#    define MCA_PATCHER_BASE_CALL_AS_ARCH NULL
#endif

#if defined(__aarch64__) || (defined(__riscv) && 64 == __riscv_xlen)
/*
 * Whether the kernel says (prctl PR_GET_SHADOW_STACK_STATUS) that this
 * process runs on a shadow stack: arm64's guarded control stack, RISC-V's
 * Zicfiss.  False where the kernel does not know that prctl.
 */
bool mca_patcher_base_call_as_shadow_stack(void);
#endif

/*
 * fn(a0, a1, a2) as if called by the code that returns to caller_ret (an
 * intercept's __builtin_return_address(0)): true with *result set, or
 * false with *why (static text), fn not called.
 */
bool mca_patcher_base_call_as(const void *caller_ret, uintptr_t fn, uintptr_t a0, uintptr_t a1,
                              uintptr_t a2, uintptr_t *result, const char **why);

#endif
