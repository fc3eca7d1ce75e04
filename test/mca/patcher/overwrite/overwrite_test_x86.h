/*
 * x86-64 and i386 targets for the overwrite tests (overwrite_test_util.h).
 */
#ifndef OVERWRITE_TEST_X86_H
#define OVERWRITE_TEST_X86_H

#define OVERWRITE_TEST_JUMP_SIZE 5 /* jmp rel32 */

#if defined(__x86_64__)
/* System V ABI: rdi, rsi, rdx, rcx, r8, r9 -> rax. */
static const unsigned char test_fn_plus42[] = { /* f(x) = x + 42, like munmap's entry */
    0xb8, 0x2a, 0x00, 0x00, 0x00,               /* mov $42,%eax */
    0x01, 0xf8,                                 /* add %edi,%eax */
    0xc3,                                       /* ret */
};
/* Like mmap: x+1, or x+2 when r9 & 0xfff.  Its second instruction begins
 * inside the jump's bytes: patching it moves threads off them. */
static const unsigned char test_fn_mmap_like[] = {
    0x41, 0x89, 0xca,                         /* mov %ecx,%r10d */
    0x41, 0xf7, 0xc1, 0xff, 0x0f, 0x00, 0x00, /* test $0xfff,%r9d */
    0x75, 0x05,                               /* jne +5 */
    0x48, 0x8d, 0x47, 0x01,                   /* lea 1(%rdi),%rax */
    0xc3,                                     /* ret */
    0x48, 0x8d, 0x47, 0x02,                   /* lea 2(%rdi),%rax */
    0xc3,                                     /* ret */
};
/* x + 42 behind a 1-byte first instruction, as dlopen and glibc's i386
 * mmap begin: the x86 write holds every other thread first (its self-loop
 * would cover the start of the second instruction). */
static const unsigned char test_fn_push_first[] = {
    0x53,             /* push %rbx */
    0x8d, 0x47, 0x2a, /* lea 42(%rdi),%eax */
    0x5b,             /* pop %rbx */
    0xc3,             /* ret */
};
#else
/* The same for i386 (cdecl: the arguments at 4(%esp), 8(%esp), ... -> eax). */
static const unsigned char test_fn_plus42[] = {
    /* f(x) = x + 42 */
    0xb8, 0x2a, 0x00, 0x00, 0x00, /* mov $42,%eax */
    0x03, 0x44, 0x24, 0x04,       /* add 4(%esp),%eax */
    0xc3,                         /* ret */
};
/* x+1, or x+2 when the 6th argument & 0xfff; the second instruction
 * begins inside the jump's bytes, as in glibc's i386 munmap. */
static const unsigned char test_fn_mmap_like[] = {
    0x8b, 0x44, 0x24, 0x04,                         /* mov 4(%esp),%eax */
    0xf7, 0x44, 0x24, 0x18, 0xff, 0x0f, 0x00, 0x00, /* testl $0xfff,0x18(%esp) */
    0x75, 0x02,                                     /* jne +2 */
    0x40,                                           /* inc %eax (a REX prefix in 64-bit mode) */
    0xc3,                                           /* ret */
    0x83, 0xc0, 0x02,                               /* add $2,%eax */
    0xc3,                                           /* ret */
};
static const unsigned char test_fn_push_first[] = {
    /* x + 42 behind a 1-byte first instruction */
    0x53,                   /* push %ebx */
    0x8b, 0x44, 0x24, 0x08, /* mov 8(%esp),%eax */
    0x83, 0xc0, 0x2a,       /* add $42,%eax */
    0x5b,                   /* pop %ebx */
    0xc3,                   /* ret */
};
#endif
/* Where the instruction at the patch point is 2 bytes or more, the x86
 * write needs no signal from a thread that runs into it: one that blocks
 * every signal is not in the way (overwrite_blocked_test). */
#define OVERWRITE_TEST_WRITE_PAST_BLOCKED 1
/* A target whose write holds every other thread (overwrite_fini_test). */
#define OVERWRITE_TEST_HOLD_FN test_fn_push_first

#endif
