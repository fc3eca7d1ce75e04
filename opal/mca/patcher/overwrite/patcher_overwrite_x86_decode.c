/*
 * x86 instruction length decoder, 64-bit and 32-bit mode.  It knows the
 * general-purpose, x87, SSE*, VEX and EVEX (maps 1-3) encodings: their
 * prefixes, ModRM/SIB/displacement and immediate sizes.  Encodings it is not
 * sure about (XOP, 3DNow!, AMX and APX maps, SSE4a, xbegin, 16-bit branch
 * forms, and in 32-bit mode 16-bit addressing, far pointers, les/lds/bound)
 * are INVALID: the relocator declines rather than guesses.
 *
 * What 32-bit mode changes: no REX (0x40-0x4f are inc/dec), a few opcodes
 * that 64-bit mode dropped are valid again, ModRM mod=00 rm=101 is an
 * absolute [disp32] (RIP-relative in 64-bit mode), moffs and mov-immediate
 * operands are at most 32 bits, and c4/c5/62 are VEX/EVEX only when the
 * next byte has mod=11 (else les/lds/bound).
 */
#include "opal_config.h"

#include <stdbool.h>
#include <string.h>

#include "opal/mca/patcher/overwrite/patcher_overwrite_x86_decode.h"

#define MAX_INSN_LENGTH 15

/* Operand bytes that follow an opcode. */
#define M 0x01 /* ModRM (+ SIB + displacement) */
#define B 0x02 /* imm8 */
#define Z 0x04 /* imm16 or imm32, by operand size */
#define V 0x08 /* imm16, imm32 or imm64 (mov reg, imm) */
#define W 0x10 /* imm16 */
#define X 0x80 /* invalid in 64-bit mode, or not supported here */

/* One-byte opcodes.  Prefixes, escapes and branches are handled in code. */
static const uint8_t one_byte[256] = {
    [0x00 ... 0x03] = M, [0x04] = B, [0x05] = Z, [0x06 ... 0x07] = X,
    [0x08 ... 0x0b] = M, [0x0c] = B, [0x0d] = Z, [0x0e] = X,
    [0x10 ... 0x13] = M, [0x14] = B, [0x15] = Z, [0x16 ... 0x17] = X,
    [0x18 ... 0x1b] = M, [0x1c] = B, [0x1d] = Z, [0x1e ... 0x1f] = X,
    [0x20 ... 0x23] = M, [0x24] = B, [0x25] = Z, [0x27] = X,
    [0x28 ... 0x2b] = M, [0x2c] = B, [0x2d] = Z, [0x2f] = X,
    [0x30 ... 0x33] = M, [0x34] = B, [0x35] = Z, [0x37] = X,
    [0x38 ... 0x3b] = M, [0x3c] = B, [0x3d] = Z, [0x3f] = X,
    [0x60 ... 0x61] = X, [0x63] = M,
    [0x68] = Z, [0x69] = M | Z, [0x6a] = B, [0x6b] = M | B,
    [0x80] = M | B, [0x81] = M | Z, [0x82] = X, [0x83] = M | B,
    [0x84 ... 0x8f] = M,
    [0x9a] = X,
    [0xa8] = B, [0xa9] = Z,
    [0xb0 ... 0xb7] = B, [0xb8 ... 0xbf] = V,
    [0xc0 ... 0xc1] = M | B, [0xc2] = W, [0xc6] = M | B, [0xc7] = M | Z,
    [0xc8] = W | B, [0xca] = W, [0xcd] = B, [0xce] = X,
    [0xd0 ... 0xd3] = M, [0xd4 ... 0xd6] = X, [0xd8 ... 0xdf] = M,
    [0xe4 ... 0xe7] = B, [0xea] = X,
    [0xf6 ... 0xf7] = M, [0xfe ... 0xff] = M,
};

