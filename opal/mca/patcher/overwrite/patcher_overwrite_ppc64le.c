/*
 * ppc64le (ELFv2) instructions for the overwrite patcher.
 *
 * The patch is one "b hop" (4 bytes, +-32 MiB) at the function's LOCAL
 * entry point, to a hop in a page the module maps near the function.
 *
 * Where: an ELFv2 function whose code uses a TOC has two entry points
 * (ELFv2 ABI, "Function Prologue"; the symbol's st_other holds the offset,
 * "Symbol Values").  Its global entry, reached through the PLT or a
 * function pointer with r12 = its address, begins
 *     addis r2,r12,.TOC.-f@ha; addi r2,r2,.TOC.-f@l
 * (or lis r2,.TOC.@ha; addi r2,r2,.TOC.@l in a program linked at a fixed
 * address, or ld r2,-8(r12); add r2,r2,r12 with the offset in the
 * doubleword before f), and callers inside its module (libc calling its
 * own munmap) "bl" straight to the local entry after those two
 * instructions, r2 already right.  A patch at the global entry would miss
 * them; at the local entry it sees both.  patch_offset finds the local
 * entry by decoding those two instructions at the address it is given:
 * patch_address has an address, not a symbol; a symbol lookup would fail
 * for static functions, stripped objects, static programs and code made
 * at run time, whereas the two instruction forms are what compilers and
 * linkers emit for every global entry.  Anything else is taken for a
 * function with one entry point (st_other 0 or 1: no TOC needed on entry,
 * r12 unused), patched at its first instruction.
 *
 * The TOC pointer (r2).  At the local entry r2 is the function's module's
 * TOC, whichever way it was called.  Our intercept is a C function of
 * another module entered at its global entry (r12 = its address), which
 * sets r2 to its own TOC and returns with it.  A caller through the PLT
 * or a pointer restores its r2 after the call (the nop after its bl
 * became "ld r2,24(r1)"), but a call inside the module has no restore:
 * "bl munmap_local_entry" is followed by code that uses r2 at once.  So
 * the hop is a real call, in a frame of its own:
 *     mflr r0; std r0,16(r1)           the return address, in the slot the
 *                                      caller's frame keeps for its callee
 *     stdu r1,-96(r1)                  32-byte frame header + 64-byte
 *                                      parameter save area: the intercept
 *                                      may be variadic (mremap) and store
 *                                      r3-r10 there ("The Stack Frame",
 *                                      "Parameter Save Area")
 *     std r2,24(r1)                    the TOC, in OUR frame's TOC save
 *                                      doubleword (never the caller's: a
 *                                      PLT stub keeps the caller's own
 *                                      there, to be reloaded after return)
 *     r12 = intercept; mtctr r12; bctrl    global entry convention
 *     ld r2,24(r1); addi r1,r1,96; ld r0,16(r1); mtlr r0; blr
 * Only r0, r12 and CTR change on the way in, all volatile at a call and
 * none an argument; results (r3, r4, f1..) pass through untouched.
 * Arguments passed in memory (a 9th integer one) would be looked for in
 * our frame: no function the hooks patch has them.  The back chain is
 * kept, but the hop page has no unwind information: a C++ unwinder or
 * backtrace() stops in it.  The intercept's own return address is the
 * hop's: the caller's return address is one frame up
 * (__builtin_return_address(1): mca_patcher_base_patched_caller in
 * base_dl.h, for dlopen's intercept, which calls the loader as its
 * caller).
 *
 * The trampoline is reached through a function pointer (the chain) from
 * the intercept, which saves and restores its own r2 around the call.  It
 * sets r2 to the function's TOC (known at patch time: computed from the
 * global entry's two instructions) with an absolute 5-instruction load
 * (not from r12, so it needs nothing of its caller), runs the displaced
 * instruction and branches back after it.  A function patched at its
 * first instruction needs no TOC on entry: r2 is left as it is.
 *
 * Relocating the displaced instruction (one; two words for a Power10
 * prefixed one, which is never split: the b replaces its prefix, the
 * trampoline holds both words and comes back after the suffix):
 *   b/bl target (AA=0)   b/bl target if it reaches, else r12 = target;
 *                        mtctr r12; bctr/bctrl (r12 and CTR are dead at
 *                        an entry point: undefined for a local caller,
 *                        never arguments)
 *   bc BO,BI,target      bc BO,BI,+8; b back; b target (same BO, so CTR
 *                        counts as before; near only, CTR may be live)
 *   addpcis rt,d (lnia)  rt = the address it would have computed
 *   prefixed R=1 (pld, pla, plwz ...): new 34-bit displacement, and a nop
 *                        before it where it would cross a 64-byte boundary
 *                        (an Alignment interrupt, Power ISA v3.1 Book I)
 *   b/bl/ba/bla/bca AA=1, everything else: copied as is
 * and declines, naming the instruction: bcl (a conditional call, and
 * "bcl 20,31,$+4; mflr" which reads the PC: it would read the
 * trampoline's), bl $+4 (the same idiom), a branch back into the patched
 * word, a return (blr: nothing to patch, or someone's stub), a trap (tw,
 * td, twi, tdi: a debugger's breakpoint?), primary opcode 0.
 *
 * Right by construction (qemu-user cannot show any of this: it keeps
 * translated code coherent with stores, never tears a store and executes
 * r2 faithfully only for what a test makes it run):
 * - Missing cache flush.  Power's instruction fetch is not coherent with
 *   data stores: Power ISA Book II, "Instruction Storage", asks for
 *   dcbst (write the block to storage), sync, icbi (invalidate the block
 *   in the instruction caches of every processor, the storage being
 *   memory-coherence required), sync, isync (discard what this processor
 *   prefetched).  GCC's __builtin___clear_cache expands to NOTHING on
 *   Power (GCC 12.2, checked: no instruction at all), so our writes go
 *   through mca_patcher_overwrite_icache_sync
 *   (patcher_overwrite_icache.h), which issues that sequence per cache
 *   block (AT_DCACHEBSIZE, AT_ICACHEBSIZE) for the patched word and for
 *   each new hop and trampoline page before it is made executable.
 *   Other processors: they are held in our signal handler across the
 *   write and the sequence, and leave it through the kernel's signal
 *   return (rfid, context synchronizing: nothing fetched before it is
 *   run), so none runs a stale copy.
 * - Broken TOC.  ELFv2 "Function Calls"/"TOC Pointer": r2 is preserved
 *   across a call for the caller (a local call has no restore after it);
 *   the global entry needs r12; a local entry needs r2.  The hop saves and
 *   restores r2 in its own frame, enters the intercept at its global entry
 *   with r12; the trampoline loads the target's TOC before the displaced
 *   instruction.  overwrite_reloc_test runs a target that reads through
 *   its TOC and one called by code with no TOC restore after its bl.
 * - Torn concurrent write.  Book II, "Concurrent Modification and
 *   Execution of Instructions": a word another processor may be executing
 *   can be changed with defined results only between instructions of the
 *   "patch class" (b, ba, bl, bla and the preferred nop ori 0,0,0).  The
 *   word we replace is anything (li, mflr, stdu ...), so no other thread
 *   may run it while it changes: the write is the stopped-threads one
 *   (patcher_overwrite_stopped_write.c), one aligned 4-byte store
 *   (single-copy atomic, Book II "Single-Copy Atomicity"), restoring
 *   likewise.  The hop and trampoline pages are written before the b
 *   that leads to them, synced, and never written again.
 */
