/*
 * The aarch64 cases of overwrite_reloc_test.c (included there, after its
 * check_patch and check_decline): every PC-relative class the relocator
 * handles at the patch point (adr, adrp, ldr/ldrsw literal in the w, x, s,
 * d and q forms, prfm literal, b, bl, b.cond, cbz/cbnz, tbz/tbnz), a
 * leading bti c, paciasp or pacibsp (pointer authentication is real under
 * qemu-aarch64's default cpu: a signed LR that reached the intercept, or an
 * unsigned one at the function's autiasp, would crash), a bti c target in a
 * guarded (PROT_BTI) page, a far b through x16, and the declines.  The
 * instruction words are encoded here, independently of the relocator.
 */
#ifndef OVERWRITE_RELOC_AARCH64_H
#define OVERWRITE_RELOC_AARCH64_H

#include <stdbool.h>

#ifndef PROT_BTI
#    define PROT_BTI 0x10
#endif

#define ADD_X0_X1 0x8b010000u
#define RET       0xd65f03c0u
#define NOP       0xd503201fu
#define BTI_C     0xd503245fu
#define PACIASP   0xd503233fu
#define AUTIASP   0xd50323bfu
#define PACIBSP   0xd503237fu
#define AUTIBSP   0xd50323ffu

/* The constants the PC-relative loads read: on the code page's second 4 KiB. */
#define K_OFFSET   (4096 + 0x100)
#define K32        1000             /* at K_OFFSET */
#define K64        1000000007L      /* at K_OFFSET + 8 */
#define KQ_HIGH    77               /* high half of a 16-byte value at K_OFFSET + 16 */
#define KNEG       (-1000)          /* int32 at K_OFFSET + 32 */

static uint32_t enc_b(uint32_t op, const uint32_t *from, const void *to)
{
    return op | ((uint32_t) (((intptr_t) to - (intptr_t) from) / 4) & 0x03ffffffu);
}

/* An instruction with a 19-bit word offset at bit 5 (ldr literal, b.cond, cbz). */
static uint32_t enc_rel19(uint32_t op, const uint32_t *from, const void *to)
{
    return op | (((uint32_t) (((intptr_t) to - (intptr_t) from) / 4) & 0x7ffffu) << 5);
}

static uint32_t enc_adr(bool page, unsigned rd, const uint32_t *from, const void *to)
{
    intptr_t d = page ? ((intptr_t) to >> 12) - ((intptr_t) from >> 12)
                      : (intptr_t) to - (intptr_t) from;
    return (page ? 0x90000000u : 0x10000000u) | ((uint32_t) (d & 3) << 29) |
           (((uint32_t) (d >> 2) & 0x7ffffu) << 5) | rd;
}

/*
 * Place n words whose word k is PC-relative to target (rel[k] an encoder, or
 * NULL for none, with the opcode in w[k]); returns where they are.
 */
typedef uint32_t (*rel_fn_t)(uint32_t op, const uint32_t *from, const void *to);
static uint32_t *place(code_page_t *cp, uint32_t *w, size_t n, int k, rel_fn_t rel,
                       const void *target)
{
    uint32_t *at = (uint32_t *) code_page_next(cp, 0);
    if (k >= 0) {
        w[k] = rel(w[k], at + k, target);
    }
    return (uint32_t *) code_page_add(cp, w, n * sizeof(*w), 0);
}

static void expect_value(const char *name, void *f, long x, long x1, long want)
{
    long got = ((fn6_t) f)(x, x1, 0, 0, 0, 0);
    CHECK_MSG(got == want, "%s: the target itself gives %ld, not %ld (test encoding?)", name,
              got, want);
}

/* A target in a guarded page: patch, guard (the patch write's mprotect drops PROT_BTI), call. */
static void check_guarded(const char *name, void *f, size_t page, long want)
{
    uintptr_t first = (uintptr_t) f & ~(uintptr_t) (page - 1);
    int rc = patcher->patch_address((uintptr_t) f, (uintptr_t) intercept);
    CHECK_MSG(OPAL_SUCCESS == rc, "%s: patch_address returned %d", name, rc);
    if (OPAL_SUCCESS != rc) {
        return;
    }
    chain = (fn6_t) mca_patcher_base_chain_of(patcher, (uintptr_t) f);
    CHECK(0 == mprotect((void *) first, page, PROT_READ | PROT_EXEC | PROT_BTI));
    intercepted = 0;
    long got = ((fn6_t) f)(7, 0, 0, 0, 0, 0);
    CHECK_MSG(got == want && 1 == intercepted, "%s: got %ld (want %ld), intercepted %d", name,
              got, want, intercepted);
    mca_patcher_base_restore_patches(patcher, NULL, NULL);
}

