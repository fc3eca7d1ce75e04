/*
 * The intercepts: policy only.  Each one decides which pages a call is
 * about to release, reports them, then chains to what was there before it
 * (a GOT slot's previous value or a trampoline) — never to "the libc
 * function" by name, so that another hooker installed before us still runs.
 *
 * A process may hold several definitions of a function: an interposer's
 * (what callers reach), libc's own (what libc's internal calls reach), and
 * the copy of libc in each dlmopen namespace (memory_namespaces.c).  An
 * address-based patcher patches each, with its own entry point (a variant,
 * memory_variants.h) so that each chains to its own previous code.
 *
 * Hook-path rules: no allocation, no lock, no stdio; only this thread's
 * TLS (initial-exec: no allocation on first touch).
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <gnu/lib-names.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/memoryhooks/memory_extents.h"
#include "opal/memoryhooks/memory_file_extents.h"
#include "opal/memoryhooks/memory_patch.h"
#include "opal/memoryhooks/memory_variants.h"
#include "opal/util/output.h"
#include "opal/util/proc_maps.h"

/* Weak: a fully static executable links without the dynamic loader; then
 * the link-time address is the only definition. */
#pragma weak dlsym
#pragma weak dlopen
#pragma weak dlclose

#ifndef MADV_DONTNEED_LOCKED
#define MADV_DONTNEED_LOCKED 24
#endif
#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#ifndef SHM_REMAP
#define SHM_REMAP 040000
#endif
/* Linux 6.13: guard markers replace the range's pages (older headers lack it). */
#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif

/*
 * The ranges this thread is chaining for, innermost first: a frame on the
 * stack of each intercept that reported a range.  When the code we chain to
 * reaches a second patched definition (sbrk calls brk; an interposer calls
 * libc's munmap), that one finds its range already reported and stays
 * quiet.  A signal handler releasing other pages meanwhile still reports
 * them.  One TLS pointer: a load and two stores per event.
 *
 * A signal handler may leave an intercept with siglongjmp: chain_top then
 * still names a frame on stack that is reused.  So only a frame that looks
 * live is believed: an outer intercept is a caller, higher on the stack
 * than the frame below it, and a frame carries a seal of its address and
 * fields from its release until its chain is done.  A frame left behind
 * fails one or the other once its stack is written over, and the walk
 * stops there instead of reading another function's data as a range (a
 * false "reported": a lost event) or a pointer (a wild one).  A handler on
 * a stack below the one it interrupted (sigaltstack) may report a range
 * of the interrupted intercept again.
 */
typedef struct chain_frame_t {
    uintptr_t start, end;
    struct chain_frame_t *outer;
    uintptr_t seal;
} chain_frame_t;

static inline uintptr_t frame_seal(const chain_frame_t *frame)
{
    return (uintptr_t) frame ^ frame->start ^ (frame->end << 1) ^ ((uintptr_t) frame->outer << 2);
}

static __thread chain_frame_t *chain_top __attribute__((tls_model("initial-exec")));

/*
 * Frames are needed only where a chain can reach another intercept of ours:
 * when an interposer's definition and libc's are both patched.  Without one
 * (the usual case) munmap and madvise report and tail-call their chain.
 */
static bool chain_frames_needed;

/* Whether a live frame of an outer intercept of this thread covers [start, end). */
static inline bool reported_by_outer(const chain_frame_t *frame, uintptr_t start, uintptr_t end)
{
    for (const chain_frame_t *inner = frame, *outer = frame->outer;
         __builtin_expect(NULL != outer, 0) && (uintptr_t) outer > (uintptr_t) inner &&
         outer->seal == frame_seal(outer);
         inner = outer, outer = outer->outer) {
        if (start >= outer->start && end <= outer->end) {
            return true;
        }
    }
    return false;
}

/* Report [start, end) unless the chain of an outer intercept did already. */
static inline void release(chain_frame_t *frame, uintptr_t start, uintptr_t end)
{
    start &= ~(opal_mem_hooks_page_size - 1);
    frame->start = start;
    frame->end = end;
    frame->outer = chain_top;
    frame->seal = frame_seal(frame);
    if (__builtin_expect(end > start, 1) && !reported_by_outer(frame, start, end)) {
        opal_mem_hooks_dispatch(start, end - start, true);
    }
    chain_top = frame;
}

static inline void chain_done(chain_frame_t *frame)
{
    frame->seal = ~frame_seal(frame);
    chain_top = frame->outer;
}

static inline uintptr_t page_align_up(uintptr_t x)
{
    return (x + opal_mem_hooks_page_size - 1) & ~(opal_mem_hooks_page_size - 1);
}

static inline bool page_aligned(const void *p)
{
    return 0 == ((uintptr_t) p & (opal_mem_hooks_page_size - 1));
}

/* Cold paths live apart, so that the common one needs no stack frame. */
#define OPAL_COLD __attribute__((noinline, cold))

