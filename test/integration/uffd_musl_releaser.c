/*
 * Code linked statically with musl, loaded into a glibc process: its
 * munmap and madvise are musl's own (libc.a linked in, every symbol kept
 * inside the library), so neither a GOT slot nor a patched glibc function
 * sees them, as with a vendor plugin built against a static musl.
 * uffd_musl.sh builds it; uffd_foreign_test.c drives it.
 *
 * Only calls that succeed: musl would store a failure's errno through its
 * own thread pointer layout, which is not glibc's.
 */
#include <stddef.h>
#include <sys/mman.h>

__attribute__((visibility("default"))) int foreign_munmap(void *addr, size_t len)
{
    return munmap(addr, len);
}

__attribute__((visibility("default"))) int foreign_madvise_dontneed(void *addr, size_t len)
{
    return madvise(addr, len, MADV_DONTNEED);
}
