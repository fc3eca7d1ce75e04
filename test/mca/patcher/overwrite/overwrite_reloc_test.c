/*
 * Relocation, patch/restore and W^X tests of the overwrite patcher.  Each
 * architecture's hand-assembled prologues are in overwrite_reloc_<arch>.h
 * (reloc_arch_cases): the intercept must run AND chain to the original
 * result; functions it cannot patch must be declined with their bytes
 * untouched and a reason that names the bytes.  Then, for every
 * architecture: a mprotect refused (W^X) declines, a function patched
 * twice restores, and libc's functions that the memory hooks patch are
 * patched and restored, munmap called through its patch.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "test/mca/patcher/overwrite/overwrite_test_util.h"
#include "test/support/capture.h"
#include "test/support/emulated.h"
#include "test/support/release_functions.h"

typedef long (*fn6_t)(long, long, long, long, long, long);

static mca_patcher_base_module_t *patcher;
static fn6_t chain;
/* volatile: munmap is declared "leaf", yet the intercept under test changes this. */
static volatile int intercepted;

/* The intercept: count, then run what was there before. */
static long intercept(long a, long b, long c, long d, long e, long f)
{
    intercepted++;
    return chain(a, b, c, d, e, f);
}

/* Another one, patched over the first (stacking). */
static fn6_t outer_chain;
static volatile int outer_intercepted;
static long outer_intercept(long a, long b, long c, long d, long e, long f)
{
    outer_intercepted++;
    return outer_chain(a, b, c, d, e, f);
}

typedef struct {
    unsigned char snap[32];
    int prot;
} code_state_t;

/* The applied patches as the patcher base lists them (foreach_patch). */
typedef struct {
    size_t count;
    mca_patcher_base_patch_t newest; /* a copy of the newest record */
    bool newest_intact;
} patch_census_t;

static void census_one(const mca_patcher_base_patch_t *patch, bool intact, void *arg)
{
    patch_census_t *c = arg;
    c->count++;
    c->newest = *patch;
    c->newest_intact = intact;
}

static patch_census_t census(void)
{
    patch_census_t c = {0};
    mca_patcher_base_foreach_patch(patcher, census_one, &c);
    return c;
}

/*
 * The protection of a code page: executable, whatever /proc/self/maps says
 * (qemu-user 7.2 lists some code pages "r--p", see
 * mca_patcher_base_with_code_writable).
 */
static int code_protection(uintptr_t addr)
{
    int prot = -1;
    CHECK(OPAL_SUCCESS == mca_patcher_base_page_protection(addr, &prot));
    return prot | PROT_EXEC;
}

static void snapshot(uintptr_t addr, code_state_t *s)
{
    memcpy(s->snap, (void *) addr, sizeof(s->snap));
    s->prot = code_protection(addr);
}

static void check_unchanged(const char *name, uintptr_t addr, const code_state_t *s)
{
    CHECK_MSG(0 == memcmp(s->snap, (void *) addr, sizeof(s->snap)), "%s: code bytes differ", name);
    int prot = code_protection(addr);
    CHECK_MSG(prot == s->prot, "%s: protection %d, was %d", name, prot, s->prot);
}

/*
 * Patch f to jump to icpt, call it (through 'call', which reaches it) with
 * each argument set: the intercept must run once per call and the result
 * must be the original's.  Then restore and compare.
 */
