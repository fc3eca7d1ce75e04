/*
 * The riscv64 cases of overwrite_reloc_test.c (included there, after its
 * check_patch and check_decline): windows of 4-byte and compressed
 * instructions (8 bytes, or 10 where a compressed one leaves the jump's
 * end inside a 4-byte one), each PC-relative class (auipc with its user
 * inside the window or after it, jal x0, jal ra, beq..bgeu, c.j, c.beqz,
 * c.bnez), an lpad first, another patcher's jumps, a target 2-byte
 * aligned; the declines: too short (a return, a jump, ebreak within the
 * 8 bytes; libc's setjmp, whose symbol is 2 bytes long and falls through
 * into __sigsetjmp), a branch into the window, a call returning inside
 * it, unknown and 48-bit encodings, t2 read at entry or set before a
 * jump that needs it.
 */
#ifndef OVERWRITE_RELOC_RISCV64_H
#define OVERWRITE_RELOC_RISCV64_H

static const unsigned char frame_c[] = { /* x + 3 behind a frame of compressed instructions (sbrk's) */
    0x41, 0x11, /* c.addi sp, -16 */
    0x06, 0xe4, /* c.sdsp ra, 8(sp) */
    0x8d, 0x47, /* c.li a5, 3 */
    0x3e, 0x95, /* c.add a0, a5 */
    0xa2, 0x60, /* c.ldsp ra, 8(sp) */
    0x41, 0x01, /* c.addi sp, 16 */
    0x82, 0x80, /* ret */
};
static const unsigned char window10[] = { /* x + 8: the 8 bytes end inside an addi (brk's shape) */
    0xaa, 0x87,             /* c.mv a5, a0 */
    0x13, 0x85, 0x77, 0x00, /* addi a0, a5, 7 */
    0x13, 0x05, 0x15, 0x00, /* addi a0, a0, 1 */
    0x82, 0x80,             /* ret */
};
static const unsigned char c_beqz[] = { /* x ? x+5 : 7 (free's c.beqz first) */
    0x09, 0xc5,             /* c.beqz a0, +10 */
    0x13, 0x05, 0x55, 0x00, /* addi a0, a0, 5 */
    0x01, 0x00,             /* c.nop */
    0x82, 0x80,             /* ret */
    0x1d, 0x45,             /* c.li a0, 7 */
    0x82, 0x80,             /* ret */
};
static const unsigned char c_bnez[] = { /* x ? x+1 : 9 */
    0x09, 0xe5,             /* c.bnez a0, +10 */
    0x13, 0x05, 0x90, 0x00, /* li a0, 9 */
    0x01, 0x00,             /* c.nop */
    0x82, 0x80,             /* ret */
    0x05, 0x05,             /* c.addi a0, 1 */
    0x82, 0x80,             /* ret */
};
static const unsigned char c_j[] = { /* x + 7: the window ends with a c.j */
    0x13, 0x05, 0x35, 0x00, /* addi a0, a0, 3 */
    0x01, 0x00,             /* c.nop */
    0x11, 0xa0,             /* c.j +4 */
    0x01, 0x00,             /* c.nop */
    0x11, 0x05,             /* c.addi a0, 4 */
    0x82, 0x80,             /* ret */
};
static const unsigned char jal_x0[] = { /* x + 2: the window ends with a j (jal x0) */
    0x13, 0x05, 0x15, 0x00, /* addi a0, a0, 1 */
    0x6f, 0x00, 0x60, 0x00, /* j +6 */
    0x01, 0x00,             /* c.nop */
    0x05, 0x05,             /* c.addi a0, 1 */
    0x82, 0x80,             /* ret */
};
static const unsigned char blt_fn[] = { /* y < x ? x+2 : x+1 */
    0x63, 0xc5, 0xa5, 0x00, /* blt a1, a0, +10 */
    0x13, 0x05, 0x15, 0x00, /* addi a0, a0, 1 */
    0x82, 0x80,             /* ret */
    0x09, 0x05,             /* c.addi a0, 2 */
    0x82, 0x80,             /* ret */
};
static const unsigned char lpad_fn[] = { /* lpad, then x + 42 */
    0x17, 0x00, 0x00, 0x00, /* lpad 0 (auipc x0, 0) */
    0x93, 0x07, 0xa0, 0x02, /* li a5, 42 */
    0x33, 0x05, 0xf5, 0x00, /* add a0, a0, a5 */
    0x82, 0x80,             /* ret */
};
static const unsigned char too_short[] = {0x05, 0x45, 0x82, 0x80};             /* c.li a0, 1; ret */
static const unsigned char ebreak_inside[] = {0x01, 0x00, 0x02, 0x90, 0x01, 0x00, /* c.nop; c.ebreak */
                                              0x01, 0x00, 0x82, 0x80};