/* The one-byte table, with what 32-bit mode adds to it. */
static unsigned one_byte_flags(uint8_t op, bool mode32)
{
    /* push/pop segment, daa/das/aaa/aas, pusha/popa: no operand bytes */
    static const uint8_t no_operands[] = {0x06, 0x07, 0x0e, 0x16, 0x17, 0x1e, 0x1f,
                                          0x27, 0x2f, 0x37, 0x3f, 0x60, 0x61};
    if (mode32 && memchr(no_operands, op, sizeof(no_operands))) {
        return 0;
    }
    if (mode32 && op == 0x82) {
        return M | B; /* the same as 0x80 */
    }
    if (mode32 && (op == 0xd4 || op == 0xd5)) {
        return B; /* aam, aad */
    }
    return one_byte[op];
}

/* Opcodes after 0x0f (0x0f 0x38 and 0x0f 0x3a are handled in code). */
static const uint8_t two_byte[256] = {
    [0x00 ... 0x03] = M,
    [0x04] = X,
    [0x0a] = X,
    [0x0c] = X,
    [0x0d] = M,
    [0x0e ... 0x0f] = X, /* femms, 3DNow! */
    [0x10 ... 0x1f] = M,
    [0x20 ... 0x23] = M,
    [0x24 ... 0x27] = X,
    [0x28 ... 0x2f] = M,
    [0x36] = X,
    [0x39] = X,
    [0x3b ... 0x3f] = X,
    [0x40 ... 0x6f] = M,
    [0x70 ... 0x73] = M | B,
    [0x74 ... 0x76] = M,
    [0x78 ... 0x79] = M,
    [0x7a ... 0x7b] = X,
    [0x7c ... 0x7f] = M,
    [0x90 ... 0x9f] = M,
    [0xa3] = M,
    [0xa4] = M | B,
    [0xa5] = M,
    [0xa6 ... 0xa7] = X,
    [0xab] = M,
    [0xac] = M | B,
    [0xad ... 0xaf] = M,
    [0xb0 ... 0xb9] = M,
    [0xba] = M | B,
    [0xbb ... 0xbf] = M,
    [0xc0 ... 0xc1] = M,
    [0xc2] = M | B,
    [0xc3] = M,
    [0xc4 ... 0xc6] = M | B,
    [0xc7] = M,
    [0xd0 ... 0xff] = M,
};

/* VEX/EVEX map 1 opcodes that carry an imm8 (map 3 always does, map 2 never). */
static bool map1_has_imm8(uint8_t op)
{
    return (op >= 0x70 && op <= 0x73) || op == 0xc2 || (op >= 0xc4 && op <= 0xc6);
}

const char *mca_patcher_x86_kind_name(int kind)
{
    switch (kind) {
    case MCA_PATCHER_X86_PLAIN:
        return "plain";
    case MCA_PATCHER_X86_RIPREL:
        return "rip-relative";
    case MCA_PATCHER_X86_JMP:
        return "jmp rel";
    case MCA_PATCHER_X86_JCC:
        return "jcc rel";
    case MCA_PATCHER_X86_CALL:
        return "call rel";
    case MCA_PATCHER_X86_LOOP:
        return "loop/jrcxz";
    case MCA_PATCHER_X86_JMP_IND:
        return "indirect jmp";
    case MCA_PATCHER_X86_END:
        return "ret/int3/int/hlt/ud";
    default:
        return "unknown or unsupported encoding";
    }
}

static size_t invalid(mca_patcher_x86_insn_t *insn)
{
    insn->length = 0;
    insn->kind = MCA_PATCHER_X86_INVALID;
    return 0;
}

