/*
 * Make one of libc's functions impossible to patch for the overwrite
 * component (a `ret` at its entry, which the relocator must decline), so
 * that the delayed setup fails; and make it whole again.  For tests only:
 * the function is not called meanwhile.
 */
#ifndef OPAL_TEST_UNPATCHABLE_H
#define OPAL_TEST_UNPATCHABLE_H

#include <dlfcn.h>
#include <gnu/lib-names.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "opal/mca/patcher/overwrite/patcher_overwrite_arch.h"
#include "test/support/test_util.h"

typedef struct test_unpatchable_t {
    uintptr_t entry;
    unsigned char saved;
} test_unpatchable_t;

static inline void test_write_code_byte(uintptr_t at, unsigned char byte)
{
    const uintptr_t size = (uintptr_t) sysconf(_SC_PAGESIZE);
    uintptr_t page = at & ~(size - 1);
    mprotect((void *) page, 2 * size, PROT_READ | PROT_WRITE | PROT_EXEC);
    *(volatile unsigned char *) at = byte;
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
    u->saved = *(unsigned char *) u->entry;
    test_write_code_byte(u->entry, 0xc3); /* ret */
}

static inline void test_make_patchable_again(const test_unpatchable_t *u)
{
    test_write_code_byte(u->entry, u->saved);
}

#endif