#include "opal_config.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/ucontext.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_arch.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_stopped_write.h"

#define JUMP_SIZE   4                    /* b */
#define REACH       ((intptr_t) 1 << 25) /* b: a signed 26-bit byte offset */
#define HOP_FRAME   96                   /* 32-byte header + 8-doubleword parameter save area */
#define HOP_WORDS   16
#define TRAMP_WORDS 16 /* the longest: TOC load, far bl, b back (13) */
#define NIP         32 /* the PC's index in the saved gp_regs (PT_NIP) */

/* Instruction words, register and immediate fields zero. */
#define NOP          0x60000000u /* ori 0,0,0: the preferred no-op */
#define B            0x48000000u /* b; | 1: bl; LI in bits 2..25 */
#define LIS          0x3c000000u /* addis rt,0,imm */
#define ORI          0x60000000u
#define ORIS         0x64000000u
#define SLDI_32      0x780007c6u /* rldicr ra,rs,32,31 */
#define MTCTR_R12    0x7d8903a6u
#define BCTR         0x4e800420u
#define BCTRL        0x4e800421u
#define MFLR_R0      0x7c0802a6u
#define MTLR_R0      0x7c0803a6u
#define BLR          0x4e800020u
#define STD_R0_16_R1 0xf8010010u
#define LD_R0_16_R1  0xe8010010u
#define STDU_R1_R1   0xf8210001u /* | displacement */
#define ADDI_R1_R1   0x38210000u /* | immediate */
#define STD_R2_24_R1 0xf8410018u
#define LD_R2_24_R1  0xe8410018u
/* The global entry's TOC setup (the first two under OP_RT_RA: | immediate). */
#define OP_RT_RA      0xffff0000u
#define ADDIS_R2_R12  0x3c4c0000u
#define LIS_R2        0x3c400000u
#define ADDI_R2_R2    0x38420000u
#define LD_R2_M8_R12  0xe84cfff8u
#define ADD_R2_R2_R12 0x7c426214u

