/*
 * The x86-64 and i386 cases of overwrite_reloc_test.c (included there,
 * after its check_patch and check_decline): glibc-like prologues, another
 * patcher's jumps, jcc, jrcxz, call, RIP-relative (x86-64) or absolute
 * [disp32] (i386) loads, endbr64/endbr32, and glibc's i386 entries: a call
 * to a get_pc_thunk that must see its original return address, inc/dec
 * where 64-bit mode has REX; C functions compiled with -fcf-protection=full.
 */
#ifndef OVERWRITE_RELOC_X86_H
#define OVERWRITE_RELOC_X86_H

/* Used by C targets: built with -fcf-protection=full, so they begin with endbr64 (endbr32). */
__attribute__((noinline)) long cf_target(long x)
{
    __asm__ volatile("" ::: "memory");
    return x * 3 + 1;
}

__attribute__((noinline)) static long cf_static_target(long x)
{
    __asm__ volatile("" ::: "memory");
    return x * 5 - 2;
}

/* More hand-assembled targets (and the two of overwrite_test_util.h). */
#if defined(__x86_64__)
static const unsigned char jcc_rel8[] = {     /* x ? x+5 : 7 */
    0x85, 0xff,                               /* test %edi,%edi */
    0x74, 0x04,                               /* je +4 */
    0x8d, 0x47, 0x05,                         /* lea 5(%rdi),%eax */
    0xc3,                                     /* ret */
    0x8d, 0x47, 0x07,                         /* lea 7(%rdi),%eax */
    0xc3,                                     /* ret */
};
static const unsigned char jrcxz_fn[] = {     /* rcx ? x+1 : x+9 */
    0xe3, 0x04,                               /* jrcxz +4 */
    0x8d, 0x47, 0x01,                         /* lea 1(%rdi),%eax */
    0xc3,                                     /* ret */
    0x8d, 0x47, 0x09,                         /* lea 9(%rdi),%eax */
    0xc3,                                     /* ret */
};
static const unsigned char push_sub[] = {     /* x + 3, with a frame */
    0x53,                                     /* push %rbx */
    0x48, 0x83, 0xec, 0x10,                   /* sub $0x10,%rsp */
    0x8d, 0x47, 0x03,                         /* lea 3(%rdi),%eax */
    0x48, 0x83, 0xc4, 0x10,                   /* add $0x10,%rsp */
    0x5b,                                     /* pop %rbx */
    0xc3,                                     /* ret */
};
static const unsigned char endbr_fn[] = {     /* endbr64, then x + 42 */
    0xf3, 0x0f, 0x1e, 0xfa,                   /* endbr64 */
    0xb8, 0x2a, 0x00, 0x00, 0x00,             /* mov $42,%eax */
    0x01, 0xf8,                               /* add %edi,%eax */
    0xc3,                                     /* ret */
};
#else
/* i386, cdecl: the arguments on the stack, the result in eax. */
static const unsigned char jcc_rel8[] = {
    /* x ? x+5 : 7 */
    0x59,             /* pop %ecx (return address) */
    0x58,             /* pop %eax (x) */
    0x85, 0xc0,       /* test %eax,%eax */
    0x74, 0x06,       /* je +6 */
    0x50, 0x51,       /* push %eax; push %ecx */
    0x83, 0xc0, 0x05, /* add $5,%eax */
    0xc3,             /* ret */
    0x50, 0x51,       /* push %eax; push %ecx */
    0x83, 0xc0, 0x07, /* add $7,%eax */
    0xc3,             /* ret */
};
static const unsigned char jrcxz_fn[] = {
    /* the 4th argument ? x+1 : x+9 */
    0x8b, 0x4c, 0x24, 0x10, /* mov 0x10(%esp),%ecx */
    0xe3, 0x06,             /* jecxz +6 */
    0x8b, 0x44, 0x24, 0x04, /* mov 4(%esp),%eax */
    0x40,                   /* inc %eax */
    0xc3,                   /* ret */
    0x8b, 0x44, 0x24, 0x04, /* mov 4(%esp),%eax */
    0x83, 0xc0, 0x09,       /* add $9,%eax */
    0xc3,                   /* ret */
};
static const unsigned char push_sub[] = {
    /* x + 3, with a frame (madvise's shape) */
    0x53,                   /* push %ebx */
    0x83, 0xec, 0x10,       /* sub $0x10,%esp */
    0x8b, 0x44, 0x24, 0x18, /* mov 0x18(%esp),%eax */
    0x83, 0xc0, 0x03,       /* add $3,%eax */
    0x83, 0xc4, 0x10,       /* add $0x10,%esp */
    0x5b,                   /* pop %ebx */
    0xc3,                   /* ret */
};
static const unsigned char endbr_fn[] = {
    /* endbr32, then x + 42 */
    0xf3, 0x0f, 0x1e, 0xfb,       /* endbr32 */
    0xb8, 0x2a, 0x00, 0x00, 0x00, /* mov $42,%eax */
    0x03, 0x44, 0x24, 0x04,       /* add 4(%esp),%eax */
    0xc3,                         /* ret */
};
static const unsigned char munmap_like[] = {
    /* x + 42, glibc's i386 munmap entry */
    0x89, 0xda,             /* mov %ebx,%edx */
    0x8b, 0x4c, 0x24, 0x08, /* mov 8(%esp),%ecx */
    0x8b, 0x5c, 0x24, 0x04, /* mov 4(%esp),%ebx */
    0x8d, 0x43, 0x2a,       /* lea 42(%ebx),%eax */
    0x89, 0xd3,             /* mov %edx,%ebx */
    0xc3,                   /* ret */
};
#endif
static const unsigned char too_short[] = {0x31, 0xc0, 0xc3};              /* xor; ret */
static const unsigned char int3_inside[] = {0x90, 0xcc, 0x90, 0x90, 0x90, 0xc3};
static const unsigned char into_window[] = {0x90, 0x90, 0x75, 0xfd, 0x90, 0xc3}; /* jne +1 */
static const unsigned char unknown_op[] = {0x90, 0x0f, 0x0f, 0xc0, 0xb4, 0x90, 0xc3}; /* 3DNow! */
static const unsigned char jmp_short[] = {0xeb, 0x10, 0x90, 0x90, 0x90, 0xc3};
/* call *%rax (*%eax): a thread in the callee would return to +2, inside the jump. */
static const unsigned char call_inside[] = {0xff, 0xd0, 0x90, 0x90, 0x90, 0xc3};
/* PC-relative forms that are not relocated, in either mode. */
static const unsigned char xbegin[] = {0xc7, 0xf8, 0x10, 0, 0, 0, 0x90, 0xc3};
static const unsigned char jmp_rel16[] = {0x66, 0xe9, 0x10, 0, 0x90, 0x90, 0xc3};

