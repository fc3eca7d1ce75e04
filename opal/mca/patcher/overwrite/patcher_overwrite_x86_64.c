/*
 * What x86-64 does its own way (the rest is patcher_overwrite_x86.c).
 *
 * The hop and every far jump are "jmp *0(%rip); .quad target": the patch's
 * jmp rel32 reaches only +-2 GiB, the intercept may be anywhere.  A
 * displaced "call rel32" becomes "call *2(%rip); jmp +8; .quad target":
 * the callee returns into the trampoline, which jumps back.
 */
#include "opal_config.h"

#include <string.h>

#include "opal/mca/patcher/overwrite/patcher_overwrite_x86.h"

void mca_patcher_overwrite_x86_far_jump(unsigned char *buf, uintptr_t run_at, uintptr_t target)
{
    (void) run_at; /* absolute */
    buf[0] = 0xff; /* jmp *0(%rip) */
    buf[1] = 0x25;
    memset(buf + 2, 0, 4);
    memcpy(buf + 6, &target, sizeof(target));
}

size_t mca_patcher_overwrite_x86_call(unsigned char *buf, uintptr_t run_at, uintptr_t next,
                                      uintptr_t target)
{
    (void) run_at;
    (void) next;
    buf[0] = 0xff; /* call *2(%rip) */
    buf[1] = 0x15;
    buf[2] = 2;
    memset(buf + 3, 0, 3);
    buf[6] = 0xeb; /* jmp +8, over the address */
    buf[7] = 8;
    memcpy(buf + 8, &target, sizeof(target));
    return 16;
}
