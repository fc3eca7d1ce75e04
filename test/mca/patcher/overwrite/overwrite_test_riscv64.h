/*
 * riscv64 targets for the overwrite tests (overwrite_test_util.h).
 * LP64D: the arguments in a0..a7, the result in a0.
 */
#ifndef OVERWRITE_TEST_RISCV64_H
#define OVERWRITE_TEST_RISCV64_H

#define OVERWRITE_TEST_JUMP_SIZE  8 /* auipc t2; jalr x0 */
#define OVERWRITE_TEST_INSN_ALIGN 2 /* with the C extension */

/* f(x) = x + 42, two 4-byte instructions at the entry like munmap's
 * "li a7, 215; ecall": the second begins inside the jump's bytes. */
static const unsigned char test_fn_plus42[] = {
    0x93, 0x07, 0xa0, 0x02, /* li a5, 42 */
    0x33, 0x05, 0xf5, 0x00, /* add a0, a0, a5 */
    0x82, 0x80,             /* ret */
};
/* Like glibc's mmap: x+1, or x+2 when a5 (the 6th argument) & 0xfff; a
 * branch in the window. */
static const unsigned char test_fn_mmap_like[] = {
    0x13, 0x98, 0x47, 0x03, /* slli a6, a5, 52 */
    0x63, 0x14, 0x08, 0x00, /* bnez a6, +8 */
    0x05, 0x05,             /* addi a0, a0, 1 */
    0x82, 0x80,             /* ret */
    0x09, 0x05,             /* addi a0, a0, 2 */
    0x82, 0x80,             /* ret */
};

#endif
