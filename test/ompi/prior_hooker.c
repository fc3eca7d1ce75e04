/*
 * LD_PRELOADed into the ranks of test/ompi/bad_hooker.sh: what the process
 * may already be like when Open MPI starts, chosen by OPATCH_TEST_HOOKER:
 *
 *   wx     mprotect refuses to make a page writable and executable at once
 *          (a W^X policy: SELinux execmod, PaX MPROTECT)
 *   int3   another tool's hook at the entry of munmap (or of the libc
 *          function OPATCH_TEST_HOOKER_AT names): a breakpoint, its SIGTRAP
 *          handler counts the call and carries out the instruction it covers
 *   jump   another hooker's jmp rel32 at munmap's entry to a hook that
 *          counts the call and makes the system call itself
 *
 * At exit each says what it saw: "prior hooker: wx refused N", or "prior
 * hooker: int3|jump saw N calls of FUNCTION".
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

static const char *mode = "", *function = "munmap";
static unsigned long seen;
static uint8_t *entry;     /* the function's first instruction after an endbr64 */
static uint32_t entry_imm; /* of the mov $imm32, %eax the hook covers */

int mprotect(void *addr, size_t len, int prot)
{
    if (0 == strcmp(mode, "wx") && (prot & PROT_WRITE) && (prot & PROT_EXEC)) {
        __atomic_add_fetch(&seen, 1, __ATOMIC_RELAXED);
        errno = EACCES;
        return -1;
    }
    return (int) syscall(SYS_mprotect, addr, len, prot);
}

static void on_trap(int sig, siginfo_t *info, void *uc_)
{
    (void) sig, (void) info;
    ucontext_t *uc = uc_;
    greg_t *rip = &uc->uc_mcontext.gregs[REG_RIP];
    if ((uint8_t *) *rip - 1 != entry) {
        abort();
    }
    __atomic_add_fetch(&seen, 1, __ATOMIC_RELAXED);
    uc->uc_mcontext.gregs[REG_RAX] = entry_imm; /* the covered mov $imm32, %eax */
    *rip = (greg_t) (entry + 5);
}

static int count_and_unmap(void *addr, size_t len)
{
    __atomic_add_fetch(&seen, 1, __ATOMIC_RELAXED);
    return (int) syscall(SYS_munmap, addr, len);
}

/* Write len bytes at 'at' in code, by the system call (not through our mprotect). */
static void write_code(uint8_t *at, const uint8_t *bytes, size_t len)
{
    const uintptr_t page = (uintptr_t) sysconf(_SC_PAGESIZE);
    void *first = (void *) ((uintptr_t) at & ~(page - 1));
    syscall(SYS_mprotect, first, 2 * page, PROT_READ | PROT_WRITE | PROT_EXEC);
    memcpy(at, bytes, len);
    syscall(SYS_mprotect, first, 2 * page, PROT_READ | PROT_EXEC);
}

__attribute__((constructor)) static void install(void)
{
    const char *m = getenv("OPATCH_TEST_HOOKER");
    mode = NULL != m ? m : "";
    if (0 != strcmp(mode, "int3") && 0 != strcmp(mode, "jump")) {
        return;
    }
    const char *at = getenv("OPATCH_TEST_HOOKER_AT");
    if (NULL != at && 0 == strcmp(mode, "int3")) {
        function = at;
    }
    entry = dlsym(RTLD_NEXT, function);
    if (NULL != entry && 0 == memcmp(entry, "\xf3\x0f\x1e\xfa", 4)) {
        entry += 4;
    }
    /* Both hooks cover the 5-byte mov $imm32, %eax of glibc's system call wrapper. */
    if (NULL == entry || 0xb8 != entry[0]) {
        fprintf(stderr, "prior hooker: %s does not start with mov $imm32, %%eax here\n", function);
        mode = "";
        return;
    }
    memcpy(&entry_imm, entry + 1, 4);
    if (0 == strcmp(mode, "int3")) {
        struct sigaction sa = {.sa_sigaction = on_trap, .sa_flags = SA_SIGINFO};
        sigaction(SIGTRAP, &sa, NULL);
        write_code(entry, (const uint8_t *) "\xcc", 1);
        return;
    }
    const intptr_t rel = (intptr_t) count_and_unmap - (intptr_t) (entry + 5);
    if (rel != (int32_t) rel) {
        fprintf(stderr, "prior hooker: the hook is out of jmp rel32 range of munmap\n");
        mode = "";
        return;
    }
    uint8_t jump[5] = {0xe9};
    const int32_t rel32 = (int32_t) rel;
    memcpy(jump + 1, &rel32, 4);
    write_code(entry, jump, sizeof(jump));
}

__attribute__((destructor)) static void report(void)
{
    if (0 == strcmp(mode, "wx")) {
        fprintf(stderr, "prior hooker: wx refused %lu\n", seen);
    } else if ('\0' != mode[0]) {
        fprintf(stderr, "prior hooker: %s saw %lu calls of %s\n", mode, seen, function);
    }
}
