/*
 * The ppc64le (ELFv2) cases of overwrite_reloc_test.c (included there,
 * after its check_patch and check_decline): the local entry behind each
 * form of the global entry's TOC setup, a target reading through its TOC
 * and one called by code with no TOC restore after its bl (r2 must survive
 * the intercept), b near and far, bc taken and not, bl, addpcis, Power10
 * prefixed instructions (run where the CPU has them, ISA 3.1; elsewhere
 * their trampoline is read), C functions with and without a TOC, and the
 * declines.
 */
#ifndef OVERWRITE_RELOC_PPC64LE_H
#define OVERWRITE_RELOC_PPC64LE_H

#include <sys/auxv.h>

#ifndef PPC_FEATURE2_ARCH_3_1
#    define PPC_FEATURE2_ARCH_3_1 0x00040000 /* Power10 */
#endif

/* A 64-bit constant at a fixed spot of the code page, and a TOC pointer past it. */
#define KONST_OFFSET 0x800
#define KONST        1000
#define TOC_BIAS     0x7000 /* loads through the TOC read -0x7000(r2) */

#define BLR 0x4e800020u

/* C targets: one reads a global through its TOC (a global entry that sets
 * r2), one needs no TOC (one entry point); a caller whose call to a static
 * function is a bare bl to its local entry, then reads through r2. */
static volatile long cf_global = 5;

__attribute__((noipa)) static long cf_toc_target(long x)
{
    return x * 3 + cf_global;
}

__attribute__((noipa)) static long cf_plain_target(long x)
{
    return x * 5 - 2;
}

/* noipa: no clone of it for the caller's call (which would not be the patched one). */
__attribute__((noipa)) static long cf_static_target(long x)
{
    return x * 7 + cf_global;
}

__attribute__((noipa)) static long cf_local_caller(long x)
{
    return cf_static_target(x) + cf_global;
}

static uint32_t *place_words(code_page_t *cp, const uint32_t *w, size_t n)
{
    return (uint32_t *) code_page_add(cp, w, n * sizeof(*w), 0);
}

/* b/bl (link) from 'at' to 'to', which must reach. */
static uint32_t branch(uintptr_t at, uintptr_t to, bool link)
{
    return 0x48000000u | ((uint32_t) (to - at) & 0x03fffffc) | link;
}

static int64_t sext(uint64_t v, unsigned bits)
{
    return (int64_t) (v << (64 - bits)) >> (64 - bits);
}

/* Where the b or bl word w at 'at' goes. */
static uintptr_t branch_target(uintptr_t at, uint32_t w)
{
    return at + (uintptr_t) sext(w & 0x03fffffc, 26);
}

/* The value of "lis; ori; sldi 32; oris; ori" at w. */
static uint64_t loaded(const uint32_t *w)
{
    return (uint64_t) (w[0] & 0xffff) << 48 | (uint64_t) (w[1] & 0xffff) << 32 |
           (uint64_t) (w[3] & 0xffff) << 16 | (w[4] & 0xffff);
}

/* The TOC setup of a global entry at f for toc: addis r2,r12 (@ha); addi r2,r2 (@l). */
static void toc_setup(uint32_t *w, uintptr_t f, uintptr_t toc)
{
    const uintptr_t off = toc - f;
    w[0] = 0x3c4c0000u | (uint32_t) (((off + 0x8000) >> 16) & 0xffff);
    w[1] = 0x38420000u | (uint32_t) (off & 0xffff);
}

/* x + KONST, read through the TOC by its first local instruction. */
static unsigned char *place_toc_load(code_page_t *cp)
{
    const uintptr_t f = (uintptr_t) code_page_next(cp, 0);
    uint32_t w[] = {0, 0, 0xe9229000 /* ld r9,-0x7000(r2) */, 0x7c634a14 /* add r3,r3,r9 */, BLR};
    toc_setup(w, f, (uintptr_t) cp->base + KONST_OFFSET + TOC_BIAS);
    return (unsigned char *) place_words(cp, w, sizeof(w) / sizeof(w[0]));
}

/* Returns its TOC pointer (mr r3,r2 at the local entry), set by "lis r2; addi r2,r2". */
static unsigned char *place_toc_lis(code_page_t *cp)
{
    static const uint32_t w[] = {0x3c401234 /* lis r2,0x1234 */, 0x38425678 /* addi r2,r2,0x5678 */,
                                 0x7c431378 /* mr r3,r2 */, BLR};
    return (unsigned char *) place_words(cp, w, sizeof(w) / sizeof(w[0]));
}

