/*
 * Minimal test support.  A test program exits 0 when every check passed,
 * 1 when one failed, 77 (automake's SKIP) when it cannot run here — and then
 * it says why.
 */
#ifndef OPAL_TEST_UTIL_H
#define OPAL_TEST_UTIL_H

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static int test_failures;

/*
 * An anonymous mmap as a raw system call, past libc and every patch on it.
 * Where the kernel's SYS_mmap is the old call taking one pointer to its
 * arguments (i386), the six-argument call is SYS_mmap2.
 */
static inline long test_raw_mmap(void *addr, size_t len, int prot, int flags)
{
#ifdef SYS_mmap2
    return syscall(SYS_mmap2, addr, len, prot, flags, -1, 0);
#else
    return syscall(SYS_mmap, addr, len, prot, flags, -1, 0);
#endif
}

#define CHECK(cond)                                                                \
    do {                                                                           \
        if (!(cond)) {                                                             \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);        \
            test_failures++;                                                       \
        }                                                                          \
    } while (0)

#define CHECK_MSG(cond, ...)                                                       \
    do {                                                                           \
        if (!(cond)) {                                                             \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);        \
            fprintf(stderr, __VA_ARGS__);                                          \
            fputc('\n', stderr);                                                   \
            test_failures++;                                                       \
        }                                                                          \
    } while (0)

#define TEST_SKIP(...)                                                             \
    do {                                                                           \
        printf("SKIP: ");                                                          \
        printf(__VA_ARGS__);                                                       \
        printf("\n");                                                              \
        exit(77);                                                                  \
    } while (0)

/* Write text to dir/name, or skip the test saying why. */
static inline void test_write_file(const char *dir, const char *name, const char *text)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (NULL == f || EOF == fputs(text, f) || 0 != fclose(f)) {
        TEST_SKIP("cannot write %s", path);
    }
}

/*
 * execv, also in a cross build's tests: there OPAL_TEST_EMULATOR (qemu-user,
 * words separated by spaces) runs the program, since without a binfmt
 * registration the kernel cannot.  /proc/self/exe is resolved first: under
 * the emulator it names the emulator's own binary to the new process.
 * Returns only on failure, like execv.
 */
static inline int test_execv(const char *path, char *const argv[])
{
    const char *emu = getenv("OPAL_TEST_EMULATOR");
    if (NULL == emu || '\0' == emu[0]) {
        return execv(path, argv);
    }
    static char self[PATH_MAX], words[1024];
    if (0 == strcmp(path, "/proc/self/exe")) {
        ssize_t n = readlink(path, self, sizeof(self) - 1);
        if (n <= 0) {
            return -1;
        }
        self[n] = '\0';
        path = self;
    }
    char *args[64];
    int n = 0;
    snprintf(words, sizeof(words), "%s", emu);
    for (char *w = strtok(words, " "); NULL != w && n < 32; w = strtok(NULL, " ")) {
        args[n++] = w;
    }
    /* qemu-user's -0: the program's argv[0] as given. */
    args[n++] = "-0";
    args[n++] = NULL != argv[0] ? argv[0] : (char *) path;
    args[n++] = (char *) path;
    for (int i = 1; NULL != argv[0] && NULL != argv[i] && n < 63; i++) {
        args[n++] = argv[i];
    }
    args[n] = NULL;
    return execvp(args[0], args);
}

/*
 * Wait for the child pid (fork's result) and check that it exited 0; if it
 * did not, say for what how it ended, the signal or the exit code, and
 * codes (what the test's exit codes or a signal mean, NULL for nothing).
 * True when it exited 0.
 */
static inline bool test_child_ok(pid_t pid, const char *what, const char *codes)
{
    int status = 0;
    if (pid <= 0 || waitpid(pid, &status, 0) != pid) {
        CHECK_MSG(false, "%s: no child to wait for", what);
        return false;
    }
    const bool ok = WIFEXITED(status) && 0 == WEXITSTATUS(status);
    CHECK_MSG(ok, "%s: the child %s %d%s%s", what,
              WIFSIGNALED(status) ? "was killed by signal" : "exited with",
              WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), codes ? " " : "",
              codes ? codes : "");
    return ok;
}

static inline int test_finish(const char *name)
{
    printf("%s: %s\n", name, test_failures ? "FAILED" : "passed");
    return test_failures ? 1 : 0;
}

#endif
