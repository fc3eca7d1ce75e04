/*
 * dlopen in two threads at once after setup.  glibc lists a new object
 * (dl_iterate_phdr shows it) as soon as it is mapped, and relocates it
 * only after finding and mapping its dependencies.  The work that follows
 * one thread's dlopen (patching what it loaded) must not write the GOT of
 * an object that another thread's dlopen has not relocated yet: a lazily
 * bound slot written then gets the load address added to our intercept
 * (a call through it crashes); one bound at load gets the definition
 * written over us.
 *
 * Each round, made deterministic:
 *  - the main thread opens libmany.so, which calls several intercepted
 *    functions (patching it takes a while) and whose dependency is found
 *    after a long RUNPATH of missing directories (its dlopen takes a few
 *    milliseconds);
 *  - meanwhile an opener thread opens libunmap_{lazy,now}.so: the loader
 *    runs it after the main thread's, and finds its dependency only after
 *    a FIFO of the same name, where it waits: mapped and listed, not
 *    relocated;
 *  - a writer thread lets it go on (a header of the other ELF class, which
 *    the loader skips to search on) once the main thread's dlopen returned;
 *  - the opener calls munmap through the library: it must be reported.
 * The rounds run in a child process, so that a crash is reported as such.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"
#include "test/support/helper_libs.h"
#include "test/support/linux_hooks.h"
#include "test/support/test_util.h"

#define ROUNDS       10
#define MISSING_DIRS 2000
static const char *const unmappers[] = {"libunmap_lazy.so", "libunmap_now.so"};

static void build_libraries(void)
{
    static char flags[48 * 1024];
    test_write_file(test_helper_dir, "dep.c", "int dep(void) { return 0; }\n");
    test_write_file(test_helper_dir, "unmap.c",
                    "#include <sys/mman.h>\n"
                    "extern int dep(void);\n"
                    "int unmap(void *p, size_t n) { return munmap(p, n) + dep(); }\n");
    test_write_file(test_helper_dir, "many.c",
                    "#define _GNU_SOURCE\n"
                    "#include <stdlib.h>\n"
                    "#include <sys/mman.h>\n"
                    "extern int dep(void);\n"
                    "int many(int x)\n"
                    "{\n"
                    "    if (x) {\n"
                    "        munmap(0, 0), mmap(0, 0, 0, 0, -1, 0), mremap(0, 0, 0, 0);\n"
                    "        madvise(0, 0, 0), free(0), free(realloc(0, 0));\n"
                    "    }\n"
                    "    return dep();\n"
                    "}\n");
    test_helper_compile("libunmap_dep.so", "dep.c", "");
    test_helper_compile("libmany_dep.so", "dep.c", "");
    for (size_t lib = 0; lib < sizeof(unmappers) / sizeof(unmappers[0]); lib++) {
        snprintf(flags, sizeof(flags), "%s -L. -lunmap_dep -Wl,-rpath,%s/fifo:'$ORIGIN'",
                 0 == lib ? "-Wl,-z,lazy" : "-Wl,-z,now", test_helper_dir);
        test_helper_compile(unmappers[lib], "unmap.c", flags);
    }
    int n = snprintf(flags, sizeof(flags), "-Wl,-z,now -L. -lmany_dep -Wl,-rpath,");
    for (int i = 0; i < MISSING_DIRS && n < (int) sizeof(flags) - 64; i++) {
        n += snprintf(flags + n, sizeof(flags) - n, "/om%d:", i);
    }
    snprintf(flags + n, sizeof(flags) - n, "'$ORIGIN'");
    test_helper_compile("libmany.so", "many.c", flags);
    char fifo[PATH_MAX];
    snprintf(fifo, sizeof(fifo), "%s/fifo", test_helper_dir);
    if (0 != mkdir(fifo, 0700) || 0 != mkfifo(strcat(fifo, "/libunmap_dep.so"), 0600)) {
        TEST_SKIP("cannot create the FIFO %s", fifo);
    }
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* --- the rounds, in the child --- */

static uintptr_t watched_page;
static unsigned long reported;
static int main_opened;