/* The same with "ld r2,-8(r12); add r2,r2,r12", the offset in the doubleword before it. */
static unsigned char *place_toc_ld(code_page_t *cp)
{
    uint32_t w[] = {0x00100000,
                    0 /* .quad 0x100000 */,
                    0xe84cfff8 /* ld r2,-8(r12) */,
                    0x7c426214 /* add r2,r2,r12 */,
                    0x7c431378 /* mr r3,r2 */,
                    BLR};
    return (unsigned char *) place_words(cp, w, sizeof(w) / sizeof(w[0])) + 8;
}

/*
 * Calls the local entry of place_toc_load's target as libc calls its own
 * munmap: r2 set, "bl", no TOC restore after it, then a load through r2.
 * (x + KONST) + KONST, right only if r2 came back intact.
 */
static unsigned char *place_local_caller(code_page_t *cp, const unsigned char *target)
{
    const uintptr_t f = (uintptr_t) code_page_next(cp, 0);
    uint32_t w[] = {0,          0, 0x7c0802a6, /* mflr r0 */
                    0xf8010010,                /* std r0,16(r1) */
                    0xf821ffe1,                /* stdu r1,-32(r1) */
                    0,                         /* bl target's local entry */
                    0xe9229000,                /* ld r9,-0x7000(r2) */
                    0x7c634a14,                /* add r3,r3,r9 */
                    0x38210020,                /* addi r1,r1,32 */
                    0xe8010010,                /* ld r0,16(r1) */
                    0x7c0803a6,                /* mtlr r0 */
                    BLR};
    toc_setup(w, f, (uintptr_t) cp->base + KONST_OFFSET + TOC_BIAS);
    w[5] = branch(f + 20, (uintptr_t) target + 8, true);
    return (unsigned char *) place_words(cp, w, sizeof(w) / sizeof(w[0]));
}

/* x + KONST, the constant's address from addpcis (lnia). */
static unsigned char *place_lnia(code_page_t *cp)
{
    const uintptr_t f = (uintptr_t) code_page_next(cp, 0);
    const uint32_t d = (uint32_t) ((uintptr_t) cp->base + KONST_OFFSET - (f + 4));
    uint32_t w[] = {0x4d200004 /* lnia r9 */, 0xe9490000 | (d & 0xfffc) /* ld r10,d(r9) */,
                    0x7c635214 /* add r3,r3,r10 */, BLR};
    return (unsigned char *) place_words(cp, w, sizeof(w) / sizeof(w[0]));
}

/* x + KONST with a Power10 pld r9,konst@pcrel (prefix, suffix). */
static unsigned char *place_pld(code_page_t *cp)
{
    const uintptr_t f = (uintptr_t) code_page_next(cp, 0);
    const uint64_t d = (uint64_t) ((uintptr_t) cp->base + KONST_OFFSET - f);
    uint32_t w[] = {0x04100000 | (uint32_t) (d >> 16 & 0x3ffff),
                    0xe5200000 | (uint32_t) (d & 0xffff), 0x7c634a14 /* add r3,r3,r9 */, BLR};
    return (unsigned char *) place_words(cp, w, sizeof(w) / sizeof(w[0]));
}

/* Whether the CPU runs Power ISA 3.1 (prefixed) instructions. */
static bool has_isa_3_1(void)
{
    return 0 != (getauxval(AT_HWCAP2) & PPC_FEATURE2_ARCH_3_1);
}

/* What a trampoline check is given: its words, the patched function and its original words. */
typedef void (*tramp_check_fn_t)(const char *name, const uint32_t *t, uintptr_t f,
                                 const uint32_t *orig);

/*
 * Patch f and hand its trampoline's words (the chain) to 'check', then
 * restore: the relocation of instructions that cannot run here, or whose
 * effect a call cannot show.
 */
static void check_trampoline(const char *name, unsigned char *f, tramp_check_fn_t check)
{
    code_state_t before;
    uint32_t orig[2];
    snapshot((uintptr_t) f, &before);
    memcpy(orig, before.snap, sizeof(orig));
    int rc = patcher->patch_address((uintptr_t) f, (uintptr_t) intercept);
    CHECK_MSG(OPAL_SUCCESS == rc, "%s: patch_address returned %d", name, rc);
    if (OPAL_SUCCESS == rc) {
        check(name, (const uint32_t *) mca_patcher_base_chain_of(patcher, (uintptr_t) f),
              (uintptr_t) f, orig);
        mca_patcher_base_restore_patches(patcher, NULL, NULL);
    }
    check_unchanged(name, (uintptr_t) f, &before);
}

