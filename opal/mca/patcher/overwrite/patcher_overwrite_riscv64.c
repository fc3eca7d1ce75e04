/*
 * RISC-V 64 (RV64GC, LP64D) instructions for the overwrite patcher.
 *
 * The patch: "auipc t2, hi; jalr x0, lo(t2)", 8 bytes, to a hop within
 * +-2 GiB, at the entry (after an lpad landing pad, which stays in
 * place).  Not a 24-byte or longer absolute jump: glibc 2.36's munmap,
 * madvise, process_madvise and remap_file_pages are 22 bytes long.
 * Debian 12's libc.so.6 has 8 bytes or more of straight-line code at the
 * entry of every function we patch: munmap, madvise, shmdt, shmat,
 * process_madvise, remap_file_pages begin "li a7, N; ecall" (exactly 8),
 * mmap "slli; bnez" (a branch to relocate), brk "c.mv; li; ecall" (10),
 * sbrk, realloc, malloc_trim four compressed stores (8), free "c.beqz;
 * c.addi; ld", mremap, dlopen, dlmopen, dlsym "c.addi sp; auipc; ld" (10),
 * dlclose "auipc; ld" (8).
 *
 * Not a 4-byte "jal x0" either, though it would clobber no register: it
 * reaches +-1 MiB, and each patch point needs a page of its own there.
 * Under qemu-riscv64 the free pages right after libc.so.6's data are
 * 0.5-0.8 MiB from these functions (its text alone is 1.1 MiB), but they
 * are the first that the next mmap or dlopen takes, and where the loader
 * put another object there, there is none; +-2 GiB does not depend on
 * that.  And 4 bytes would not spare the held threads: they cover more
 * than one instruction where a function begins with a compressed one
 * (brk, sbrk, free, malloc_trim), and only an aligned 4-byte fetch is
 * atomic (Ziccif, a profile's promise, not RV64GC's).  One jump size for
 * every patch is also what the architecture interface has.
 *
 * t2 (x7) is the register the jumps use.  The psABI makes t0-t6
 * caller-saved temporaries, dead at a call; t2 is also the one that
 * Zicfilp exempts from landing pads ("software guarded": jalr with rs1 =
 * x7 needs no lpad at its target), which is what the jump back into the
 * middle of a function needs, and what compilers use for their own far
 * direct calls with Zicfilp (auipc x7; jalr x7).  t2 is otherwise the
 * landing pad label, consumed by the lpad before the patch point, and
 * GCC's static chain, which a nested function reads at entry: a displaced
 * instruction that reads t2 before writing it is declined, and so is a
 * relocated jump or a jump back that would overwrite a t2 the displaced
 * instructions set.  The trampoline begins with "lpad 0" (auipc x0, 0: a
 * hint that does nothing without Zicfilp): the intercept calls it through
 * a pointer.
 *
 *   hop:  auipc t2, 0; ld t2, 16(t2); jalr x0, 0(t2); nop; .quad intercept
 *
 * The trampoline holds the displaced instructions, made independent of
 * where they run (C: the compressed form; "far jump": auipc t2; jalr):
 *   plain, jalr, c.jr, c.jalr     copied (a call returns into the trampoline;
 *                                 it must end the window: a thread already in
 *                                 the callee returns to the original code)
 *   auipc rd, hi                  auipc rd, hi'; addi rd, rd, lo': rd gets the
 *                                 original value, so its user (addi, ld, jalr,
 *                                 inside the window or after it) runs unchanged
 *   jal rd / C c.j                far jump, linking rd
 *   beq..bgeu / C c.beqz, c.bnez  the opposite branch over a far jump
 * then a far jump back to the first instruction not displaced.  The
 * window is whole instructions only: it ends at 8 bytes or, after a
 * compressed instruction, at 10.  It must end inside the function: a
 * return, jump, ebreak or unimp before its end declines, and where the
 * loader knows the function's symbol (dladdr1), its size is checked too
 * (glibc's riscv64 setjmp is 2 bytes and falls through into __sigsetjmp).
 * PC-relative forms it does not know (anything longer than 4 bytes, a
 * custom opcode) decline, naming the bytes.
 *
 * The write (patcher_overwrite_stopped_write.c) holds every other thread
 * in a signal handler, stores, calls __builtin___clear_cache (through
 * patcher_overwrite_icache.h, as for each new trampoline page), releases.
 * Why that is right, by the RISC-V unprivileged ISA and Linux (qemu-user
 * re-translates written code and never tears a store, so no run here can
 * show it):
 * - Missing cache flush.  Instruction fetch is not coherent with stores:
 *   by Zifencei, a hart is guaranteed to fetch what was stored only after
 *   a FENCE.I of its own, and FENCE.I orders that hart's fetches only;
 *   making a store visible to the fetches of other harts takes a data
 *   FENCE by the writer and then a FENCE.I on every other hart.
 *   __builtin___clear_cache is a call to __riscv_flush_icache(start, end,
 *   0) in GCC 12 (checked: riscv64-linux-gnu-gcc -O2, objdump), glibc's
 *   IFUNC to the vDSO's __vdso_flush_icache or the riscv_flush_icache
 *   system call; on an SMP kernel the vDSO makes that system call.  Flags
 *   0 (not SYS_RISCV_FLUSH_ICACHE_LOCAL): the kernel's flush_icache_mm
 *   (arch/riscv/mm/cacheflush.c) runs FENCE.I on this hart, sends every
 *   other hart that has this mm active a remote FENCE.I (SBI or IPI), and
 *   marks every hart's I-cache stale for the mm, so that one that switches
 *   to it later runs FENCE.I first (flush_icache_deferred at switch_mm).
 *   The data FENCE comes with the call: our store precedes, in program
 *   order on this hart, the kernel's request to the other harts, an IPI
 *   queued with fully ordered atomics (a release-annotated atomic or a
 *   FENCE rw,rw orders every earlier access in RVWMO's preserved program
 *   order) or an SBI call, which flush_icache_mm counts on to be as
 *   strongly ordered (its comment says so); the other hart sees the
 *   request before its FENCE.I.  So when the call returns, every hart
 *   that can run our threads fetches the new bytes.  The held threads leave the handler by the kernel's
 *   sret; sret itself is not what synchronizes their fetch (RISC-V has no
 *   such rule), the FENCE.I above is, and it has run on their harts or
 *   will before they run user code again.
 * - Torn concurrent write.  RVWMO gives an instruction fetch racing a
 *   store no atomicity or order (Ziccif, in the RVA profiles, makes only
 *   a naturally aligned 4-byte fetch atomic; an 8-byte auipc+jalr and a
 *   store over compressed instructions are beyond it).  So no other
 *   thread runs while the bytes change: each is held in the handler, and
 *   one stopped at an inner boundary of the window is moved to its copy
 *   in the trampoline (restoring: one between our auipc and jalr goes to
 *   the hop).  The exception is the threads that opted out of signals and
 *   sleep in a system call whose instruction is off the window, so that a
 *   restart cannot land in it (patcher_overwrite_threads.c); one blocking
 *   the signal otherwise makes the write decline.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/ucontext.h>

#include "opal/constants.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_arch.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_stopped_write.h"

/* A static program may be linked without the loader's functions. */
#pragma weak dladdr1

