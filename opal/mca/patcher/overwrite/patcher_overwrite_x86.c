/*
 * x86 instructions for the overwrite patcher, 64-bit and 32-bit mode.
 *
 * The patch is a 5-byte "jmp rel32" at the entry (after an endbr64, or an
 * endbr32 on i386, which stays in place so indirect calls still land on
 * it), to a hop that jumps on to the intercept.  Five bytes, not more: a
 * longer patch could cover the instruction after a syscall, where a thread
 * returning from the kernel would run half a jump.
 *
 * The trampoline holds the displaced instructions, made position
 * independent of where they now run ("far jump" is the mode's jump that
 * reaches any address: jmp *0(%rip); .quad target on x86-64, jmp rel32 on
 * i386, whose 32-bit displacement wraps around the whole address space):
 *   plain            copied
 *   [rip + disp32]   copied with a new disp32 (declined if out of range)
 *   jmp rel          far jump
 *   jcc rel          j!cc over the far jump; far jump
 *   call rel32       the mode's form (patcher_overwrite_x86_64.c, _i386.c)
 *   loop/jrcxz rel8  the same opcode to +2; jmp over the far jump; far jump
 * then jumps back to the first original instruction it did not displace.
 * A call that ends inside the 5 bytes is declined: a thread in its callee
 * when the jump is written would return into the middle of the jump.
 */
#include "opal_config.h"

#include <string.h>
#include <sys/ucontext.h>

#include "opal/constants.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_arch.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_x86.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_x86_decode.h"

#define JUMP_SIZE     5  /* jmp rel32 */
#define MAX_INSN_SIZE 15 /* the longest x86 instruction */
#define FAR_JUMP_SIZE MCA_PATCHER_OVERWRITE_X86_FAR_JUMP_SIZE

static const unsigned char endbr[4] = {MCA_PATCHER_OVERWRITE_X86_PAD_BYTES};

static size_t x86_patch_offset(uintptr_t func)
{
    /* func may be any address from the API: its mapping may end within the 4 bytes. */
    const bool pad = mca_patcher_overwrite_readable(func, sizeof(endbr)) &&
                     memcmp((const void *) func, endbr, sizeof(endbr)) == 0;
    return pad ? sizeof(endbr) : 0;
}

static bool fits_rel32(intptr_t d)
{
#if INTPTR_MAX > INT32_MAX
    return d >= INT32_MIN && d <= INT32_MAX;
#else
    (void) d;
    return true; /* i386: EIP + rel32 wraps, every distance fits */
#endif
}

/* The hop: the mode's far jump (it does not depend on the patch point). */
static void x86_hop(unsigned char *buf, uintptr_t run_at, uintptr_t target, uintptr_t at)
{
    (void) at;
    mca_patcher_overwrite_x86_far_jump(buf, run_at, target);
}

/* The program counter in a signal's saved context. */
#if defined(__x86_64__)
#    define PC_REG REG_RIP
#else
#    define PC_REG REG_EIP
#endif

static uintptr_t x86_get_pc(const void *uc)
{
    return (uintptr_t) ((const ucontext_t *) uc)->uc_mcontext.gregs[PC_REG];
}

static void x86_set_pc(void *uc, uintptr_t pc)
{
    ((ucontext_t *) uc)->uc_mcontext.gregs[PC_REG] = (greg_t) pc;
}

static int x86_entry_jump(unsigned char *buf, uintptr_t from, uintptr_t to)
{
    intptr_t d = (intptr_t) (to - (from + JUMP_SIZE));
    if (!fits_rel32(d)) {
        return 0;
    }
    int32_t rel = (int32_t) d;
    buf[0] = 0xe9;
    memcpy(buf + 1, &rel, sizeof(rel));
    return 1;
}

/*
 * Relocate one decoded instruction found at 'at' into out (which runs at
 * run_at).  Returns the bytes written, or 0 if it cannot be relocated.
 */
static size_t relocate_one(const uint8_t *at, const mca_patcher_x86_insn_t *insn,
                           unsigned char *out, uintptr_t run_at, uintptr_t *branch_target)
{
    uintptr_t next = (uintptr_t) at + insn->length;
    uintptr_t target = next + (intptr_t) insn->rel;
    *branch_target = 0;

    switch (insn->kind) {
    case MCA_PATCHER_X86_PLAIN:
        memcpy(out, at, insn->length);
        return insn->length;
    case MCA_PATCHER_X86_RIPREL:
    case MCA_PATCHER_X86_JMP_IND:
        memcpy(out, at, insn->length);
        if (insn->riprel) {
            intptr_t d = (intptr_t) (target - (run_at + insn->length));
            if (!fits_rel32(d)) {
                return 0;
            }
            int32_t disp = (int32_t) d;
            memcpy(out + insn->rel_offset, &disp, sizeof(disp));
        }
        return insn->length;
    case MCA_PATCHER_X86_JMP:
        *branch_target = target;
        mca_patcher_overwrite_x86_far_jump(out, run_at, target);
        return FAR_JUMP_SIZE;
    case MCA_PATCHER_X86_JCC:
        *branch_target = target;
        out[0] = 0x70 | (insn->cond ^ 1); /* the opposite condition skips the jump */
        out[1] = FAR_JUMP_SIZE;
        mca_patcher_overwrite_x86_far_jump(out + 2, run_at + 2, target);
        return 2 + FAR_JUMP_SIZE;
    case MCA_PATCHER_X86_CALL:
        *branch_target = target;
        return mca_patcher_overwrite_x86_call(out, run_at, next, target);
    case MCA_PATCHER_X86_LOOP:
        *branch_target = target;
        memcpy(out, at, insn->length); /* any prefix and the opcode, then rel8 = 2 */
        out[insn->length - 1] = 2;
        out[insn->length] = 0xeb; /* not taken: over the far jump */
        out[insn->length + 1] = FAR_JUMP_SIZE;
        mca_patcher_overwrite_x86_far_jump(out + insn->length + 2, run_at + insn->length + 2,
                                           target);
        return insn->length + 2 + FAR_JUMP_SIZE;
    default:
        return 0;
    }
}