/* pld: both words copied, the displacement now from the trampoline; b back after the suffix. */
static void pld_copied(const char *name, const uint32_t *t, uintptr_t f, const uint32_t *want)
{
    const uintptr_t tt = (uintptr_t) t;
    const int64_t d = sext((uint64_t) (t[0] & 0x3ffff) << 16 | (t[1] & 0xffff), 34);
    const int64_t d0 = sext((uint64_t) (want[0] & 0x3ffff) << 16 | (want[1] & 0xffff), 34);
    CHECK_MSG((t[0] & ~0x3ffffu) == (want[0] & ~0x3ffffu) &&
                  (t[1] & ~0xffffu) == (want[1] & ~0xffffu) &&
                  tt + (uintptr_t) d == f + (uintptr_t) d0,
              "%s: the trampoline's copy reads %#lx, the original %#lx", name,
              (unsigned long) (tt + (uintptr_t) d), (unsigned long) (f + (uintptr_t) d0));
    CHECK_MSG(0x48000000u == (t[2] & 0xfc000003) && branch_target(tt + 8, t[2]) == f + 8,
              "%s: no b back to the instruction after the suffix", name);
    CHECK_MSG(tt / 64 == (tt + 7) / 64, "%s: the copy crosses a 64-byte boundary", name);
}

/* paddi (not PC-relative): both words as they were. */
static void paddi_copied(const char *name, const uint32_t *t, uintptr_t f, const uint32_t *orig)
{
    CHECK_MSG(0 == memcmp(t, orig, 8) && branch_target((uintptr_t) t + 8, t[2]) == f + 8,
              "%s: not copied as is, with a b back after it", name);
}

/* The bl's target, from the trampoline: near (bl), or far (r12; mtctr; bctrl); then b back. */
static uintptr_t bl_target;

static void bl_relocated(const char *name, const uint32_t *t, uintptr_t f, const uint32_t *orig)
{
    (void) orig;
    const uintptr_t tt = (uintptr_t) t;
    if (0x48000001u == (t[0] & 0xfc000003)) {
        CHECK_MSG(branch_target(tt, t[0]) == bl_target && branch_target(tt + 4, t[1]) == f + 4,
                  "%s: the near bl goes to %#lx, not %#lx, or no b back", name,
                  (unsigned long) branch_target(tt, t[0]), (unsigned long) bl_target);
        return;
    }
    CHECK_MSG(0x3d800000u == (t[0] & 0xffff0000) && loaded(t) == bl_target && 0x7d8903a6u == t[5] &&
                  0x4e800421u == t[6] && branch_target(tt + 28, t[7]) == f + 4,
              "%s: neither bl nor r12 = %#lx; mtctr r12; bctrl; b back", name,
              (unsigned long) bl_target);
}

/* The trampoline of the far b case, read after its check_patch. */
static void far_b_relocated(const char *name, const uint32_t *t, uintptr_t f, const uint32_t *orig)
{
    (void) orig;
    CHECK_MSG(0x3d800000u == (t[0] & 0xffff0000) && loaded(t) == bl_target && 0x7d8903a6u == t[5] &&
                  0x4e800420u == t[6],
              "%s: the far b is not r12 = %#lx; mtctr r12; bctr (trampoline %p, %ld MiB from it)",
              name, (unsigned long) bl_target, (const void *) t,
              (long) (((intptr_t) bl_target - (intptr_t) t) >> 20));
    (void) f;
}

/*
 * b and bl at a patch point 32 MiB - 64 KiB below their target: the
 * module maps the trampoline below the patch point first (nothing else is
 * mapped there: the test made the hole), out of the b's +-32 MiB reach of
 * the target, so both go through r12 and CTR.
 */