#define JUMP_SIZE 8     /* auipc t2; jalr x0 */
#define FAR_JUMP  8     /* auipc t2; jalr rd */
#define HOP_SIZE  24    /* auipc; ld; jalr; nop; .quad (8-aligned: the hop is) */
#define MAX_COPY  12    /* a branch: the opposite branch, a far jump */
#define PAD_SIZE  4     /* lpad */

#define X0 0
#define RA 1
#define T2 7

#define OP_LOAD   0x03
#define OP_AUIPC  0x17
#define OP_BRANCH 0x63
#define OP_JALR   0x67
#define OP_JAL    0x6f
#define OP_IMM    0x13
#define NOP       0x00000013u /* addi x0, x0, 0 */
#define LPAD0     0x00000017u /* lpad 0: auipc x0, 0 */

/* What a displaced instruction is, for its relocation. */
typedef enum {
    RV_PLAIN,   /* copied as is */
    RV_AUIPC,   /* rd = pc + imm */
    RV_JAL,     /* jal rd, pc + imm; c.j (rd = x0) */
    RV_BRANCH,  /* b<cond> rs1, rs2, pc + imm; c.beqz/c.bnez (rs2 = x0) */
    RV_END,     /* ebreak, c.ebreak, unimp, the illegal all-zero parcel */
    RV_UNKNOWN, /* not decoded: declined */
} rv_kind_t;