static OPAL_COLD int munmap_framed(opal_mem_variant_t *var, void *addr, size_t len)
{
    chain_frame_t frame;
    release(&frame, (uintptr_t) addr, (uintptr_t) addr + len);
    int rc = var->chain.munmap(addr, len);
    chain_done(&frame);
    return rc;
}

ENTRY_INLINE int munmap_common(opal_mem_variant_t *var, void *addr, size_t len)
{
    /* The kernel rejects an unaligned address: nothing is released. */
    if (__builtin_expect(!page_aligned(addr) || 0 == len, 0)) {
        return var->chain.munmap(addr, len);
    }
    if (__builtin_expect(chain_frames_needed, 0)) {
        return munmap_framed(var, addr, len);
    }
    opal_mem_hooks_report((uintptr_t) addr, len);
    return var->chain.munmap(addr, len);
}
/* Defines intercept_munmap_0 .. _<NUM_VARIANTS-1>. */
DEFINE_ENTRIES(munmap, int, (void *addr, size_t len), (addr, len))

/*
 * mremap releases the old range when it may move (MAYMOVE/FIXED, also
 * DONTUNMAP, which takes the pages away), its tail when it shrinks in
 * place, and with MREMAP_FIXED whatever was mapped at the destination.
 */
static void *mremap_common(opal_mem_variant_t *var, void *old, size_t old_size, size_t new_size,
                           int flags, void *new_addr)
{
    size_t old_len = old_size, new_len = new_size; /* what the kernel takes: huge pages rounded */
    opal_mem_extents_mremap_lens((uintptr_t) old, &old_len, &new_len);
    uintptr_t start = (uintptr_t) old, end = start;
    if (flags & (MREMAP_MAYMOVE | MREMAP_FIXED)) {
        end = start + old_len;
    } else if (new_len < old_len) {
        start = page_align_up(start + new_len);
        end = (uintptr_t) old + old_len;
    }
    /* Two frames when the destination is replaced too: a second patched
     * mremap further down the chain finds both ranges reported.  One array,
     * so that the destination's, the outer one, is the higher (as outer
     * frames are: reported_by_outer). */
    chain_frame_t frames[2];
    chain_frame_t *const dest_frame = &frames[1], *const frame = &frames[0];
    const bool fixed = (flags & MREMAP_FIXED) && new_size;
    if (fixed) {
        release(dest_frame, (uintptr_t) new_addr, (uintptr_t) new_addr + new_len);
    }
    release(frame, start, end);
    void *rc = var->chain.mremap(old, old_size, new_size, flags, new_addr);
    chain_done(frame);
    if (fixed) {
        chain_done(dest_frame);
    }
    return rc;
}
/* Defines intercept_mremap_0 .. _<NUM_VARIANTS-1>. */
DEFINE_ENTRIES(mremap, void *, (void *old, size_t old_size, size_t new_size, int flags, void *new_addr),
               (old, old_size, new_size, flags, new_addr))

static bool advice_drops_pages(int advice)
{
    return MADV_DONTNEED == advice || MADV_FREE == advice || MADV_REMOVE == advice ||
           MADV_DONTNEED_LOCKED == advice || MADV_GUARD_INSTALL == advice;
}

static OPAL_COLD int madvise_framed(opal_mem_variant_t *var, void *addr, size_t len, int advice)
{
    chain_frame_t frame;
    release(&frame, (uintptr_t) addr, (uintptr_t) addr + len);
    int rc = var->chain.madvise(addr, len, advice);
    chain_done(&frame);
    return rc;
}

ENTRY_INLINE int madvise_common(opal_mem_variant_t *var, void *addr, size_t len, int advice)
{
    if (!advice_drops_pages(advice) || !page_aligned(addr) || 0 == len) {
        return var->chain.madvise(addr, len, advice);
    }
    if (__builtin_expect(chain_frames_needed, 0)) {
        return madvise_framed(var, addr, len, advice);
    }
    opal_mem_hooks_report((uintptr_t) addr, len);
    return var->chain.madvise(addr, len, advice);
}
/* Defines intercept_madvise_0 .. _<NUM_VARIANTS-1>. */
DEFINE_ENTRIES(madvise, int, (void *addr, size_t len, int advice), (addr, len, advice))

/*
 * process_madvise gives the advice of madvise to each range of iov.  Only
 * the caller's own pages can be dropped by it: the kernel takes the
 * page-dropping advice from a process for itself alone (6.13 and later;
 * for another process it refuses them, and before 6.13 it refused them
 * always), so a pidfd that is not ours costs at most an event for a call
 * that fails.  Every range is reported: a later one may be released even
 * when an earlier one is not (the kernel stops at the first error).  A
 * vector the kernel refuses before reading it (more than UIO_MAXIOV ranges:
 * EINVAL) or cannot read (EFAULT) releases nothing, and must not fault
 * here either: the caller gets the kernel's error.  So the vector is first
 * read as the kernel reads it, through a system call (process_vm_readv of
 * our own memory: EFAULT where any of it is unreadable); where that call
 * is refused (a seccomp filter; qemu-user has none) only NULL is known to
 * be unreadable.
 */
