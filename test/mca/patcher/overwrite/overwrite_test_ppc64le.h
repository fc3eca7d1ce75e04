/*
 * ppc64le (ELFv2) targets for the overwrite tests (overwrite_test_util.h):
 * instruction words, in the host's (little-endian) byte order.  Arguments
 * in r3..r8, the result in r3.  Functions with one entry point: no TOC.
 */
#ifndef OVERWRITE_TEST_PPC64LE_H
#define OVERWRITE_TEST_PPC64LE_H

#define OVERWRITE_TEST_JUMP_SIZE 4 /* b */

/* Instructions are word aligned: "misaligned" copies sit 4 bytes off a 16-byte boundary. */
#define OVERWRITE_TEST_INSN_ALIGN 4

static const uint32_t test_fn_plus42[] = {
    /* f(x) = x + 42 */
    0x3863002a, /* addi r3,r3,42 */
    0x4e800020, /* blr */
};
/* Like mmap: x+1, or x+2 when r8 (the 6th argument) & 0xfff. */
static const uint32_t test_fn_mmap_like[] = {
    0x71090fff, /* andi. r9,r8,4095 */
    0x4082000c, /* bne +12 */
    0x38630001, /* addi r3,r3,1 */
    0x4e800020, /* blr */
    0x38630002, /* addi r3,r3,2 */
    0x4e800020, /* blr */
};

#endif
