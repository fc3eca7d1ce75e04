/*
 * aarch64 instructions for the overwrite patcher.
 *
 * The patch is one "b" (4 bytes) at the entry, after a leading "bti"
 * and/or "paciasp"/"pacibsp", which stay in place so that indirect calls
 * still land on a landing pad.  It leads to a hop in our page (within b's
 * +-128 MiB: patcher_overwrite_module.c allocates it there):
 *     [autiasp]  ldr x16, =intercept  br x16
 * The hop reaches the intercept anywhere through x16 (IP0, free at any
 * function entry by the procedure call standard).  Our pages are not
 * guarded (mapped without PROT_BTI), so that br sets BTYPE 01 whatever
 * the register, which the intercept's "bti c" (or paciasp) accepts.
 *
 * Past a paciasp the LR is already signed when the hop runs: the hop
 * authenticates it (autiasp, SP unchanged since the paciasp, so it
 * succeeds) and the intercept gets a plain return address; the
 * trampoline signs its own caller's LR again with paciasp before the
 * displaced instruction, so the function's own autiasp/ret still
 * authenticates against the SP it was entered with.  The hop knows from
 * 'at' alone (the page header's patch point) whether a paciasp precedes
 * it: patch_offset skips one only at a function's entry, where the word
 * before the patch point is then the paciasp.
 *
 * The trampoline: [paciasp/pacibsp] the displaced instruction, relocated;
 * "b next" back, a direct branch: it always reaches (the page is within
 * +-128 MiB of the patch point) and a direct branch is never checked by
 * BTI, where a br to "next" in a guarded page would raise a Branch
 * Target exception.  Then its literals.  Relocations:
 *   plain                 copied
 *   adr/adrp xd           ldr xd, =value
 *   ldr/ldrsw literal     ldr x16, =address; ldr/ldrsw rt, [x16]  (w, x, s, d, q)
 *   prfm literal          nop (a hint)
 *   b                     b target, or ldr x16, =target; br x16 beyond b's
 *                         reach, only to a landing pad (br sets BTYPE 01)
 *   bl                    ldr x30, =next, then as b: the callee returns
 *                         where it would have, LR as the original's
 *   b.cond, cbz/cbnz,     the inverse condition over the jump, then as b
 *   tbz/tbnz
 * and declines (naming the instruction) ret/br/blr and the other register
 * branches, brk/hlt/hvc/smc, undefined and unknown encodings (anything
 * PC-relative we do not know is among them), and a literal load of the
 * word being patched.  The ADRP page is 4 KiB by definition, whatever the
 * runtime page size (which the module uses everywhere else).
 *
 * Why the code write holds every other thread
 * (patcher_overwrite_stopped_write.c), by the Arm ARM (DDI 0487):
 * - "Concurrent modification and execution of instructions" (B2.2.5 in
 *   recent issues):
 *   another PE executing an instruction while it is modified may do
 *   anything that some sequence of instructions at that exception level
 *   could do, except when the old AND the new instruction are each one of
 *   B, BL, BRK, HVC, ISB, NOP, SMC, SVC.  Our new instruction is a B, but
 *   the old one is the function's first (stp, mov, adrp, tst...), and on
 *   restore it is the other way round: neither write is in the allowed
 *   set, so no thread may run the word while it changes.  Held in a
 *   signal handler, none does.  The store is one single-copy atomic
 *   32-bit store (an aligned word), so even a thread that is not held (see
 *   the limits in patcher_overwrite_stopped_write.c) can only fetch the
 *   old or the new word as data, though the rule above does not promise
 *   it executes either.
 * - "Synchronization and coherency issues between data and instruction
 *   accesses" (B2.7.4.2 in recent issues; "Implication of caches for the
 *   application programmer"): a write is coherent with instruction fetch
 *   once cleaned from the D-cache to the point of unification and then
 *   invalidated from the I-cache to the PoU, each complete for the
 *   shareability domain (CTR_EL0.IDC/DIC waive the first/second), and a
 *   PE runs the new instruction after a context synchronization event.
 *   __builtin___clear_cache is a call of libgcc's __clear_cache, on aarch64
 *   __aarch64_sync_cache_range (GCC 12, read from its disassembly): it
 *   reads CTR_EL0, does DC CVAU per D-cache
 *   line (skipped if IDC), DSB ISH, IC IVAU per I-cache line and DSB ISH
 *   (both skipped if DIC), then ISB: the manual's sequence, with the
 *   invalidation broadcast to the Inner Shareable domain.  The writer's
 *   ISB synchronizes the writer; every held thread leaves the handler
 *   through the kernel (futex wake, rt_sigreturn: exception returns,
 *   context synchronization events while SCTLR_EL1.EOS is set, RES1 before
 *   FEAT_ExS and set by Linux), after the writer's DSB ISH, so none runs
 *   an instruction it fetched before the write.  The hop and
 *   trampoline page gets the same maintenance before it becomes
 *   executable (patcher_overwrite_module.c).
 * qemu-user translates code anew after a write, with or without these
 * steps, and runs one guest instruction at a time per thread: it shows
 * neither a missing flush nor a torn concurrent write.  Both are right by
 * the rules above, not by the test runs.
 */
