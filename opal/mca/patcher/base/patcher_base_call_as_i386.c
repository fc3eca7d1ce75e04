/*
 * i386 calls made as the caller (base_call_as.h).
 *
 * The arguments follow the return address on the stack, so after fn
 * returns the gadget must step over them: the end of crti/crtn's _init and
 * _fini, "add $8,%esp; pop %ebx; ret", skips two words, takes a third
 * into ebx (saved here) and returns through the fourth.  Hence three
 * arguments at most.  The call:
 *
 *     push ebp; ebp = esp; push ebx; esp -= 4     esp = 12 mod 16 at fn
 *     push <back>; push a2; push a1; push a0
 *     push <gadget>; jmp fn
 *   back:
 *     ebx = saved; leave; ret                     fn's result still in eax
 */
#include "opal_config.h"

#if defined(__i386__)

#    include <string.h>

#    include "opal/mca/patcher/base/base_call_as.h"

uintptr_t mca_patcher_base_i386_call_via(uintptr_t gadget, uintptr_t fn, uintptr_t a0, uintptr_t a1,
                                         uintptr_t a2);

__asm__(".text\n"
        ".globl mca_patcher_base_i386_call_via\n"
        ".hidden mca_patcher_base_i386_call_via\n"
        ".type mca_patcher_base_i386_call_via, @function\n"
        "mca_patcher_base_i386_call_via:\n"
        "    .cfi_startproc\n"
        "    push %ebp\n"
        "    .cfi_def_cfa_offset 8\n"
        "    .cfi_offset %ebp, -8\n"
        "    mov %esp, %ebp\n"
        "    .cfi_def_cfa_register %ebp\n"
        "    push %ebx\n"
        "    .cfi_offset %ebx, -12\n"
        "    sub $4, %esp\n"
        "    call 2f\n"
        "2:  pop %eax\n"
        "    add $(1f - 2b), %eax\n"
        "    push %eax\n"
        "    push 24(%ebp)\n"
        "    push 20(%ebp)\n"
        "    push 16(%ebp)\n"
        "    push 8(%ebp)\n"
        "    mov 12(%ebp), %eax\n"
        "    jmp *%eax\n"
        "1:\n"
        "    mov -4(%ebp), %ebx\n"
        "    leave\n"
        "    .cfi_def_cfa %esp, 4\n"
        "    .cfi_restore %ebx\n"
        "    ret\n"
        "    .cfi_endproc\n"
        ".size mca_patcher_base_i386_call_via, .-mca_patcher_base_i386_call_via\n");

/* add $8,%esp; pop %ebx; ret: the gadget is its first byte. */
static const unsigned char tail[] = {0x83, 0xc4, 0x08, 0x5b, 0xc3};

static const unsigned char *find_tail(const unsigned char *code, size_t len)
{
    for (size_t i = 0; i + sizeof(tail) <= len; i++) {
        if (0 == memcmp(code + i, tail, sizeof(tail))) {
            return code + i;
        }
    }
    return NULL;
}

static const char *i386_unavailable(void)
{
    return NULL; /* no shadow stack for 32-bit processes */
}

const mca_patcher_base_call_as_arch_t mca_patcher_base_call_as_arch = {
    .name = "i386",
    .epilogue_gadget = find_tail,
    .any_gadget = find_tail,
    .unavailable = i386_unavailable,
    .call_via = mca_patcher_base_i386_call_via,
};

#endif