static const unsigned char c_j_early[] = {0x21, 0xa0, 0x01, 0x00, 0x01, 0x00,    /* c.j +8 */
                                          0x01, 0x00, 0x82, 0x80};
static const unsigned char into_window[] = {0x01, 0x00, 0x01, 0x00,               /* c.nop; c.nop */
                                            0xe3, 0x1f, 0x05, 0xfe, 0x82, 0x80}; /* bnez a0, -2 */
static const unsigned char custom_op[] = {0x01, 0x00, 0x0b, 0x00, 0x00, 0x00,    /* custom-0 */
                                          0x01, 0x00, 0x82, 0x80};
static const unsigned char long48[] = {0x01, 0x00, 0x1f, 0x00, 0x00, 0x00,       /* 48-bit */
                                       0x00, 0x00, 0x82, 0x80};
static const unsigned char reads_t2[] = {0x1e, 0x85,                 /* c.mv a0, t2 (a static chain) */
                                         0x13, 0x05, 0x15, 0x00, 0x82, 0x80};
static const unsigned char sets_t2[] = {0x93, 0x03, 0x50, 0x00,      /* li t2, 5 */
                                        0x33, 0x05, 0x75, 0x00, 0x82, 0x80}; /* add a0, a0, t2 */
static const unsigned char t2_then_branch[] = {0x85, 0x43,           /* c.li t2, 1 */
                                               0x63, 0x04, 0x05, 0x00, /* beqz a0, +8 */
                                               0x01, 0x00, 0x82, 0x80, 0x82, 0x80};

/* A constant at a fixed spot of the code page, for the loads below. */
#define KONST_OFFSET 0x800
#define KONST        1000

static void put_insn(unsigned char *at, uint32_t insn)
{
    memcpy(at, &insn, sizeof(insn));
}

/* The auipc at 'at' and its I-type user at 'user' (templates with zero
 * immediates) made to reach target. */
static void fill_pcrel(unsigned char *bytes, size_t at, size_t user, uint32_t auipc, uint32_t load,
                       const unsigned char *where, const void *target)
{
    int64_t delta = (const unsigned char *) target - (where + at);
    int64_t hi = (delta + 0x800) >> 12, lo = delta - hi * 4096;
    put_insn(bytes + at, auipc | ((uint32_t) hi << 12));
    put_insn(bytes + user, load | ((uint32_t) lo << 20));
}

/* x + KONST, loaded auipc-relative: the ld inside the window (dlclose's
 * "auipc; ld"), or after it (mremap's, behind a compressed instruction). */
static unsigned char *place_pc_load(code_page_t *cp, bool user_inside)
{
    unsigned char inside[] = {0x97, 0x07, 0, 0, 0x83, 0xb7, 0x07, 0, /* auipc a5; ld a5, lo(a5) */
                              0x33, 0x05, 0xf5, 0x00, 0x82, 0x80};   /* add a0, a0, a5; ret */
    unsigned char after[] = {0x2a, 0x87, 0x01, 0x00,                 /* c.mv a4, a0; c.nop */
                             0x97, 0x07, 0, 0, 0x83, 0xb7, 0x07, 0,  /* auipc a5; ld a5, lo(a5) */
                             0x33, 0x05, 0xf7, 0x00, 0x82, 0x80};    /* add a0, a4, a5; ret */
    unsigned char *bytes = user_inside ? inside : after;
    size_t len = user_inside ? sizeof(inside) : sizeof(after), at = user_inside ? 0 : 4;
    fill_pcrel(bytes, at, at + 4, 0x00000797, 0x0007b783, code_page_next(cp, 0),
               cp->base + KONST_OFFSET);
    return code_page_add(cp, bytes, len, 0);
}

/* "jal ra, pc + off" (off within +-1 MiB). */
static uint32_t jal_ra(intptr_t off)
{
    uint32_t o = (uint32_t) off;
    return 0x000000ef | (((o >> 20) & 1) << 31) | (((o >> 1) & 0x3ff) << 21) |
           (((o >> 11) & 1) << 20) | (((o >> 12) & 0xff) << 12);
}