typedef struct rv_insn_t {
    unsigned len;   /* 2 or 4 */
    rv_kind_t kind;
    bool ends;      /* no way on: jal/c.j x0, jalr/c.jr x0 */
    bool links;     /* a call: jal, jalr, c.jalr writing a return address */
    unsigned rd;    /* integer register written, 0 if none */
    unsigned rs1, rs2; /* integer registers read, 0 if none */
    unsigned funct3;   /* RV_BRANCH: the condition */
    int64_t imm;       /* RV_AUIPC, RV_JAL, RV_BRANCH: the offset from the instruction */
} rv_insn_t;

static uint32_t bits(uint32_t v, unsigned hi, unsigned lo)
{
    return (v >> lo) & ((1u << (hi - lo + 1)) - 1);
}

/* Compressed (RVC, RV64): quadrant h & 3, funct3 h >> 13. */
static void decode_rvc(uint16_t h, rv_insn_t *in)
{
    const unsigned f3 = h >> 13, r = bits(h, 11, 7), r2 = bits(h, 6, 2);
    in->len = 2;
    in->kind = RV_PLAIN;
    switch (h & 3) {
    case 0: /* c.addi4spn, c.fld, c.lw, c.ld, c.fsd, c.sw, c.sd: x8-x15 only */
        if (0 == h) {
            in->kind = RV_END; /* the defined illegal instruction */
        } else if (4 == f3) {
            in->kind = RV_UNKNOWN;
        }
        return;
    case 1:
        if (f3 <= 3) { /* c.addi, c.addiw (c.jal is RV32 only), c.li, c.lui/c.addi16sp */
            in->rd = r;
            in->rs1 = (2 == f3 || (3 == f3 && 2 != r)) ? 0 : r; /* c.li, c.lui read nothing */
        } else if (5 == f3) { /* c.j */
            in->kind = RV_JAL;
            in->ends = true;
            in->imm = mca_patcher_overwrite_sext((bits(h, 12, 12) << 11) | (bits(h, 11, 11) << 4) |
                               (bits(h, 10, 9) << 8) | (bits(h, 8, 8) << 10) |
                               (bits(h, 7, 7) << 6) | (bits(h, 6, 6) << 7) |
                               (bits(h, 5, 3) << 1) | (bits(h, 2, 2) << 5),
                           12);
        } else if (f3 >= 6) { /* c.beqz, c.bnez rs1', offset */
            in->kind = RV_BRANCH;
            in->funct3 = 6 == f3 ? 0 : 1; /* beq, bne against x0 */
            in->rs1 = 8 + bits(h, 9, 7);
            in->imm = mca_patcher_overwrite_sext((bits(h, 12, 12) << 8) | (bits(h, 11, 10) << 3) |
                               (bits(h, 6, 5) << 6) | (bits(h, 4, 3) << 1) |
                               (bits(h, 2, 2) << 5),
                           9);
        } /* 4: arithmetic on x8-x15 */
        return;
    case 2:
        if (0 == f3 || 2 == f3 || 3 == f3) { /* c.slli; c.lwsp, c.ldsp */
            in->rd = r;
            in->rs1 = 0 == f3 ? r : 0;
        } else if (4 == f3) {
            const bool bit12 = bits(h, 12, 12);
            if (0 == r2 && 0 == r) {
                in->kind = bit12 ? RV_END : RV_UNKNOWN; /* c.ebreak */
            } else if (0 == r2) { /* c.jr, c.jalr */
                in->rs1 = r;
                in->rd = bit12 ? RA : X0;
                in->ends = !bit12;
                in->links = bit12;
            } else { /* c.mv, c.add */
                in->rd = r;
                in->rs1 = bit12 ? r : 0;
                in->rs2 = r2;
            }
        } else if (6 == f3 || 7 == f3) { /* c.swsp, c.sdsp */
            in->rs2 = r2;
        } /* 1, 5: c.fldsp, c.fsdsp (floating-point registers) */
        return;
    }
}

