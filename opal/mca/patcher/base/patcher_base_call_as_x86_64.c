/*
 * x86-64 calls made as the caller (base_call_as.h).
 *
 * The gadget is a "ret" (0xc3) of the caller's object.  The call:
 *
 *     push rbp; rbp = rsp; rsp -= 8         frame, and rsp = 8 mod 16 below
 *     push <back>                           where the gadget's ret goes
 *     push <gadget>                         fn's return address
 *     jmp fn                                (arguments moved into place)
 *   back:
 *     leave; ret                            fn's result still in rax
 *
 * fn sees the gadget as its return address and returns there; the gadget's
 * ret takes <back> off the stack.  A shadow stack (CET) would reject that
 * return: calls are not made this way where one is active.
 */
#include "opal_config.h"

#if defined(__x86_64__)

#    include <string.h>
#    include <sys/syscall.h>
#    include <unistd.h>

#    include "opal/mca/patcher/base/base_call_as.h"

#    define RET               0xc3
#    define ARCH_SHSTK_STATUS 0x5005 /* asm/prctl.h, Linux 6.6 */
#    define ARCH_SHSTK_SHSTK  (1ULL << 0)

uintptr_t mca_patcher_base_x86_64_call_via(uintptr_t gadget, uintptr_t fn, uintptr_t a0,
                                           uintptr_t a1, uintptr_t a2);

__asm__(".text\n"
        ".globl mca_patcher_base_x86_64_call_via\n"
        ".hidden mca_patcher_base_x86_64_call_via\n"
        ".type mca_patcher_base_x86_64_call_via, @function\n"
        "mca_patcher_base_x86_64_call_via:\n"
        "    .cfi_startproc\n"
        "    push %rbp\n"
        "    .cfi_def_cfa_offset 16\n"
        "    .cfi_offset %rbp, -16\n"
        "    mov %rsp, %rbp\n"
        "    .cfi_def_cfa_register %rbp\n"
        "    sub $8, %rsp\n"
        "    lea 1f(%rip), %rax\n"
        "    push %rax\n"
        "    push %rdi\n"
        "    mov %rsi, %rax\n"
        "    mov %rdx, %rdi\n"
        "    mov %rcx, %rsi\n"
        "    mov %r8, %rdx\n"
        "    jmp *%rax\n"
        "1:\n"
        "    leave\n"
        "    .cfi_def_cfa %rsp, 8\n"
        "    ret\n"
        "    .cfi_endproc\n"
        ".size mca_patcher_base_x86_64_call_via, .-mca_patcher_base_x86_64_call_via\n");

/* The end of crti/crtn's _init and _fini: add $8,%rsp; ret. */
static const unsigned char *x86_64_epilogue_gadget(const unsigned char *code, size_t len)
{
    static const unsigned char tail[] = {0x48, 0x83, 0xc4, 0x08, RET};
    for (size_t i = 0; i + sizeof(tail) <= len; i++) {
        if (0 == memcmp(code + i, tail, sizeof(tail))) {
            return code + i + sizeof(tail) - 1;
        }
    }
    return NULL;
}

/* Any byte 0xc3 runs as a ret, whatever instruction it belongs to. */
static const unsigned char *x86_64_any_gadget(const unsigned char *code, size_t len)
{
    return memchr(code, RET, len);
}

static const char *x86_64_unavailable(void)
{
    /* 0 unknown, 1 no shadow stack, 2 shadow stack (enabled at startup only). */
    static int state;
    int s = __atomic_load_n(&state, __ATOMIC_RELAXED);
    if (0 == s) {
        unsigned long long features = 0;
        const bool shstk = 0 == syscall(SYS_arch_prctl, ARCH_SHSTK_STATUS, &features) &&
                           (features & ARCH_SHSTK_SHSTK);
        s = shstk ? 2 : 1;
        __atomic_store_n(&state, s, __ATOMIC_RELAXED);
    }
    return 2 == s ? "a shadow stack (CET) is active: it would reject the return through the "
                    "caller's object"
                  : NULL;
}

const mca_patcher_base_call_as_arch_t mca_patcher_base_call_as_arch = {
    .name = "x86_64",
    .epilogue_gadget = x86_64_epilogue_gadget,
    .any_gadget = x86_64_any_gadget,
    .unavailable = x86_64_unavailable,
    .call_via = mca_patcher_base_x86_64_call_via,
};

#endif