/*
 * A b to a target 100 MiB below it, with the trampoline certainly more than
 * 128 MiB from that target: in a 512 MiB reservation whose only hole within
 * b's reach of the function is 95..113 MiB above it.  The module's hints
 * at 96 and 112 MiB above are there (and whatever the kernel gives for a
 * hint that is taken is either in the hole or refused as too far).  To a
 * bti c target in a guarded page the trampoline goes through x16; to an
 * ordinary instruction it declines (a br there would fault).
 */
static void far_cases(size_t page)
{
    const size_t mib = 1 << 20;
    unsigned char *r = mmap(NULL, 512 * mib, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                            -1, 0);
    CHECK(MAP_FAILED != r);
    if (MAP_FAILED == r) {
        return;
    }
    unsigned char *f = (unsigned char *) (((uintptr_t) r + 256 * mib) & ~(uintptr_t) (page - 1));
    unsigned char *t = f - 100 * mib;
    CHECK(0 == munmap(f + 95 * mib, 18 * mib));
    CHECK(f == mmap(f, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0));
    CHECK(t == mmap(t, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0));
    const uint32_t pad_target[] = {BTI_C, 0x91001400 /* add x0, x0, #5 */, RET};
    const uint32_t plain_target[] = {0x91001800 /* add x0, x0, #6 */, RET};
    memcpy(t, pad_target, sizeof(pad_target));
    memcpy(t + 64, plain_target, sizeof(plain_target));
    uint32_t *to_pad = (uint32_t *) f, *to_plain = (uint32_t *) (f + 64);
    to_pad[0] = enc_b(0x14000000u, to_pad, t);
    to_plain[0] = enc_b(0x14000000u, to_plain, t + 64);
    __builtin___clear_cache((char *) f, (char *) f + page);
    __builtin___clear_cache((char *) t, (char *) t + page);
    CHECK(0 == mprotect(f, page, PROT_READ | PROT_EXEC));
    CHECK(0 == mprotect(t, page, PROT_READ | PROT_EXEC | PROT_BTI));

    const long one[][6] = {{7, 0, 0, 0, 0, 0}};
    check_patch("b beyond the trampoline's reach, to bti c", to_pad, one, 1, 0);
    if (OPAL_SUCCESS == patcher->patch_address((uintptr_t) to_pad, (uintptr_t) intercept)) {
        uintptr_t tramp = mca_patcher_base_chain_of(patcher, (uintptr_t) to_pad);
        CHECK_MSG(tramp - (uintptr_t) t >= 128 * mib,
                  "the trampoline is %lu MiB from the far target: the far path was not taken",
                  (unsigned long) ((tramp - (uintptr_t) t) / mib));
        mca_patcher_base_restore_patches(patcher, NULL, NULL);
    }
    check_decline("b beyond the trampoline's reach, to no landing pad", to_plain,
                  "not a BTI landing pad: instruction at +0");
    munmap(r, 512 * mib);
}

/*
 * An intercept that counts and tail-calls the chain touching no register
 * but x16, x17 and memory (not the flags): for the targets that a C
 * intercept could not call, whose entry reads the flags (b.cond) or
 * discards the LR (bl).
 */
static void *place_tail_intercept(code_page_t *cp)
{
    uint32_t w[12] = {0x58000110 /* ldr x16, &intercepted */, 0xb9400211 /* ldr w17, [x16] */,
                      0x11000631 /* add w17, w17, #1 */,    0xb9000211 /* str w17, [x16] */,
                      0x580000d0 /* ldr x16, &chain */,     0xf9400210 /* ldr x16, [x16] */,
                      0xd61f0200 /* br x16 */};
    const uintptr_t lits[2] = {(uintptr_t) &intercepted, (uintptr_t) &chain};
    memcpy(w + 8, lits, sizeof(lits));
    return code_page_add(cp, w, sizeof(w), 0);
}

