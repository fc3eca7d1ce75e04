/*
 * An interposer loaded with LD_PRELOAD whose munmap, mremap, mmap, ftruncate
 * and fallocate chain to the next definition (libc's), as a profiler or a
 * memory checker does.  With the overwrite component both definitions are
 * patched: one call then passes two intercepts of ours, and must still be
 * reported once.  ftruncate and fallocate find libc's with a handle of
 * libc, not RTLD_NEXT (which the linux component answers, for a chain's
 * own code, with the definition past our patch): with either component a
 * call then passes two intercepts of ours.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <gnu/lib-names.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

typedef void *(*mremap_fn_t)(void *, size_t, size_t, int, ...);
typedef int (*munmap_fn_t)(void *, size_t);
typedef void *(*mmap_fn_t)(void *, size_t, int, int, int, off_t);
typedef int (*ftruncate_fn_t)(int, off_t);
typedef int (*fallocate_fn_t)(int, int, off_t, off_t);

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

static void *libc_function(const char *name)
{
    void *libc = dlopen(LIBC_SO, RTLD_LAZY | RTLD_NOLOAD);
    void *f = NULL != libc ? dlsym(libc, name) : NULL;
    return NULL != f ? f : dlsym(RTLD_NEXT, name);
}

/* Whether calls reached mmap, ftruncate and fallocate here (said at exit):
 * not only our intercepts, which chain to them (a chain of mmap64's or
 * ftruncate64's, libc's definition, put over mmap's or ftruncate's in one
 * slot skipped them). */
static int reached_mmap, reached_ftruncate, reached_fallocate;

__attribute__((destructor)) static void say_reached(void)
{
    /* After the program's output so far, on lines of their own. */
    fflush(stdout);
    if (reached_ftruncate && reached_fallocate) {
        printf("libinterposer: ftruncate and fallocate reached\n");
    }
    if (reached_mmap) {
        printf("libinterposer: mmap reached\n");
    }
    fflush(stdout);
}

/* libc's mmap calls no interposable function: RTLD_NEXT from here is safe. */
void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    static mmap_fn_t next;
    reached_mmap = 1;
    if (NULL == next) {
        next = (mmap_fn_t) dlsym(RTLD_NEXT, "mmap");
    }
    return next(addr, len, prot, flags, fd, off);
}

int ftruncate(int fd, off_t length)
{
    static ftruncate_fn_t next;
    reached_ftruncate = 1;
    if (NULL == next) {
        next = (ftruncate_fn_t) libc_function("ftruncate");
    }
    return next(fd, length);
}

int fallocate(int fd, int mode, off_t offset, off_t len)
{
    static fallocate_fn_t next;
    reached_fallocate = 1;
    if (NULL == next) {
        next = (fallocate_fn_t) libc_function("fallocate");
    }
    return next(fd, mode, offset, len);
}