static void check_patch_via(const char *name, void *f, void *call, void *icpt,
                            const long args[][6], int nargs, size_t expect_skip)
{
    fn6_t fn = (fn6_t) call;
    long expect[8];
    code_state_t before;
    for (int i = 0; i < nargs; i++) {
        expect[i] = fn(args[i][0], args[i][1], args[i][2], args[i][3], args[i][4], args[i][5]);
    }
    snapshot((uintptr_t) f, &before);

    int rc = patcher->patch_address((uintptr_t) f, (uintptr_t) icpt);
    CHECK_MSG(OPAL_SUCCESS == rc, "%s: patch_address returned %d", name, rc);
    if (OPAL_SUCCESS != rc) {
        return;
    }
    chain = (fn6_t) mca_patcher_base_chain_of(patcher, (uintptr_t) f);
    CHECK_MSG(NULL != chain, "%s: no chain recorded", name);
    patch_census_t c = census();
    const mca_patcher_base_patch_t *p = &c.newest;
    CHECK_MSG(1 == c.count, "%s: %zu patches recorded", name, c.count);
    CHECK_MSG(p->patch_orig == (uintptr_t) f + expect_skip, "%s: patched at +%ld, expected +%zu",
              name, (long) (p->patch_orig - (uintptr_t) f), expect_skip);
    CHECK(p->patch_how && p->patch_restore && p->patch_data_size == OVERWRITE_TEST_JUMP_SIZE);
    CHECK_MSG(c.newest_intact, "%s: the patched place does not hold the bytes written", name);
    CHECK(code_protection((uintptr_t) f) == before.prot);

    for (int i = 0; i < nargs; i++) {
        intercepted = 0;
        long got = fn(args[i][0], args[i][1], args[i][2], args[i][3], args[i][4], args[i][5]);
        CHECK_MSG(intercepted == 1, "%s: intercept ran %d times", name, intercepted);
        CHECK_MSG(got == expect[i], "%s (args %d): got %ld, original gives %ld", name, i, got,
                  expect[i]);
    }
    mca_patcher_base_restore_patches(patcher, NULL, NULL);
    check_unchanged(name, (uintptr_t) f, &before);
    intercepted = 0;
    CHECK_MSG(fn(args[0][0], args[0][1], args[0][2], args[0][3], args[0][4], args[0][5]) ==
                  expect[0] && intercepted == 0,
              "%s: not back to the original after restore", name);
}

static void check_patch(const char *name, void *f, const long args[][6], int nargs,
                        size_t expect_skip)
{
    check_patch_via(name, f, f, (void *) intercept, args, nargs, expect_skip);
}

/* A decline: nothing changed, and (when says is given) the message has it. */
static void check_decline(const char *name, void *f, const char *says)
{
    code_state_t before;
    test_capture_t cap;
    snapshot((uintptr_t) f, &before);
    test_capture_begin(&cap);
    int rc = patcher->patch_address((uintptr_t) f, (uintptr_t) intercept);
    const char *said = test_capture_end(&cap);
    CHECK_MSG(OPAL_ERR_NOT_SUPPORTED == rc, "%s: expected a decline, got %d", name, rc);
    CHECK_MSG(0 == census().count, "%s: a patch was recorded", name);
    CHECK_MSG(NULL == says || NULL != strstr(said, says), "%s: the reason does not say \"%s\": %s",
              name, says, said);
    check_unchanged(name, (uintptr_t) f, &before);
}

/* The architecture's own cases: reloc_arch_cases(cp, base). */
#if defined(__x86_64__) || defined(__i386__)
#    include "test/mca/patcher/overwrite/overwrite_reloc_x86.h"
#elif defined(__aarch64__)
#    include "test/mca/patcher/overwrite/overwrite_reloc_aarch64.h"
#elif defined(__powerpc64__) && defined(__LITTLE_ENDIAN__)
#    include "test/mca/patcher/overwrite/overwrite_reloc_ppc64le.h"
#elif defined(__riscv) && 64 == __riscv_xlen
#    include "test/mca/patcher/overwrite/overwrite_reloc_riscv64.h"
#endif

/*
 * W^X: in a child whose seccomp filter makes every mprotect that asks for
 * PROT_WRITE fail with EPERM, patching must decline cleanly, bytes and
 * protection untouched.
 */
static void check_wx_decline(void *f)
{
    if (test_emulated()) {
        /* qemu-user runs no seccomp filter for its guest. */
        printf("note: emulated, no seccomp: W^X decline not tested\n");
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        struct sock_filter filter[] = {
            BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mprotect, 0, 3),
            BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
            BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, PROT_WRITE, 0, 1),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        };
        struct sock_fprog prog = {.len = sizeof(filter) / sizeof(filter[0]), .filter = filter};
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
            _exit(77);
        }
        check_decline("mprotect refused (W^X)", f, NULL);
        _exit(test_failures ? 1 : 0);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
        printf("note: seccomp unavailable, W^X decline not tested\n");
        return;
    }
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "W^X child: status 0x%x (crashed or failed)", status);
}

