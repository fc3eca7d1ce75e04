/*
 * ppc64le (ELFv2) calls made as the caller (base_call_as.h).
 *
 * The return address is the link register, so the gadget must reload it
 * from the stack before returning: the standard epilogue
 * "addi r1,r1,N; ld r0,16(r1); mtlr r0; blr" that ends _init and _fini
 * (crtn.o) and many functions.  N is read from the gadget's addi.  The
 * call, R = r1 at entry:
 *
 *     LR -> 16(R); r31 -> -8(R); r31 = R         our frame, the CFA
 *     stdu r1,-48(r1)                  T = R-48: back chain R, 16(T) =
 *                                      <back>, 24(T) = our TOC pointer
 *     stdux r1,r1,-N                   S = T-N: back chain T
 *     LR = <gadget>; r12 = ctr = fn; bctr    (r12 for fn's global entry)
 *   back:                              the gadget left r1 = S+N = T and
 *     r2 = 24(T); r1 = r31; restore LR, r31; blr    took <back> from 16(T)
 *
 * fn, or linkage code on its way, may store into its caller's frame what
 * ELFv2 allows (CR at 8(S), LR at 16(S), a TOC pointer at 24(S)): N >= 32
 * keeps that below T.  fn takes at most three prototyped, non-variadic
 * arguments, all in registers, so S needs no parameter save area.  The
 * back chain runs S -> T -> R: S is the frame of the gadget's function, T
 * that of a caller at <back>, as an unwinder following back chains
 * expects.  There is no shadow stack on Power.
 */
#include "opal_config.h"

#if defined(__powerpc64__) && defined(__LITTLE_ENDIAN__)

#    include <string.h>

#    include "opal/mca/patcher/base/base_call_as.h"

/* Instruction words of the epilogue. */
#    define ADDI_R1_R1      0x38210000u /* | N, a signed 16-bit immediate */
#    define ADDI_R1_R1_MASK 0xffff0000u
#    define LD_R0_16_R1     0xe8010010u
#    define MTLR_R0         0x7c0803a6u
#    define BLR             0x4e800020u
/* What fn may store into its caller's frame ends below this. */
#    define MIN_FRAME 32

uintptr_t mca_patcher_base_ppc64le_call_frame(uintptr_t gadget, uintptr_t fn, uintptr_t a0,
                                              uintptr_t a1, uintptr_t a2, uintptr_t n);

__asm__(".text\n"
        ".globl mca_patcher_base_ppc64le_call_frame\n"
        ".hidden mca_patcher_base_ppc64le_call_frame\n"
        ".type mca_patcher_base_ppc64le_call_frame, @function\n"
        "mca_patcher_base_ppc64le_call_frame:\n"
        "    .cfi_startproc\n"
        "    mflr 0\n"
        "    std 0, 16(1)\n"
        "    .cfi_offset lr, 16\n"
        "    std 31, -8(1)\n"
        "    .cfi_offset r31, -8\n"
        "    mr 31, 1\n"
        "    .cfi_def_cfa_register r31\n"
        "    stdu 1, -48(1)\n"
        "    bcl 20, 31, 2f\n"
        "2:  mflr 9\n"
        "    addi 9, 9, 1f - 2b\n"
        "    std 9, 16(1)\n"
        "    std 2, 24(1)\n"
        "    neg 8, 8\n"
        "    stdux 1, 1, 8\n"
        "    mtlr 3\n"
        "    mr 12, 4\n"
        "    mtctr 12\n"
        "    mr 3, 5\n"
        "    mr 4, 6\n"
        "    mr 5, 7\n"
        "    bctr\n"
        "1:\n"
        "    ld 2, -24(31)\n"
        "    mr 1, 31\n"
        "    .cfi_def_cfa_register r1\n"
        "    ld 0, 16(1)\n"
        "    mtlr 0\n"
        "    .cfi_restore lr\n"
        "    ld 31, -8(1)\n"
        "    .cfi_restore r31\n"
        "    blr\n"
        "    .cfi_endproc\n"
        ".size mca_patcher_base_ppc64le_call_frame, .-mca_patcher_base_ppc64le_call_frame\n");

static uint32_t word(const unsigned char *p)
{
    uint32_t w;
    memcpy(&w, p, sizeof(w));
    return w;
}

/* N of the epilogue at p, or 0 when p holds none that we can use. */
static uintptr_t epilogue_frame(const unsigned char *p)
{
    const uint32_t addi = word(p);
    const int16_t n = (int16_t) (addi & ~ADDI_R1_R1_MASK);
    if (ADDI_R1_R1 != (addi & ADDI_R1_R1_MASK) || n < MIN_FRAME || 0 != n % 16 ||
        LD_R0_16_R1 != word(p + 4) || MTLR_R0 != word(p + 8) || BLR != word(p + 12)) {
        return 0;
    }
    return (uintptr_t) n;
}

static const unsigned char *find_epilogue(const unsigned char *code, size_t len)
{
    for (size_t i = 0; i + 16 <= len; i += 4) {
        if (0 != epilogue_frame(code + i)) {
            return code + i;
        }
    }
    return NULL;
}

static uintptr_t ppc64le_call_via(uintptr_t gadget, uintptr_t fn, uintptr_t a0, uintptr_t a1,
                                  uintptr_t a2)
{
    return mca_patcher_base_ppc64le_call_frame(gadget, fn, a0, a1, a2,
                                               epilogue_frame((const unsigned char *) gadget));
}

static const char *ppc64le_unavailable(void)
{
    return NULL;
}

const mca_patcher_base_call_as_arch_t mca_patcher_base_call_as_arch = {
    .name = "ppc64le",
    /* The epilogue is the gadget wherever it is: _fini's first. */
    .epilogue_gadget = find_epilogue,
    .any_gadget = find_epilogue,
    .unavailable = ppc64le_unavailable,
    .call_via = ppc64le_call_via,
};

#endif
