/*
 * RISC-V 64 calls made as the caller (base_call_as.h).
 *
 * The return address is ra, so the gadget must reload it from the stack
 * before returning: a function's epilogue, "ld ra,X(sp)" with perhaps
 * some of "ld s0..s11,Y(sp)", then "addi sp,sp,N; ret" (each in its
 * compressed form or not).  The crti/crtn of riscv64 are empty (no
 * _init/_fini), so it is any such epilogue of the object; what it loads
 * and N are decoded from it.  The call, R = sp at entry:
 *
 *     sp = T = R-112; ra, s0..s11 -> T+8..T+111     restored after back
 *     s0 = R                                        the CFA
 *     sp = S = T-N; <back> -> X(sp); s0 -> Y(sp) if the gadget loads s0
 *     ra = <gadget>; jr fn                           (through t1)
 *   back:                 the gadget left sp = S+N = T, ra = <back>, s0 = R
 *     sp = s0-112; restore ra, s0..s11; sp = R; ret  fn's result in a0
 *
 * The gadget's other loads take what the stack holds into s1..s11, hence
 * their save area above S+N, which it does not read.  An unwinder inside
 * fn takes ra, and s0 when the epilogue's function saved it, from the
 * gadget's frame: both are right there.
 *
 * Under a shadow stack (Zicfiss) an epilogue that checks its return
 * (sspopchk) would reject the one to <back>, which no call pushed, so it
 * does not decode as a gadget; one that does not check would bypass the
 * protection that the process asked for: calls are not made this way
 * where a shadow stack is active.
 */
#include "opal_config.h"

#if defined(__riscv) && 64 == __riscv_xlen

#    include <string.h>

#    include "opal/mca/patcher/base/base_call_as.h"

#    define REG_RA 1
#    define REG_S0 8
/* ra, s0 (x8), s1 (x9) and s2..s11 (x18..x27): what an epilogue restores. */
#    define RESTORED ((1u << REG_RA) | (1u << REG_S0) | (1u << 9) | (0x3ffu << 18))
#    define C_JR_RA  0x8082u     /* ret, compressed */
#    define JALR_RA  0x00008067u /* ret: jalr x0, 0(ra) */

typedef struct gadget_t {
    intptr_t frame; /* N */
    intptr_t ra;    /* X */
    intptr_t s0;    /* Y of s0, or -1 */
} gadget_t;

uintptr_t mca_patcher_base_riscv64_call_frame(uintptr_t gadget, uintptr_t fn, uintptr_t a0,
                                              uintptr_t a1, uintptr_t a2, intptr_t frame,
                                              intptr_t ra, intptr_t s0);

