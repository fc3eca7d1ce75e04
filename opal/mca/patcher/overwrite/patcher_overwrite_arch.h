/*
 * What the overwrite patcher needs from an architecture: where in a
 * function the patch goes, a relocated copy of the instructions it
 * displaces (the trampoline), the hop and the entry jump, the program
 * counter in a signal's saved context, and a code write that threads
 * running the function never see half done.  One file per architecture
 * (patcher_overwrite_<arch>.c) provides its table; x86-64 and i386 share
 * theirs (patcher_overwrite_x86.c) and differ in patcher_overwrite_x86_64.c
 * and patcher_overwrite_i386.c.  The code writes are shared:
 * patcher_overwrite_x86_write.c (a self-loop first, every other thread
 * held first where the first instruction is one byte) for x86, and
 * patcher_overwrite_stopped_write.c (every other thread held in a signal
 * handler) for the others; both ask threads through
 * patcher_overwrite_threads.c.  The decline and branch checks below are
 * in patcher_overwrite_relocate.c.
 */
#ifndef MCA_PATCHER_OVERWRITE_ARCH_H
#define MCA_PATCHER_OVERWRITE_ARCH_H

#include <stddef.h>
#include <stdint.h>

/* The 32-bit instruction word at addr (aarch64, ppc64le, riscv64). */
static inline uint32_t mca_patcher_overwrite_word(uintptr_t addr)
{
    uint32_t w;
    __builtin_memcpy(&w, (const void *) addr, sizeof(w));
    return w;
}

/* The low 'width' bits of v as a signed number (an instruction's immediate). */
static inline int64_t mca_patcher_overwrite_sext(uint64_t v, unsigned width)
{
    return (int64_t) (v << (64 - width)) >> (64 - width);
}

#include "opal/mca/patcher/patcher.h"

/* Instructions that one patch can displace, at most. */
#define MCA_PATCHER_OVERWRITE_MAX_INSNS 8

/* Bytes a hop may take, at most (the trampoline follows it, 16-aligned). */
#define MCA_PATCHER_OVERWRITE_MAX_HOP 96

/* The displaced instructions and where their copies begin in the trampoline. */
typedef struct mca_patcher_overwrite_reloc_t {
    size_t window;    /* bytes of original code the trampoline replaces */
    size_t tramp_len; /* bytes of trampoline written, including the jump back */
    unsigned insns;
    uint8_t insn_offset[MCA_PATCHER_OVERWRITE_MAX_INSNS];  /* start in the original */
    uint8_t tramp_offset[MCA_PATCHER_OVERWRITE_MAX_INSNS]; /* start of its copy */
} mca_patcher_overwrite_reloc_t;

/* Everything the code write needs to keep other threads safe. */
typedef struct mca_patcher_overwrite_write_t {
    uintptr_t addr;                        /* where the bytes go */
    const unsigned char *bytes;            /* what to write */
    size_t len;
    uintptr_t tramp;                       /* trampoline running the displaced code */
    uintptr_t hop;                         /* where the entry jump goes */
    const mca_patcher_overwrite_reloc_t *reloc; /* patching: the displaced code; NULL: restoring */
    int rc;                                /* out: OPAL_SUCCESS or an error */
    const char *reason;                    /* out: static text on failure */
} mca_patcher_overwrite_write_t;

typedef struct mca_patcher_overwrite_arch_t {
    const char *name;
    size_t jump_size;    /* bytes written at the patch point */
    uintptr_t reach;     /* the entry jump reaches the hop this far either way, at most */
    size_t hop_size;     /* bytes of the hop, at most MCA_PATCHER_OVERWRITE_MAX_HOP */
    size_t max_tramp;    /* bytes a trampoline may need, jump back included */
    const char *how;     /* the patch's shape, for opal_patcher_info */
    const char *how_past_pad; /* the same when patch_offset skipped a landing pad */
    /* Offset of the patch point from the function entry (past a landing pad). */
    size_t (*patch_offset)(uintptr_t func);
    /*
     * Copy the instructions covering at least jump_size bytes at 'code' into
     * tramp_buf (which will run at tramp_addr), adjusted to run there,
     * followed by a jump back.  On failure return OPAL_ERR_NOT_SUPPORTED and
     * write why (naming the instruction) into reason.
     */
    int (*relocate)(uintptr_t code, unsigned char *tramp_buf, uintptr_t tramp_addr,
                    mca_patcher_overwrite_reloc_t *reloc, char *reason, size_t reason_size);
    /*
     * Write the hop at buf (hop_size bytes, to run at run_at): what the
     * entry jump at the patch point 'at' leads to, ending in a jump to the
     * intercept 'target' anywhere in the address space.  'at' tells what
     * patch_offset skipped (a hop may have to undo it, see aarch64's).
     */
    void (*hop)(unsigned char *buf, uintptr_t run_at, uintptr_t target, uintptr_t at);
    /* The patch bytes: a jump from 'from' to 'to' (jump_size bytes); false if out of range. */
    int (*entry_jump)(unsigned char *buf, uintptr_t from, uintptr_t to);
    /* Write w->bytes to code other threads may be running (pages already writable). */
    void (*code_write)(mca_patcher_overwrite_write_t *w);
    /* The program counter in a signal handler's ucontext_t, read and set. */
    uintptr_t (*get_pc)(const void *uc);
    void (*set_pc)(void *uc, uintptr_t pc);
} mca_patcher_overwrite_arch_t;

/*
 * For an architecture's relocate: "why: instruction at +off (its len bytes
 * in hex)" into reason; returns OPAL_ERR_NOT_SUPPORTED.
 */
int mca_patcher_overwrite_decline_insn(char *reason, size_t size, const unsigned char *code,
                                       size_t off, size_t len, const char *why);

/*
 * The same for an architecture of 4-byte instruction words: "why:
 * instruction at +0 (the first 'words' words at code, as words in hex)".
 */
int mca_patcher_overwrite_decline_words(char *reason, size_t size, uintptr_t code, unsigned words,
                                        const char *why);

/* Whether [addr, addr + len) lies in one readable mapping (/proc/self/maps). */
bool mca_patcher_overwrite_readable(uintptr_t addr, size_t len);

/* How many of the max bytes from addr on its mapping holds, if readable (else 0). */
size_t mca_patcher_overwrite_readable_bytes(uintptr_t addr, size_t max);

/*
 * For relocate, after the walk: declined (as above) if a displaced branch
 * (targets[k], 0 for none, of the k-th of n instructions, which start at
 * insn_offset[k]) lands strictly inside the window at code: in the middle
 * of the new jump.
 */
int mca_patcher_overwrite_check_targets(uintptr_t code, size_t window, const uint8_t *insn_offset,
                                        unsigned n, const uintptr_t *targets, char *reason,
                                        size_t size);

/* The table of the architecture built (configure: config/opal_arch.m4). */
#if OPAL_PATCHER_OVERWRITE_HAVE_ARCH
extern const mca_patcher_overwrite_arch_t mca_patcher_overwrite_arch;
#    define MCA_PATCHER_OVERWRITE_ARCH      (&mca_patcher_overwrite_arch)
#    define MCA_PATCHER_OVERWRITE_HAVE_ARCH 1
#else
#    define MCA_PATCHER_OVERWRITE_ARCH      ((const mca_patcher_overwrite_arch_t *) NULL)
#    define MCA_PATCHER_OVERWRITE_HAVE_ARCH 0
#endif

#endif
