/*
 * Making code just written what the processors fetch, before anything may
 * run it: the patched bytes, each new hop and trampoline page, and the
 * tests' hand-assembled code (header-only, so that a test linked without
 * the component has it too).
 *
 * __builtin___clear_cache does that on aarch64 (a call to libgcc's
 * __aarch64_sync_cache_range), riscv64 (__riscv_flush_icache) and x86
 * (nothing needed), but GCC expands it to NOTHING on Power (checked:
 * powerpc64le-linux-gnu-gcc 12.2 -O2 emits no instruction for it).
 * There the Power ISA's sequence for modified instruction storage is
 * issued here (Book II, "Instruction Storage";
 * patcher_overwrite_ppc64le.c says why each step):
 *     dcbst each data cache block; sync; icbi each instruction cache
 *     block; sync; isync
 * with the block sizes the kernel gives (AT_DCACHEBSIZE, AT_ICACHEBSIZE;
 * 32 bytes if it does not, the smallest of any 64-bit Power: a smaller
 * step only repeats work).  Allocates nothing and takes no lock: it runs
 * while other threads are held.
 */
#ifndef MCA_PATCHER_OVERWRITE_ICACHE_H
#define MCA_PATCHER_OVERWRITE_ICACHE_H

#include <stddef.h>
#include <stdint.h>
#if defined(__powerpc64__)
#    include <sys/auxv.h>
#endif

static inline void mca_patcher_overwrite_icache_sync(uintptr_t addr, size_t len)
{
#if defined(__powerpc64__)
    uintptr_t dline = (uintptr_t) getauxval(AT_DCACHEBSIZE);
    uintptr_t iline = (uintptr_t) getauxval(AT_ICACHEBSIZE);
    dline = dline ? dline : 32;
    iline = iline ? iline : 32;
    for (uintptr_t p = addr & ~(dline - 1); p < addr + len; p += dline) {
        __asm__ volatile("dcbst 0,%0" : : "r"(p) : "memory");
    }
    __asm__ volatile("sync" : : : "memory");
    for (uintptr_t p = addr & ~(iline - 1); p < addr + len; p += iline) {
        __asm__ volatile("icbi 0,%0" : : "r"(p) : "memory");
    }
    __asm__ volatile("sync; isync" : : : "memory");
#else
    __builtin___clear_cache((char *) addr, (char *) addr + len);
#endif
}

#endif