/* Place the cases on cp, seal it, patch each (base: test_fn_plus42, placed already). */
static void reloc_arch_cases(code_page_t *cp, unsigned char *base)
{
    const size_t page = (size_t) sysconf(_SC_PAGESIZE);
    unsigned char *k = cp->base + K_OFFSET;
    const int32_t k32 = K32, kneg = KNEG;
    const int64_t k64 = K64, kq[2] = {1, KQ_HIGH};
    memcpy(k, &k32, sizeof(k32));
    memcpy(k + 8, &k64, sizeof(k64));
    memcpy(k + 16, kq, sizeof(kq));
    memcpy(k + 32, &kneg, sizeof(kneg));

    void *mmapl = code_page_add(cp, test_fn_mmap_like, sizeof(test_fn_mmap_like), 0);
    uint32_t nop_first[] = {NOP, 0x9100a800 /* add x0, x0, #42 */, RET};
    void *nopf = place(cp, nop_first, 3, -1, NULL, NULL);

    /* PC-relative address and literal loads: x + the constant. */
    uint32_t adrp_w[] = {1 /* adrp x1 */, 0xb9400021 | ((K_OFFSET & 0xfff) / 4) << 10, ADD_X0_X1,
                         RET}; /* ldr w1, [x1, #lo12] */
    uint32_t *adrp = (uint32_t *) code_page_next(cp, 0);
    adrp_w[0] = enc_adr(true, 1, adrp, k);
    place(cp, adrp_w, 4, -1, NULL, NULL);
    uint32_t adr_w[] = {1 /* adr x1 */, 0xb9400021 /* ldr w1, [x1] */, ADD_X0_X1, RET};
    uint32_t *adr = (uint32_t *) code_page_next(cp, 0);
    adr_w[0] = enc_adr(false, 1, adr, k);
    place(cp, adr_w, 4, -1, NULL, NULL);
    uint32_t ldr_w[] = {0x18000001 /* ldr w1, K */, ADD_X0_X1, RET};
    void *ldrw = place(cp, ldr_w, 3, 0, enc_rel19, k);
    uint32_t ldr_x[] = {0x58000001 /* ldr x1, K64 */, ADD_X0_X1, RET};
    void *ldrx = place(cp, ldr_x, 3, 0, enc_rel19, k + 8);
    uint32_t ldrsw_x[] = {0x98000001 /* ldrsw x1, KNEG */, ADD_X0_X1, RET};
    void *ldrsw = place(cp, ldrsw_x, 3, 0, enc_rel19, k + 32);
    uint32_t ldr_s[] = {0x1c000001 /* ldr s1, K */, 0x1e260021 /* fmov w1, s1 */, ADD_X0_X1, RET};
    void *ldrs = place(cp, ldr_s, 4, 0, enc_rel19, k);
    uint32_t ldr_d[] = {0x5c000001 /* ldr d1, K64 */, 0x9e660021 /* fmov x1, d1 */, ADD_X0_X1, RET};
    void *ldrd = place(cp, ldr_d, 4, 0, enc_rel19, k + 8);
    uint32_t ldr_q[] = {0x9c000001 /* ldr q1, KQ */, 0x4e183c21 /* mov x1, v1.d[1] */, ADD_X0_X1,
                        RET};
    void *ldrq = place(cp, ldr_q, 4, 0, enc_rel19, k + 16);
    uint32_t prfm_w[] = {0xd8000000 /* prfm pldl1keep, K */, 0x9100a800, RET};
    void *prfm = place(cp, prfm_w, 3, 0, enc_rel19, k);

    /* Branches: x + 5 by b; x1 decides x + 1 or x + 2 for the conditional ones. */
    uint32_t b_w[] = {0x14000002 /* b +8 */, 0 /* udf */, 0x91001400 /* add x0, x0, #5 */, RET};
    void *b = place(cp, b_w, 4, -1, NULL, NULL);
#define TAKEN_PLUS2(first) {(first), 0x91000400 /* add #1 */, RET, 0x91000800 /* add #2 */, RET}
    uint32_t cbz_w[] = TAKEN_PLUS2(0xb4000061 /* cbz x1, +12 */);
    void *cbz = place(cp, cbz_w, 5, -1, NULL, NULL);
    uint32_t cbnz_w[] = TAKEN_PLUS2(0x35000061 /* cbnz w1, +12 */);
    void *cbnz = place(cp, cbnz_w, 5, -1, NULL, NULL);
    uint32_t tbnz_w[] = TAKEN_PLUS2(0xb7400061 /* tbnz x1, #40, +12 */);
    void *tbnz = place(cp, tbnz_w, 5, -1, NULL, NULL);
    uint32_t tbz_w[] = TAKEN_PLUS2(0x36180061 /* tbz w1, #3, +12 */);
    void *tbz = place(cp, tbz_w, 5, -1, NULL, NULL);
    /* b.ne at the patch point: the flags come from a stub that tail-calls it. */
    void *tail_icpt = place_tail_intercept(cp);
    uint32_t bne_w[] = TAKEN_PLUS2(0x54000061 /* b.ne +12 */);
    void *bne = place(cp, bne_w, 5, -1, NULL, NULL);
    uint32_t bne_stub_w[] = {0xf100003f /* cmp x1, #0 */, 0x14000000 /* b bne */};
    void *bne_stub = place(cp, bne_stub_w, 2, 1, enc_b, bne);
    /*
     * bl at the patch point: the callee adds 11, and 1 more only if its LR
     * is the original return address.  The bl discards the LR: the stub
     * keeps its own in its frame and has the function return through x19.
     */
    uint32_t *callee = (uint32_t *) code_page_next(cp, 0);
    uint32_t *bl = callee + 8;
    uint32_t callee_w[] = {1 /* adr x10, bl + 4 */, 0xeb0a03df /* cmp x30, x10 */,
                           0x9a801400 /* cinc x0, x0, eq */, 0x91002c00 /* add x0, x0, #11 */, RET};
    callee_w[0] = enc_adr(false, 10, callee, bl + 1);
    place(cp, callee_w, 5, -1, NULL, NULL);
    uint32_t bl_w[] = {0x94000000 /* bl callee */, 0xd61f0260 /* br x19 */};
    CHECK(bl == place(cp, bl_w, 2, 0, enc_b, callee));
    uint32_t bl_stub_w[] = {0xa9bf7bf3 /* stp x19, x30, [sp, #-16]! */, 0x10000053 /* adr x19, +8 */,
                            0x14000000 /* b bl */, 0xa8c17bf3 /* ldp x19, x30, [sp], #16 */, RET};
    void *bl_stub = place(cp, bl_stub_w, 5, 2, enc_b, bl);
    /* Another patcher's b at the entry, to base. */
    uint32_t other_w[] = {0x14000000};
    void *other = place(cp, other_w, 1, 0, enc_b, base);

    /* Landing pads and return address signing at the entry: x + 42. */
#define FRAMED(sign, auth) {(sign), 0xa9bf7bfd /* stp x29, x30, [sp, #-16]! */, \
                            0x910003fd /* mov x29, sp */, 0x9100a800 /* add x0, x0, #42 */, \
                            0xa8c17bfd /* ldp x29, x30, [sp], #16 */, (auth), RET}
    uint32_t pacia_w[] = FRAMED(PACIASP, AUTIASP);
    void *pacia = place(cp, pacia_w, 7, -1, NULL, NULL);
    uint32_t pacib_w[] = FRAMED(PACIBSP, AUTIBSP);
    void *pacib = place(cp, pacib_w, 7, -1, NULL, NULL);
    uint32_t bti_w[] = {BTI_C, 0x9100a800, RET};
    void *bti = place(cp, bti_w, 3, -1, NULL, NULL);
    uint32_t bti_pac_w[8] = {BTI_C};
    memcpy(bti_pac_w + 1, pacia_w, sizeof(pacia_w));
    void *bti_pac = place(cp, bti_pac_w, 8, -1, NULL, NULL);
    /* paciasp, then an adrp at the patch point: x + K32. */
    uint32_t pac_adrp_w[] = {PACIASP, 1, 0xb9400021 | ((K_OFFSET & 0xfff) / 4) << 10, ADD_X0_X1,
                             AUTIASP, RET};
    uint32_t *pac_adrp = (uint32_t *) code_page_next(cp, 0);
    pac_adrp_w[1] = enc_adr(true, 1, pac_adrp + 1, k);
    place(cp, pac_adrp_w, 6, -1, NULL, NULL);

    /* Declines. */
    uint32_t ret_w[] = {RET}, br_w[] = {0xd61f0200 /* br x16 */}, brk_w[] = {0xd4200000, RET};
    uint32_t udf_w[] = {0, RET}, unknown_w[] = {0x55000000, RET};
    uint32_t self_w[] = {0x18000001 /* ldr w1, . */, RET};
    void *d_ret = place(cp, ret_w, 1, -1, NULL, NULL), *d_br = place(cp, br_w, 1, -1, NULL, NULL);
    void *d_brk = place(cp, brk_w, 2, -1, NULL, NULL), *d_udf = place(cp, udf_w, 2, -1, NULL, NULL);
    void *d_unknown = place(cp, unknown_w, 2, -1, NULL, NULL);
    void *d_self = place(cp, self_w, 2, -1, NULL, NULL);
    CHECK((unsigned char *) cp->base + cp->used <= k);
    code_page_seal(cp);

    /* A guarded page (PROT_BTI): its target called indirectly lands on bti c. */
    code_page_t guarded;
    code_page_init(&guarded);
    void *g_bti = code_page_add(&guarded, bti_w, sizeof(bti_w), 0);
    void *g_pac = code_page_add(&guarded, pacia_w, sizeof(pacia_w), 0);
    code_page_seal(&guarded);

    const long one[][6] = {{7, 0, 0, 0, 0, 0}};
    const long two[][6] = {{7, 0, 0, 0, 0, 0}, {7, 0, 0, 0, 0, 1}};
    const long x1[][6] = {{7, 0, 0, 0, 0, 0}, {7, 1, 0, 0, 0, 0}};
    const long bit40[][6] = {{7, 1L << 40, 0, 0, 0, 0}, {7, 1, 0, 0, 0, 0}};
    const long bit3[][6] = {{7, 8, 0, 0, 0, 0}, {7, 0, 0, 0, 0, 0}};

    expect_value("adrp", adrp, 7, 0, 7 + K32);
    expect_value("ldrsw", ldrsw, 7, 0, 7 + KNEG);
    expect_value("ldr q", ldrq, 7, 0, 7 + KQ_HIGH);
    expect_value("bl", bl_stub, 7, 0, 7 + 12);
    expect_value("b.ne", bne_stub, 7, 1, 7 + 2);

    check_patch("add (munmap-like)", base, one, 1, 0);
    check_patch("tst; b.ne (mmap-like)", mmapl, two, 2, 0);
    check_patch("nop first (glibc's munmap, madvise)", nopf, one, 1, 0);
    check_patch("adrp", adrp, one, 1, 0);
    check_patch("adr", adr, one, 1, 0);
    check_patch("ldr w literal", ldrw, one, 1, 0);
    check_patch("ldr x literal", ldrx, one, 1, 0);
    check_patch("ldrsw literal", ldrsw, one, 1, 0);
    check_patch("ldr s literal", ldrs, one, 1, 0);
    check_patch("ldr d literal", ldrd, one, 1, 0);
    check_patch("ldr q literal", ldrq, one, 1, 0);
    check_patch("prfm literal", prfm, one, 1, 0);
    check_patch("b", b, one, 1, 0);
    check_patch("cbz", cbz, x1, 2, 0);
    check_patch("cbnz", cbnz, x1, 2, 0);
    check_patch("tbnz bit 40", tbnz, bit40, 2, 0);
    check_patch("tbz bit 3", tbz, bit3, 2, 0);
    check_patch_via("b.ne", bne, bne_stub, tail_icpt, x1, 2, 0);
    check_patch_via("bl (the original return address)", bl, bl_stub, tail_icpt, one, 1, 0);
    check_patch("another patcher's b", other, one, 1, 0);
    check_patch("paciasp first", pacia, one, 1, 4);
    check_patch("pacibsp first", pacib, one, 1, 4);
    check_patch("bti c first", bti, one, 1, 4);
    check_patch("bti c, paciasp first", bti_pac, one, 1, 8);
    check_patch("paciasp, then adrp", pac_adrp, one, 1, 4);
    check_guarded("bti c first, guarded page", g_bti, page, 7 + 42);
    check_guarded("paciasp first, guarded page", g_pac, page, 7 + 42);
    far_cases(page);

    check_decline("ret", d_ret, "register branch (ret) at the patch point: instruction at +0 "
                                "(d65f03c0)");
    check_decline("br x16", d_br, "register branch (br)");
    check_decline("brk", d_brk, "breakpoint or exception-generating instruction");
    check_decline("udf", d_udf, "undefined or reserved encoding: instruction at +0 (00000000)");
    check_decline("unknown", d_unknown, "does not know (it may be PC-relative): instruction at +0 "
                                        "(55000000)");
    check_decline("a literal load of itself", d_self, "load of the word being patched");
}

#endif