/* A jal ra ending the window: base(x) + 1. */
static unsigned char *place_call(code_page_t *cp, const unsigned char *base)
{
    unsigned char fn[] = {0x41, 0x11, 0x06, 0xe4, /* c.addi sp, -16; c.sdsp ra, 8(sp) */
                          0xef, 0x00, 0x00, 0x00, /* jal ra, base */
                          0x13, 0x05, 0x15, 0x00, /* addi a0, a0, 1 */
                          0xa2, 0x60, 0x41, 0x01, /* c.ldsp ra, 8(sp); c.addi sp, 16 */
                          0x82, 0x80};            /* ret */
    put_insn(fn + 4, jal_ra(base - (code_page_next(cp, 0) + 4)));
    return code_page_add(cp, fn, sizeof(fn), 0);
}

/* A call at the entry, its return address inside the window: declined. */
static unsigned char *place_early_call(code_page_t *cp, const unsigned char *base)
{
    unsigned char fn[] = {0xef, 0x00, 0x00, 0x00, /* jal ra, base */
                          0x13, 0x05, 0x15, 0x00, /* addi a0, a0, 1 */
                          0x82, 0x80};            /* ret */
    put_insn(fn, jal_ra(base - code_page_next(cp, 0)));
    return code_page_add(cp, fn, sizeof(fn), 0);
}

/* Another patcher's entry jumps to base: tail-call style through t1, and
 * an absolute address loaded from a literal after the jump. */
static unsigned char *place_tail(code_page_t *cp, const unsigned char *base)
{
    unsigned char fn[8] = {0x17, 0x03, 0, 0, 0x67, 0x00, 0x03, 0}; /* auipc t1; jalr x0, lo(t1) */
    fill_pcrel(fn, 0, 4, 0x00000317, 0x00030067, code_page_next(cp, 0), base);
    return code_page_add(cp, fn, sizeof(fn), 0);
}

static unsigned char *place_abs_jump(code_page_t *cp, const unsigned char *base)
{
    unsigned char fn[24] = {0x17, 0x03, 0x00, 0x00,  /* auipc t1, 0 */
                            0x03, 0x33, 0x03, 0x01,  /* ld t1, 16(t1) */
                            0x67, 0x00, 0x03, 0x00,  /* jalr x0, 0(t1) */
                            0x13, 0x00, 0x00, 0x00}; /* nop; .quad base */
    uint64_t target = (uint64_t) (uintptr_t) base;
    memcpy(fn + 16, &target, sizeof(target));
    return code_page_add(cp, fn, sizeof(fn), 0);
}

/*
 * glibc's riscv64 setjmp is "c.li a1, 1" (its symbol's 2 bytes), then
 * falls through into __sigsetjmp: no return or jump ends it, only its
 * symbol's size tells.  Patching it would write over __sigsetjmp.
 */
static void check_setjmp_declined(void)
{
    uintptr_t func = (uintptr_t) dlsym(RTLD_DEFAULT, "setjmp"), old = 0;
    if (0 == func) {
        printf("note: no setjmp symbol in this libc: symbol size not tested\n");
        return;
    }
    code_state_t before;
    test_capture_t cap;
    snapshot(func, &before);
    test_capture_begin(&cap);
    int rc = patcher->patch_symbol("setjmp", (uintptr_t) intercept, &old);
    const char *said = test_capture_end(&cap);
    CHECK_MSG(OPAL_ERR_NOT_SUPPORTED == rc, "setjmp: expected a decline, got %d", rc);
    CHECK_MSG(NULL != strstr(said, "its symbol ends"), "setjmp: the reason does not name the "
                                                       "symbol's size: %s", said);
    if (OPAL_SUCCESS == rc) {
        mca_patcher_base_restore_patches(patcher, NULL, NULL);
    }
    check_unchanged("setjmp", func, &before);
}

