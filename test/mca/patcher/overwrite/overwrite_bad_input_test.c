/*
 * Addresses that hold no code to read, given to the patcher's API
 * (patch_address_chain): each must be declined with a message that says
 * why, no page's protection changed, and no crash (the component read the
 * bytes there before it looked at the mapping: SIGSEGV).
 *
 * 1. an unmapped page
 * 2. a page with no access (PROT_NONE)
 * 3. a readable page that is not executable, holding a function's bytes:
 *    data, not code (the component wrote its jump there, and the page came
 *    back executable)
 * 4. (x86) code whose mapping ends within the 5 bytes of the jump, a
 *    PROT_NONE page next: 2 bytes (nop; nop), and an endbr (the patch point
 *    at the mapping's end).  The component read past the end (SIGSEGV).
 *
 * Each runs in a child of its own, so that a crash fails that case only.
 */
#include "opal_config.h"

#include <stdbool.h>
#include <sys/syscall.h>

#include "opal/util/proc_maps.h"
#if defined(__x86_64__) || defined(__i386__)
#    include "opal/mca/patcher/overwrite/patcher_overwrite_x86.h"
#endif
#include "test/mca/patcher/overwrite/overwrite_test_util.h"
#include "test/support/capture.h"

static mca_patcher_base_module_t *patcher;
static uintptr_t chain;

static long intercept(long a)
{
    return ((long (*)(long)) chain)(a);
}

/* In a child: patch at addr, which must decline, saying why (says, when
 * given), and leave the page's protection and readable bytes as they were
 * (when mapped). */
static int declined(uintptr_t addr, bool mapped, int prot, const char *says)
{
    const size_t page = (size_t) sysconf(_SC_PAGESIZE);
    unsigned char before[16];
    size_t n = mapped && (prot & PROT_READ) ? page - (addr & (page - 1)) : 0;
    n = n < sizeof(before) ? n : sizeof(before);
    memcpy(before, (const void *) addr, n);

    test_capture_t cap;
    test_capture_begin(&cap);
    int rc = patcher->patch_address_chain(addr, (uintptr_t) intercept, &chain);
    const char *said = test_capture_end(&cap);
    if (OPAL_SUCCESS == rc) {
        fprintf(stderr, "patched\n");
        return 2;
    }
    const char *why = says ? says : "cannot patch";
    if (NULL == strstr(said, "cannot patch") || NULL == strstr(said, why)) {
        fprintf(stderr, "declined (%d) without saying '%s': '%s'\n", rc, why, said);
        return 3;
    }
    opal_proc_maps_entry_t e;
    if (mapped && (OPAL_SUCCESS != opal_proc_maps_find(addr, &e) || e.prot != prot)) {
        fprintf(stderr, "the page's protection changed\n");
        return 4;
    }
    if (0 != memcmp(before, (const void *) addr, n)) {
        fprintf(stderr, "the bytes changed\n");
        return 5;
    }
    return 0;
}

static void check_declined(const char *what, uintptr_t addr, bool mapped, int prot,
                           const char *says)
{
    const pid_t pid = fork();
    if (0 == pid) {
        _exit(declined(addr, mapped, prot, says));
    }
    test_child_ok(pid, what,
                  "(2: patched, 3: no message, 4: protection changed, 5: bytes changed)");
}

/* A fresh page with prot, holding a function's bytes. */
static uintptr_t page_with(int prot)
{
    const size_t page = (size_t) sysconf(_SC_PAGESIZE);
    unsigned char *p = (unsigned char *) test_raw_mmap(NULL, page, PROT_READ | PROT_WRITE,
                                                       MAP_PRIVATE | MAP_ANONYMOUS);
    CHECK(MAP_FAILED != (void *) p);
    memcpy(p, test_fn_plus42, sizeof(test_fn_plus42));
    CHECK(0 == syscall(SYS_mprotect, p, page, prot));
    return (uintptr_t) p;
}

#if defined(__x86_64__) || defined(__i386__)
/* 4: bytes at the end of an executable page, a PROT_NONE page after it. */
static void check_page_end(const char *what, const unsigned char *bytes, size_t len)
{
    const size_t page = (size_t) sysconf(_SC_PAGESIZE);
    unsigned char *p = (unsigned char *) test_raw_mmap(NULL, 2 * page, PROT_READ | PROT_WRITE,
                                                       MAP_PRIVATE | MAP_ANONYMOUS);
    CHECK(MAP_FAILED != (void *) p);
    memcpy(p + page - len, bytes, len);
    CHECK(0 == syscall(SYS_mprotect, p, page, PROT_READ | PROT_EXEC));
    CHECK(0 == syscall(SYS_mprotect, p + page, page, PROT_NONE));
    check_declined(what, (uintptr_t) (p + page - len), true, PROT_READ | PROT_EXEC,
                   "function too short: its mapping ends within the 5 bytes to patch");
}
#endif

int main(void)
{
    patcher = overwrite_test_setup();
    const size_t page = (size_t) sysconf(_SC_PAGESIZE);

    const uintptr_t gone = page_with(PROT_READ);
    CHECK(0 == syscall(SYS_munmap, gone, page));
    check_declined("1 (an unmapped page)", gone, false, 0, NULL);
    check_declined("2 (PROT_NONE)", page_with(PROT_NONE), true, PROT_NONE, NULL);
    check_declined("3 (readable, not executable)", page_with(PROT_READ), true, PROT_READ, NULL);
#if defined(__x86_64__) || defined(__i386__)
    static const unsigned char nops[] = {0x90, 0x90};
    static const unsigned char pad[] = {MCA_PATCHER_OVERWRITE_X86_PAD_BYTES};
    check_page_end("4 (nop; nop, then a PROT_NONE page)", nops, sizeof(nops));
    check_page_end("4 (an endbr, then a PROT_NONE page)", pad, sizeof(pad));
#endif

    opal_finalize_util();
    return test_finish("overwrite_bad_input_test");
}