/* A constant at a fixed spot of the code page, for the loads below. */
#define KONST_OFFSET 0x800
#define KONST        1000

/*
 * Place bytes whose rel32 at rel_at, relative to the end of those 4 bytes,
 * is made to reach target.
 */
static unsigned char *place_rel32(code_page_t *cp, unsigned char *bytes, size_t len, size_t rel_at,
                                  const void *target)
{
    unsigned char *at = code_page_next(cp, 0);
    int32_t rel = (int32_t) ((const unsigned char *) target - (at + rel_at + 4));
    memcpy(bytes + rel_at, &rel, sizeof(rel));
    return code_page_add(cp, bytes, len, 0);
}

#if defined(__x86_64__)
/* A RIP-relative load of the constant: x + 1000. */
static unsigned char *place_pc_load(code_page_t *cp)
{
    unsigned char riprel[] = {0x8b, 0x05, 0,   0, 0, 0, /* mov disp32(%rip),%eax */
                              0x01, 0xf8, 0xc3};        /* add %edi,%eax; ret */
    return place_rel32(cp, riprel, sizeof(riprel), 2, cp->base + KONST_OFFSET);
}

/* A call rel32 in the window: base(x) + 1. */
static unsigned char *place_call(code_page_t *cp, const unsigned char *base)
{
    unsigned char callfn[] = {0x48, 0x83, 0xec, 0x08,    /* sub $8,%rsp (align) */
                              0xe8, 0,    0,    0,    0, /* call base */
                              0x83, 0xc0, 0x01,          /* add $1,%eax */
                              0x48, 0x83, 0xc4, 0x08,    /* add $8,%rsp */
                              0xc3};
    return place_rel32(cp, callfn, sizeof(callfn), 5, base);
}

