/*
 * Capture what a piece of code writes to stderr (fd 2), to check that an
 * error message names what it must.
 */
#ifndef OPAL_TEST_CAPTURE_H
#define OPAL_TEST_CAPTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct test_capture_t {
    int saved_fd;
    FILE *file;
    char text[8192];
} test_capture_t;

static inline void test_capture_begin(test_capture_t *cap)
{
    fflush(stderr);
    cap->file = tmpfile();
    cap->saved_fd = dup(STDERR_FILENO);
    dup2(fileno(cap->file), STDERR_FILENO);
}

static inline const char *test_capture_end(test_capture_t *cap)
{
    fflush(stderr);
    dup2(cap->saved_fd, STDERR_FILENO);
    close(cap->saved_fd);
    rewind(cap->file);
    size_t n = fread(cap->text, 1, sizeof(cap->text) - 1, cap->file);
    cap->text[n] = '\0';
    fclose(cap->file);
    return cap->text;
}

#endif