/* Place the cases on cp, seal it, patch each (base: test_fn_plus42, placed already). */
static void reloc_arch_cases(code_page_t *cp, unsigned char *base)
{
    unsigned char *mmapl = code_page_add(cp, test_fn_mmap_like, sizeof(test_fn_mmap_like), 0);
    unsigned char *frame = code_page_add(cp, frame_c, sizeof(frame_c), 0);
    unsigned char *win10 = code_page_add(cp, window10, sizeof(window10), 0);
    unsigned char *beqz = code_page_add(cp, c_beqz, sizeof(c_beqz), 0);
    unsigned char *bnez = code_page_add(cp, c_bnez, sizeof(c_bnez), 0);
    unsigned char *cj = code_page_add(cp, c_j, sizeof(c_j), 0);
    unsigned char *j = code_page_add(cp, jal_x0, sizeof(jal_x0), 0);
    unsigned char *blt = code_page_add(cp, blt_fn, sizeof(blt_fn), 0);
    unsigned char *lpad = code_page_add(cp, lpad_fn, sizeof(lpad_fn), 0);
    /* 2-byte aligned only: the jump straddles an 8-byte word and a 4-byte one. */
    unsigned char *base_odd = code_page_add(cp, test_fn_plus42, sizeof(test_fn_plus42), 6);

    int64_t konst = KONST;
    memcpy(cp->base + KONST_OFFSET, &konst, sizeof(konst));
    unsigned char *load_in = place_pc_load(cp, true);
    unsigned char *load_after = place_pc_load(cp, false);
    unsigned char *call = place_call(cp, base);
    unsigned char *other1 = place_tail(cp, base);
    unsigned char *other2 = place_abs_jump(cp, base);
    unsigned char *d_call = place_early_call(cp, base);

    unsigned char *d_short = code_page_add(cp, too_short, sizeof(too_short), 0);
    unsigned char *d_ebreak = code_page_add(cp, ebreak_inside, sizeof(ebreak_inside), 0);
    unsigned char *d_cj = code_page_add(cp, c_j_early, sizeof(c_j_early), 0);
    unsigned char *d_window = code_page_add(cp, into_window, sizeof(into_window), 0);
    unsigned char *d_custom = code_page_add(cp, custom_op, sizeof(custom_op), 0);
    unsigned char *d_long = code_page_add(cp, long48, sizeof(long48), 0);
    unsigned char *d_reads = code_page_add(cp, reads_t2, sizeof(reads_t2), 0);
    unsigned char *d_sets = code_page_add(cp, sets_t2, sizeof(sets_t2), 0);
    unsigned char *d_t2br = code_page_add(cp, t2_then_branch, sizeof(t2_then_branch), 0);
    code_page_seal(cp);

    const long one[][6] = {{7, 0, 0, 0, 0, 0}};
    const long two[][6] = {{7, 0, 0, 0, 0, 0}, {7, 0, 0, 0, 0, 1}};
    const long zero_or_not[][6] = {{0, 0, 0, 0, 0, 0}, {9, 0, 0, 0, 0, 0}};
    const long less[][6] = {{3, 5, 0, 0, 0, 0}, {5, 3, 0, 0, 0, 0}};

    check_patch("li; add (munmap-like)", base, one, 1, 0);
    check_patch("mmap-like: slli; bnez", mmapl, two, 2, 0);
    check_patch("compressed frame (c.addi sp; c.sdsp; ...)", frame, one, 1, 0);
    check_patch("c.mv, then the 8 bytes end inside an addi (window 10)", win10, one, 1, 0);
    check_patch("c.beqz", beqz, zero_or_not, 2, 0);
    check_patch("c.bnez", bnez, zero_or_not, 2, 0);
    check_patch("c.j ends the window", cj, one, 1, 0);
    check_patch("j (jal x0) ends the window", j, one, 1, 0);
    check_patch("blt", blt, less, 2, 0);
    check_patch("lpad first", lpad, one, 1, 4);
    check_patch("2-byte aligned li; add", base_odd, one, 1, 0);
    check_patch("auipc; ld inside the window", load_in, one, 1, 0);
    check_patch("auipc in the window, its ld after it", load_after, one, 1, 0);
    check_patch("jal ra (a call)", call, one, 1, 0);
    check_patch("another patcher's auipc t1; jalr", other1, one, 1, 0);
    check_patch("another patcher's absolute jump (ld from a literal)", other2, one, 1, 0);

    check_decline("too short (ret)", d_short, "instruction at +2 (82 80)");
    check_decline("c.ebreak inside the window", d_ebreak, "instruction at +2 (02 90)");
    check_decline("c.j ends it early", d_cj, "instruction at +0 (21 a0)");
    check_decline("branch into the window", d_window, "instruction at +4 (e3 1f 05 fe)");
    check_decline("custom-0 opcode", d_custom, "instruction at +2 (0b 00 00 00)");
    check_decline("48-bit instruction", d_long, "instruction at +2 (1f 00)");
    check_decline("a call returning inside the window", d_call, "instruction at +0 (ef");
    check_decline("reads t2 at entry", d_reads, "instruction at +0 (1e 85)");
    check_decline("sets t2, jump back", d_sets, "set t2");
    check_decline("sets t2, then a branch", d_t2br, "instruction at +2 (63 04 05 00)");
    check_setjmp_declined();
}

#endif