/* Another patcher's absolute entry jump, as UCX writes it: movabs %r11; jmp *%r11. */
static unsigned char *place_abs_jump(code_page_t *cp, const unsigned char *base)
{
    unsigned char ucx_abs[13] = {0x49, 0xbb, 0, 0, 0, 0, 0, 0, 0, 0, 0x41, 0xff, 0xe3};
    uint64_t target = (uint64_t) (uintptr_t) base;
    memcpy(ucx_abs + 2, &target, sizeof(target));
    return code_page_add(cp, ucx_abs, sizeof(ucx_abs), 0);
}
#else
/* An absolute [disp32] load of the constant (RIP-relative in 64-bit mode): x + 1000. */
static unsigned char *place_pc_load(code_page_t *cp)
{
    unsigned char absload[] = {0x8b, 0x05, 0,    0,    0, 0, /* mov disp32,%eax */
                               0x03, 0x44, 0x24, 0x04,       /* add 4(%esp),%eax */
                               0xc3};
    uint32_t addr = (uint32_t) (uintptr_t) (cp->base + KONST_OFFSET);
    memcpy(absload + 2, &addr, sizeof(addr));
    return code_page_add(cp, absload, sizeof(absload), 0);
}

/* A call rel32 in the window: base(x) + 1. */
static unsigned char *place_call(code_page_t *cp, const unsigned char *base)
{
    unsigned char callfn[] = {0xff, 0x74, 0x24, 0x04,    /* push 4(%esp) */
                              0xe8, 0,    0,    0,    0, /* call base */
                              0x83, 0xc4, 0x04,          /* add $4,%esp */
                              0x40,                      /* inc %eax */
                              0xc3};
    return place_rel32(cp, callfn, sizeof(callfn), 5, base);
}

/* Another patcher's absolute entry jump: mov $base,%eax; jmp *%eax. */
static unsigned char *place_abs_jump(code_page_t *cp, const unsigned char *base)
{
    unsigned char abs_jump[7] = {0xb8, 0, 0, 0, 0, 0xff, 0xe0};
    uint32_t target = (uint32_t) (uintptr_t) base;
    memcpy(abs_jump + 1, &target, sizeof(target));
    return code_page_add(cp, abs_jump, sizeof(abs_jump), 0);
}

/*
 * glibc's i386 brk, sbrk, mmap and mremap begin with a call to a
 * __x86.get_pc_thunk, which returns its return address, to find their
 * GOT: here the constant, at a link-time distance from that address.
 * x + 1000 only if the relocated call pushes the original return address.
 */
static unsigned char *place_thunk_call(code_page_t *cp)
{
    static const unsigned char thunk[] = {0x8b, 0x14, 0x24, 0xc3}; /* mov (%esp),%edx; ret */
    unsigned char *get_pc = code_page_add(cp, thunk, sizeof(thunk), 0);
    unsigned char fn[] = {0xe8, 0,    0,    0,    0,    /* call get_pc */
                          0x81, 0xc2, 0,    0,    0, 0, /* add $konst - next,%edx */
                          0x8b, 0x02,                   /* mov (%edx),%eax */
                          0x03, 0x44, 0x24, 0x04,       /* add 4(%esp),%eax */
                          0xc3};
    int32_t got = (int32_t) (cp->base + KONST_OFFSET - (code_page_next(cp, 0) + 5));
    memcpy(fn + 7, &got, sizeof(got));
    return place_rel32(cp, fn, sizeof(fn), 1, get_pc);
}
#endif