#include "opal_config.h"

#include <stdio.h>
#include <string.h>
#include <sys/ucontext.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_arch.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_stopped_write.h"

#define INSN_SIZE 4
#define B_REACH   ((intptr_t) 1 << 27) /* b: +-128 MiB */

/* Encodings used as they are. */
#define NOP      0xd503201fu
#define BR_X16   0xd61f0200u
#define PACIASP  0xd503233fu
#define PACIBSP  0xd503237fu
#define AUTIASP  0xd50323bfu
#define AUTIBSP  0xd50323ffu
#define B_OP     0x14000000u
#define LDR_LIT_X 0x58000000u /* ldr xt, label */
#define X16      16
#define X30      30

/* The trampoline's literals, 8-aligned, after at most 8 instructions. */
#define LIT_OFFSET 32
#define MAX_LITS   2

#define HOP_SIZE 24 /* [autiasp] ldr; br; [pad]; .quad */

/* bti, bti c, bti j, bti jc: hint #32..#38 (even). */
static bool is_bti(uint32_t insn)
{
    return (insn & 0xffffff3fu) == 0xd503241fu;
}

/* What a br from an unguarded page (BTYPE 01) may land on in a guarded one. */
static bool is_landing_pad(uint32_t insn)
{
    return (is_bti(insn) && insn != 0xd503241fu) || insn == PACIASP || insn == PACIBSP;
}

static size_t aarch64_patch_offset(uintptr_t func)
{
    size_t off = 0;
    if (is_bti(mca_patcher_overwrite_word(func))) {
        off += INSN_SIZE;
    }
    uint32_t insn = mca_patcher_overwrite_word(func + off);
    if (insn == PACIASP || insn == PACIBSP) {
        off += INSN_SIZE;
    }
    return off;
}

/* The paciasp/pacibsp that patch_offset skipped right before 'at', or 0. */
static uint32_t signed_before(uintptr_t at)
{
    /* The word before a page boundary may not be mapped (then none is there). */
    if (0 == (at & ((uintptr_t) sysconf(_SC_PAGESIZE) - 1)) &&
        !mca_patcher_overwrite_readable(at - INSN_SIZE, INSN_SIZE)) {
        return 0;
    }
    uint32_t insn = mca_patcher_overwrite_word(at - INSN_SIZE);
    return insn == PACIASP || insn == PACIBSP ? insn : 0;
}

static bool b_reaches(uintptr_t from, uintptr_t to)
{
    intptr_t d = (intptr_t) (to - from);
    return d >= -B_REACH && d < B_REACH;
}

static uint32_t enc_b(uint32_t op, uintptr_t from, uintptr_t to)
{
    return op | ((uint32_t) ((intptr_t) (to - from) >> 2) & 0x03ffffffu);
}

/* The hop: [autiasp/autibsp] ldr x16, lit; br x16; [pad] lit: .quad target. */
static void aarch64_hop(unsigned char *buf, uintptr_t run_at, uintptr_t target, uintptr_t at)
{
    (void) run_at; /* position independent */
    uint32_t w[4];
    unsigned n = 0;
    uint32_t pac = signed_before(at);
    if (pac) {
        w[n++] = pac == PACIASP ? AUTIASP : AUTIBSP;
    }
    /* The literal at +8 (no pac) or +16 (after the pad word): 8-aligned. */
    w[n] = LDR_LIT_X | ((pac ? 3u : 2u) << 5) | X16;
    n++;
    w[n++] = BR_X16;
    if (pac) {
        w[n++] = 0; /* never run */
    }
    memset(buf, 0, HOP_SIZE);
    memcpy(buf, w, n * INSN_SIZE);
    memcpy(buf + n * INSN_SIZE, &target, sizeof(target));
}