__asm__(".text\n"
        ".globl mca_patcher_base_riscv64_call_frame\n"
        ".hidden mca_patcher_base_riscv64_call_frame\n"
        ".type mca_patcher_base_riscv64_call_frame, @function\n"
        "mca_patcher_base_riscv64_call_frame:\n"
        "    .cfi_startproc\n"
        "    addi sp, sp, -112\n"
        "    .cfi_def_cfa_offset 112\n"
        "    sd ra, 104(sp)\n"
        "    sd s0, 96(sp)\n"
        "    sd s1, 88(sp)\n"
        "    sd s2, 80(sp)\n"
        "    sd s3, 72(sp)\n"
        "    sd s4, 64(sp)\n"
        "    sd s5, 56(sp)\n"
        "    sd s6, 48(sp)\n"
        "    sd s7, 40(sp)\n"
        "    sd s8, 32(sp)\n"
        "    sd s9, 24(sp)\n"
        "    sd s10, 16(sp)\n"
        "    sd s11, 8(sp)\n"
        "    .cfi_offset ra, -8\n"
        "    .cfi_offset s0, -16\n"
        "    .cfi_offset s1, -24\n"
        "    .cfi_offset s2, -32\n"
        "    .cfi_offset s3, -40\n"
        "    .cfi_offset s4, -48\n"
        "    .cfi_offset s5, -56\n"
        "    .cfi_offset s6, -64\n"
        "    .cfi_offset s7, -72\n"
        "    .cfi_offset s8, -80\n"
        "    .cfi_offset s9, -88\n"
        "    .cfi_offset s10, -96\n"
        "    .cfi_offset s11, -104\n"
        "    addi s0, sp, 112\n"
        "    .cfi_def_cfa s0, 0\n"
        "    sub sp, sp, a5\n"
        "    lla t0, 1f\n"
        "    add t1, sp, a6\n"
        "    sd t0, 0(t1)\n"
        "    bltz a7, 2f\n"
        "    add t1, sp, a7\n"
        "    sd s0, 0(t1)\n"
        "2:  mv ra, a0\n"
        "    mv t1, a1\n"
        "    mv a0, a2\n"
        "    mv a1, a3\n"
        "    mv a2, a4\n"
        "    jr t1\n"
        "1:  addi sp, s0, -112\n"
        "    .cfi_def_cfa sp, 112\n"
        "    ld s11, 8(sp)\n"
        "    ld s10, 16(sp)\n"
        "    ld s9, 24(sp)\n"
        "    ld s8, 32(sp)\n"
        "    ld s7, 40(sp)\n"
        "    ld s6, 48(sp)\n"
        "    ld s5, 56(sp)\n"
        "    ld s4, 64(sp)\n"
        "    ld s3, 72(sp)\n"
        "    ld s2, 80(sp)\n"
        "    ld s1, 88(sp)\n"
        "    ld s0, 96(sp)\n"
        "    ld ra, 104(sp)\n"
        "    .cfi_restore ra\n"
        "    .cfi_restore s0\n"
        "    .cfi_restore s1\n"
        "    .cfi_restore s2\n"
        "    .cfi_restore s3\n"
        "    .cfi_restore s4\n"
        "    .cfi_restore s5\n"
        "    .cfi_restore s6\n"
        "    .cfi_restore s7\n"
        "    .cfi_restore s8\n"
        "    .cfi_restore s9\n"
        "    .cfi_restore s10\n"
        "    .cfi_restore s11\n"
        "    addi sp, sp, 112\n"
        "    .cfi_def_cfa_offset 0\n"
        "    ret\n"
        "    .cfi_endproc\n"
        ".size mca_patcher_base_riscv64_call_frame, .-mca_patcher_base_riscv64_call_frame\n");

/* The instruction at p, of at most len bytes: its length (2 or 4), 0 when none fits. */
static size_t insn(const unsigned char *p, size_t len, uint32_t *w)
{
    uint16_t lo, hi;
    if (len < 2) {
        return 0;
    }
    memcpy(&lo, p, sizeof(lo));
    if (3 != (lo & 3)) {
        *w = lo;
        return 2;
    }
    if (len < 4) {
        return 0;
    }
    memcpy(&hi, p + 2, sizeof(hi));
    /* Longer encodings than 4 bytes match none of the patterns below. */
    *w = lo | (uint32_t) hi << 16;
    return 4;
}

/* ld reg, off(sp) or c.ldsp. */
static bool is_load(uint32_t w, size_t n, unsigned *reg, intptr_t *off)
{
    if (4 == n && 0x03 == (w & 0x7f) && 3 == ((w >> 12) & 7) && 2 == ((w >> 15) & 31)) {
        *reg = (w >> 7) & 31;
        *off = (int32_t) w >> 20;
        return true;
    }
    if (2 == n && 0x6002 == (w & 0xe003)) {
        *reg = (w >> 7) & 31;
        *off = ((w >> 7) & 0x20) | ((w >> 2) & 0x18) | ((w << 4) & 0x1c0);
        return true;
    }
    return false;
}