#define IOV_CHUNK 32

static bool iov_readable(const struct iovec *iov, size_t n)
{
    struct iovec buf[IOV_CHUNK];
    const long self = (long) getpid();
    for (size_t at = 0; at < n; at += IOV_CHUNK) {
        const size_t k = n - at < IOV_CHUNK ? n - at : IOV_CHUNK;
        struct iovec local = {.iov_base = buf, .iov_len = k * sizeof(*iov)};
        struct iovec remote = {.iov_base = (void *) (iov + at), .iov_len = local.iov_len};
        const long got = syscall(SYS_process_vm_readv, self, &local, 1L, &remote, 1L, 0L);
        if (got != (long) local.iov_len) {
            /* Part of it, or none with EFAULT: the kernel's own copy fails the same way. */
            return got < 0 && EFAULT != errno;
        }
    }
    return true;
}

static OPAL_COLD void report_iov(const struct iovec *iov, size_t n)
{
    const int saved_errno = errno; /* the call through sets it, or leaves it as it was */
    if (iov_readable(iov, n)) {
        for (size_t i = 0; i < n; i++) {
            if (page_aligned(iov[i].iov_base) && 0 != iov[i].iov_len) {
                opal_mem_hooks_dispatch((uintptr_t) iov[i].iov_base, iov[i].iov_len, true);
            }
        }
    }
    errno = saved_errno;
}

static ssize_t process_madvise_common(opal_mem_variant_t *var, int pidfd, const struct iovec *iov,
                                      size_t n, int advice, unsigned flags)
{
    if (advice_drops_pages(advice) && NULL != iov && n <= UIO_MAXIOV) {
        report_iov(iov, n);
    }
    return var->chain.process_madvise(pidfd, iov, n, advice, flags);
}
/* Defines intercept_process_madvise_0 .. _<NUM_VARIANTS-1>. */
DEFINE_ENTRIES(process_madvise, ssize_t,
               (int pidfd, const struct iovec *iov, size_t n, int advice, unsigned flags),
               (pidfd, iov, n, advice, flags))

/*
 * remap_file_pages (an emulation since Linux 4.0) maps other pages of the
 * file over the range: the range's pages are released.  The kernel rounds
 * the start and the size down to pages.
 */
static int remap_file_pages_common(opal_mem_variant_t *var, void *addr, size_t size, int prot,
                                   size_t pgoff, int flags)
{
    const uintptr_t mask = opal_mem_hooks_page_size - 1;
    const uintptr_t start = (uintptr_t) addr & ~mask;
    chain_frame_t frame;
    release(&frame, start, start + (size & ~mask));
    int rc = var->chain.remap_file_pages(addr, size, prot, pgoff, flags);
    chain_done(&frame);
    return rc;
}
/* Defines intercept_remap_file_pages_0 .. _<NUM_VARIANTS-1>. */
DEFINE_ENTRIES(remap_file_pages, int, (void *addr, size_t size, int prot, size_t pgoff, int flags),
               (addr, size, prot, pgoff, flags))

static OPAL_COLD void *mmap_framed(opal_mem_variant_t *var, void *addr, size_t len, int prot,
                                   int flags, int fd, off_t off)
{
    chain_frame_t frame;
    release(&frame, (uintptr_t) addr,
            (uintptr_t) addr + opal_mem_extents_mmap_len((uintptr_t) addr, len, flags, fd));
    void *rc = var->chain.mmap(addr, len, prot, flags, fd, off);
    chain_done(&frame);
    return rc;
}

/* MAP_FIXED replaces whatever was mapped there; MAP_FIXED_NOREPLACE never does. */
static inline bool mmap_replaces(void *addr, size_t len, int flags)
{
    return __builtin_expect((flags & MAP_FIXED) && !(flags & MAP_FIXED_NOREPLACE), 0) &&
           page_aligned(addr) && 0 != len;
}

ENTRY_INLINE void *mmap_common(opal_mem_variant_t *var, void *addr, size_t len, int prot, int flags,
                               int fd, off_t off)
{
    if (!mmap_replaces(addr, len, flags)) {
        return var->chain.mmap(addr, len, prot, flags, fd, off);
    }
    return mmap_framed(var, addr, len, prot, flags, fd, off);
}

/* Defines intercept_mmap_0 .. _<NUM_VARIANTS-1>. */
DEFINE_ENTRIES(mmap, void *, (void *addr, size_t len, int prot, int flags, int fd, off_t off),
               (addr, len, prot, flags, fd, off))

static OPAL_COLD void *mmap64_framed(opal_mem_variant_t *var, void *addr, size_t len, int prot,
                                     int flags, int fd, off64_t off)
{
    chain_frame_t frame;
    release(&frame, (uintptr_t) addr,
            (uintptr_t) addr + opal_mem_extents_mmap_len((uintptr_t) addr, len, flags, fd));
    void *rc = var->chain.mmap64(addr, len, prot, flags, fd, off);
    chain_done(&frame);
    return rc;
}

