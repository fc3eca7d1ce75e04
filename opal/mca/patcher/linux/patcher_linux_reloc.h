/*
 * Per architecture: which dynamic relocations make a GOT slot, a word the
 * loader fills with a function's address that callers jump through.
 *
 * - JUMP_SLOT: the PLT's slots (lazily bound).
 * - GLOB_DAT: the GOT entries of code that takes a function's address or
 *   calls through the GOT (-fno-plt).
 * - ADDR: where the linker makes those GOT entries with the plain absolute
 *   word relocation instead: ppc64le (the TOC entries, R_PPC64_ADDR64; it
 *   has a GLOB_DAT type that binutils does not emit for them) and riscv64
 *   (R_RISCV_64: it has no GLOB_DAT at all).  The same type also fills
 *   ordinary data words; only one that is exactly the symbol's address
 *   (addend 0) holds what a call through it reaches.
 *
 * i386 uses Rel (the addend in place) and the others Rela; the walker reads
 * r_offset and r_info, which both begin with, and the addend only for ADDR
 * (always Rela here).  An architecture not listed has no GOT patching: the
 * component declines, saying so.
 */
#ifndef MCA_PATCHER_LINUX_RELOC_H
#define MCA_PATCHER_LINUX_RELOC_H

#include <elf.h>
#include <link.h>
#include <stdbool.h>
#include <stddef.h>

#if defined(__x86_64__)
#    define MCA_PATCHER_LINUX_R_JUMP_SLOT R_X86_64_JUMP_SLOT
#    define MCA_PATCHER_LINUX_R_GLOB_DAT  R_X86_64_GLOB_DAT
#    define MCA_PATCHER_LINUX_RELOC_NAMES "R_X86_64_JUMP_SLOT, R_X86_64_GLOB_DAT (Rela)"
#elif defined(__aarch64__)
#    define MCA_PATCHER_LINUX_R_JUMP_SLOT R_AARCH64_JUMP_SLOT
#    define MCA_PATCHER_LINUX_R_GLOB_DAT  R_AARCH64_GLOB_DAT
#    define MCA_PATCHER_LINUX_RELOC_NAMES "R_AARCH64_JUMP_SLOT, R_AARCH64_GLOB_DAT (Rela)"
#elif defined(__i386__)
#    define MCA_PATCHER_LINUX_R_JUMP_SLOT R_386_JMP_SLOT
#    define MCA_PATCHER_LINUX_R_GLOB_DAT  R_386_GLOB_DAT
#    define MCA_PATCHER_LINUX_RELOC_NAMES "R_386_JMP_SLOT, R_386_GLOB_DAT (Rel)"
#elif defined(__powerpc64__) && defined(_CALL_ELF) && 2 == _CALL_ELF
/* ELFv2 only: ELFv1's slots hold function descriptors, not code addresses. */
#    define MCA_PATCHER_LINUX_R_JUMP_SLOT R_PPC64_JMP_SLOT
#    define MCA_PATCHER_LINUX_R_GLOB_DAT  R_PPC64_GLOB_DAT
#    define MCA_PATCHER_LINUX_R_ADDR      R_PPC64_ADDR64
#    define MCA_PATCHER_LINUX_RELOC_NAMES \
        "R_PPC64_JMP_SLOT, R_PPC64_GLOB_DAT, R_PPC64_ADDR64 with addend 0 (Rela)"
#elif defined(__riscv) && 64 == __riscv_xlen
#    define MCA_PATCHER_LINUX_R_JUMP_SLOT R_RISCV_JUMP_SLOT
#    define MCA_PATCHER_LINUX_R_ADDR      R_RISCV_64
#    define MCA_PATCHER_LINUX_RELOC_NAMES "R_RISCV_JUMP_SLOT, R_RISCV_64 with addend 0 (Rela)"
#endif

#ifdef MCA_PATCHER_LINUX_R_JUMP_SLOT
#    define MCA_PATCHER_LINUX_HAVE_RELOC 1

/* r_info decoding for the native class (link.h has ElfW for types only). */
#    if __ELF_NATIVE_CLASS == 64
#        define MCA_PATCHER_LINUX_R_SYM(info)  ELF64_R_SYM(info)
#        define MCA_PATCHER_LINUX_R_TYPE(info) ELF64_R_TYPE(info)
#    else
#        define MCA_PATCHER_LINUX_R_SYM(info)  ELF32_R_SYM(info)
#        define MCA_PATCHER_LINUX_R_TYPE(info) ELF32_R_TYPE(info)
#    endif

/* Whether the relocation at rel (entsize bytes: Rel or Rela) fills a GOT slot. */
static inline bool mca_patcher_linux_reloc_is_slot(const ElfW(Rel) * rel, size_t entsize)
{
    const unsigned long type = MCA_PATCHER_LINUX_R_TYPE(rel->r_info);
    if (MCA_PATCHER_LINUX_R_JUMP_SLOT == type) {
        return true;
    }
#    ifdef MCA_PATCHER_LINUX_R_GLOB_DAT
    if (MCA_PATCHER_LINUX_R_GLOB_DAT == type) {
        return true;
    }
#    endif
#    ifdef MCA_PATCHER_LINUX_R_ADDR
    if (MCA_PATCHER_LINUX_R_ADDR == type && entsize >= sizeof(ElfW(Rela))) {
        return 0 == ((const ElfW(Rela) *) rel)->r_addend;
    }
#    endif
    return false;
}
#else
#    define MCA_PATCHER_LINUX_HAVE_RELOC 0
#endif

#endif