static int x86_relocate(uintptr_t code, unsigned char *tramp, uintptr_t tramp_addr,
                        mca_patcher_overwrite_reloc_t *reloc, char *reason, size_t reason_size)
{
    const uint8_t *p = (const uint8_t *) code;
    uintptr_t targets[MCA_PATCHER_OVERWRITE_MAX_INSNS];
    size_t off = 0, t = 0;
    unsigned n = 0;

    /* The walk reads no byte past code's mapping (the last instruction may start at +4). */
    const size_t readable = mca_patcher_overwrite_readable_bytes(code,
                                                                 JUMP_SIZE - 1 + MAX_INSN_SIZE);

    memset(reloc, 0, sizeof(*reloc));
    if (readable < JUMP_SIZE) {
        return mca_patcher_overwrite_decline_insn(
            reason, reason_size, p, 0, readable,
            "function too short: its mapping ends within the 5 bytes to patch");
    }
    while (off < JUMP_SIZE) {
        mca_patcher_x86_insn_t insn;
        const size_t left = readable - off;
        size_t len = mca_patcher_x86_decode(p + off, left, MCA_PATCHER_X86_NATIVE_MODE, &insn);
        if (len == 0) {
            return mca_patcher_overwrite_decline_insn(
                reason, reason_size, p, off, left < 4 ? left : 4,
                left < MAX_INSN_SIZE
                    ? "unknown or unsupported instruction, or one cut short by its mapping's end"
                    : "unknown or unsupported instruction");
        }
        if (insn.kind == MCA_PATCHER_X86_END) {
            return mca_patcher_overwrite_decline_insn(
                reason, reason_size, p, off, len,
                "function too short: ret/int3/hlt/ud2 within the 5 bytes to patch");
        }
        if (n == MCA_PATCHER_OVERWRITE_MAX_INSNS) {
            return mca_patcher_overwrite_decline_insn(reason, reason_size, p, off, len,
                                                      "too many instructions to displace");
        }
        size_t w = relocate_one(p + off, &insn, tramp + t, tramp_addr + t, &targets[n]);
        if (w == 0) {
            return mca_patcher_overwrite_decline_insn(
                reason, reason_size, p, off, len,
                "rip-relative operand out of +-2 GiB from the trampoline");
        }
        reloc->insn_offset[n] = (uint8_t) off;
        reloc->tramp_offset[n] = (uint8_t) t;
        n++;
        off += len;
        t += w;
        if (insn.call && off < JUMP_SIZE) {
            return mca_patcher_overwrite_decline_insn(
                reason, reason_size, p, off - len, len,
                "a call whose return address is inside the 5 bytes to patch");
        }
        if ((insn.kind == MCA_PATCHER_X86_JMP || insn.kind == MCA_PATCHER_X86_JMP_IND) &&
            off < JUMP_SIZE) {
            return mca_patcher_overwrite_decline_insn(
                reason, reason_size, p, off - len, len,
                "function too short: an unconditional jump ends it within the 5 bytes "
                "to patch");
        }
    }
    int rc = mca_patcher_overwrite_check_targets(code, off, reloc->insn_offset, n, targets, reason,
                                                 reason_size);
    if (OPAL_SUCCESS != rc) {
        return rc;
    }
    mca_patcher_overwrite_x86_far_jump(tramp + t, tramp_addr + t, code + off);
    reloc->window = off;
    reloc->tramp_len = t + FAR_JUMP_SIZE;
    reloc->insns = n;
    return OPAL_SUCCESS;
}

const mca_patcher_overwrite_arch_t mca_patcher_overwrite_arch = {
    .name = MCA_PATCHER_OVERWRITE_X86_NAME,
    .jump_size = JUMP_SIZE,
    .reach = (uintptr_t) 1 << 31, /* jmp rel32: +-2 GiB (i386: everywhere; the module asks no more) */
    .hop_size = FAR_JUMP_SIZE,
    .max_tramp = MCA_PATCHER_OVERWRITE_MAX_INSNS * MCA_PATCHER_OVERWRITE_X86_MAX_COPY +
                 FAR_JUMP_SIZE,
    .how = "jmp rel32 at entry to a near hop, trampoline",
    .how_past_pad = "jmp rel32 after " MCA_PATCHER_OVERWRITE_X86_PAD " to a near hop, trampoline",
    .patch_offset = x86_patch_offset,
    .relocate = x86_relocate,
    .hop = x86_hop,
    .entry_jump = x86_entry_jump,
    .code_write = mca_patcher_overwrite_x86_code_write,
    .get_pc = x86_get_pc,
    .set_pc = x86_set_pc,
};
