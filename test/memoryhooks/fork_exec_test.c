/*
 * fork and exec with the hooks installed.
 *
 * fork: the child's hooks work (a munmap there produces the event, its
 * rcache forgets the released registration and registers anew).
 * exec: the new image carries nothing of ours: the entry bytes of the
 * intercepted libc functions and where the executable's own GOT slots
 * lead are the same as in a process exec'd before any hook was installed.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/rcache/base/base.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"
#include "test/support/rcache_mock.h"
#include "test/support/test_util.h"
#include "test/support/watch.h"


static mock_dev_t dev;

/* The executable's own references: its GOT slots (read at each call). */
#define EXE_REF(fn)                                                          \
    static __attribute__((noinline)) const void *exe_##fn(void)             \
    {                                                                       \
        const void *addr = (const void *) (uintptr_t) &fn;                  \
        __asm__ volatile("" : "+r"(addr));                                  \
        return addr;                                                        \
    }
EXE_REF(munmap)
EXE_REF(mmap)
EXE_REF(madvise)
EXE_REF(free)

static void describe(FILE *out, const char *name, const void *addr)
{
    Dl_info info;
    if (NULL == addr || 0 == dladdr(addr, &info) || NULL == info.dli_fname) {
        fprintf(out, "%s: %p (no object)\n", name, addr);
        return;
    }
    fprintf(out, "%s: %s+%#lx:", name, info.dli_fname,
            (unsigned long) ((uintptr_t) addr - (uintptr_t) info.dli_fbase));
    for (int i = 0; i < 16; i++) {
        fprintf(out, " %02x", ((const unsigned char *) addr)[i]);
    }
    fputc('\n', out);
}

/* What a freshly exec'd process sees. */
static int dump_image(void)
{
    static const char *const names[] = {"munmap", "mremap", "madvise", "mmap", "brk", "sbrk",
                                        "shmdt", "shmat", "free", "realloc", "dlopen", "dlsym"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        describe(stdout, names[i], dlsym(RTLD_DEFAULT, names[i]));
    }
    describe(stdout, "exe munmap", exe_munmap());
    describe(stdout, "exe mmap", exe_mmap());
    describe(stdout, "exe madvise", exe_madvise());
    describe(stdout, "exe free", exe_free());
    return 0;
}

/* Run this program with --dump in a child (fork + exec) and collect its output. */
static char *exec_dump(const char *self)
{
    int fds[2];
    if (0 != pipe(fds)) {
        return NULL;
    }
    pid_t pid = fork();
    if (0 == pid) {
        dup2(fds[1], 1);
        close(fds[0]);
        test_execv(self, (char *[]){(char *) self, "--dump", NULL});
        _exit(127);
    }
    close(fds[1]);
    static char bufs[2][8192];
    static int which;
    char *out = bufs[which++ % 2];
    size_t n = 0;
    ssize_t r;
    while (n < 8191 && (r = read(fds[0], out + n, 8191 - n)) > 0) {
        n += (size_t) r;
    }
    out[n] = '\0';
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && 0 == WEXITSTATUS(status) ? out : NULL;
}

static int child_after_fork(mca_rcache_base_module_t *rcache)
{
    unsigned char *p = mmap(NULL, 8 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    mca_rcache_base_registration_t *reg = NULL, *found = NULL;
    const long before = dev.registered;
    p[0] = 1;
    CHECK(OPAL_SUCCESS == rcache->rcache_register(rcache, p, 8 * 4096, 0, MCA_RCACHE_ACCESS_ANY, &reg));
    if (reg) {
        rcache->rcache_deregister(rcache, reg);
    }
    CHECK(dev.registered == before + 1);
    watched = (uintptr_t) p;
    events = 0;
    munmap(p, 8 * 4096);
    CHECK_MSG(1 == events, "child: %d events for munmap", events);
    CHECK_MSG(OPAL_SUCCESS != rcache->rcache_find(rcache, p, 8 * 4096, &found) || NULL == found,
              "child: the released registration is still found");
    p = mmap(p, 8 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(OPAL_SUCCESS == rcache->rcache_register(rcache, p, 8 * 4096, 0, MCA_RCACHE_ACCESS_ANY, &reg));
    CHECK_MSG(dev.registered == before + 2, "child: registering the new pages called register_mem %ld times",
              dev.registered - before);
    if (reg) {
        rcache->rcache_deregister(rcache, reg);
    }
    return test_finish("child after fork");
}

int main(int argc, char **argv)
{
    if (argc > 1 && 0 == strcmp(argv[1], "--dump")) {
        return dump_image();
    }
    const char *self = "/proc/self/exe";
    char *pristine = exec_dump(self);
    if (NULL == pristine) {
        TEST_SKIP("cannot fork and exec %s", self);
    }
    setenv("OMPI_MCA_mpi_leave_pinned", "1", 1);
    if (OPAL_SUCCESS != opal_init_util(&argc, &argv)) {
        return 1;
    }
    CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(on_release, NULL));
    mca_rcache_base_resources_t resources;
    mock_resources(&dev, &resources);
    mca_rcache_base_module_t *rcache = mca_rcache_base_module_create(NULL, NULL, &resources);
    CHECK(NULL != rcache);

    /* The hooks are in: exec must not carry them over. */
    char *after = exec_dump(self);
    CHECK(NULL != after);
    CHECK_MSG(NULL == after || 0 == strcmp(pristine, after),
              "an exec'd process differs from a pristine one:\n--- pristine\n%s--- after setup\n%s",
              pristine, after ? after : "");
    /* And the hooks in this process do change something (the check can fail). */
    char code[512] = "", slot[512] = "";
    FILE *f1 = fmemopen(code, sizeof(code), "w"), *f2 = fmemopen(slot, sizeof(slot), "w");
    if (f1 && f2) {
        describe(f1, "munmap", dlsym(RTLD_DEFAULT, "munmap"));
        describe(f2, "exe munmap", exe_munmap());
    }
    if (f1) {
        fclose(f1);
    }
    if (f2) {
        fclose(f2);
    }
    CHECK_MSG(NULL == strstr(pristine, code) || NULL == strstr(pristine, slot),
              "the hooks changed nothing visible here:\n%s%s", code, slot);

    if (rcache) {
        fflush(stdout);
        pid_t pid = fork();
        if (0 == pid) {
            _exit(child_after_fork(rcache));
        }
        int status;
        waitpid(pid, &status, 0);
        CHECK_MSG(WIFEXITED(status) && 0 == WEXITSTATUS(status), "child after fork: status %#x", status);
        mca_rcache_base_module_destroy(rcache);
    }
    opal_mem_hooks_unregister_release(on_release);
    opal_finalize_util();
    return test_finish("fork_exec_test");
}