/* The 4-byte base instructions of RV64GC (and V), by major opcode. */
static void decode_32(uint32_t w, rv_insn_t *in)
{
    const unsigned rd = bits(w, 11, 7), rs1 = bits(w, 19, 15), rs2 = bits(w, 24, 20);
    in->len = 4;
    in->kind = RV_PLAIN;
    switch (w & 0x7f) {
    case 0x37: /* lui */
        in->rd = rd;
        break;
    case OP_AUIPC:
        in->rd = rd;
        in->kind = X0 == rd ? RV_PLAIN : RV_AUIPC; /* auipc x0: a hint (lpad) */
        in->imm = mca_patcher_overwrite_sext(w & 0xfffff000u, 32);
        break;
    case OP_JAL:
        in->rd = rd;
        in->kind = RV_JAL;
        in->ends = X0 == rd;
        in->links = X0 != rd;
        in->imm = mca_patcher_overwrite_sext((bits(w, 31, 31) << 20) | (bits(w, 19, 12) << 12) |
                           (bits(w, 20, 20) << 11) | (bits(w, 30, 21) << 1),
                       21);
        break;
    case OP_JALR:
        in->rd = rd;
        in->rs1 = rs1;
        in->ends = X0 == rd;
        in->links = X0 != rd;
        in->kind = 0 == bits(w, 14, 12) ? RV_PLAIN : RV_UNKNOWN;
        break;
    case OP_BRANCH:
        in->rs1 = rs1;
        in->rs2 = rs2;
        in->funct3 = bits(w, 14, 12);
        in->kind = (2 == in->funct3 || 3 == in->funct3) ? RV_UNKNOWN : RV_BRANCH;
        in->imm = mca_patcher_overwrite_sext((bits(w, 31, 31) << 12) | (bits(w, 7, 7) << 11) |
                           (bits(w, 30, 25) << 5) | (bits(w, 11, 8) << 1),
                       13);
        break;
    case 0x73: /* ecall, csr*; ebreak and unimp (csrrw x0, cycle, x0) trap */
        if (0x00100073u == w || 0xc0001073u == w) {
            in->kind = RV_END;
        }
        in->rd = rd;
        in->rs1 = rs1;
        break;
    case OP_LOAD: case OP_IMM: case 0x1b: case 0x0f: /* loads, op-imm(-32), fence */
        in->rd = rd;
        in->rs1 = rs1;
        break;
    case 0x07: case 0x27: /* fp load, fp store: an integer base */
        in->rs1 = rs1;
        break;
    case 0x23: /* store */
        in->rs1 = rs1;
        in->rs2 = rs2;
        break;
    case 0x33: case 0x3b: case 0x2f: case 0x53: case 0x57:
        /* op(-32), atomics, fp and vector ops: as integer registers (fp and
         * vector ones named 7 are declined needlessly, never wrongly) */
        in->rd = rd;
        in->rs1 = rs1;
        in->rs2 = rs2;
        break;
    case 0x43: case 0x47: case 0x4b: case 0x4f: /* fused multiply-add: fp only */
        break;
    default:
        in->kind = RV_UNKNOWN;
    }
}

