/*
 * An interposer loaded with LD_PRELOAD whose munmap and mremap chain to the
 * next definition (libc's), as a profiler or a memory checker does.  With
 * the overwrite component both definitions are patched: one call then
 * passes two intercepts of ours, and must still be reported once.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/mman.h>

typedef void *(*mremap_fn_t)(void *, size_t, size_t, int, ...);
typedef int (*munmap_fn_t)(void *, size_t);

void *mremap(void *old, size_t old_size, size_t new_size, int flags, ...)
{
    static mremap_fn_t next;
    void *new_addr = NULL;
    if (flags & MREMAP_FIXED) {
        va_list ap;
        va_start(ap, flags);
        new_addr = va_arg(ap, void *);
        va_end(ap);
    }
    if (NULL == next) {
        next = (mremap_fn_t) dlsym(RTLD_NEXT, "mremap");
    }
    return next(old, old_size, new_size, flags, new_addr);
}

int munmap(void *addr, size_t len)
{
    static munmap_fn_t next;
    if (NULL == next) {
        next = (munmap_fn_t) dlsym(RTLD_NEXT, "munmap");
    }
    return next(addr, len);
}