static void check_far_branches(void)
{
    const size_t page = (size_t) sysconf(_SC_PAGESIZE), span = (size_t) 34 << 20;
    unsigned char *r = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
                            0);
    CHECK(MAP_FAILED != r);
    if (MAP_FAILED == r) {
        return;
    }
    unsigned char *lo = (unsigned char *) (((uintptr_t) r + ((size_t) 1 << 20) + page - 1) &
                                           ~(uintptr_t) (page - 1));
    unsigned char *hi = lo + ((size_t) 32 << 20) - 65536;
    CHECK(lo ==
          mmap(lo, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0));
    CHECK(hi ==
          mmap(hi, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0));
    munmap(r, (size_t) (lo - r));
    munmap(lo + page, (size_t) (hi - lo - page));
    munmap(hi + page, (size_t) (r + span - hi - page));

    const uint32_t plus100[] = {0x38630064 /* addi r3,r3,100 */, BLR};
    memcpy(hi, plus100, sizeof(plus100));
    const uint32_t far_b[] = {branch((uintptr_t) lo, (uintptr_t) hi, false)};
    const uint32_t far_bl[] = {branch((uintptr_t) lo + 16, (uintptr_t) hi, true), BLR};
    memcpy(lo, far_b, sizeof(far_b));
    memcpy(lo + 16, far_bl, sizeof(far_bl));
    mca_patcher_overwrite_icache_sync((uintptr_t) lo, page);
    mca_patcher_overwrite_icache_sync((uintptr_t) hi, page);
    CHECK(0 == mprotect(lo, page, PROT_READ | PROT_EXEC) &&
          0 == mprotect(hi, page, PROT_READ | PROT_EXEC));

    const long one[][6] = {{7, 0, 0, 0, 0, 0}};
    bl_target = (uintptr_t) hi;
    check_patch("b to a function 32 MiB away, at a page's start", lo, one, 1, 0);
    check_trampoline("b to a function 32 MiB away: through r12 and CTR", lo, far_b_relocated);
    check_trampoline("bl to a function 32 MiB away", lo + 16, bl_relocated);
    munmap(lo, page);
    munmap(hi, page);
}

/* Patch f, then call 'caller', which calls f: the intercept runs once, the result is the
 * original's. */
static void check_called_by(const char *name, void *f, void *caller)
{
    fn6_t c = (fn6_t) caller;
    const long expect = c(7, 0, 0, 0, 0, 0);
    int rc = patcher->patch_address_chain((uintptr_t) f, (uintptr_t) intercept,
                                          (uintptr_t *) &chain);
    CHECK_MSG(OPAL_SUCCESS == rc, "%s: patch_address_chain returned %d", name, rc);
    if (OPAL_SUCCESS != rc) {
        return;
    }
    intercepted = 0;
    const long got = c(7, 0, 0, 0, 0, 0);
    CHECK_MSG(1 == intercepted && got == expect,
              "%s: intercepted %d times, got %ld, the original gives %ld (r2 not kept?)", name,
              intercepted, got, expect);
    mca_patcher_base_restore_patches(patcher, NULL, NULL);
}