/* Decode the instruction at p (reading its second half only for a 4-byte one). */
static void decode(const unsigned char *p, rv_insn_t *in)
{
    uint16_t lo, hi;
    memset(in, 0, sizeof(*in));
    memcpy(&lo, p, sizeof(lo));
    if (3 != (lo & 3)) {
        decode_rvc(lo, in);
    } else if (0x1f == (lo & 0x1f)) {
        in->len = 0; /* 48 bits or longer */
        in->kind = RV_UNKNOWN;
    } else {
        memcpy(&hi, p + 2, sizeof(hi));
        decode_32((uint32_t) lo | ((uint32_t) hi << 16), in);
    }
}

static void put32(unsigned char *buf, uint32_t w)
{
    memcpy(buf, &w, sizeof(w));
}

static uint32_t u_type(unsigned op, unsigned rd, uint32_t imm20)
{
    return (imm20 << 12) | (rd << 7) | op;
}

static uint32_t i_type(unsigned op, unsigned f3, unsigned rd, unsigned rs1, int32_t imm12)
{
    return ((uint32_t) imm12 << 20) | (rs1 << 15) | (f3 << 12) | (rd << 7) | op;
}

static uint32_t b_type(unsigned f3, unsigned rs1, unsigned rs2, int32_t imm13)
{
    const uint32_t i = (uint32_t) imm13;
    return (bits(i, 12, 12) << 31) | (bits(i, 10, 5) << 25) | (rs2 << 20) | (rs1 << 15) |
           (f3 << 12) | (bits(i, 4, 1) << 8) | (bits(i, 11, 11) << 7) | OP_BRANCH;
}

/*
 * The (hi, lo) of an auipc pair that adds delta to its own address: hi
 * rounds so that the sign-extended 12-bit lo lands exactly; false if hi
 * does not fit its 20 bits (auipc's reach: -2 GiB - 2 KiB .. +2 GiB - 2 KiB).
 */
static bool split_pcrel(int64_t delta, uint32_t *hi, int32_t *lo)
{
    const int64_t h = (delta + 0x800) >> 12;
    if (h < -(INT64_C(1) << 19) || h >= (INT64_C(1) << 19)) {
        return false;
    }
    *hi = (uint32_t) h & 0xfffff;
    *lo = (int32_t) (delta - h * 4096);
    return true;
}

/* "auipc t2, hi; jalr rd, lo(t2)" at buf (to run at run_at) to target; false if out of reach. */
static bool far_jump(unsigned char *buf, uintptr_t run_at, uintptr_t target, unsigned rd)
{
    uint32_t hi;
    int32_t lo;
    if (!split_pcrel((int64_t) (target - run_at), &hi, &lo)) {
        return false;
    }
    put32(buf, u_type(OP_AUIPC, T2, hi));
    put32(buf + 4, i_type(OP_JALR, 0, rd, T2, lo));
    return true;
}

/* A leading lpad (auipc x0, label) stays where indirect calls land. */
static size_t riscv64_patch_offset(uintptr_t func)
{
    uint16_t lo; /* the opcode and rd are in the first half */
    memcpy(&lo, (const void *) func, sizeof(lo));
    return (lo & 0xfff) == OP_AUIPC ? PAD_SIZE : 0;
}

static int riscv64_entry_jump(unsigned char *buf, uintptr_t from, uintptr_t to)
{
    return far_jump(buf, from, to, X0);
}

static void riscv64_hop(unsigned char *buf, uintptr_t run_at, uintptr_t target, uintptr_t at)
{
    (void) run_at; /* the literal is read relative to the hop's own address */
    (void) at;
    put32(buf, u_type(OP_AUIPC, T2, 0));
    put32(buf + 4, i_type(OP_LOAD, 3, T2, T2, 16)); /* ld t2, 16(t2) */
    put32(buf + 8, i_type(OP_JALR, 0, X0, T2, 0));
    put32(buf + 12, NOP);
    memcpy(buf + 16, &target, sizeof(target));
}

