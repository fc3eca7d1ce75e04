/*
 * Snapshots of everything a patcher may write: the first bytes of each
 * definition of the intercepted functions, and every object's GOT
 * (.got.plt and the RELRO segment holding .got).  Taken before setup and
 * after the last finalize, they must be identical.  Run with LD_BIND_NOW=1
 * so that lazy binding does not change .got.plt between the two.
 */
#ifndef OPAL_TEST_SNAPSHOT_H
#define OPAL_TEST_SNAPSHOT_H

#include <dlfcn.h>
#include <gnu/lib-names.h>
#include <link.h>
#include <unistd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test/support/release_functions.h"

#include "test/support/test_util.h"

#define SNAPSHOT_CODE_BYTES 32
#define SNAPSHOT_MAX_REGIONS 512

typedef struct snapshot_region_t {
    uintptr_t addr;
    size_t len;
    unsigned char *bytes;
} snapshot_region_t;

typedef struct snapshot_t {
    snapshot_region_t regions[SNAPSHOT_MAX_REGIONS];
    int count;
} snapshot_t;

static const char *const snapshot_functions[] = {
    TEST_RELEASE_FUNCTIONS,
    "free",
    "realloc",
    "reallocarray",
    "malloc_trim",
    "mallopt",
    "dlopen",
    "dlclose",
    "dlsym",
    NULL,
};

/*
 * Byte loops, not memcpy/memcmp, and no AddressSanitizer: a RELRO segment
 * holds globals with redzones around them, and reading across them is the
 * point here.
 */
#define SNAPSHOT_NO_ASAN __attribute__((no_sanitize_address, noinline))

SNAPSHOT_NO_ASAN static void snapshot_copy(unsigned char *to, uintptr_t from, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        to[i] = ((const volatile unsigned char *) from)[i];
    }
}

SNAPSHOT_NO_ASAN static bool snapshot_same(const unsigned char *bytes, uintptr_t at, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (bytes[i] != ((const volatile unsigned char *) at)[i]) {
            return false;
        }
    }
    return true;
}

static inline void snapshot_add(snapshot_t *s, uintptr_t addr, size_t len)
{
    if (0 == addr || 0 == len || s->count >= SNAPSHOT_MAX_REGIONS) {
        return;
    }
    snapshot_region_t *r = &s->regions[s->count++];
    r->addr = addr;
    r->len = len;
    r->bytes = malloc(len);
    snapshot_copy(r->bytes, addr, len);
}

static inline int snapshot_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    snapshot_t *s = arg;
    (void) size;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (PT_GNU_RELRO == ph->p_type) {
            snapshot_add(s, info->dlpi_addr + ph->p_vaddr, ph->p_memsz);
        }
        if (PT_DYNAMIC == ph->p_type) {
            const ElfW(Dyn) *dyn = (const ElfW(Dyn) *) (info->dlpi_addr + ph->p_vaddr);
            uintptr_t pltgot = 0;
            size_t pltrelsz = 0, entsize = sizeof(ElfW(Rela));
            for (; dyn->d_tag != DT_NULL; dyn++) {
                if (DT_PLTGOT == dyn->d_tag) {
                    pltgot = dyn->d_un.d_ptr;
                } else if (DT_PLTRELSZ == dyn->d_tag) {
                    pltrelsz = dyn->d_un.d_val;
                } else if (DT_PLTREL == dyn->d_tag && DT_REL == dyn->d_un.d_val) {
                    entsize = sizeof(ElfW(Rel)); /* i386 */
                }
            }
            /* The loader relocated DT_PLTGOT to an absolute address, except
             * where the dynamic section is read-only (riscv64, the vDSO). */
            if (pltgot && pltgot < info->dlpi_addr) {
                pltgot += info->dlpi_addr;
            }
            if (pltgot && pltrelsz) {
                snapshot_add(s, pltgot, (3 + pltrelsz / entsize) * sizeof(void *));
            }
        }
    }
    return 0;
}

/* Lazy binding would change .got.plt between two snapshots: run again with
 * LD_BIND_NOW=1 unless already so. */
static inline void snapshot_bind_now(char **argv)
{
    if (NULL == getenv("LD_BIND_NOW")) {
        setenv("LD_BIND_NOW", "1", 1);
        test_execv("/proc/self/exe", argv);
        printf("SKIP: cannot re-execute with LD_BIND_NOW=1\n");
        exit(77);
    }
}

static inline void snapshot_take(snapshot_t *s)
{
    s->count = 0;
    void *libc = dlopen(LIBC_SO, RTLD_LAZY | RTLD_NOLOAD);
    for (int i = 0; snapshot_functions[i]; i++) {
        snapshot_add(s, (uintptr_t) dlsym(RTLD_DEFAULT, snapshot_functions[i]), SNAPSHOT_CODE_BYTES);
        if (libc) {
            snapshot_add(s, (uintptr_t) dlsym(libc, snapshot_functions[i]), SNAPSHOT_CODE_BYTES);
        }
    }
    if (libc) {
        dlclose(libc);
    }
    dl_iterate_phdr(snapshot_object, s);
}

/* The number of regions whose bytes differ now from the snapshot (printed). */
static inline int snapshot_diff(const snapshot_t *s, const char *when)
{
    int differ = 0;
    for (int i = 0; i < s->count; i++) {
        const snapshot_region_t *r = &s->regions[i];
        if (!snapshot_same(r->bytes, r->addr, r->len)) {
            Dl_info info = {0};
            dladdr((void *) r->addr, &info);
            fprintf(stderr, "%s: %zu bytes at %#lx (%s) differ from the snapshot\n", when, r->len,
                    (unsigned long) r->addr, info.dli_fname ? info.dli_fname : "?");
            differ++;
        }
    }
    return differ;
}

static inline void snapshot_free(snapshot_t *s)
{
    for (int i = 0; i < s->count; i++) {
        free(s->regions[i].bytes);
    }
    s->count = 0;
}

#endif
