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

static inline int test_finish(const char *name)
{
    printf("%s: %s\n", name, test_failures ? "FAILED" : "passed");
    return test_failures ? 1 : 0;
}

#endif