/*
 * The copy of one instruction, found at pc, into out (to run at run_at);
 * its length, or 0 if a target is out of reach from there.
 */
static size_t relocate_one(const rv_insn_t *in, uintptr_t pc, unsigned char *out, uintptr_t run_at)
{
    const uintptr_t target = pc + (uintptr_t) in->imm;
    uint32_t hi;
    int32_t lo;
    switch (in->kind) {
    case RV_AUIPC:
        if (!split_pcrel((int64_t) (target - run_at), &hi, &lo)) {
            return 0;
        }
        put32(out, u_type(OP_AUIPC, in->rd, hi));
        put32(out + 4, i_type(OP_IMM, 0, in->rd, in->rd, lo)); /* addi rd, rd, lo */
        return 8;
    case RV_JAL:
        return far_jump(out, run_at, target, in->rd) ? FAR_JUMP : 0;
    case RV_BRANCH:
        /* Not taken: over the far jump.  funct3 ^ 1 is the opposite condition. */
        put32(out, b_type(in->funct3 ^ 1, in->rs1, in->rs2, 4 + FAR_JUMP));
        return far_jump(out + 4, run_at + 4, target, X0) ? 4 + FAR_JUMP : 0;
    default:
        memcpy(out, (const void *) pc, in->len);
        return in->len;
    }
}

/*
 * Whether the loader's symbol around code (dladdr1: the dynamic symbol
 * table) ends before code + window; its size from code, in *left.
 */
static bool symbol_ends_before(uintptr_t code, size_t window, size_t *left)
{
    Dl_info info;
    const ElfW(Sym) *sym = NULL;
    if (NULL == dladdr1 || 0 == dladdr1((void *) code, &info, (void **) &sym, RTLD_DL_SYMENT) ||
        NULL == sym || NULL == info.dli_saddr || 0 == sym->st_size) {
        return false;
    }
    const uintptr_t start = (uintptr_t) info.dli_saddr, end = start + sym->st_size;
    *left = end - code;
    return code >= start && code < end && code + window > end;
}

