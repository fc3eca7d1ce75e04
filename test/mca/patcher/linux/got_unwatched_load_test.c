/*
 * A load that does not pass our dlopen (glibc's own loads for NSS, iconv
 * or libgcc_s; here a dlopen whose address was taken before our setup)
 * while a pass of ours patches the loaded objects.  glibc lists the new
 * object before it relocates it: a lazily bound slot written then gets
 * the load address added to our intercept, and the first call through it
 * jumps to nowhere.
 *
 * Made deterministic: libifunc.so's IFUNC resolver, which the loader runs
 * while relocating it (before its PLT slots), calls the program back
 * through a data pointer (no PLT), and the program runs a pass there: a
 * watched dlopen of a library already loaded, as another thread's dlopen
 * would.  That pass must leave libifunc.so alone; the next one (a watched
 * dlopen after the load) patches it, and a munmap through it is reported.
 * In a child, so that a crash is reported as such.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <gnu/lib-names.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "opal/constants.h"
#include "test/support/helper_libs.h"
#include "test/support/linux_hooks.h"
#include "test/support/test_util.h"

typedef void *(*dlopen_fn_t)(const char *, int);

static volatile int events, in_relocation;
static void *volatile page;

static void on_release(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) len, (void) cbdata, (void) from_alloc;
    events += buf == page;
}

/* Called by libifunc.so's resolver, mid-relocation: a watched dlopen runs a pass. */
static void pass_in_relocation(void)
{
    in_relocation = 1;
    void *h = dlopen(LIBC_SO, RTLD_LAZY | RTLD_NOLOAD);
    if (NULL != h) {
        dlclose(h);
    }
}

/* libifunc.so reaches it through a data pointer (GLOB_DAT, relocated before its IFUNC). */
void (*got_unwatched_load_test_hook)(void) = pass_in_relocation;

static int child(dlopen_fn_t unwatched_dlopen)
{
    if (!test_hooks_by_linux(on_release)) {
        return 2;
    }
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/libifunc.so", test_helper_dir);
    void *h = unwatched_dlopen(path, RTLD_LAZY);
    if (NULL == h || !in_relocation) {
        fprintf(stderr, "libifunc.so: %s\n", NULL == h ? dlerror() : "its resolver did not run");
        return 3;
    }
    /* The next pass, after the load: now it is patched. */
    void *again = dlopen(LIBC_SO, RTLD_LAZY | RTLD_NOLOAD);
    if (NULL != again) {
        dlclose(again);
    }
    int (*unmap_through)(void *, size_t) = (int (*)(void *, size_t)) dlsym(h, "unmap_through");
    page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (NULL == unmap_through || MAP_FAILED == page || 0 != unmap_through(page, 4096)) {
        return 4;
    }
    if (1 != events) {
        fprintf(stderr, "the munmap through libifunc.so gave %d events\n", events);
        return 5;
    }
    return 0;
}

/* Without our hooks, in a child: the library loads and its resolver runs. */
static bool ifunc_works(dlopen_fn_t unwatched_dlopen)
{
    const pid_t pid = fork();
    if (0 == pid) {
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/libifunc.so", test_helper_dir);
        void *h = unwatched_dlopen(path, RTLD_LAZY);
        _exit(NULL != h && in_relocation && NULL != dlsym(h, "unmap_through") ? 0 : 1);
    }
    int status = 0;
    return pid > 0 && pid == waitpid(pid, &status, 0) && WIFEXITED(status) &&
           0 == WEXITSTATUS(status);
}

int main(void)
{
    /* Taken before any setup: a call through it passes none of our intercepts. */
    const dlopen_fn_t unwatched_dlopen = dlopen;
    test_helper_mkdir("opal_got_unwatched_load");
    test_write_file(test_helper_dir, "ifunc.c",
                    "#include <stddef.h>\n"
                    "#include <sys/mman.h>\n"
                    "extern void (*got_unwatched_load_test_hook)(void);\n"
                    "static int one(void) { return 1; }\n"
                    "static int (*resolve(void))(void)\n"
                    "{\n"
                    "    got_unwatched_load_test_hook();\n"
                    "    return one;\n"
                    "}\n"
                    "int pick(void) __attribute__((ifunc(\"resolve\")));\n"
                    "int (*pick_pointer)(void) = pick;\n"
                    "int unmap_through(void *p, size_t n) { return munmap(p, n); }\n");
    test_helper_compile("libifunc.so", "ifunc.c", "-Wl,-z,lazy");
    if (!ifunc_works(unwatched_dlopen)) {
        test_helper_cleanup();
        TEST_SKIP("the loader here runs no IFUNC resolver of a dlopened library (the case "
                  "cannot be made; riscv64 with glibc before 2.40)");
    }
    const pid_t pid = fork();
    if (0 == pid) {
        alarm(60);
        _exit(child(unwatched_dlopen));
    }
    test_child_ok(pid, "patching while an unwatched load relocates",
                  "(SIGSEGV: a slot written before its relocation; 2: no hooks; 3: the library did "
                  "not load; 4: the munmap failed; 5: not reported)");
    test_helper_cleanup();
    return test_finish("got_unwatched_load_test");
}
