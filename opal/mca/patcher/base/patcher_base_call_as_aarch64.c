/*
 * AArch64 calls made as the caller (base_call_as.h).
 *
 * The return address is the link register, so the gadget must restore it
 * before returning: the standard epilogue "ldp x29, x30, [sp], #16; ret"
 * of the caller's object.  The call:
 *
 *     stp x29, x30, [sp, #-16]!; x29 = sp    our frame
 *     stp x29, <back>, [sp, #-16]!           what the gadget's ldp takes
 *     x30 = <gadget>; br fn                  (through x16: a "bti c" lands it)
 *   back:
 *     ldp x29, x30, [sp], #16; ret           fn's result still in x0
 *
 * A function signing its return address (paciasp) signs the gadget's
 * address and checks it before returning there: that holds.  The gadget
 * itself must not authenticate (an epilogue with autiasp is not taken).
 * A guarded control stack would reject the return: calls are not made
 * this way where one is active.
 */
#include "opal_config.h"

#if defined(__aarch64__)

#    include <string.h>

#    include "opal/mca/patcher/base/base_call_as.h"

uintptr_t mca_patcher_base_aarch64_call_via(uintptr_t gadget, uintptr_t fn, uintptr_t a0,
                                            uintptr_t a1, uintptr_t a2);

__asm__(".text\n"
        ".globl mca_patcher_base_aarch64_call_via\n"
        ".hidden mca_patcher_base_aarch64_call_via\n"
        ".type mca_patcher_base_aarch64_call_via, %function\n"
        "mca_patcher_base_aarch64_call_via:\n"
        "    .cfi_startproc\n"
        "    stp x29, x30, [sp, #-16]!\n"
        "    .cfi_def_cfa_offset 16\n"
        "    .cfi_offset x29, -16\n"
        "    .cfi_offset x30, -8\n"
        "    mov x29, sp\n"
        "    .cfi_def_cfa x29, 16\n"
        "    adr x9, 1f\n"
        "    stp x29, x9, [sp, #-16]!\n"
        "    mov x30, x0\n"
        "    mov x16, x1\n"
        "    mov x0, x2\n"
        "    mov x1, x3\n"
        "    mov x2, x4\n"
        "    br x16\n"
        "1:\n"
        "    ldp x29, x30, [sp], #16\n"
        "    .cfi_def_cfa sp, 0\n"
        "    .cfi_restore x29\n"
        "    .cfi_restore x30\n"
        "    ret\n"
        "    .cfi_endproc\n"
        ".size mca_patcher_base_aarch64_call_via, .-mca_patcher_base_aarch64_call_via\n");

/* ldp x29, x30, [sp], #16; ret (little-endian instruction words). */
static const unsigned char epilogue[] = {0xfd, 0x7b, 0xc1, 0xa8, 0xc0, 0x03, 0x5f, 0xd6};

static const unsigned char *find_epilogue(const unsigned char *code, size_t len)
{
    for (size_t i = 0; i + sizeof(epilogue) <= len; i += 4) {
        if (0 == memcmp(code + i, epilogue, sizeof(epilogue))) {
            return code + i;
        }
    }
    return NULL;
}

static const char *aarch64_unavailable(void)
{
    return mca_patcher_base_call_as_shadow_stack()
               ? "a guarded control stack is active: it would reject the return through the "
                 "caller's object"
               : NULL;
}

const mca_patcher_base_call_as_arch_t mca_patcher_base_call_as_arch = {
    .name = "aarch64",
    /* The epilogue is the gadget wherever it is: _fini's first. */
    .epilogue_gadget = find_epilogue,
    .any_gadget = find_epilogue,
    .unavailable = aarch64_unavailable,
    .call_via = mca_patcher_base_aarch64_call_via,
};

#endif