static int aarch64_entry_jump(unsigned char *buf, uintptr_t from, uintptr_t to)
{
    if (!b_reaches(from, to)) {
        return 0;
    }
    uint32_t b = enc_b(B_OP, from, to);
    memcpy(buf, &b, sizeof(b));
    return 1;
}

static uintptr_t aarch64_get_pc(const void *uc)
{
    return (uintptr_t) ((const ucontext_t *) uc)->uc_mcontext.pc;
}

static void aarch64_set_pc(void *uc, uintptr_t pc)
{
    ((ucontext_t *) uc)->uc_mcontext.pc = pc;
}

/* ---- relocation ---- */

/* The trampoline being written: its words and literals. */
typedef struct tramp_t {
    uint32_t w[LIT_OFFSET / INSN_SIZE];
    unsigned n;
    uint64_t lit[MAX_LITS];
    unsigned nlit;
    uintptr_t run_at; /* where w[0] runs */
} tramp_t;

static uintptr_t pos(const tramp_t *t)
{
    return t->run_at + t->n * INSN_SIZE;
}

static void emit(tramp_t *t, uint32_t insn)
{
    t->w[t->n++] = insn;
}

/* ldr xt, =value (from the literal pool at LIT_OFFSET). */
static void emit_ldr_value(tramp_t *t, unsigned rt, uint64_t value)
{
    uint32_t off = LIT_OFFSET + 8 * t->nlit - t->n * INSN_SIZE;
    t->lit[t->nlit++] = value;
    emit(t, LDR_LIT_X | ((off >> 2) << 5) | rt);
}

/* How many words the jump to target takes from here (0: it cannot be made). */
static unsigned jump_words(uintptr_t from, uintptr_t target)
{
    if (b_reaches(from, target)) {
        return 1;
    }
    bool pad = mca_patcher_overwrite_readable(target, INSN_SIZE) &&
               is_landing_pad(mca_patcher_overwrite_word(target));
    return pad ? 2 : 0;
}

/* Jump to target: b, or through x16 (jump_words said which, non-zero). */
static void emit_jump(tramp_t *t, uintptr_t target)
{
    if (1 == jump_words(pos(t), target)) {
        emit(t, enc_b(B_OP, pos(t), target));
    } else {
        emit_ldr_value(t, X16, target);
        emit(t, BR_X16);
    }
}

/* The signed value of a 'bits'-wide field, times 'scale'. */
static intptr_t field(uint64_t v, unsigned bits, intptr_t scale)
{
    return (intptr_t) mca_patcher_overwrite_sext(v, bits) * scale;
}

/* The decoded instruction's class, for relocation or a decline. */
typedef enum {
    K_PLAIN, K_ADR, K_LDR_LIT, K_B, K_BCOND, K_CB, K_TB, K_REG_BRANCH, K_TRAP, K_UNDEFINED,
    K_UNKNOWN
} kind_t;

static kind_t classify(uint32_t insn)
{
    switch ((insn >> 25) & 0xf) { /* op0 */
    case 0x0:
        return (insn >> 31) ? K_PLAIN /* SME */ : K_UNDEFINED /* udf, reserved */;
    case 0x2:
        return K_PLAIN; /* SVE */
    case 0x8:
    case 0x9: /* data processing, immediate */
        return (insn & 0x1f000000u) == 0x10000000u ? K_ADR : K_PLAIN;
    case 0xa:
    case 0xb: /* branches, exception generating, system */
        if ((insn & 0x7c000000u) == 0x14000000u) {
            return K_B; /* b, bl */
        }
        if ((insn & 0x7e000000u) == 0x34000000u) {
            return K_CB;
        }
        if ((insn & 0x7e000000u) == 0x36000000u) {
            return K_TB;
        }
        if ((insn & 0xff000000u) == 0x54000000u) {
            return K_BCOND; /* b.cond, bc.cond */
        }
        if ((insn & 0xffe0001fu) == 0xd4000001u) {
            return K_PLAIN; /* svc */
        }
        if ((insn & 0xff000000u) == 0xd4000000u) {
            return K_TRAP;
        }
        if ((insn & 0xff800000u) == 0xd5000000u) {
            return K_PLAIN; /* system: hints, barriers, msr, mrs, sys */
        }
        if ((insn & 0xfe000000u) == 0xd6000000u) {
            return K_REG_BRANCH;
        }
        return K_UNKNOWN;
    case 0x4:
    case 0x6:
    case 0xc:
    case 0xe: /* loads and stores */
        return (insn & 0x3b000000u) == 0x18000000u ? K_LDR_LIT : K_PLAIN;
    case 0x5:
    case 0xd:
    case 0x7:
    case 0xf: /* data processing, register and SIMD/FP */
        return K_PLAIN;
    default:
        return K_UNDEFINED; /* unallocated */
    }
}

