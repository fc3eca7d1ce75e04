/*
 * Make one of libc's functions impossible to patch for the overwrite
 * component (a return at its entry, which the relocator must decline), so
 * that the delayed setup fails; and make it whole again.  For tests only:
 * the function is not called meanwhile.
 */
#ifndef OPAL_TEST_UNPATCHABLE_H
#define OPAL_TEST_UNPATCHABLE_H

#include <dlfcn.h>
#include <gnu/lib-names.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Our configuration first: a program built by mpicc includes no opal_config.h of its own. */
#include "opal_config.h"

#include "opal/mca/patcher/overwrite/patcher_overwrite_arch.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_icache.h"
#include "test/support/test_util.h"

/* A return as the function's first instruction, in the architecture's encoding. */
#if defined(__x86_64__) || defined(__i386__)
static const unsigned char test_return_insn[] = {0xc3}; /* ret */
#elif defined(__aarch64__)
static const unsigned char test_return_insn[] = {0xc0, 0x03, 0x5f, 0xd6}; /* ret */
#elif defined(__powerpc64__) && defined(__LITTLE_ENDIAN__)
static const unsigned char test_return_insn[] = {0x20, 0x00, 0x80, 0x4e}; /* blr */
#elif defined(__riscv) && __riscv_xlen == 64
static const unsigned char test_return_insn[] = {0x82, 0x80}; /* c.jr ra */
#else
static const unsigned char test_return_insn[] = {0};
#endif

typedef struct test_unpatchable_t {
    uintptr_t entry;
    unsigned char saved[sizeof(test_return_insn)];
} test_unpatchable_t;

static inline void test_write_code(uintptr_t at, const unsigned char *bytes, size_t len)
{
    const uintptr_t size = (uintptr_t) sysconf(_SC_PAGESIZE);
    uintptr_t page = at & ~(size - 1);
    mprotect((void *) page, 2 * size, PROT_READ | PROT_WRITE | PROT_EXEC);
    memcpy((void *) at, bytes, len);
    mca_patcher_overwrite_icache_sync(at, len);
    mprotect((void *) page, 2 * size, PROT_READ | PROT_EXEC);
}

static inline void test_make_unpatchable(test_unpatchable_t *u, const char *libc_function)
{
    if (!MCA_PATCHER_OVERWRITE_HAVE_ARCH) {
        TEST_SKIP("the overwrite component has no instructions for this architecture: it "
                  "declines, so there is no failing setup of it to provoke");
    }
    void *libc = dlopen(LIBC_SO, RTLD_LAZY | RTLD_NOLOAD);
    u->entry = (uintptr_t) dlsym(libc, libc_function);
    dlclose(libc);
    memcpy(u->saved, (const void *) u->entry, sizeof(u->saved));
    test_write_code(u->entry, test_return_insn, sizeof(test_return_insn));
}

static inline void test_make_patchable_again(const test_unpatchable_t *u)
{
    test_write_code(u->entry, u->saved, sizeof(u->saved));
}

#endif