/* Place the cases on cp, seal it, patch each (base: test_fn_plus42, placed already). */
static void reloc_arch_cases(code_page_t *cp, unsigned char *base)
{
    unsigned char *mmapl = code_page_add(cp, test_fn_mmap_like, sizeof(test_fn_mmap_like), 0);
    unsigned char *jcc = code_page_add(cp, jcc_rel8, sizeof(jcc_rel8), 0);
    unsigned char *jrcxz = code_page_add(cp, jrcxz_fn, sizeof(jrcxz_fn), 0);
    unsigned char *frame = code_page_add(cp, push_sub, sizeof(push_sub), 0);
    unsigned char *endbr = code_page_add(cp, endbr_fn, sizeof(endbr_fn), 0);
    /* Misaligned copies: the 5 bytes straddle an 8-byte word (no single store). */
    unsigned char *base_odd = code_page_add(cp, test_fn_plus42, sizeof(test_fn_plus42), 5);

    int32_t konst = KONST;
    memcpy(cp->base + KONST_OFFSET, &konst, sizeof(konst));
    unsigned char *pc_load = place_pc_load(cp);
    unsigned char *call = place_call(cp, base);
#if defined(__i386__)
    unsigned char *munmapl = code_page_add(cp, munmap_like, sizeof(munmap_like), 0);
    unsigned char *thunk_call = place_thunk_call(cp);
#endif

    /* Another patcher's entry jumps: jmp rel32, and an absolute one. */
    unsigned char rel_jump[5] = {0xe9};
    unsigned char *other1 = place_rel32(cp, rel_jump, sizeof(rel_jump), 1, base);
    unsigned char *other2 = place_abs_jump(cp, base);

    unsigned char *d_short = code_page_add(cp, too_short, sizeof(too_short), 0);
    unsigned char *d_int3 = code_page_add(cp, int3_inside, sizeof(int3_inside), 0);
    unsigned char *d_window = code_page_add(cp, into_window, sizeof(into_window), 0);
    unsigned char *d_unknown = code_page_add(cp, unknown_op, sizeof(unknown_op), 0);
    unsigned char *d_jmp = code_page_add(cp, jmp_short, sizeof(jmp_short), 0);
    unsigned char *d_call = code_page_add(cp, call_inside, sizeof(call_inside), 0);
    unsigned char *d_xbegin = code_page_add(cp, xbegin, sizeof(xbegin), 0);
    unsigned char *d_rel16 = code_page_add(cp, jmp_rel16, sizeof(jmp_rel16), 0);
    code_page_seal(cp);

    const long one[][6] = {{7, 0, 0, 0, 0, 0}};
    const long two[][6] = {{7, 0, 0, 0, 0, 0}, {7, 0, 0, 0, 0, 1}};
    const long zero_or_not[][6] = {{0, 0, 0, 0, 0, 0}, {9, 0, 0, 0, 0, 0}};
    const long rcx[][6] = {{4, 0, 0, 0, 0, 0}, {4, 0, 0, 1, 0, 0}};

    check_patch("mov $imm,%eax (munmap-like)", base, one, 1, 0);
    check_patch("mmap-like: the 2nd instruction inside the jump", mmapl, two, 2, 0);
    check_patch("test; je rel8", jcc, zero_or_not, 2, 0);
    check_patch("jrcxz/jecxz rel8", jrcxz, rcx, 2, 0);
    check_patch("push; sub $imm,%rsp/%esp", frame, one, 1, 0);
    check_patch("endbr first", endbr, one, 1, 4);
    check_patch("misaligned mov $imm,%eax", base_odd, one, 1, 0);
    check_patch("rip-relative (x86-64) or absolute [disp32] (i386) load", pc_load, one, 1, 0);
    check_patch("call rel32", call, one, 1, 0);
#if defined(__i386__)
    check_patch("glibc's i386 munmap entry", munmapl, one, 1, 0);
    check_patch("call __x86.get_pc_thunk (the original return address)", thunk_call, one, 1, 0);
#endif
    check_patch("another patcher's jmp rel32", other1, one, 1, 0);
    check_patch("another patcher's absolute jump", other2, one, 1, 0);
    check_patch("C, -fcf-protection=full", (void *) cf_target, one, 1, 4);
    check_patch("C static, -fcf-protection=full", (void *) cf_static_target, one, 1, 4);

    check_decline("too short (ret)", d_short, "instruction at +2 (c3)");
    check_decline("int3 inside the window", d_int3, "instruction at +1 (cc)");
    check_decline("branch into the window", d_window, "instruction at +2 (75 fd)");
    check_decline("unknown opcode", d_unknown, "instruction at +1 (0f 0f c0 b4)");
    check_decline("jmp rel8 ends it early", d_jmp, "instruction at +0 (eb 10)");
    check_decline("a call returning inside the window", d_call,
                  "return address is inside the 5 bytes to patch: instruction at +0 (ff d0)");
    check_decline("xbegin (PC-relative)", d_xbegin, "instruction at +0 (c7 f8 10 00)");
    check_decline("jmp rel16 (PC-relative)", d_rel16, "instruction at +0 (66 e9 10 00)");
}

#endif