/* Place the cases on cp, seal it, patch each (base: test_fn_plus42, placed already). */
static void reloc_arch_cases(code_page_t *cp, unsigned char *base)
{
    const int64_t konst = KONST;
    memcpy(cp->base + KONST_OFFSET, &konst, sizeof(konst));
    cp->used = KONST_OFFSET + sizeof(konst);

    unsigned char *mmapl = code_page_add(cp, test_fn_mmap_like, sizeof(test_fn_mmap_like), 0);
    unsigned char *toc_load = place_toc_load(cp);
    unsigned char *toc_lis = place_toc_lis(cp);
    unsigned char *toc_ld = place_toc_ld(cp);
    unsigned char *local_caller = place_local_caller(cp, toc_load);
    const uint32_t b_near[] = {0x48000008 /* b +8 */, 0x7fe00008 /* trap */,
                               0x38630007 /* addi r3,r3,7 */, BLR};
    unsigned char *bnear = (unsigned char *) place_words(cp, b_near, 4);
    const uint32_t bdnz[] = {0x4200000c /* bdnz +12 */, 0x38630001, BLR, 0x38630002, BLR};
    unsigned char *bdnz_fn = (unsigned char *) place_words(cp, bdnz, 5);
    const uint32_t bdz[] = {0x4240000c /* bdz +12 */, 0x38630001, BLR, 0x38630002, BLR};
    unsigned char *bdz_fn = (unsigned char *) place_words(cp, bdz, 5);
    const uint32_t bl_near[] = {branch((uintptr_t) code_page_next(cp, 0), (uintptr_t) base, true),
                                BLR};
    unsigned char *bl_fn = (unsigned char *) place_words(cp, bl_near, 2);
    unsigned char *lnia = place_lnia(cp);
    unsigned char *pld = place_pld(cp);
    const uint32_t paddi[] = {0x06000001, 0x386386a0 /* paddi r3,r3,100000 */, BLR};
    unsigned char *paddi_fn = (unsigned char *) place_words(cp, paddi, 3);
    /* Another patcher's entry jump: b base. */
    const uint32_t other[] = {branch((uintptr_t) code_page_next(cp, 0), (uintptr_t) base, false)};
    unsigned char *other_b = (unsigned char *) place_words(cp, other, 1);

    /* Declined, the reason naming the instruction; each followed by a blr. */
    static const struct {
        const char *name;
        uint32_t insn;
        const char *says;
    } declines[] = {
        {"blr", BLR, "a return (blr/bclr): instruction at +0 (4e800020)"},
        {"trap", 0x7fe00008,
         "a trap (tw/td: a debugger's breakpoint?): instruction at +0 (7fe00008)"},
        {"twi 0,r0,0", 0x0c000000,
         "a trap (tdi/twi: a debugger's breakpoint?): instruction at +0 (0c000000)"},
        {"bcl 20,31,$+4", 0x429f0005,
         "bcl (a conditional call, or bcl 20,31 reading the PC): instruction at +0"},
        {"bl $+4", 0x48000005,
         "bl to the next instruction (reads the PC): instruction at +0 (48000005)"},
        {"b .", 0x48000000, "a branch back to the patched word: instruction at +0 (48000000)"},
        {"primary opcode 0", 0,
         "an illegal instruction (primary opcode 0): instruction at +0 (00000000)"},
    };
    enum { NDECLINES = sizeof(declines) / sizeof(declines[0]) };
    unsigned char *declined[NDECLINES];
    for (int i = 0; i < NDECLINES; i++) {
        const uint32_t w[] = {declines[i].insn, BLR};
        declined[i] = (unsigned char *) place_words(cp, w, 2);
    }
    code_page_seal(cp);

    const long one[][6] = {{7, 0, 0, 0, 0, 0}};
    const long two[][6] = {{7, 0, 0, 0, 0, 0}, {7, 0, 0, 0, 0, 1}};
    check_patch("addi (munmap-like), at a page's start", base, one, 1, 0);
    check_patch("mmap-like: andi. first", mmapl, two, 2, 0);
    check_patch("the TOC read by the first local instruction (addis r2,r12 entry)", toc_load, one,
                1, 8);
    check_patch("the TOC set by lis r2; addi r2,r2", toc_lis, one, 1, 8);
    check_patch("the TOC set by ld r2,-8(r12); add r2,r2,r12", toc_ld, one, 1, 8);
    check_called_by("called by a bl with no TOC restore after it", toc_load, local_caller);
    check_patch("b +8", bnear, one, 1, 0);
    check_patch("bdnz (taken)", bdnz_fn, one, 1, 0);
    check_patch("bdz (not taken)", bdz_fn, one, 1, 0);
    bl_target = (uintptr_t) base;
    check_trampoline("bl to a near function", bl_fn, bl_relocated);
    check_patch("addpcis (lnia)", lnia, one, 1, 0);
    if (has_isa_3_1()) {
        check_patch("pld, PC-relative (Power10 prefixed)", pld, one, 1, 0);
        check_patch("paddi (Power10 prefixed, not PC-relative)", paddi_fn, one, 1, 0);
    } else {
        printf("note: no Power ISA 3.1 here: the prefixed cases' trampolines are read, not run\n");
    }
    check_trampoline("pld, PC-relative (Power10 prefixed)", pld, pld_copied);
    check_trampoline("paddi (Power10 prefixed)", paddi_fn, paddi_copied);
    check_patch("another patcher's b", other_b, one, 1, 0);
    check_far_branches();

    check_patch("C, reads a global through its TOC", (void *) cf_toc_target, one, 1, 8);
    check_patch("C, no TOC", (void *) cf_plain_target, one, 1, 0);
    /* The compiler's own bare bl (its TOC is the intercept's here, so only
     * the hand-assembled caller above can show r2 kept). */
    check_called_by("C, a static function called by a bare bl", (void *) cf_static_target,
                    (void *) cf_local_caller);

    for (int i = 0; i < NDECLINES; i++) {
        check_decline(declines[i].name, declined[i], declines[i].says);
    }
}

#endif
