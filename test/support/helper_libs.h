/*
 * Helper libraries that a test compiles itself, with the configured
 * compiler (the test is built with -DTEST_CC='"$(CC)"'), into a private
 * directory: their DT_RPATH/DT_RUNPATH can name directories of its own.
 */
#ifndef OPAL_TEST_HELPER_LIBS_H
#define OPAL_TEST_HELPER_LIBS_H

#include <dlfcn.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test/support/test_util.h"

static char test_helper_dir[256];

/* Create the directory, <name>.XXXXXX under $TMPDIR or /tmp, or skip the test. */
static inline void test_helper_mkdir(const char *name)
{
    snprintf(test_helper_dir, sizeof(test_helper_dir), "%s/%s.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", name);
    if (NULL == mkdtemp(test_helper_dir)) {
        TEST_SKIP("cannot create a temporary directory for %s", name);
    }
}

/* "cc -shared -fPIC -o out src flags" in the directory (flags of any length), or skip the test. */
static inline void test_helper_compile(const char *out, const char *src, const char *flags)
{
    const size_t len = strlen(test_helper_dir) + strlen(TEST_CC) + strlen(out) + strlen(src) +
                       strlen(flags) + 64;
    char *cmd = malloc(len);
    if (NULL == cmd) {
        TEST_SKIP("out of memory building %s", out);
    }
    snprintf(cmd, len, "cd %s && %s -shared -fPIC -o %s %s %s 2>&1", test_helper_dir, TEST_CC, out,
             src, flags);
    const int rc = system(cmd);
    if (0 != rc) {
        printf("%.*s\n", 2000, cmd);
        free(cmd);
        TEST_SKIP("the C compiler cannot build the helper library %s", out);
    }
    free(cmd);
}

/* dlopen of the directory's name; NULL, having said why, if it fails. */
static inline void *test_helper_open(const char *name, int mode)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", test_helper_dir, name);
    void *h = dlopen(path, mode);
    CHECK_MSG(NULL != h, "dlopen %s: %s", path, dlerror());
    return h;
}

/* Remove the directory and everything in it. */
static inline void test_helper_cleanup(void)
{
    char cmd[sizeof(test_helper_dir) + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", test_helper_dir);
    CHECK(0 == system(cmd));
}

#endif