static void on_release(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) cbdata, (void) from_alloc;
    const uintptr_t page = __atomic_load_n(&watched_page, __ATOMIC_RELAXED);
    if (0 != page && page >= (uintptr_t) buf && page < (uintptr_t) buf + len) {
        __atomic_add_fetch(&reported, 1, __ATOMIC_RELAXED);
    }
}

/* Opens an unmapper (arg: its name) after the main thread began its dlopen, calls munmap through
 * it. */
static void *opener(void *arg)
{
    const char *name = arg;
    const size_t page = (size_t) sysconf(_SC_PAGESIZE);
    usleep(1000);
    void *h = test_helper_open(name, RTLD_LAZY);
    if (NULL == h) {
        return NULL;
    }
    int (*unmap)(void *, size_t) = (int (*)(void *, size_t)) dlsym(h, "unmap");
    void *p = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(NULL != unmap && MAP_FAILED != p);
    __atomic_store_n(&watched_page, (uintptr_t) p, __ATOMIC_RELAXED);
    const unsigned long before = __atomic_load_n(&reported, __ATOMIC_RELAXED);
    CHECK(0 == unmap(p, page));
    CHECK_MSG(before + 1 == __atomic_load_n(&reported, __ATOMIC_RELAXED),
              "munmap through %s was not reported", name);
    __atomic_store_n(&watched_page, 0, __ATOMIC_RELAXED);
    dlclose(h);
    return NULL;
}

/* Lets the opener's loader go on past the FIFO once the main thread's dlopen returned. */
static void *writer(void *arg)
{
    (void) arg;
    char fifo[PATH_MAX];
    snprintf(fifo, sizeof(fifo), "%s/fifo/libunmap_dep.so", test_helper_dir);
    const double start = now();
    int fd;
    /* Opens (without waiting) only once the loader has it open for reading. */
    while (-1 == (fd = open(fifo, O_WRONLY | O_NONBLOCK)) && ENXIO == errno && now() - start < 10) {
        usleep(100);
    }
    if (-1 == fd) {
        CHECK_MSG(0, "the loader never opened the FIFO %s: %s", fifo, strerror(errno));
        return NULL;
    }
    /* Either order of the two dlopen calls ends here: a round where the
     * opener's went first waits for nothing else. */
    while (!__atomic_load_n(&main_opened, __ATOMIC_ACQUIRE) && now() - start < 0.5) {
        usleep(100);
    }
    ElfW(Ehdr)
        other = {.e_ident = {ELFMAG0, ELFMAG1, ELFMAG2, ELFMAG3,
                             8 == sizeof(void *) ? ELFCLASS32 : ELFCLASS64,
                             __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB : ELFDATA2MSB,
                             EV_CURRENT}};
    CHECK(sizeof(other) == write(fd, &other, sizeof(other)));
    close(fd);
    return NULL;
}

static int run(void)
{
    if (!test_hooks_by_linux(on_release)) {
        return test_finish("got_dlopen_race_test");
    }
    for (int round = 0; round < 2 * ROUNDS && 0 == test_failures; round++) {
        pthread_t threads[2];
        __atomic_store_n(&main_opened, 0, __ATOMIC_RELEASE);
        /* The writer first: creating a thread waits for the loader's lock,
         * which the opener holds while it waits for the writer. */
        pthread_create(&threads[0], NULL, writer, NULL);
        pthread_create(&threads[1], NULL, opener, (void *) unmappers[round % 2]);
        void *many = test_helper_open("libmany.so", RTLD_LAZY);
        __atomic_store_n(&main_opened, 1, __ATOMIC_RELEASE);
        for (int i = 0; i < 2; i++) {
            pthread_join(threads[i], NULL);
        }
        if (many) {
            dlclose(many);
        }
    }
    CHECK(OPAL_SUCCESS == opal_mem_hooks_unregister_release(on_release));
    CHECK(OPAL_SUCCESS == opal_finalize_util());
    return test_finish("got_dlopen_race_test");
}

int main(void)
{
    test_helper_mkdir("opal_got_race");
    build_libraries();
    fflush(stdout);
    pid_t pid = fork();
    if (0 == pid) {
        exit(run());
    }
    test_child_ok(pid, "the rounds", NULL);
    test_helper_cleanup();
    return test_finish("got_dlopen_race_test");
}
