/*
 * x86-64 and i386 share most of their instruction work: the 5-byte
 * "jmp rel32" patch after an optional endbr landing pad, the walk that
 * relocates the displaced instructions (patcher_overwrite_x86.c, which
 * holds the architecture table), and the code write protocol
 * (patcher_overwrite_x86_write.c).  The one file of the mode being built,
 * patcher_overwrite_x86_64.c or patcher_overwrite_i386.c, provides the two
 * things that differ: a jump that reaches any address, and the relocated
 * form of a "call rel32".
 */
#ifndef MCA_PATCHER_OVERWRITE_X86_H
#define MCA_PATCHER_OVERWRITE_X86_H

#include <stddef.h>
#include <stdint.h>

#include "opal/mca/patcher/overwrite/patcher_overwrite_arch.h"

/* The architecture's name, its landing pad, and its jump that reaches any address. */
#if defined(__x86_64__)
#    define MCA_PATCHER_OVERWRITE_X86_NAME          "x86_64"
#    define MCA_PATCHER_OVERWRITE_X86_PAD           "endbr64"
#    define MCA_PATCHER_OVERWRITE_X86_PAD_BYTES     0xf3, 0x0f, 0x1e, 0xfa
#    define MCA_PATCHER_OVERWRITE_X86_FAR_JUMP_SIZE 14 /* jmp *0(%rip); .quad target */
#else
#    define MCA_PATCHER_OVERWRITE_X86_NAME          "i386"
#    define MCA_PATCHER_OVERWRITE_X86_PAD           "endbr32"
#    define MCA_PATCHER_OVERWRITE_X86_PAD_BYTES     0xf3, 0x0f, 0x1e, 0xfb
#    define MCA_PATCHER_OVERWRITE_X86_FAR_JUMP_SIZE 5 /* jmp rel32 */
#endif

/* The longest relocated form of one instruction. */
#define MCA_PATCHER_OVERWRITE_X86_MAX_COPY 16

/*
 * Write a jump to target at buf (MCA_PATCHER_OVERWRITE_X86_FAR_JUMP_SIZE
 * bytes), for code that will run at run_at.  Per mode.
 */
void mca_patcher_overwrite_x86_far_jump(unsigned char *buf, uintptr_t run_at, uintptr_t target);

/*
 * Write the copy, to run at run_at, of a "call rel32" to target whose
 * return address was next; returns its length (at most
 * MCA_PATCHER_OVERWRITE_X86_MAX_COPY).  Being 5 bytes, a displaced call
 * always ends the window: next is also where the trampoline jumps back to.
 * Per mode.
 */
size_t mca_patcher_overwrite_x86_call(unsigned char *buf, uintptr_t run_at, uintptr_t next,
                                      uintptr_t target);

/* The code write protocol (patcher_overwrite_x86_write.c). */
void mca_patcher_overwrite_x86_code_write(mca_patcher_overwrite_write_t *w);

#endif