/* The TOC pointer that the global entry at func sets, if it begins with a TOC setup. */
static bool entry_toc(uintptr_t func, uintptr_t *toc)
{
    const uint32_t w0 = mca_patcher_overwrite_word(func), w1 = mca_patcher_overwrite_word(func + 4);
    if (LD_R2_M8_R12 == w0 && ADD_R2_R2_R12 == w1) {
        int64_t off;
        memcpy(&off, (const void *) (func - 8), sizeof(off));
        *toc = func + off;
        return true;
    }
    if (ADDI_R2_R2 != (w1 & OP_RT_RA) ||
        (ADDIS_R2_R12 != (w0 & OP_RT_RA) && LIS_R2 != (w0 & OP_RT_RA))) {
        return false;
    }
    const uintptr_t base = ADDIS_R2_R12 == (w0 & OP_RT_RA) ? func : 0;
    *toc = base + (uintptr_t) (mca_patcher_overwrite_sext(w0 & 0xffff, 16) << 16) +
           (uintptr_t) mca_patcher_overwrite_sext(w1 & 0xffff, 16);
    return true;
}

static size_t ppc64le_patch_offset(uintptr_t func)
{
    uintptr_t toc;
    return entry_toc(func, &toc) ? 8 : 0;
}

/*
 * The TOC of the function whose local entry is code, if code is one:
 * patch_offset put the patch point 8 bytes past a TOC setup.  Those bytes
 * are read only where they can be: in code's page, or a readable one
 * before it (code at the very start of a mapping is a global entry).  A
 * function with one entry point that happens to follow such bytes gets a
 * TOC it does not use: r2 is not an input there, and the hop restores the
 * caller's.
 */
static bool local_entry_toc(uintptr_t code, uintptr_t *toc)
{
    const uintptr_t page = (uintptr_t) sysconf(_SC_PAGESIZE);
    if ((code & (page - 1)) < 8 &&
        !mca_patcher_overwrite_readable(code - 8, 8 - (code & (page - 1)))) {
        return false;
    }
    return entry_toc(code - 8, toc);
}

/* Code being written to run at 'at'. */
typedef struct emit_t {
    unsigned char *buf;
    uintptr_t at;
    size_t n; /* bytes written */
} emit_t;

static void put(emit_t *e, uint32_t w)
{
    memcpy(e->buf + e->n, &w, sizeof(w));
    e->n += sizeof(w);
}

/* rt = v: lis; ori; sldi 32; oris; ori. */
static void put_load(emit_t *e, unsigned rt, uint64_t v)
{
    const uint32_t t = rt << 21, ta = t | rt << 16;
    put(e, LIS | t | (uint32_t) (v >> 48));
    put(e, ORI | ta | (uint32_t) ((v >> 32) & 0xffff));
    put(e, SLDI_32 | ta);
    put(e, ORIS | ta | (uint32_t) ((v >> 16) & 0xffff));
    put(e, ORI | ta | (uint32_t) (v & 0xffff));
}

