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
 *
 * Each runs in a child of its own, so that a crash fails that case only.
 */
#include "opal_config.h"

#include <stdbool.h>
#include <sys/syscall.h>

#include "opal/util/proc_maps.h"
#include "test/mca/patcher/overwrite/overwrite_test_util.h"
#include "test/support/capture.h"

static mca_patcher_base_module_t *patcher;
static uintptr_t chain;

static long intercept(long a)
{
    return ((long (*)(long)) chain)(a);
}

/* In a child: patch at addr, which must decline, saying so, and leave the
 * page's protection as it was (when mapped). */
static int declined(uintptr_t addr, bool mapped, int prot)
{
    test_capture_t cap;
    test_capture_begin(&cap);
    int rc = patcher->patch_address_chain(addr, (uintptr_t) intercept, &chain);
    const char *said = test_capture_end(&cap);
    if (OPAL_SUCCESS == rc) {
        fprintf(stderr, "patched\n");
        return 2;
    }
    if (NULL == strstr(said, "cannot patch")) {
        fprintf(stderr, "declined (%d) without saying why: '%s'\n", rc, said);
        return 3;
    }
    opal_proc_maps_entry_t e;
    if (mapped && (OPAL_SUCCESS != opal_proc_maps_find(addr, &e) || e.prot != prot)) {
        fprintf(stderr, "the page's protection changed\n");
        return 4;
    }
    return 0;
}

static void check_declined(const char *what, uintptr_t addr, bool mapped, int prot)
{
    const pid_t pid = fork();
    if (0 == pid) {
        _exit(declined(addr, mapped, prot));
    }
    test_child_ok(pid, what, "(2: patched, 3: no message, 4: protection changed)");
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

int main(void)
{
    patcher = overwrite_test_setup();
    const size_t page = (size_t) sysconf(_SC_PAGESIZE);

    const uintptr_t gone = page_with(PROT_READ);
    CHECK(0 == syscall(SYS_munmap, gone, page));
    check_declined("1 (an unmapped page)", gone, false, 0);
    check_declined("2 (PROT_NONE)", page_with(PROT_NONE), true, PROT_NONE);
    check_declined("3 (readable, not executable)", page_with(PROT_READ), true, PROT_READ);

    opal_finalize_util();
    return test_finish("overwrite_bad_input_test");
}
