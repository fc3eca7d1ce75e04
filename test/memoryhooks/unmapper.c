/* A library loaded with dlopen after setup: its munmap calls must produce events. */
#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/mman.h>

int unmapper_munmap(void *addr, size_t len);

int unmapper_munmap(void *addr, size_t len)
{
    return munmap(addr, len);
}

/* A library that looks up "the original" munmap itself, after our setup:
 * with RTLD_NEXT (the objects after it) or RTLD_DEFAULT. */

int unmapper_lookup_munmap(void *addr, size_t len, int next);

int unmapper_lookup_munmap(void *addr, size_t len, int next)
{
    int (*fn)(void *, size_t) = (int (*)(void *, size_t)) dlsym(next ? RTLD_NEXT : RTLD_DEFAULT, "munmap");
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