/* A literal load: its size and the load from [x16] into the same register. */
static bool literal_load(uint32_t insn, size_t *size, uint32_t *load)
{
    const unsigned rt = insn & 0x1f, opc = insn >> 30, simd = (insn >> 26) & 1;
    static const uint32_t gp[3] = {0xb9400200u, 0xf9400200u, 0xb9800200u}; /* ldr w, x; ldrsw */
    static const uint32_t fp[3] = {0xbd400200u, 0xfd400200u, 0x3dc00200u}; /* ldr s, d, q */
    static const size_t gp_size[3] = {4, 8, 4}, fp_size[3] = {4, 8, 16};
    if (opc == 3) {
        *size = 0; /* prfm (general) or unallocated (SIMD) */
        return !simd;
    }
    *size = simd ? fp_size[opc] : gp_size[opc];
    *load = (simd ? fp[opc] : gp[opc]) | rt;
    return true;
}

/* The relocated form of insn (at pc) into t; OPAL_SUCCESS or a decline. */
static int relocate_insn(tramp_t *t, uint32_t insn, uintptr_t pc, char *reason, size_t size)
{
    const uintptr_t next = pc + INSN_SIZE;
    uintptr_t target;
    switch (classify(insn)) {
    case K_PLAIN:
        emit(t, insn);
        return OPAL_SUCCESS;
    case K_ADR: {
        const uint64_t imm = ((insn >> 5) & 0x7ffff) << 2 | ((insn >> 29) & 3);
        /* adrp: 4 KiB pages by definition, whatever the runtime page size */
        uintptr_t v = (insn >> 31) ? (pc & ~(uintptr_t) 4095) + (uintptr_t) field(imm, 21, 4096)
                                   : pc + (uintptr_t) field(imm, 21, 1);
        emit_ldr_value(t, insn & 0x1f, v);
        return OPAL_SUCCESS;
    }
    case K_LDR_LIT: {
        uintptr_t addr = pc + (uintptr_t) field((insn >> 5) & 0x7ffff, 19, 4);
        size_t len;
        uint32_t load;
        if (!literal_load(insn, &len, &load)) {
            return mca_patcher_overwrite_decline_words(reason, size, pc, 1,
                                                       "an unallocated literal load");
        }
        if (0 == len) {
            emit(t, NOP); /* prfm: a hint, no architectural effect */
            return OPAL_SUCCESS;
        }
        if (addr < next && addr + len > pc) {
            return mca_patcher_overwrite_decline_words(
                reason, size, pc, 1, "a PC-relative load of the word being patched");
        }
        emit_ldr_value(t, X16, addr);
        emit(t, load);
        return OPAL_SUCCESS;
    }
    case K_B:
        target = pc + (uintptr_t) field(insn & 0x03ffffffu, 26, 4);
        if (insn >> 31) {
            emit_ldr_value(t, X30, next); /* bl: LR is the original return address */
        }
        if (0 == jump_words(pos(t), target)) {
            return mca_patcher_overwrite_decline_words(reason, size, pc, 1,
                                                       "a branch beyond the trampoline's reach "
                                                       "(+-128 MiB) to a target that is not a BTI "
                                                       "landing pad");
        }
        emit_jump(t, target);
        return OPAL_SUCCESS;
    case K_BCOND:
    case K_CB:
    case K_TB: {
        const bool tb = (insn & 0x7e000000u) == 0x36000000u;
        const bool bcond = (insn & 0xff000000u) == 0x54000000u;
        const unsigned imm_bits = tb ? 14 : 19;
        target = pc + (uintptr_t) field((insn >> 5) & ((1u << imm_bits) - 1), imm_bits, 4);
        if (bcond && (insn & 0xe) == 0xe) {
            /* b.al, b.nv: always taken (and inverting gives no "never") */
            if (0 == jump_words(pos(t), target)) {
                return mca_patcher_overwrite_decline_words(
                    reason, size, pc, 1, "a branch beyond the trampoline's reach");
            }
            emit_jump(t, target);
            return OPAL_SUCCESS;
        }
        unsigned words = jump_words(pos(t) + INSN_SIZE, target);
        if (0 == words) {
            return mca_patcher_overwrite_decline_words(reason, size, pc, 1,
                                                       "a branch beyond the trampoline's reach "
                                                       "(+-128 MiB) to a target that is not a BTI "
                                                       "landing pad");
        }
        /* The inverse: over the jump when the original would not branch. */
        const uint32_t imm_mask = ((1u << imm_bits) - 1) << 5;
        uint32_t inv = (insn & ~imm_mask) | ((words + 1) << 5);
        inv ^= bcond ? 1u /* cond ^ 1 */ : 1u << 24 /* z <-> nz */;
        emit(t, inv);
        emit_jump(t, target);
        return OPAL_SUCCESS;
    }
    case K_REG_BRANCH: {
        static const char *const names[] = {"br", "blr", "ret", "?", "eret", "drps"};
        const unsigned opc = (insn >> 21) & 0xf;
        char why[96];
        snprintf(why, sizeof(why), "a register branch (%s) at the patch point",
                 opc < 6 && opc != 3 ? names[opc] : "with pointer authentication");
        return mca_patcher_overwrite_decline_words(reason, size, pc, 1, why);
    }
    case K_TRAP:
        return mca_patcher_overwrite_decline_words(
            reason, size, pc, 1,
            "a breakpoint or exception-generating instruction "
            "(brk, hlt, hvc, smc, dcps) at the patch point");
    case K_UNDEFINED:
        return mca_patcher_overwrite_decline_words(reason, size, pc, 1,
                                                   "an undefined or reserved encoding");
    default:
        return mca_patcher_overwrite_decline_words(reason, size, pc, 1,
                                                   "an instruction this relocator does not know "
                                                   "(it may be PC-relative)");
    }
}