ENTRY_INLINE void *mmap64_common(opal_mem_variant_t *var, void *addr, size_t len, int prot,
                                 int flags, int fd, off64_t off)
{
    if (!mmap_replaces(addr, len, flags)) {
        return var->chain.mmap64(addr, len, prot, flags, fd, off);
    }
    return mmap64_framed(var, addr, len, prot, flags, fd, off);
}

/* Defines intercept_mmap64_0 .. _<NUM_VARIANTS-1>. */
DEFINE_ENTRIES(mmap64, void *, (void *addr, size_t len, int prot, int flags, int fd, off64_t off),
               (addr, len, prot, flags, fd, off))

/* The kernel's current break (libc's cached copy may be stale). */
static uintptr_t current_break(void)
{
    return (uintptr_t) syscall(SYS_brk, 0);
}

/* Where a break moved from cur to 'to' releases from: below the heap's
 * start the kernel moves nothing (glibc's brk still returns 0). */
static uintptr_t heap_floor(uintptr_t to, uintptr_t cur)
{
    return to < opal_mem_extents_heap_start ? cur : to;
}

static int brk_common(opal_mem_variant_t *var, void *addr)
{
    /* brk(NULL) asks for the current break (glibc's sbrk does on first
     * use): the kernel moves nothing. */
    if (NULL == addr) {
        return var->chain.brk(addr);
    }
    uintptr_t cur = current_break();
    chain_frame_t frame;
    release(&frame, page_align_up(heap_floor((uintptr_t) addr, cur)), page_align_up(cur));
    int rc = var->chain.brk(addr);
    chain_done(&frame);
    return rc;
}
/* Defines intercept_brk_0 .. _<NUM_VARIANTS-1>. */
DEFINE_ENTRIES(brk, int, (void *addr), (addr))

static void *sbrk_common(opal_mem_variant_t *var, intptr_t increment)
{
    if (increment >= 0) {
        return var->chain.sbrk(increment);
    }
    uintptr_t cur = current_break();
    chain_frame_t frame;
    release(&frame, page_align_up(heap_floor(cur + increment, cur)), page_align_up(cur));
    void *rc = var->chain.sbrk(increment);
    chain_done(&frame);
    return rc;
}
/* Defines intercept_sbrk_0 .. _<NUM_VARIANTS-1>. */
DEFINE_ENTRIES(sbrk, void *, (intptr_t increment), (increment))

/* A SysV segment's size, from its shmid, without allocating. */
static size_t shm_segment_size(int shmid)
{
    struct shmid_ds ds;
    return 0 == shmctl(shmid, IPC_STAT, &ds) ? ds.shm_segsz : 0;
}

static int shmdt_common(opal_mem_variant_t *var, const void *addr)
{
    /* An unaligned address detaches nothing (EINVAL). */
    const uintptr_t end = page_aligned(addr) ? opal_mem_extents_shmdt_end((uintptr_t) addr)
                                             : (uintptr_t) addr;
    chain_frame_t frame;
    release(&frame, (uintptr_t) addr, end);
    int rc = var->chain.shmdt(addr);
    chain_done(&frame);
    return rc;
}
/* Defines intercept_shmdt_0 .. _<NUM_VARIANTS-1>. */
DEFINE_ENTRIES(shmdt, int, (const void *addr), (addr))

static void *shmat_common(opal_mem_variant_t *var, int shmid, const void *addr, int flags)
{
    if (!(flags & SHM_REMAP) || NULL == addr) {
        return var->chain.shmat(shmid, addr, flags);
    }
    uintptr_t start = (uintptr_t) addr & ~(opal_mem_hooks_page_size - 1);
    chain_frame_t frame;
    release(&frame, start, start + opal_mem_extents_shmat_len(start, shm_segment_size(shmid)));
    void *rc = var->chain.shmat(shmid, addr, flags);
    chain_done(&frame);
    return rc;
}
/* Defines intercept_shmat_0 .. _<NUM_VARIANTS-1>. */
DEFINE_ENTRIES(shmat, void *, (int shmid, const void *addr, int flags), (shmid, addr, flags))

/*
 * A file truncated below its pages, or with a hole punched in it, loses
 * those pages from every mapping of it (memory_file_extents.c): the
 * call names the file, so its mappings are looked up in /proc/self/maps,
 * and each range found is reported with a frame of its own.  Frames are
 * taken from the top of the array down, so that an outer one is the
 * higher (reported_by_outer); past FILE_FRAMES ranges the rest are
 * reported without one (a second patched definition down the chain
 * reports them again).  The lookup costs an fstat, and a maps walk only
 * when pages are released: a truncation that does not shrink the file
 * past a page boundary, or fallocate that only allocates, skips the walk.
 */
#define FILE_FRAMES 8

typedef struct file_release_t {
    chain_frame_t frames[FILE_FRAMES];
    int n;
} file_release_t;

