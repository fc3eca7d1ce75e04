/*
 * Minimal test support.  A test program exits 0 when every check passed,
 * 1 when one failed, 77 (automake's SKIP) when it cannot run here — and then
 * it says why.
 */
#ifndef OPAL_TEST_UTIL_H
#define OPAL_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>

static int test_failures;

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

static inline int test_finish(const char *name)
{
    printf("%s: %s\n", name, test_failures ? "FAILED" : "passed");
    return test_failures ? 1 : 0;
}

#endif
