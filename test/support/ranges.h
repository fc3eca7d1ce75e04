/*
 * A release callback that keeps the ranges it is given, and the question
 * the extent tests ask of them: is every page of [start, end) in one?
 * volatile: glibc declares munmap & co. "leaf", yet the callback runs
 * inside them.
 */
#ifndef OPAL_TEST_RANGES_H
#define OPAL_TEST_RANGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#define TEST_RANGES_MAX 64

static volatile int test_nranges;
static volatile uintptr_t test_range_start[TEST_RANGES_MAX], test_range_end[TEST_RANGES_MAX];

static void test_ranges_record(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) cbdata, (void) from_alloc;
    const int i = test_nranges;
    if (i < TEST_RANGES_MAX) {
        test_range_start[i] = (uintptr_t) buf;
        test_range_end[i] = (uintptr_t) buf + len;
        test_nranges = i + 1;
    }
}

/* Whether the pages of [start, end) are each inside one recorded range. */
static bool test_ranges_cover(uintptr_t start, uintptr_t end)
{
    const uintptr_t page = (uintptr_t) sysconf(_SC_PAGESIZE);
    for (uintptr_t at = start; at < end; at += page) {
        bool in = false;
        for (int i = 0; i < test_nranges && !in; i++) {
            in = test_range_start[i] <= at && at + page <= test_range_end[i];
        }
        if (!in) {
            return false;
        }
    }
    return true;
}

#endif