/* libc's functions that the memory hooks patch: each one patches and restores. */
static void check_libc_targets(void)
{
    static const char *const names[] = {TEST_RELEASE_FUNCTIONS};
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
        uintptr_t func = (uintptr_t) dlsym(RTLD_DEFAULT, names[k]), old = 0;
        code_state_t before;
        CHECK_MSG(0 != func, "%s not found", names[k]);
        if (0 == func) {
            continue;
        }
        snapshot(func, &before);
        int rc = patcher->patch_symbol(names[k], (uintptr_t) intercept, &old);
        CHECK_MSG(OPAL_SUCCESS == rc && 0 != old, "patch_symbol(%s): %d", names[k], rc);
        mca_patcher_base_restore_patches(patcher, NULL, NULL);
        check_unchanged(names[k], func, &before);
    }
}

int main(void)
{
    patcher = overwrite_test_setup();
    code_page_t cp;
    code_page_init(&cp);

    unsigned char *base = code_page_add(&cp, test_fn_plus42, sizeof(test_fn_plus42), 0);
    reloc_arch_cases(&cp, base);
    check_wx_decline(base);

    /*
     * Stacking on ourselves: another intercept patched over the first, each
     * call runs both once; the first one again on top would call itself
     * (its chain reaching its own jump below): declined.  Both restored,
     * newest first.
     */
    code_state_t before;
    snapshot((uintptr_t) base, &before);
    fn6_t fn = (fn6_t) base;
    CHECK(OPAL_SUCCESS == patcher->patch_address_chain((uintptr_t) base, (uintptr_t) intercept,
                                                       (uintptr_t *) &chain));
    CHECK(OPAL_SUCCESS == patcher->patch_address_chain((uintptr_t) base,
                                                       (uintptr_t) outer_intercept,
                                                       (uintptr_t *) &outer_chain));
    intercepted = outer_intercepted = 0;
    CHECK_MSG(43 == fn(1, 0, 0, 0, 0, 0) && 1 == intercepted && 1 == outer_intercepted,
              "stacked: intercepts ran %d and %d times", intercepted, outer_intercepted);
    fn6_t kept = chain;
    CHECK_MSG(OPAL_ERR_NOT_SUPPORTED == patcher->patch_address_chain((uintptr_t) base,
                                                                     (uintptr_t) intercept,
                                                                     (uintptr_t *) &chain),
              "the first intercept patched again over its own jump below");
    CHECK(kept == chain && 2 == census().count);
    intercepted = outer_intercepted = 0;
    CHECK(43 == fn(1, 0, 0, 0, 0, 0) && 1 == intercepted && 1 == outer_intercepted);
    mca_patcher_base_restore_patches(patcher, NULL, NULL);
    check_unchanged("patched twice", (uintptr_t) base, &before);

    check_libc_targets();

    /* A libc function, by symbol: the chain is returned as old_addr. */
    uintptr_t old = 0;
    void *libc_munmap = (void *) munmap;
    snapshot((uintptr_t) libc_munmap, &before);
    int rc = patcher->patch_symbol("munmap", (uintptr_t) intercept, &old);
    CHECK_MSG(OPAL_SUCCESS == rc && old != 0, "patch_symbol(munmap): %d", rc);
    if (OPAL_SUCCESS == rc) {
        chain = (fn6_t) old;
        void *m = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        intercepted = 0;
        CHECK(0 == munmap(m, 4096) && 1 == intercepted);
        CHECK(-1 == munmap((void *) 1, 4096) && EINVAL == errno && 2 == intercepted);
        mca_patcher_base_restore_patches(patcher, NULL, NULL);
        check_unchanged("libc munmap", (uintptr_t) libc_munmap, &before);
    }
    CHECK(OPAL_ERR_NOT_FOUND ==
          patcher->patch_symbol("no_such_symbol_anywhere", (uintptr_t) intercept, &old));

    opal_finalize_util();
    return test_finish("overwrite_reloc_test");
}
