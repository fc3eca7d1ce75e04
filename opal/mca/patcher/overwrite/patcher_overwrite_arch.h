/*
 * What the overwrite patcher needs from an architecture: where in a
 * function the patch goes, a relocated copy of the instructions it
 * displaces (the trampoline), the jumps, and a code write that threads
 * running the function never see half done.  One file per architecture
 * (patcher_overwrite_<arch>.c) provides its table; x86-64 and i386 share
 * theirs (patcher_overwrite_x86.c) and differ in patcher_overwrite_x86_64.c
 * and patcher_overwrite_i386.c.
 */
#ifndef MCA_PATCHER_OVERWRITE_ARCH_H
#define MCA_PATCHER_OVERWRITE_ARCH_H

#include <stddef.h>
#include <stdint.h>

#include "opal/mca/patcher/patcher.h"

/* Instructions that one patch can displace, at most. */
#define MCA_PATCHER_OVERWRITE_MAX_INSNS 8

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
    const mca_patcher_overwrite_reloc_t *reloc;
    int rc;                                /* out: OPAL_SUCCESS or an error */
    const char *reason;                    /* out: static text on failure */
} mca_patcher_overwrite_write_t;

typedef struct mca_patcher_overwrite_arch_t {
    const char *name;
    size_t jump_size;    /* bytes written at the patch point */
    size_t hop_size;     /* bytes of a jump reaching any address (hop, jump back) */
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
    /* Write a jump to target at buf (hop_size bytes), for code that will run at run_at. */
    void (*abs_jump)(unsigned char *buf, uintptr_t run_at, uintptr_t target);
    /* The patch bytes: a jump from 'from' to 'to' (jump_size bytes); false if out of range. */
    int (*entry_jump)(unsigned char *buf, uintptr_t from, uintptr_t to);
    /* Write w->bytes to code other threads may be running (pages already writable). */
    void (*code_write)(mca_patcher_overwrite_write_t *w);
    /* Called at patch_fini: drop any state (signal handlers) kept for code_write. */
    void (*fini)(void);
} mca_patcher_overwrite_arch_t;

#if defined(__x86_64__) || defined(__i386__)
extern const mca_patcher_overwrite_arch_t mca_patcher_overwrite_arch_x86;
#    define MCA_PATCHER_OVERWRITE_ARCH      (&mca_patcher_overwrite_arch_x86)
#    define MCA_PATCHER_OVERWRITE_HAVE_ARCH 1
#else
#define MCA_PATCHER_OVERWRITE_ARCH ((const mca_patcher_overwrite_arch_t *) NULL)
#define MCA_PATCHER_OVERWRITE_HAVE_ARCH 0
#endif

#endif
