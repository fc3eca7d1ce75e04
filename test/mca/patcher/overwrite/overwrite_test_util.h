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
#include "opal/runtime/opal.h"
#include "test/support/test_util.h"

#if !defined(__x86_64__) && !defined(__i386__)
#    define OVERWRITE_TEST_REQUIRE_ARCH() TEST_SKIP("the overwrite patcher has no x86 instructions")
#else
#define OVERWRITE_TEST_REQUIRE_ARCH() do { } while (0)
#endif

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

#if defined(__x86_64__)
/*
 * Hand-assembled targets shared by the tests (System V ABI: rdi, rsi, rdx,
 * rcx, r8, r9 -> rax).
 */
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

/* Place bytes at the next 16-byte aligned spot (plus 'misalign'); returns their address. */
static inline unsigned char *code_page_add(code_page_t *cp, const void *bytes, size_t len,
                                           size_t misalign)
{
    unsigned char *at = code_page_next(cp, misalign);
    cp->used = (size_t) (at - cp->base);
    memcpy(at, bytes, len);
    cp->used += len;
    return at;
}

static inline void code_page_seal(code_page_t *cp)
{
    if (mprotect(cp->base, 2 * (size_t) sysconf(_SC_PAGESIZE), PROT_READ | PROT_EXEC)) {
        perror("mprotect");
        exit(1);
    }
}

#endif
