/* A library loaded with dlopen after setup: its munmap calls must produce events. */
#include <stddef.h>
#include <sys/mman.h>

int unmapper_munmap(void *addr, size_t len);

int unmapper_munmap(void *addr, size_t len)
{
    return munmap(addr, len);
}