static int aarch64_relocate(uintptr_t code, unsigned char *buf, uintptr_t tramp_addr,
                            mca_patcher_overwrite_reloc_t *reloc, char *reason, size_t reason_size)
{
    tramp_t t = {.run_at = tramp_addr};
    memset(reloc, 0, sizeof(*reloc));
    uint32_t pac = signed_before(code);
    if (pac) {
        emit(&t, pac); /* sign the LR of the trampoline's caller again */
    }
    reloc->tramp_offset[0] = (uint8_t) (t.n * INSN_SIZE);
    int rc = relocate_insn(&t, mca_patcher_overwrite_word(code), code, reason, reason_size);
    if (OPAL_SUCCESS != rc) {
        return rc;
    }
    emit(&t, enc_b(B_OP, pos(&t), code + INSN_SIZE)); /* in reach: see the top */
    memset(buf, 0, LIT_OFFSET);
    memcpy(buf, t.w, t.n * INSN_SIZE);
    memcpy(buf + LIT_OFFSET, t.lit, t.nlit * sizeof(t.lit[0]));
    reloc->window = INSN_SIZE;
    reloc->tramp_len = t.nlit ? LIT_OFFSET + t.nlit * sizeof(t.lit[0]) : t.n * INSN_SIZE;
    reloc->insns = 1;
    reloc->insn_offset[0] = 0;
    return OPAL_SUCCESS;
}

const mca_patcher_overwrite_arch_t mca_patcher_overwrite_arch = {
    .name = "aarch64",
    .jump_size = INSN_SIZE,
    .reach = (uintptr_t) B_REACH,
    .hop_size = HOP_SIZE,
    .max_tramp = LIT_OFFSET + MAX_LITS * sizeof(uint64_t),
    .how = "b at entry to a near hop (ldr x16; br x16), trampoline",
    .how_past_pad = "b after bti c/paciasp (kept; the hop authenticates LR, the trampoline "
                    "signs it again) to a near hop (ldr x16; br x16), trampoline",
    .patch_offset = aarch64_patch_offset,
    .relocate = aarch64_relocate,
    .hop = aarch64_hop,
    .entry_jump = aarch64_entry_jump,
    .code_write = mca_patcher_overwrite_stopped_code_write,
    .get_pc = aarch64_get_pc,
    .set_pc = aarch64_set_pc,
};
