/*
 * Shared by the overwrite patcher tests: select the overwrite component
 * through the framework (DSO or built in, as configured), and place
 * hand-assembled functions in executable memory.
 */
#ifndef OVERWRITE_TEST_UTIL_H
#define OVERWRITE_TEST_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_arch.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_icache.h"
#include "opal/runtime/opal.h"
#include "test/support/test_util.h"

#define OVERWRITE_TEST_REQUIRE_ARCH()                                                            \
    do {                                                                                         \
        if (!MCA_PATCHER_OVERWRITE_HAVE_ARCH) {                                                  \
            TEST_SKIP("the overwrite patcher has no instructions for this architecture");        \
        }                                                                                        \
    } while (0)

/* opal_init_util with patcher=overwrite, and the selected module. */
static inline mca_patcher_base_module_t *overwrite_test_setup(void)
{
    OVERWRITE_TEST_REQUIRE_ARCH();
    setenv("OMPI_MCA_patcher", "overwrite", 1);
    if (OPAL_SUCCESS != opal_init_util(NULL, NULL)) {
        fprintf(stderr, "FAIL: opal_init_util\n");
        exit(1);
    }
    if (OPAL_SUCCESS != mca_patcher_base_select() || NULL == opal_patcher ||
        0 != strcmp(opal_patcher->super.module_component->mca_component_name, "overwrite")) {
        fprintf(stderr, "FAIL: the overwrite component was not selected\n");
        exit(1);
    }
    return opal_patcher;
}

/*
 * The architecture's hand-assembled targets, shared by the tests:
 * test_fn_plus42 (f(x) = x + 42, like munmap's entry), test_fn_mmap_like
 * (x+1, or x+2 when the 6th argument & 0xfff; more than one instruction
 * displaced where the architecture's jump covers more than one), and
 * OVERWRITE_TEST_JUMP_SIZE, the bytes of the entry jump.
 */
#if defined(__x86_64__) || defined(__i386__)
#    include "test/mca/patcher/overwrite/overwrite_test_x86.h"
#elif defined(__aarch64__)
#    include "test/mca/patcher/overwrite/overwrite_test_aarch64.h"
#elif defined(__powerpc64__) && defined(__LITTLE_ENDIAN__)
#    include "test/mca/patcher/overwrite/overwrite_test_ppc64le.h"
#elif defined(__riscv) && 64 == __riscv_xlen
#    include "test/mca/patcher/overwrite/overwrite_test_riscv64.h"
#endif
/* Instructions begin at multiples of this (a 'misalign' is rounded down to it). */
#ifndef OVERWRITE_TEST_INSN_ALIGN
#    define OVERWRITE_TEST_INSN_ALIGN 1
#endif

/* A page of hand-assembled code: write while RW, then make it RX. */
typedef struct code_page_t {
    unsigned char *base;
    size_t used;
} code_page_t;

static inline void code_page_init(code_page_t *cp)
{
    cp->base = mmap(NULL, 2 * (size_t) sysconf(_SC_PAGESIZE), PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (cp->base == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    memset(cp->base, 0xcc, 2 * (size_t) sysconf(_SC_PAGESIZE));
    cp->used = 0;
}

/* Where code_page_add will place its next bytes (for code that refers to its own address). */
static inline unsigned char *code_page_next(const code_page_t *cp, size_t misalign)
{
    return cp->base + ((cp->used + 15) & ~(size_t) 15) + misalign;
}

/*
 * Place bytes at the next 16-byte aligned spot plus 'misalign' (as far as
 * the architecture's instructions can be misaligned); returns their address.
 */
static inline unsigned char *code_page_add(code_page_t *cp, const void *bytes, size_t len,
                                           size_t misalign)
{
    unsigned char *at = code_page_next(cp, misalign & ~(size_t) (OVERWRITE_TEST_INSN_ALIGN - 1));
    cp->used = (size_t) (at - cp->base);
    memcpy(at, bytes, len);
    cp->used += len;
    return at;
}

static inline void code_page_seal(code_page_t *cp)
{
    /* What the CPU fetches must be what was written (a no-op on x86). */
    mca_patcher_overwrite_icache_sync((uintptr_t) cp->base, 2 * (size_t) sysconf(_SC_PAGESIZE));
    if (mprotect(cp->base, 2 * (size_t) sysconf(_SC_PAGESIZE), PROT_READ | PROT_EXEC)) {
        perror("mprotect");
        exit(1);
    }
}

#endif
