/*
 * A release callback that counts the events covering one watched address.
 * volatile: glibc declares munmap & co. "leaf", yet the callback runs
 * inside them.
 */
#ifndef OPAL_TEST_WATCH_H
#define OPAL_TEST_WATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

static volatile int events;
static uintptr_t watched;

static void on_release(void *buf, size_t length, void *cbdata, bool from_alloc)
{
    (void) cbdata, (void) from_alloc;
    if ((uintptr_t) buf <= watched && watched < (uintptr_t) buf + length) {
        events++;
    }
}

#endif