static bool b_reaches(intptr_t d)
{
    return d >= -REACH && d < REACH && 0 == (d & 3);
}

/* b or bl to target; beyond its reach, through r12 and CTR where far is allowed. */
static bool put_branch(emit_t *e, uintptr_t target, bool link, bool far)
{
    const intptr_t d = (intptr_t) (target - (e->at + e->n));
    if (b_reaches(d)) {
        put(e, B | ((uint32_t) d & 0x03fffffc) | link);
        return true;
    }
    if (!far) {
        return false;
    }
    put_load(e, 12, target);
    put(e, MTCTR_R12);
    put(e, link ? BCTRL : BCTR);
    return true;
}

/* Why an instruction is not relocated (NULL: it was, into e). */
typedef const char *why_t;

/*
 * The copy of the instruction at code: its bytes in *window, whether it
 * continues after itself (false: it jumped away).
 */
static why_t copy_insn(emit_t *e, uintptr_t code, size_t *window, bool *falls_through)
{
    uint32_t insn = mca_patcher_overwrite_word(code);
    *window = 4;
    *falls_through = true;
    switch (insn >> 26) {
    case 0:
        return "an illegal instruction (primary opcode 0)";
    case 1: { /* Power10 prefix: both words, never split */
        uint32_t suffix = mca_patcher_overwrite_word(code + 4);
        *window = 8;
        if (60 == ((e->at + e->n) & 63)) {
            put(e, NOP);
        }
        if (((insn >> 24) & 3) < 2 && ((insn >> 20) & 1)) { /* 8LS/MLS with R=1: PC-relative */
            if ((suffix >> 16) & 31) {
                return "an invalid prefixed instruction (R=1 with RA not 0)";
            }
            const int64_t d = mca_patcher_overwrite_sext((uint64_t) (insn & 0x3ffff) << 16 |
                                                             (suffix & 0xffff),
                                                         34);
            const int64_t nd = (int64_t) (code + d - (e->at + e->n));
            if (nd != mca_patcher_overwrite_sext((uint64_t) nd, 34)) {
                return "a PC-relative prefixed instruction whose operand is out of reach";
            }
            insn = (insn & ~0x3ffffu) | (uint32_t) ((uint64_t) nd >> 16 & 0x3ffff);
            suffix = (suffix & ~0xffffu) | (uint32_t) (nd & 0xffff);
        }
        put(e, insn);
        put(e, suffix);
        return NULL;
    }
    case 2:
    case 3:
        return "a trap (tdi/twi: a debugger's breakpoint?)";
    case 16: { /* bc */
        if (insn & 1) {
            return "bcl (a conditional call, or bcl 20,31 reading the PC)";
        }
        if (insn & 2) {
            break; /* absolute */
        }
        const uintptr_t target = code + (uintptr_t) mca_patcher_overwrite_sext(insn & 0xfffc, 16);
        if (target == code) {
            return "a branch back to the patched word";
        }
        put(e, (insn & ~0xfffcu) | 8); /* taken: to the jump to target */
        *falls_through = false;
        if (!put_branch(e, code + 4, false, false) || !put_branch(e, target, false, false)) {
            return "a conditional branch the trampoline cannot reach back from";
        }
        return NULL;
    }
    case 18: { /* b, bl */
        if (insn & 2) {
            break; /* absolute */
        }
        const bool link = insn & 1;
        const uintptr_t target = code +
                                 (uintptr_t) mca_patcher_overwrite_sext(insn & 0x03fffffc, 26);
        if (target == code) {
            return "a branch back to the patched word";
        }
        if (link && target == code + 4) {
            return "bl to the next instruction (reads the PC)";
        }
        *falls_through = link;
        put_branch(e, target, link, true);
        return NULL;
    }
    case 19:
        if (2 == ((insn >> 1) & 0x1f)) { /* addpcis rt,d: rt = next + d << 16 */
            const uint32_t d = (insn >> 6 & 0x3ff) << 6 | (insn >> 16 & 0x1f) << 1 | (insn & 1);
            put_load(e, (insn >> 21) & 31,
                     code + 4 + (uintptr_t) (mca_patcher_overwrite_sext(d, 16) << 16));
            return NULL;
        }
        if (16 == ((insn >> 1) & 0x3ff) && !(insn & 1)) {
            return "a return (blr/bclr)";
        }
        break;
    case 31:
        if (4 == ((insn >> 1) & 0x3ff) || 68 == ((insn >> 1) & 0x3ff)) {
            return "a trap (tw/td: a debugger's breakpoint?)";
        }
        break;
    default:
        break;
    }
    put(e, insn);
    return NULL;
}

