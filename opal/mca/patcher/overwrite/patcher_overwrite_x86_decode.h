/*
 * A small x86 instruction length decoder, for 64-bit and 32-bit mode:
 * enough to walk a function's first instructions and to tell which of them
 * are position dependent (RIP-relative memory operands, relative branches).
 * Everything it does not know for certain is reported as INVALID, which the
 * relocator turns into a clean decline.  test/mca/patcher/overwrite checks
 * it against Zydis, in both modes.
 */
#ifndef MCA_PATCHER_OVERWRITE_X86_DECODE_H
#define MCA_PATCHER_OVERWRITE_X86_DECODE_H

#include <stddef.h>
#include <stdint.h>

/* The processor mode the bytes are decoded for. */
typedef enum {
    MCA_PATCHER_X86_MODE_32 = 32, /* IA-32: 0x40-0x4f are inc/dec, no RIP-relative operands */
    MCA_PATCHER_X86_MODE_64 = 64,
} mca_patcher_x86_mode_t;

#if defined(__x86_64__)
#    define MCA_PATCHER_X86_NATIVE_MODE MCA_PATCHER_X86_MODE_64
#else
#    define MCA_PATCHER_X86_NATIVE_MODE MCA_PATCHER_X86_MODE_32
#endif

typedef enum {
    MCA_PATCHER_X86_PLAIN,   /* position independent: copy as is */
    MCA_PATCHER_X86_RIPREL,  /* memory operand [rip + disp32] (64-bit mode only) */
    MCA_PATCHER_X86_JMP,     /* jmp rel8 / rel32 */
    MCA_PATCHER_X86_JCC,     /* jcc rel8 / rel32 (cond = low nibble of the opcode) */
    MCA_PATCHER_X86_CALL,    /* call rel32 */
    MCA_PATCHER_X86_LOOP,    /* loop, loope, loopne, jrcxz/jecxz: rel8 only */
    MCA_PATCHER_X86_JMP_IND, /* jmp through a register or memory (may be RIPREL too) */
    MCA_PATCHER_X86_END,     /* ret, int3, int n, hlt, ud*, iret: flow never continues */
    MCA_PATCHER_X86_INVALID, /* unknown or unsupported encoding */
} mca_patcher_x86_kind_t;

typedef struct mca_patcher_x86_insn_t {
    uint8_t length;
    uint8_t kind;       /* mca_patcher_x86_kind_t */
    uint8_t rel_offset; /* RIPREL: offset of disp32; branches: offset of rel8/rel32 */
    uint8_t rel_size;   /* 1 or 4 */
    uint8_t cond;       /* JCC: condition code 0..15 */
    uint8_t riprel;     /* 1 when a memory operand is [rip + disp32] (RIPREL, JMP_IND, CALL_IND) */
    uint8_t call;       /* 1 for a call (e8, ff /2, ff /3): it pushes the next address */
    int32_t rel;        /* the disp32 or the branch displacement, sign extended */
} mca_patcher_x86_insn_t;

/*
 * Decode one instruction from code[0 .. avail) in the given mode.  Returns
 * the length (also in insn->length), or 0 with insn->kind INVALID when the
 * bytes are not an instruction this decoder knows (or are cut short by
 * avail).
 */
size_t mca_patcher_x86_decode(const uint8_t *code, size_t avail, mca_patcher_x86_mode_t mode,
                              mca_patcher_x86_insn_t *insn);

/* Short mnemonic-ish name of a kind for messages ("ret/int3/...", "unknown"). */
const char *mca_patcher_x86_kind_name(int kind);

#endif