/* addi sp, sp, imm, c.addi16sp or c.addi sp. */
static bool is_sp_add(uint32_t w, size_t n, intptr_t *imm)
{
    if (4 == n && 0x00010113 == (w & 0xfffff)) {
        *imm = (int32_t) w >> 20;
        return true;
    }
    if (2 == n && 0x6101 == (w & 0xef83)) {
        const intptr_t v = ((w >> 3) & 0x200) | ((w >> 2) & 0x10) | ((w << 1) & 0x40) |
                           ((w << 4) & 0x180) | ((w << 3) & 0x20);
        *imm = v & 0x200 ? v - 0x400 : v;
        return true;
    }
    if (2 == n && 0x0101 == (w & 0xef83)) {
        const intptr_t v = ((w >> 7) & 0x20) | ((w >> 2) & 0x1f);
        *imm = v & 0x20 ? v - 0x40 : v;
        return true;
    }
    return false;
}

/*
 * Whether [p, p+len) starts with an epilogue that we can use: loads of ra
 * and of distinct s registers from distinct 8-byte slots of the frame
 * being freed, the sp adjustment (16-byte aligned), ret.
 */
static bool gadget_at(const unsigned char *p, size_t len, gadget_t *g)
{
    intptr_t slots[13];
    size_t nslots = 0;
    uint32_t loaded = 0, w;
    unsigned reg;
    intptr_t off;
    size_t n;
    g->ra = g->s0 = -1;
    while (0 != (n = insn(p, len, &w)) && is_load(w, n, &reg, &off)) {
        if (0 == (RESTORED & (1u << reg)) || 0 != (loaded & (1u << reg)) || off < 0 ||
            0 != off % 8) {
            return false;
        }
        for (size_t i = 0; i < nslots; i++) {
            if (slots[i] == off) {
                return false;
            }
        }
        slots[nslots++] = off;
        loaded |= 1u << reg;
        if (REG_RA == reg) {
            g->ra = off;
        } else if (REG_S0 == reg) {
            g->s0 = off;
        }
        p += n;
        len -= n;
    }
    if (0 == n || g->ra < 0 || !is_sp_add(w, n, &g->frame) || g->frame <= 0 || 0 != g->frame % 16) {
        return false;
    }
    for (size_t i = 0; i < nslots; i++) {
        if (slots[i] + 8 > g->frame) {
            return false;
        }
    }
    p += n;
    len -= n;
    n = insn(p, len, &w);
    return (2 == n && C_JR_RA == w) || (4 == n && JALR_RA == w);
}

/* Compressed instructions are 2-byte aligned: so is the search. */
static const unsigned char *find_epilogue(const unsigned char *code, size_t len)
{
    gadget_t g;
    for (size_t i = 0; i + 2 <= len; i += 2) {
        if (gadget_at(code + i, len - i, &g)) {
            return code + i;
        }
    }
    return NULL;
}

static uintptr_t riscv64_call_via(uintptr_t gadget, uintptr_t fn, uintptr_t a0, uintptr_t a1,
                                  uintptr_t a2)
{
    /* Found by find_epilogue: decoded again, it ends at the same ret. */
    gadget_t g;
    (void) gadget_at((const unsigned char *) gadget, SIZE_MAX, &g);
    return mca_patcher_base_riscv64_call_frame(gadget, fn, a0, a1, a2, g.frame, g.ra, g.s0);
}

static const char *riscv64_unavailable(void)
{
    return mca_patcher_base_call_as_shadow_stack()
               ? "a shadow stack (Zicfiss) is active: the caller's object checks its returns "
                 "against it"
               : NULL;
}

const mca_patcher_base_call_as_arch_t mca_patcher_base_call_as_arch = {
    .name = "riscv64",
    .epilogue_gadget = find_epilogue,
    .any_gadget = find_epilogue,
    .unavailable = riscv64_unavailable,
    .call_via = riscv64_call_via,
};

#endif
