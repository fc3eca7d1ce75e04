/*
 * x86-64 instructions for the overwrite patcher.
 *
 * The patch is a 5-byte "jmp rel32" at the entry (after an endbr64, which
 * stays in place so indirect calls still land on it), to a hop within
 * +-2 GiB that jumps on absolutely to the intercept.  Five bytes, not
 * more: a longer patch could cover the instruction after a syscall, where
 * a thread returning from the kernel would run half a jump.
 *
 * The trampoline holds the displaced instructions, made position
 * independent of where they now run:
 *   plain            copied
 *   [rip + disp32]   copied with a new disp32 (declined if out of range)
 *   jmp rel          jmp *0(%rip); .quad target
 *   jcc rel          j!cc +14; jmp *0(%rip); .quad target
 *   call rel32       call *2(%rip); jmp +8; .quad target
 *   loop/jrcxz rel8  the same opcode to +2; jmp +14; jmp *0(%rip); .quad target
 * then jumps back to the first original instruction it did not displace.
 */
#include "opal_config.h"

#include <stdio.h>
#include <string.h>

#include "opal/constants.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_arch.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_x86_64.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_x86_64_decode.h"

#define JUMP_SIZE     5  /* jmp rel32 */
#define ABS_JUMP_SIZE 14 /* jmp *0(%rip); .quad target */
#define MAX_COPY      16 /* the longest relocated form of one instruction */

static const unsigned char endbr64[4] = {0xf3, 0x0f, 0x1e, 0xfa};

static size_t x86_64_patch_offset(uintptr_t func)
{
    return memcmp((const void *) func, endbr64, sizeof(endbr64)) == 0 ? sizeof(endbr64) : 0;
}

static void x86_64_abs_jump(unsigned char *buf, uintptr_t target)
{
    buf[0] = 0xff; /* jmp *0(%rip) */
    buf[1] = 0x25;
    memset(buf + 2, 0, 4);
    memcpy(buf + 6, &target, sizeof(target));
}

static bool fits_rel32(int64_t d)
{
    return d >= INT32_MIN && d <= INT32_MAX;
}

static int x86_64_entry_jump(unsigned char *buf, uintptr_t from, uintptr_t to)
{
    int64_t d = (int64_t) (to - (from + JUMP_SIZE));
    if (!fits_rel32(d)) {
        return 0;
    }
    int32_t rel = (int32_t) d;
    buf[0] = 0xe9;
    memcpy(buf + 1, &rel, sizeof(rel));
    return 1;
}

static int decline(char *reason, size_t size, const uint8_t *code, size_t off, size_t len,
                   const char *why)
{
    int n = snprintf(reason, size, "%s: instruction at +%zu (", why, off);
    for (size_t k = 0; k < (len ? len : 4) && n > 0 && (size_t) n < size; k++) {
        n += snprintf(reason + n, size - n, k ? " %02x" : "%02x", code[off + k]);
    }
    if (n > 0 && (size_t) n < size) {
        snprintf(reason + n, size - n, ")");
    }
    return OPAL_ERR_NOT_SUPPORTED;
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
            int64_t d = (int64_t) (target - (run_at + insn->length));
            if (!fits_rel32(d)) {
                return 0;
            }
            int32_t disp = (int32_t) d;
            memcpy(out + insn->rel_offset, &disp, sizeof(disp));
        }
        return insn->length;
    case MCA_PATCHER_X86_JMP:
        *branch_target = target;
        x86_64_abs_jump(out, target);
        return ABS_JUMP_SIZE;
    case MCA_PATCHER_X86_JCC:
        *branch_target = target;
        out[0] = 0x70 | (insn->cond ^ 1); /* the opposite condition skips the jump */
        out[1] = ABS_JUMP_SIZE;
        x86_64_abs_jump(out + 2, target);
        return 2 + ABS_JUMP_SIZE;
    case MCA_PATCHER_X86_CALL:
        *branch_target = target;
        out[0] = 0xff; /* call *2(%rip) */
        out[1] = 0x15;
        out[2] = 2;
        memset(out + 3, 0, 3);
        out[6] = 0xeb; /* jmp +8, over the address */
        out[7] = 8;
        memcpy(out + 8, &target, sizeof(target));
        return 16;
    case MCA_PATCHER_X86_LOOP:
        *branch_target = target;
        memcpy(out, at, insn->length); /* any prefix and the opcode, then rel8 = 2 */
        out[insn->length - 1] = 2;
        out[insn->length] = 0xeb; /* not taken: over the absolute jump */
        out[insn->length + 1] = ABS_JUMP_SIZE;
        x86_64_abs_jump(out + insn->length + 2, target);
        return insn->length + 2 + ABS_JUMP_SIZE;
    default:
        return 0;
    }
}