static int32_t read_le(const uint8_t *p, size_t size)
{
    if (size == 1) {
        return (int8_t) p[0];
    }
    uint32_t v = (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 | (uint32_t) p[3] << 24;
    return (int32_t) v;
}

/*
 * ModRM, optional SIB and displacement starting at code[*pos].  Notes a
 * [rip + disp32] operand (64-bit mode).  False when the bytes run out.
 */
static bool decode_modrm(const uint8_t *code, size_t avail, size_t *pos, bool adsize, bool mode32,
                         mca_patcher_x86_insn_t *insn)
{
    size_t i = *pos;
    if (i >= avail) {
        return false;
    }
    uint8_t modrm = code[i++];
    unsigned mod = modrm >> 6, rm = modrm & 7;
    size_t disp = 0;
    if (mod == 1) {
        disp = 1;
    } else if (mod == 2) {
        disp = 4;
    }
    if (mod != 3 && rm == 4) {
        if (i >= avail) {
            return false;
        }
        uint8_t sib = code[i++];
        if (mod == 0 && (sib & 7) == 5) {
            disp = 4; /* no base, disp32 */
        }
    } else if (mod == 0 && rm == 5 && mode32) {
        disp = 4; /* [disp32], absolute */
    } else if (mod == 0 && rm == 5) {
        if (adsize) {
            return false; /* [eip + disp32]: not worth supporting */
        }
        disp = 4;
        insn->riprel = 1;
        insn->rel_offset = (uint8_t) i;
        insn->rel_size = 4;
    }
    if (i + disp > avail) {
        return false;
    }
    if (insn->riprel) {
        insn->rel = read_le(code + i, 4);
    }
    *pos = i + disp;
    return true;
}

size_t mca_patcher_x86_decode(const uint8_t *code, size_t avail, mca_patcher_x86_mode_t mode,
                              mca_patcher_x86_insn_t *insn)
{
    const bool mode32 = mode == MCA_PATCHER_X86_MODE_32;
    bool opsize = false, adsize = false, rep = false, repne = false, lock = false;
    bool rex = false, rexw = false;
    size_t i = 0;

    memset(insn, 0, sizeof(*insn));
    if (avail > MAX_INSN_LENGTH) {
        avail = MAX_INSN_LENGTH;
    }

    /* Legacy prefixes; a REX prefix counts only right before the opcode. */
    for (;; i++) {
        if (i >= avail) {
            return invalid(insn);
        }
        uint8_t b = code[i];
        if ((b & 0xf0) == 0x40 && !mode32) {
            rex = true;
            rexw = (b & 0x08) != 0;
            continue;
        }
        if (b == 0x66) {
            opsize = true;
        } else if (b == 0x67) {
            if (mode32) {
                return invalid(insn); /* 16-bit addressing: a ModRM of its own */
            }
            adsize = true;
        } else if (b == 0xf0) {
            lock = true;
        } else if (b == 0xf2) {
            repne = true;
        } else if (b == 0xf3) {
            rep = true;
        } else if (b != 0x2e && b != 0x36 && b != 0x3e && b != 0x26 && b != 0x64 && b != 0x65) {
            break;
        }
        if (rex) {
            return invalid(insn); /* a prefix after REX: unusual, not supported */
        }
    }

    uint8_t op = code[i++];
    unsigned flags;
    int map = 0; /* 0: one byte, 1: 0f, 2: 0f38, 3: 0f3a */

    if (op == 0xc4 || op == 0xc5 || op == 0x62) {
        /* VEX (2 or 3 bytes) or EVEX (4 bytes): always ModRM. */
        if (opsize || rep || repne || lock || rex) {
            return invalid(insn);
        }
        if (mode32 && (i >= avail || code[i] < 0xc0)) {
            return invalid(insn); /* les, lds, bound */
        }
        size_t plen = op == 0xc5 ? 1 : op == 0xc4 ? 2 : 3;
        if (i + plen >= avail) {
            return invalid(insn);
        }
        if (op == 0xc5) {
            map = 1;
        } else if (op == 0xc4) {
            map = code[i] & 0x1f;
        } else {
            map = code[i] & 0x07;
            if ((code[i] & 0x08) || !(code[i + 1] & 0x04)) {
                return invalid(insn); /* reserved bits: APX or not EVEX */
            }
        }
        if (map < 1 || map > 3) {
            return invalid(insn);
        }
        i += plen;
        op = code[i++];
        flags = M;
        if (map == 3 || (map == 1 && map1_has_imm8(op))) {
            flags |= B;
        }
        if (map == 1 && op == 0x77 && plen < 3) {
            flags = 0; /* vzeroupper / vzeroall */
        }
    } else if (op == 0x0f) {
        if (i >= avail) {
            return invalid(insn);
        }
        op = code[i++];
        if (op == 0x38 || op == 0x3a) {
            if (i >= avail) {
                return invalid(insn);
            }
            map = op == 0x38 ? 2 : 3;
            op = code[i++];
            flags = map == 2 ? M : M | B;
        } else {
            map = 1;
            flags = two_byte[op];
            if ((op == 0x78 && (opsize || repne)) || (op == 0xb8 && !rep)) {
                return invalid(insn); /* SSE4a extrq/insertq, jmpe */
            }
        }
    } else {
        flags = one_byte_flags(op, mode32);
        if (op == 0x8f && (i >= avail || (code[i] & 0x38) != 0)) {
            return invalid(insn); /* XOP */
        }
    }
    if (flags & X) {
        return invalid(insn);
    }

    insn->kind = MCA_PATCHER_X86_PLAIN;

    /* Relative branches. */
    size_t rel_size = 0;
    if (map == 0 && ((op >= 0x70 && op <= 0x7f) || op == 0xeb || (op >= 0xe0 && op <= 0xe3))) {
        rel_size = 1;
        insn->kind = op == 0xeb ? MCA_PATCHER_X86_JMP
                     : op >= 0xe0 ? MCA_PATCHER_X86_LOOP : MCA_PATCHER_X86_JCC;
    } else if (map == 0 && (op == 0xe8 || op == 0xe9)) {
        rel_size = 4;
        insn->kind = op == 0xe8 ? MCA_PATCHER_X86_CALL : MCA_PATCHER_X86_JMP;
        insn->call = op == 0xe8;
    } else if (map == 1 && op >= 0x80 && op <= 0x8f) {
        rel_size = 4;
        insn->kind = MCA_PATCHER_X86_JCC;
    }
    if (rel_size) {
        if (opsize || i + rel_size > avail) {
            return invalid(insn); /* 16-bit branch forms differ between vendors */
        }
        insn->cond = op & 0x0f;
        insn->rel_offset = (uint8_t) i;
        insn->rel_size = (uint8_t) rel_size;
        insn->rel = read_le(code + i, rel_size);
        insn->length = (uint8_t) (i + rel_size);
        return insn->length;
    }

    /* Opcodes that end the flow of control. */
    if (map == 0 && (op == 0xc2 || op == 0xc3 || op == 0xca || op == 0xcb || op == 0xcc ||
                     op == 0xcd || op == 0xcf || op == 0xf1 || op == 0xf4)) {
        insn->kind = MCA_PATCHER_X86_END;
    } else if (map == 1 && (op == 0x0b || op == 0xb9 || op == 0xff)) {
        insn->kind = MCA_PATCHER_X86_END;
    }

    uint8_t modrm = 0;
    if (flags & M) {
        if (i >= avail) {
            return invalid(insn);
        }
        modrm = code[i];
        if (!decode_modrm(code, avail, &i, adsize, mode32, insn)) {
            return invalid(insn);
        }
    }

    /* The Z immediate: 2 bytes with 0x66, unless REX.W makes the operand 64-bit (imm32). */
    const size_t imm_z = opsize && !rexw ? 2 : 4;
    size_t imm = 0;
    if (flags & B) {
        imm += 1;
    }
    if (flags & W) {
        imm += 2;
    }
    if (flags & Z) {
        imm += imm_z;
    }
    if (flags & V) {
        imm += rexw ? 8 : opsize ? 2 : 4;
    }
    if (map == 0) {
        unsigned reg = (modrm >> 3) & 7;
        if (op >= 0xa0 && op <= 0xa3) {
            imm += adsize || mode32 ? 4 : 8; /* mov with an absolute address */
        } else if (op == 0xf6 && reg <= 1) {
            imm += 1;
        } else if (op == 0xf7 && reg <= 1) {
            imm += imm_z; /* test */
        } else if (op == 0xc7 && modrm == 0xf8) {
            return invalid(insn); /* xbegin: a relative branch */
        } else if (op == 0xff && (reg == 4 || reg == 5)) {
            insn->kind = MCA_PATCHER_X86_JMP_IND;
        } else if (op == 0xff && (reg == 2 || reg == 3)) {
            insn->call = 1; /* through a register or memory */
        }
    }
    if (i + imm > avail) {
        return invalid(insn);
    }
    if (insn->riprel && insn->kind == MCA_PATCHER_X86_PLAIN) {
        insn->kind = MCA_PATCHER_X86_RIPREL;
    }
    insn->length = (uint8_t) (i + imm);
    return insn->length;
}
