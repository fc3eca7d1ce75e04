/*
 * What i386 does its own way (the rest is patcher_overwrite_x86.c).
 *
 * Every jump is a plain "jmp rel32": in 32-bit mode EIP + rel32 wraps
 * around, so it reaches the whole address space from anywhere.
 *
 * A displaced "call rel32" becomes "push $next; jmp target": the callee
 * sees the ORIGINAL return address.  That matters here: position
 * independent i386 code finds its GOT by calling __x86.get_pc_thunk.*,
 * which returns its own return address (glibc's brk, sbrk, mmap, mremap
 * begin so), and adds a link-time constant to it.  Called from the
 * trampoline with its own address it would compute a wrong GOT.  The
 * callee returns straight to next, the first byte after the window (a
 * call is the last displaced instruction, see patcher_overwrite_x86.h),
 * which is what the trampoline's jump back would have done; return
 * addresses, unwinders and thunks all see the original code.
 */
#include "opal_config.h"

#include <string.h>

#include "opal/mca/patcher/overwrite/patcher_overwrite_x86.h"

void mca_patcher_overwrite_x86_far_jump(unsigned char *buf, uintptr_t run_at, uintptr_t target)
{
    uint32_t rel = (uint32_t) (target - (run_at + 5));
    buf[0] = 0xe9; /* jmp rel32 */
    memcpy(buf + 1, &rel, sizeof(rel));
}

size_t mca_patcher_overwrite_x86_call(unsigned char *buf, uintptr_t run_at, uintptr_t next,
                                      uintptr_t target)
{
    uint32_t ret = (uint32_t) next;
    buf[0] = 0x68; /* push $imm32 */
    memcpy(buf + 1, &ret, sizeof(ret));
    mca_patcher_overwrite_x86_far_jump(buf + 5, run_at + 5, target);
    return 10;
}
