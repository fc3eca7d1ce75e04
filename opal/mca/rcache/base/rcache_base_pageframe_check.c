/*
 * Stale-hit sanitizer: a registration remembers the physical frames of its
 * pages (/proc/self/pagemap) when it is made; at every cache hit they are
 * read again.  A difference means the cache is handing out a registration
 * whose pages are gone: the device would write into the old frames.
 */
#include "opal_config.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/rcache/base/base.h"
#include "opal/util/output.h"

#define PM_PRESENT  (1ull << 63)
#define PM_PFN_MASK ((1ull << 55) - 1)

static uint64_t mismatches;
static int unavailable_said;

/*
 * /proc/self/pagemap stays open: strict mode reads it at every hit.  The
 * file belongs to the address space it was opened in, so a forked child
 * (a new generation) opens its own.
 */
static int pagemap_fd = -1;
static uint32_t pagemap_gen;

static int pagemap(void)
{
    const uint32_t gen = __atomic_load_n(&mca_rcache_base_fork_gen, __ATOMIC_ACQUIRE);
    int fd = __atomic_load_n(&pagemap_fd, __ATOMIC_ACQUIRE);
    if (fd >= 0 && gen == __atomic_load_n(&pagemap_gen, __ATOMIC_RELAXED)) {
        return fd;
    }
    int mine = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (mine < 0) {
        return -1;
    }
    /* The first opener in this generation keeps its descriptor; a racing one uses it. */
    if (__atomic_compare_exchange_n(&pagemap_fd, &fd, mine, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE)) {
        __atomic_store_n(&pagemap_gen, gen, __ATOMIC_RELAXED);
        return mine;
    }
    close(mine);
    return fd;
}

int mca_rcache_base_frames_read(const void *addr, size_t npages, uint64_t *pfns)
{
    size_t page = (size_t) sysconf(_SC_PAGESIZE);
    int fd = pagemap();
    if (fd < 0) {
        return OPAL_ERR_NOT_AVAILABLE;
    }
    off_t off = (off_t) ((uintptr_t) addr / page * sizeof(uint64_t));
    size_t want = npages * sizeof(uint64_t);
    ssize_t got = pread(fd, pfns, want, off);
    if (got != (ssize_t) want) {
        return OPAL_ERR_NOT_AVAILABLE;
    }
    bool any_present = false, any_frame = false;
    for (size_t i = 0; i < npages; i++) {
        any_present = any_present || (pfns[i] & PM_PRESENT);
        pfns[i] = (pfns[i] & PM_PRESENT) ? (pfns[i] & PM_PFN_MASK) : 0;
        any_frame = any_frame || pfns[i];
    }
    /* Unprivileged readers see present pages with frame number 0. */
    return any_present && !any_frame ? OPAL_ERR_NOT_AVAILABLE : OPAL_SUCCESS;
}

static size_t reg_pages(const mca_rcache_base_registration_t *reg)
{
    size_t page = (size_t) sysconf(_SC_PAGESIZE);
    return ((size_t) (reg->bound - reg->base) + 1) / page;
}

void mca_rcache_base_frames_record(mca_rcache_base_registration_t *reg)
{
    size_t n = reg_pages(reg);
    uint64_t *frames = malloc(n * sizeof(*frames));
    if (NULL == frames) {
        return;
    }
    if (OPAL_SUCCESS != mca_rcache_base_frames_read(reg->base, n, frames)) {
        if (0 == __atomic_fetch_add(&unavailable_said, 1, __ATOMIC_RELAXED)) {
            opal_output("rcache: rcache_base_verify_frames: physical frames cannot be read from "
                        "/proc/self/pagemap here (needs CAP_SYS_ADMIN); stale hits will not be "
                        "detected");
        }
        free(frames);
        return;
    }
    reg->reg_frames = frames;
}

/*
 * The first page of reg whose frame differs from the one recorded (its
 * index, with both frames), or -1.  A page not present at registration
 * (no pin) proves nothing; frames that cannot be read now prove nothing.
 */
static long first_mismatch(const mca_rcache_base_registration_t *reg, uint64_t *was, uint64_t *now)
{
    size_t n = reg_pages(reg), page = (size_t) sysconf(_SC_PAGESIZE);
    uint64_t cur[64];
    for (size_t first = 0; first < n; first += 64) {
        size_t k = n - first < 64 ? n - first : 64;
        if (OPAL_SUCCESS != mca_rcache_base_frames_read(reg->base + first * page, k, cur)) {
            return -1;
        }
        for (size_t i = 0; i < k; i++) {
            if (0 != reg->reg_frames[first + i] && reg->reg_frames[first + i] != cur[i]) {
                *was = reg->reg_frames[first + i];
                *now = cur[i];
                return (long) (first + i);
            }
        }
    }
    return -1;
}

bool mca_rcache_base_frames_check(mca_rcache_base_registration_t *reg, const char *call)
{
    uint64_t was, now;
    long i = NULL == reg->reg_frames ? -1 : first_mismatch(reg, &was, &now);
    if (i < 0) {
        return true;
    }
    __atomic_add_fetch(&mismatches, 1, __ATOMIC_RELAXED);
    opal_output("rcache: STALE REGISTRATION handed out by %s: registration [%p, %p] "
                "page %p was frame 0x%llx when registered, is 0x%llx now",
                call, (void *) reg->base, (void *) reg->bound,
                (void *) (reg->base + (size_t) i * (size_t) sysconf(_SC_PAGESIZE)),
                (unsigned long long) was, (unsigned long long) now);
    if (2 == mca_rcache_base_verify_frames) {
        abort();
    }
    return false;
}

bool mca_rcache_base_frames_same(const mca_rcache_base_registration_t *reg)
{
    uint64_t was, now;
    return NULL == reg->reg_frames || first_mismatch(reg, &was, &now) < 0;
}

void mca_rcache_base_frames_release(mca_rcache_base_registration_t *reg)
{
    free(reg->reg_frames);
    reg->reg_frames = NULL;
}

uint64_t mca_rcache_base_frames_mismatches(void)
{
    return __atomic_load_n(&mismatches, __ATOMIC_RELAXED);
}