static void file_range(uintptr_t start, uintptr_t end, void *arg)
{
    file_release_t *fr = arg;
    if (fr->n < FILE_FRAMES) {
        fr->n++;
        release(&fr->frames[FILE_FRAMES - fr->n], start, end);
    } else {
        opal_mem_hooks_dispatch(start, end - start, true);
    }
}

static void file_release_done(file_release_t *fr)
{
    for (int i = FILE_FRAMES - fr->n; i < FILE_FRAMES; i++) {
        chain_done(&fr->frames[i]); /* innermost (the last taken) first */
    }
}

/* ftruncate (fd >= 0) or truncate (path) to length. */
static OPAL_COLD void truncate_release(file_release_t *fr, int fd, const char *path, int64_t length)
{
    fr->n = 0;
    opal_mem_file_t file;
    if (length < 0 || !opal_mem_extents_file_stat(&file, fd, path)) {
        return;
    }
    /* From the page after the new end to the file's end: the kernel unmaps up to the end of the
     * file, and nothing is mapped past the old size (a grow racing with us in another thread
     * is covered too). */
    const uint64_t from = ((uint64_t) length + opal_mem_hooks_page_size - 1) &
                          ~(uint64_t) (opal_mem_hooks_page_size - 1);
    if (from < (uint64_t) file.st.st_size) {
        opal_mem_extents_file_ranges(&file, from, UINT64_MAX, file_range, fr);
    }
}

static OPAL_COLD void fallocate_release(file_release_t *fr, int fd, int mode, int64_t offset,
                                        int64_t len)
{
    fr->n = 0;
    opal_mem_file_t file;
    uint64_t lo, hi;
    if (offset >= 0 && len > 0 && 0 != (mode & ~FALLOC_FL_KEEP_SIZE) &&
        opal_mem_extents_file_stat(&file, fd, NULL) &&
        opal_mem_extents_fallocate(&file, mode, (uint64_t) offset, (uint64_t) len, &lo, &hi)) {
        opal_mem_extents_file_ranges(&file, lo, hi, file_range, fr);
    }
}

static int ftruncate_common(opal_mem_variant_t *var, int fd, off_t length)
{
    file_release_t fr;
    truncate_release(&fr, fd, NULL, length);
    int rc = var->chain.ftruncate(fd, length);
    file_release_done(&fr);
    return rc;
}
/* Defines intercept_ftruncate_0 .. _<NUM_VARIANTS-1>. */
DEFINE_ENTRIES(ftruncate, int, (int fd, off_t length), (fd, length))

static int truncate_common(opal_mem_variant_t *var, const char *path, off_t length)
{
    file_release_t fr;
    truncate_release(&fr, -1, path, length);
    int rc = var->chain.truncate(path, length);
    file_release_done(&fr);
    return rc;
}
/* Defines intercept_truncate_0 .. _<NUM_VARIANTS-1>. */
DEFINE_ENTRIES(truncate, int, (const char *path, off_t length), (path, length))

static int fallocate_common(opal_mem_variant_t *var, int fd, int mode, off_t offset, off_t len)
{
    file_release_t fr;
    fallocate_release(&fr, fd, mode, offset, len);
    int rc = var->chain.fallocate(fd, mode, offset, len);
    file_release_done(&fr);
    return rc;
}
/* Defines intercept_fallocate_0 .. _<NUM_VARIANTS-1>. */
DEFINE_ENTRIES(fallocate, int, (int fd, int mode, off_t offset, off_t len), (fd, mode, offset, len))

/* ftruncate64 & co.: see their chains in memory_variants.h. */
static int ftruncate64_common(opal_mem_variant_t *var, int fd, off64_t length)
{
    file_release_t fr;
    truncate_release(&fr, fd, NULL, length);
    int rc = var->chain.ftruncate64(fd, length);
    file_release_done(&fr);
    return rc;
}
/* Defines intercept_ftruncate64_0 .. _<NUM_VARIANTS-1>. */
DEFINE_ENTRIES(ftruncate64, int, (int fd, off64_t length), (fd, length))

static int truncate64_common(opal_mem_variant_t *var, const char *path, off64_t length)
{
    file_release_t fr;
    truncate_release(&fr, -1, path, length);
    int rc = var->chain.truncate64(path, length);
    file_release_done(&fr);
    return rc;
}
/* Defines intercept_truncate64_0 .. _<NUM_VARIANTS-1>. */
DEFINE_ENTRIES(truncate64, int, (const char *path, off64_t length), (path, length))

static int fallocate64_common(opal_mem_variant_t *var, int fd, int mode, off64_t offset,
                              off64_t len)
{
    file_release_t fr;
    fallocate_release(&fr, fd, mode, offset, len);
    int rc = var->chain.fallocate64(fd, mode, offset, len);
    file_release_done(&fr);
    return rc;
}
/* Defines intercept_fallocate64_0 .. _<NUM_VARIANTS-1>. */
DEFINE_ENTRIES(fallocate64, int, (int fd, int mode, off64_t offset, off64_t len),
               (fd, mode, offset, len))

