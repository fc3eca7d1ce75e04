/*
 * aarch64 targets for the overwrite tests (overwrite_test_util.h), as
 * instruction words (little-endian in memory, as the architecture runs).
 */
#ifndef OVERWRITE_TEST_AARCH64_H
#define OVERWRITE_TEST_AARCH64_H

#define OVERWRITE_TEST_JUMP_SIZE 4 /* b */
#define OVERWRITE_TEST_INSN_ALIGN 4

static const uint32_t test_fn_plus42[] = { /* f(x) = x + 42 */
    0x9100a800, /* add x0, x0, #42 */
    0xd65f03c0, /* ret */
};
/* Like glibc's mmap: x+1, or x+2 when x5 & 0xfff. */
static const uint32_t test_fn_mmap_like[] = {
    0xf2402cbf, /* tst x5, #0xfff */
    0x54000061, /* b.ne +12 */
    0x91000400, /* add x0, x0, #1 */
    0xd65f03c0, /* ret */
    0x91000800, /* add x0, x0, #2 */
    0xd65f03c0, /* ret */
};

#endif
