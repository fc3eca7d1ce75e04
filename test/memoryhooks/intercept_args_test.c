/*
 * What the caller of an intercepted function sees is what it would see
 * without us, whatever a callback does and whatever the arguments are:
 *
 *  - free keeps errno (POSIX.1-2024, glibc since 2.33), also when a
 *    callback called for the block it unmaps changes errno;
 *  - process_madvise with a vector the kernel refuses (NULL, in an
 *    unreadable page or running into one: EFAULT; more than UIO_MAXIOV
 *    ranges: EINVAL) returns the kernel's error, with no event, instead of
 *    faulting in the intercept that reads the vector.
 */
#include "opal_config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"
#include "test/support/emulated.h"
#include "test/support/test_util.h"

#define PAGE ((size_t) sysconf(_SC_PAGESIZE))

/* volatile: glibc declares the intercepted functions leaf (see memory.h). */
static volatile int events;

static void errno_changing_callback(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) buf, (void) len, (void) cbdata, (void) from_alloc;
    events++;
    errno = EIO;
}

/* errno read again after the call: GCC assumes that free keeps it. */
static int errno_now(void)
{
    __asm__ volatile("" ::: "memory");
    return errno;
}

static void test_free_keeps_errno(void)
{
    void *block = malloc(8 << 20); /* mmapped by glibc's malloc: free unmaps it */
    CHECK(NULL != block);
    events = 0;
    errno = ENOENT;
    free(block);
    const int after = errno_now();
    if (0 == events) {
        printf("note: free of an 8 MiB block gave no event (not glibc's malloc?)\n");
    }
    CHECK_MSG(ENOENT == after, "errno %d after free (was %d before, the callback set %d)", after,
              ENOENT, EIO);
}

#ifdef SYS_process_madvise
/* More ranges than the intercept reads at a time (its IOV_CHUNK, 32). */
#    define IOV_CHUNK_TRIED 40

/* The call through libc (intercepted) and as a raw system call: the same result. */
static void check_refused(const struct iovec *iov, size_t n, const char *what)
{
    events = 0;
    errno = 0;
    const long raw = syscall(SYS_process_madvise, -1, iov, n, MADV_DONTNEED, 0);
    const int raw_errno = errno;
    errno = 0;
    const long rc = process_madvise(-1, iov, n, MADV_DONTNEED, 0);
    const int rc_errno = errno;
    CHECK_MSG(raw == rc && raw_errno == rc_errno, "%s: %ld (errno %d), without the hooks %ld (errno %d)",
              what, rc, rc_errno, raw, raw_errno);
    CHECK_MSG(0 == events, "%s: %d events for a call the kernel refuses", what, events);
}

static void test_process_madvise_refused(void)
{
    /* One range at the end of a page, an unreadable page after it: a vector
     * read past its end faults. */
    char *pages = mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *target = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(MAP_FAILED != pages && MAP_FAILED != target);
    if (MAP_FAILED == pages || MAP_FAILED == target) {
        return;
    }
    CHECK(0 == mprotect(pages + PAGE, PAGE, PROT_NONE));
    struct iovec *last = (struct iovec *) (pages + PAGE) - 1;
    *last = (struct iovec){.iov_base = target, .iov_len = PAGE};
    check_refused(NULL, 1, "a NULL vector");
    check_refused(last, UIO_MAXIOV + 1, "more than UIO_MAXIOV ranges");
    if (test_emulated()) {
        /* The intercept reads the vector in place where process_vm_readv is refused. */
        printf("note: unreadable vectors not tried: the emulator has no process_vm_readv\n");
    } else {
        check_refused((const struct iovec *) (pages + PAGE), 1, "a vector in an unreadable page");
        check_refused(last, 2, "a vector running into an unreadable page");
        check_refused(last - IOV_CHUNK_TRIED + 1, IOV_CHUNK_TRIED + 1,
                      "a vector whose second chunk runs into an unreadable page");
    }
    munmap(target, PAGE);
    munmap(pages, 2 * PAGE);
}
#endif

int main(int argc, char **argv)
{
    if (OPAL_SUCCESS != opal_init_util(&argc, &argv)) {
        return 1;
    }
    CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(errno_changing_callback, NULL));
    test_free_keeps_errno();
#ifdef SYS_process_madvise
    test_process_madvise_refused();
#endif
    CHECK(OPAL_SUCCESS == opal_mem_hooks_unregister_release(errno_changing_callback));
    opal_finalize_util();
    return test_finish("intercept_args_test");
}
