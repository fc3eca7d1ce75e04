/*
 * A library loaded with dlopen after setup: its munmap calls must produce
 * events.  Built with UNMAPPER_LOOKUP_ONLY it calls munmap only through
 * what dlsym/dlvsym give it (no GOT slot names munmap).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/mman.h>

#ifndef UNMAPPER_LOOKUP_ONLY
int unmapper_munmap(void *addr, size_t len);
int unmapper_munmap_errno(void *addr, size_t len);

int unmapper_munmap(void *addr, size_t len)
{
    return munmap(addr, len);
}

/* errno after munmap, as this library's libc sees it (a namespace's copy). */
int unmapper_munmap_errno(void *addr, size_t len)
{
    errno = 0;
    return 0 == munmap(addr, len) ? 0 : errno;
}
#endif

/* A library that looks up "the original" munmap itself, after our setup:
 * with RTLD_NEXT (the objects after it) or RTLD_DEFAULT. */

int unmapper_lookup_munmap(void *addr, size_t len, int next);

int unmapper_lookup_munmap(void *addr, size_t len, int next)
{
    int (*fn)(void *, size_t) = (int (*)(void *, size_t)) dlsym(next ? RTLD_NEXT : RTLD_DEFAULT, "munmap");
    return fn ? fn(addr, len) : -1;
}

/* The same with dlvsym, for the version given. */

int unmapper_lookup_versioned(void *addr, size_t len, int next, const char *version);

int unmapper_lookup_versioned(void *addr, size_t len, int next, const char *version)
{
    int (*fn)(void *, size_t) = (int (*)(void *, size_t)) dlvsym(next ? RTLD_NEXT : RTLD_DEFAULT,
                                                                 "munmap", version);
    return fn ? fn(addr, len) : -1;
}

/* The allocator of the libc this library is bound to: in a dlmopen
 * namespace, that namespace's own copy. */

void *unmapper_alloc(size_t len);
void unmapper_free(void *p);

void *unmapper_alloc(size_t len)
{
    return malloc(len);
}

void unmapper_free(void *p)
{
    free(p);
}