/* What we intercept.  mmap64 is the same function as mmap on LP64 glibc,
 * but objects may import it under either name; it has a chain of its own,
 * as ftruncate64, truncate64 and fallocate64 do (memory_variants.h). */
typedef struct intercept_target_t {
    const char *name;
    uintptr_t link_addr;           /* the definition as this library links it */
    uintptr_t entry[NUM_VARIANTS]; /* intercept per variant */
    size_t chain;                  /* its chain in a variant: offsetof(opal_mem_variant_t, ...) */
} intercept_target_t;

#define TARGET(sym, real, fn)                                                                      \
    {#sym, (uintptr_t) &real, ENTRY_ADDRESSES(fn), offsetof(opal_mem_variant_t, chain.fn)}

static const intercept_target_t targets[] = {
    TARGET(munmap, munmap, munmap),
    TARGET(mremap, mremap, mremap),
    TARGET(madvise, madvise, madvise),
    TARGET(mmap, mmap, mmap),
    TARGET(mmap64, mmap64, mmap64),
    TARGET(brk, brk, brk),
    TARGET(sbrk, sbrk, sbrk),
    TARGET(shmdt, shmdt, shmdt),
    TARGET(shmat, shmat, shmat),
    /* No other hooker intercepts these. */
    TARGET(process_madvise, process_madvise, process_madvise),
    TARGET(remap_file_pages, remap_file_pages, remap_file_pages),
    TARGET(ftruncate, ftruncate, ftruncate),
    TARGET(truncate, truncate, truncate),
    TARGET(fallocate, fallocate, fallocate),
    TARGET(ftruncate64, ftruncate64, ftruncate64),
    TARGET(truncate64, truncate64, truncate64),
    TARGET(fallocate64, fallocate64, fallocate64),
};
#define NUM_TARGETS (sizeof(targets) / sizeof(targets[0]))
_Static_assert(NUM_TARGETS == OPAL_MEM_HOOKS_NUM_TARGETS, "a variant's patched[] is per target");

/* Where variant v keeps the chain of target t. */
static void **chain_of(const intercept_target_t *t, int v)
{
    return opal_mem_variant_chain(&opal_mem_variants[v], t->chain);
}

/* The function an address-based patcher patched for target t in variant v (0: none). */
static uintptr_t *patched(const intercept_target_t *t, int v)
{
    return &opal_mem_variants[v].patched[t - targets];
}

/*
 * The definitions of name in this process: [0] what callers reach, [1]
 * libc's own when that is another one (an interposer is in front of it).
 */
static void find_definitions(const intercept_target_t *t, uintptr_t def[2])
{
    def[0] = t->link_addr;
    def[1] = 0;
    if (NULL == dlsym || NULL == dlopen) {
        return; /* static executable: one definition */
    }
    uintptr_t global = (uintptr_t) dlsym(RTLD_DEFAULT, t->name);
    if (global) {
        def[0] = global;
    }
    void *libc = dlopen(LIBC_SO, RTLD_LAZY | RTLD_NOLOAD);
    if (libc) {
        uintptr_t own = (uintptr_t) dlsym(libc, t->name);
        if (own && own != def[0]) {
            def[1] = own;
        }
        dlclose(libc);
    }
}

/*
 * Send calls of def to variant v's entry; the chain is stored before the
 * patch goes live (other threads may enter the intercept at once).  A def
 * patched already under another name (mmap64 is mmap) is only chained to.
 */
static int patch_definition(mca_patcher_base_module_t *patcher, const intercept_target_t *t, int v,
                            uintptr_t def)
{
    const uintptr_t to = mca_patcher_base_chain_of(patcher, def);
    if (0 != to) {
        *chain_of(t, v) = (void *) to;
        return OPAL_SUCCESS;
    }
    int rc = patcher->patch_address_chain(def, t->entry[v], (uintptr_t *) chain_of(t, v));
    if (OPAL_SUCCESS != rc) {
        opal_output("cannot intercept %s at %p with patcher %s: %s", t->name, (void *) def,
                    patcher->super.module_component->mca_component_name, opal_strerror(rc));
        return rc;
    }
    mca_patcher_base_name_patch(patcher, def, t->name);
    *patched(t, v) = def;
    return OPAL_SUCCESS;
}

static int patch_by_address(mca_patcher_base_module_t *patcher, const intercept_target_t *t)
{
    uintptr_t def[2];
    find_definitions(t, def);
    *patched(t, VARIANT_GLOBAL) = *patched(t, VARIANT_LIBC) = 0;
    chain_frames_needed |= (0 != def[1]);
    for (int v = VARIANT_GLOBAL; v <= VARIANT_LIBC; v++) {
        if (0 == def[v]) {
            *chain_of(t, v) = *chain_of(t, VARIANT_GLOBAL);
            continue;
        }
        int rc = patch_definition(patcher, t, v, def[v]);
        if (OPAL_SUCCESS != rc) {
            return rc;
        }
    }
    return OPAL_SUCCESS;
}

/*
 * Another hooker may write over our jumps later: UCX's libucm in bistro
 * mode, loaded after our setup, puts its own jump at the entry of munmap &
 * co., and its hooks make the system call themselves, so ours would never
 * run again.  Put our jump back in front of its code and chain to it: both
 * see every call.  Cold: run from registration and support_level.  Only
 * the program's definitions: a copy of libc may be unmapped by a dlclose
 * in another thread while we read it, so the copies are looked at only
 * where the loader holds them still (memory_namespaces.c), and one whose
 * jump is gone is patched again there.
 */
int opal_mem_hooks_check_intercepts(mca_patcher_base_style_t style)
{
    mca_patcher_base_module_t *patcher = opal_patcher;
    if (NULL == patcher || MCA_PATCHER_BASE_STYLE_BY_ADDRESS != style) {
        return OPAL_SUCCESS; /* GOT slots: the linux component takes them back itself */
    }
    for (size_t i = 0; i < NUM_TARGETS; i++) {
        const intercept_target_t *t = &targets[i];
        for (int v = 0; v < VARIANT_FIRST_COPY; v++) {
            const uintptr_t func = *patched(t, v);
            if (0 == func || mca_patcher_base_patch_intact(patcher, func)) {
                continue;
            }
            opal_output("%s at %p: another hooker wrote over our jump since our setup (UCX's "
                        "libucm in bistro mode, loaded after us?); putting ours back in front "
                        "of it", t->name, (void *) func);
            int rc = patcher->patch_address_chain(func, t->entry[v], (uintptr_t *) chain_of(t, v));
            if (OPAL_SUCCESS != rc) {
                opal_output("%s at %p: cannot chain to the code written over our jump (%s): "
                            "release events through %s are LOST from now on", t->name,
                            (void *) func, opal_strerror(rc), t->name);
                return rc;
            }
            mca_patcher_base_name_patch(patcher, func, t->name);
            if (VARIANT_GLOBAL == v && 0 == *patched(t, VARIANT_LIBC)) {
                *chain_of(t, VARIANT_LIBC) = *chain_of(t, VARIANT_GLOBAL);
            }
        }
    }
    return OPAL_SUCCESS;
}

/*
 * For a GOT patcher: the calls that reach the copy's functions go to the
 * variant's entries, which chain to the copy's own (its errno); the copy's
 * own calls (its malloc's) are reached through its allocator.
 */
static int patch_copy_calls(mca_patcher_base_module_t *patcher, opal_mem_variant_t *variant,
                            uintptr_t (*lookup)(const char *name, void *arg), void *arg)
{
    const int v = opal_mem_variant_index(variant);
    for (size_t i = 0; i < NUM_TARGETS; i++) {
        const intercept_target_t *t = &targets[i];
        const uintptr_t def = lookup(t->name, arg);
        if (0 == def) {
            continue;
        }
        /* The chain before the first slot points to the entry. */
        __atomic_store_n(chain_of(t, v), (void *) def, __ATOMIC_RELEASE);
        int rc = patcher->patch_definition(t->name, def, t->entry[v]);
        if (OPAL_SUCCESS != rc) {
            return rc;
        }
    }
    return opal_mem_hooks_patch_alloc_copy(variant, lookup, arg);
}

int opal_mem_hooks_patch_copy(mca_patcher_base_style_t style, opal_mem_variant_t *variant,
                              uintptr_t (*lookup)(const char *name, void *arg), void *arg)
{
    mca_patcher_base_module_t *patcher = opal_patcher;
    const int v = opal_mem_variant_index(variant);
    if (NULL == patcher || v < VARIANT_FIRST_COPY || v >= NUM_VARIANTS) {
        return OPAL_ERR_BAD_PARAM;
    }
    int rc = OPAL_SUCCESS;
    if (MCA_PATCHER_BASE_STYLE_BY_SYMBOL == style) {
        rc = patch_copy_calls(patcher, variant, lookup, arg);
    }
    for (size_t i = 0; MCA_PATCHER_BASE_STYLE_BY_ADDRESS == style && i < NUM_TARGETS; i++) {
        const intercept_target_t *t = &targets[i];
        const uintptr_t def = lookup(t->name, arg);
        *patched(t, v) = 0;
        /* A def of 0: the copy does not have it, nobody there can call it. */
        rc = 0 == def ? OPAL_SUCCESS : patch_definition(patcher, t, v, def);
        if (OPAL_SUCCESS != rc) {
            break;
        }
    }
    if (OPAL_SUCCESS != rc) {
        opal_mem_hooks_unpatch_copy(style, variant, false);
    }
    return rc;
}

static bool patch_of_variant(mca_patcher_base_patch_t *patch, void *arg)
{
    const opal_mem_variant_t *variant = arg;
    const int v = opal_mem_variant_index(variant);
    for (size_t i = 0; i < NUM_TARGETS; i++) {
        if ((0 != variant->patched[i] && patch->patch_func == variant->patched[i]) ||
            patch->patch_value == targets[i].entry[v]) {
            return true;
        }
    }
    return false;
}

/* A GOT slot sent to one of the variant's entries, its allocator's included. */
static bool slot_of_variant(mca_patcher_base_patch_t *patch, void *arg)
{
    return patch_of_variant(patch, arg) || opal_mem_hooks_alloc_patch_of(patch, arg);
}

bool opal_mem_hooks_copy_intact(mca_patcher_base_style_t style, const opal_mem_variant_t *variant,
                                uintptr_t start, uintptr_t end)
{
    mca_patcher_base_module_t *patcher = opal_patcher;
    if (NULL == patcher) {
        return true;
    }
    if (MCA_PATCHER_BASE_STYLE_BY_SYMBOL == style) {
        /* The slots we wrote in the copy itself (its allocator's, which its
         * libc calls through its own GOT): a copy loaded anew at the same
         * place has its own values there.  A copy where we wrote none
         * cannot be told from a new one: taken as intact. */
        int count = 0;
        const bool intact = mca_patcher_base_patches_intact_in(patcher, start, end, slot_of_variant,
                                                               (void *) variant, &count);
        return 0 == count || intact;
    }
    for (size_t i = 0; i < NUM_TARGETS; i++) {
        if (0 != variant->patched[i] &&
            !mca_patcher_base_patch_intact(patcher, variant->patched[i])) {
            return false;
        }
    }
    return true;
}

void opal_mem_hooks_unpatch_copy(mca_patcher_base_style_t style, opal_mem_variant_t *variant,
                                 bool unloaded)
{
    mca_patcher_base_module_t *patcher = opal_patcher;
    if (NULL == patcher) {
        return;
    }
    if (MCA_PATCHER_BASE_STYLE_BY_SYMBOL == style) {
        /* Objects loaded from now on do not get the variant's entries. */
        for (size_t i = 0; i < NUM_TARGETS; i++) {
            patcher->patch_retire(targets[i].entry[opal_mem_variant_index(variant)]);
        }
        opal_mem_hooks_unpatch_alloc_copy(variant, unloaded);
    }
    if (unloaded) {
        mca_patcher_base_forget_patches(patcher, patch_of_variant, variant);
    } else {
        mca_patcher_base_restore_patches(patcher, patch_of_variant, variant);
    }
}

static int patch_by_symbol(mca_patcher_base_module_t *patcher, const intercept_target_t *t)
{
    /* patch_symbol stores the chain before any slot points to us. */
    int rc = patcher->patch_symbol(t->name, t->entry[VARIANT_GLOBAL],
                                   (uintptr_t *) chain_of(t, VARIANT_GLOBAL));
    uintptr_t to = (uintptr_t) *chain_of(t, VARIANT_GLOBAL);
    if (OPAL_SUCCESS != rc || 0 == to) {
        opal_output("cannot intercept %s with patcher %s: %s", t->name,
                    patcher->super.module_component->mca_component_name,
                    OPAL_SUCCESS != rc ? opal_strerror(rc) : "no definition to chain to");
        return OPAL_SUCCESS != rc ? rc : OPAL_ERR_NOT_FOUND;
    }
    *chain_of(t, VARIANT_LIBC) = (void *) to;
    return OPAL_SUCCESS;
}

int opal_mem_hooks_install_intercepts(mca_patcher_base_style_t style)
{
    mca_patcher_base_module_t *patcher = opal_patcher;
    const bool by_address = MCA_PATCHER_BASE_STYLE_BY_ADDRESS == style;
    int rc = OPAL_SUCCESS;
    chain_frames_needed = false; /* set per target, before its patch goes live */
    opal_mem_extents_init();
    /* Lookups that call dlopen come before the first patch: the dlopen we
     * reach may be another hooker's that re-patches every object after
     * each call (UCX's libucm), and a GOT patcher takes its slots back only
     * when it patches or sees a dlopen of the program. */
    if (!by_address) {
        opal_mem_hooks_alloc_inspect();
    }

    for (size_t i = 0; i < NUM_TARGETS && OPAL_SUCCESS == rc; i++) {
        rc = by_address ? patch_by_address(patcher, &targets[i]) : patch_by_symbol(patcher, &targets[i]);
    }
    /* A GOT patcher does not see libc calling itself (free → munmap):
     * announce what the allocator entry points are about to release. */
    if (OPAL_SUCCESS == rc && !by_address) {
        rc = opal_mem_hooks_install_alloc_intercepts();
    }
    return OPAL_SUCCESS == rc ? rc : OPAL_ERR_NOT_SUPPORTED;
}

void opal_mem_hooks_uninstall_intercepts(void)
{
    if (NULL != opal_patcher) {
        mca_patcher_base_restore_patches(opal_patcher, NULL, NULL);
    }
    opal_mem_hooks_uninstall_alloc_intercepts();
}

size_t opal_mem_hooks_intercept_names(const char **names, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < NUM_TARGETS && n < max; i++) {
        names[n++] = targets[i].name;
    }
    return n;
}