static int x86_64_relocate(uintptr_t code, unsigned char *tramp, uintptr_t tramp_addr,
                           mca_patcher_overwrite_reloc_t *reloc, char *reason, size_t reason_size)
{
    const uint8_t *p = (const uint8_t *) code;
    uintptr_t targets[MCA_PATCHER_OVERWRITE_MAX_INSNS];
    size_t off = 0, t = 0;
    unsigned n = 0;

    memset(reloc, 0, sizeof(*reloc));
    while (off < JUMP_SIZE) {
        mca_patcher_x86_insn_t insn;
        size_t len = mca_patcher_x86_64_decode(p + off, 15, &insn);
        if (len == 0) {
            return decline(reason, reason_size, p, off, 0, "unknown or unsupported instruction");
        }
        if (insn.kind == MCA_PATCHER_X86_END) {
            return decline(reason, reason_size, p, off, len,
                           "function too short: ret/int3/hlt/ud2 within the 5 bytes to patch");
        }
        if (n == MCA_PATCHER_OVERWRITE_MAX_INSNS) {
            return decline(reason, reason_size, p, off, len, "too many instructions to displace");
        }
        size_t w = relocate_one(p + off, &insn, tramp + t, tramp_addr + t, &targets[n]);
        if (w == 0) {
            return decline(reason, reason_size, p, off, len,
                           "rip-relative operand out of +-2 GiB from the trampoline");
        }
        reloc->insn_offset[n] = (uint8_t) off;
        reloc->tramp_offset[n] = (uint8_t) t;
        n++;
        off += len;
        t += w;
        if ((insn.kind == MCA_PATCHER_X86_JMP || insn.kind == MCA_PATCHER_X86_JMP_IND) &&
            off < JUMP_SIZE) {
            return decline(reason, reason_size, p, off - len, len,
                           "function too short: an unconditional jump ends it within the 5 bytes "
                           "to patch");
        }
    }
    /* A branch back into the displaced bytes would land in the middle of our jump. */
    for (unsigned k = 0; k < n; k++) {
        if (targets[k] > code && targets[k] < code + off) {
            return decline(reason, reason_size, p, reloc->insn_offset[k],
                           (k + 1 < n ? reloc->insn_offset[k + 1] : off) - reloc->insn_offset[k],
                           "a branch targets the middle of the bytes to patch");
        }
    }
    x86_64_abs_jump(tramp + t, code + off);
    reloc->window = off;
    reloc->tramp_len = t + ABS_JUMP_SIZE;
    reloc->insns = n;
    return OPAL_SUCCESS;
}

const mca_patcher_overwrite_arch_t mca_patcher_overwrite_arch_x86_64 = {
    .name = "x86_64",
    .jump_size = JUMP_SIZE,
    .hop_size = ABS_JUMP_SIZE,
    .max_tramp = MCA_PATCHER_OVERWRITE_MAX_INSNS * MAX_COPY + ABS_JUMP_SIZE,
    .patch_offset = x86_64_patch_offset,
    .relocate = x86_64_relocate,
    .abs_jump = x86_64_abs_jump,
    .entry_jump = x86_64_entry_jump,
    .code_write = mca_patcher_overwrite_x86_64_code_write,
    .fini = mca_patcher_overwrite_x86_64_write_fini,
};