static int ppc64le_relocate(uintptr_t code, unsigned char *tramp, uintptr_t tramp_addr,
                            mca_patcher_overwrite_reloc_t *reloc, char *reason, size_t reason_size)
{
    emit_t e = {.buf = tramp, .at = tramp_addr};
    uintptr_t toc;
    size_t window;
    bool falls_through;

    memset(reloc, 0, sizeof(*reloc));
    if (local_entry_toc(code, &toc)) {
        put_load(&e, 2, toc); /* the function's TOC, as its global entry set it */
    }
    reloc->tramp_offset[0] = (uint8_t) e.n;
    why_t why = copy_insn(&e, code, &window, &falls_through);
    if (NULL == why && falls_through && !put_branch(&e, code + window, false, false)) {
        why = "the trampoline is out of reach of the code after it";
    }
    if (NULL != why) {
        /* A prefixed instruction (primary opcode 1) is two words. */
        const unsigned words = 1 == mca_patcher_overwrite_word(code) >> 26 ? 2 : 1;
        return mca_patcher_overwrite_decline_words(reason, reason_size, code, words, why);
    }
    reloc->window = window;
    reloc->tramp_len = e.n;
    reloc->insns = 1;
    return OPAL_SUCCESS;
}

/* The hop: a call to the intercept in a frame that keeps LR and r2 (see the top). */
static void ppc64le_hop(unsigned char *buf, uintptr_t run_at, uintptr_t target, uintptr_t at)
{
    emit_t e = {.buf = buf, .at = run_at};
    (void) at;
    put(&e, MFLR_R0);
    put(&e, STD_R0_16_R1);
    put(&e, STDU_R1_R1 | (uint16_t) -HOP_FRAME);
    put(&e, STD_R2_24_R1);
    put_load(&e, 12, target);
    put(&e, MTCTR_R12);
    put(&e, BCTRL);
    put(&e, LD_R2_24_R1);
    put(&e, ADDI_R1_R1 | HOP_FRAME);
    put(&e, LD_R0_16_R1);
    put(&e, MTLR_R0);
    put(&e, BLR);
}

static int ppc64le_entry_jump(unsigned char *buf, uintptr_t from, uintptr_t to)
{
    emit_t e = {.buf = buf, .at = from};
    return put_branch(&e, to, false, false);
}

static uintptr_t ppc64le_get_pc(const void *uc)
{
    return (uintptr_t) ((const ucontext_t *) uc)->uc_mcontext.gp_regs[NIP];
}

static void ppc64le_set_pc(void *uc, uintptr_t pc)
{
    ((ucontext_t *) uc)->uc_mcontext.gp_regs[NIP] = pc;
}

const mca_patcher_overwrite_arch_t mca_patcher_overwrite_arch = {
    .name = "ppc64le",
    .jump_size = JUMP_SIZE,
    .reach = (uintptr_t) REACH,
    .hop_size = 4 * HOP_WORDS,
    .max_tramp = 4 * TRAMP_WORDS,
    .how = "b at entry to a near hop (a call keeping LR and r2), trampoline",
    .how_past_pad = "b at the local entry (past the TOC setup) to a near hop (a call keeping LR "
                    "and r2), trampoline loading the TOC",
    .patch_offset = ppc64le_patch_offset,
    .relocate = ppc64le_relocate,
    .hop = ppc64le_hop,
    .entry_jump = ppc64le_entry_jump,
    .code_write = mca_patcher_overwrite_stopped_code_write,
    .get_pc = ppc64le_get_pc,
    .set_pc = ppc64le_set_pc,
};