static int riscv64_relocate(uintptr_t code, unsigned char *tramp, uintptr_t tramp_addr,
                            mca_patcher_overwrite_reloc_t *reloc, char *reason, size_t reason_size)
{
    const unsigned char *p = (const unsigned char *) code;
    uintptr_t targets[MCA_PATCHER_OVERWRITE_MAX_INSNS];
    bool t2_set = false; /* a displaced instruction wrote t2: our jumps may not */
    bool ended = false;
    size_t off = 0, t = PAD_SIZE;
    unsigned n = 0;

    memset(reloc, 0, sizeof(*reloc));
    put32(tramp, LPAD0);
    while (off < JUMP_SIZE) {
        rv_insn_t in;
        decode(p + off, &in);
        if (RV_UNKNOWN == in.kind) {
            return mca_patcher_overwrite_decline_insn(reason, reason_size, p, off,
                                                      in.len ? in.len : 2,
                                                      "unknown or unsupported instruction");
        }
        if (RV_END == in.kind) {
            return mca_patcher_overwrite_decline_insn(
                reason, reason_size, p, off, in.len,
                "function too short: ebreak/unimp within the 8 bytes to patch");
        }
        if (!t2_set && (T2 == in.rs1 || T2 == in.rs2)) {
            return mca_patcher_overwrite_decline_insn(
                reason, reason_size, p, off, in.len,
                "reads t2 before setting it (a static chain?): the jump to the "
                "hop sets t2");
        }
        if (t2_set && (RV_JAL == in.kind || RV_BRANCH == in.kind)) {
            return mca_patcher_overwrite_decline_insn(
                reason, reason_size, p, off, in.len,
                "a PC-relative jump after t2 was set: its relocated form needs t2");
        }
        if (n == MCA_PATCHER_OVERWRITE_MAX_INSNS) {
            return mca_patcher_overwrite_decline_insn(reason, reason_size, p, off, in.len,
                                                      "too many instructions to displace");
        }
        size_t w = relocate_one(&in, code + off, tramp + t, tramp_addr + t);
        if (0 == w) {
            return mca_patcher_overwrite_decline_insn(
                reason, reason_size, p, off, in.len,
                "PC-relative target out of +-2 GiB from the trampoline");
        }
        targets[n] = RV_JAL == in.kind || RV_BRANCH == in.kind ? code + off + (uintptr_t) in.imm
                                                               : 0;
        reloc->insn_offset[n] = (uint8_t) off;
        reloc->tramp_offset[n] = (uint8_t) t;
        n++;
        off += in.len;
        t += w;
        t2_set |= T2 == in.rd;
        ended = in.ends;
        if (in.ends && off < JUMP_SIZE) {
            return mca_patcher_overwrite_decline_insn(
                reason, reason_size, p, off - in.len, in.len,
                "function too short: a return or jump ends it within the 8 bytes "
                "to patch");
        }
        if (in.links && off < JUMP_SIZE) {
            /* A thread already in the callee would return into our jump. */
            return mca_patcher_overwrite_decline_insn(
                reason, reason_size, p, off - in.len, in.len,
                "a call whose return address is inside the 8 bytes to patch");
        }
    }
    int rc = mca_patcher_overwrite_check_targets(code, off, reloc->insn_offset, n, targets, reason,
                                                 reason_size);
    if (OPAL_SUCCESS != rc) {
        return rc;
    }
    size_t left;
    if (symbol_ends_before(code, off, &left)) {
        char why[96];
        snprintf(why, sizeof(why),
                 "function too short: its symbol ends %zu bytes after the "
                 "patch point, the jump needs 8",
                 left);
        return mca_patcher_overwrite_decline_insn(reason, reason_size, p, 0,
                                                  left < off ? left : off, why);
    }
    if (!ended) {
        if (t2_set) {
            return mca_patcher_overwrite_decline_insn(
                reason, reason_size, p, 0, off,
                "the displaced instructions set t2, which the jump back would "
                "overwrite");
        }
        if (!far_jump(tramp + t, tramp_addr + t, code + off, X0)) {
            return mca_patcher_overwrite_decline_insn(
                reason, reason_size, p, 0, off, "the trampoline is out of +-2 GiB of the function");
        }
        t += FAR_JUMP;
    }
    reloc->window = off;
    reloc->tramp_len = t;
    reloc->insns = n;
    return OPAL_SUCCESS;
}

static uintptr_t riscv64_get_pc(const void *uc)
{
    return (uintptr_t) ((const ucontext_t *) uc)->uc_mcontext.__gregs[REG_PC];
}

static void riscv64_set_pc(void *uc, uintptr_t pc)
{
    ((ucontext_t *) uc)->uc_mcontext.__gregs[REG_PC] = (unsigned long) pc;
}

const mca_patcher_overwrite_arch_t mca_patcher_overwrite_arch = {
    .name = "riscv64",
    .jump_size = JUMP_SIZE,
    .reach = (uintptr_t) 1 << 31, /* auipc: +-2 GiB (less 2 KiB, which near() leaves) */
    .hop_size = HOP_SIZE,
    .max_tramp = PAD_SIZE + MCA_PATCHER_OVERWRITE_MAX_INSNS * MAX_COPY + FAR_JUMP,
    .how = "auipc t2 + jalr (8 bytes) at entry to a near hop, trampoline",
    .how_past_pad = "auipc t2 + jalr (8 bytes) after lpad to a near hop, trampoline",
    .patch_offset = riscv64_patch_offset,
    .relocate = riscv64_relocate,
    .hop = riscv64_hop,
    .entry_jump = riscv64_entry_jump,
    .code_write = mca_patcher_overwrite_stopped_code_write,
    .get_pc = riscv64_get_pc,
    .set_pc = riscv64_set_pc,
};
