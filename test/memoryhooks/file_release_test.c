/*
 * A file's pages released by a call on the file, not on an address: the
 * event names every range of this process that maps them
 * (memory_file_extents.c).  Run with each component (OMPI_MCA_patcher).
 * A memfd of 8 pages mapped shared whole at A, shared from its third page
 * at B, and private whole at P (some pages copied):
 *
 *  - ftruncate that grows the file reports nothing;
 *  - a hole punched over whole pages reports those pages in each mapping,
 *    exactly; one that cuts pages only (zeroed in place) reports nothing;
 *  - ftruncate that shrinks reports every mapped page past the new end's
 *    page, the private mapping's too; one within the last page nothing;
 *  - ftruncate and fallocate on an fd mapped nowhere report nothing; a
 *    shrink of a file mapped at ten places (more than the intercept's
 *    frames) reports each;
 *  - the 64-bit forms do the same;
 *  - in a regular file in /tmp a hole's pages are reported (maybe rounded
 *    out), and truncate by path reports its mapping; errno is the call's,
 *    or as it was after a call that succeeds.
 */
#define _GNU_SOURCE
#include "opal_config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"
#include "test/support/ranges.h"
#include "test/support/test_util.h"

#define PAGE  ((uintptr_t) sysconf(_SC_PAGESIZE))
#define PAGES 8

static char *a, *b, *p; /* b maps the file from its page 2 */

/* Whether the events are exactly [start[i], end[i]) for i < n, in any order. */
static bool events_are(const char *what, int n, const uintptr_t *start, const uintptr_t *end)
{
    bool same = test_nranges == n;
    for (int i = 0; i < n && same; i++) {
        bool found = false;
        for (int k = 0; k < test_nranges && !found; k++) {
            found = test_range_start[k] == start[i] && test_range_end[k] == end[i];
        }
        same = found;
    }
    if (!same) {
        fprintf(stderr, "%s: %d events, expected %d:", what, test_nranges, n);
        for (int k = 0; k < test_nranges; k++) {
            fprintf(stderr, " [%#lx, %#lx)", (unsigned long) test_range_start[k],
                    (unsigned long) test_range_end[k]);
        }
        fprintf(stderr, "; a %p, b %p (from page 2), p %p\n", (void *) a, (void *) b, (void *) p);
    }
    return same;
}

/* Pages [from, to) of the file, as mapped at a, b and p. */
static bool file_pages_reported(const char *what, uintptr_t from, uintptr_t to)
{
    uintptr_t start[3], end[3];
    int n = 0;
    const uintptr_t bases[3] = {(uintptr_t) a, (uintptr_t) b - 2 * PAGE, (uintptr_t) p};
    for (int i = 0; i < 3; i++) {
        uintptr_t lo = from, hi = to;
        if (1 == i && lo < 2 * PAGE) {
            lo = 2 * PAGE; /* b starts at page 2 */
        }
        if (lo < hi) {
            start[n] = bases[i] + lo;
            end[n++] = bases[i] + hi;
        }
    }
    return events_are(what, n, start, end);
}

static void test_memfd(void)
{
    int fd = memfd_create("file_release_test", 0);
    if (fd < 0) {
        printf("note: no memfd_create (%s): the memfd cases are not run\n", strerror(errno));
        return;
    }
    CHECK(0 == ftruncate(fd, PAGES * PAGE));
    a = mmap(NULL, PAGES * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    b = mmap(NULL, (PAGES - 2) * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 2 * PAGE);
    p = mmap(NULL, PAGES * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    CHECK(MAP_FAILED != a && MAP_FAILED != b && MAP_FAILED != p);
    if (MAP_FAILED == a || MAP_FAILED == b || MAP_FAILED == p) {
        return;
    }
    memset(a, 1, PAGES * PAGE);
    for (uintptr_t i = 0; i < PAGES; i++) {
        if (i & 1) {
            p[i * PAGE] = 2; /* a private copy */
        } else {
            CHECK(1 == *(volatile char *) (p + i * PAGE)); /* the file's page */
        }
    }

    test_nranges = 0;
    CHECK(0 == ftruncate(fd, (PAGES + 2) * PAGE));
    CHECK_MSG(events_are("ftruncate that grows", 0, NULL, NULL), "it releases nothing");

    test_nranges = 0;
    CHECK(0 == fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 2 * PAGE, 2 * PAGE));
    CHECK_MSG(file_pages_reported("a hole over pages 2-3", 2 * PAGE, 4 * PAGE),
              "pages 2-3 in each mapping");
    CHECK(0 == a[2 * PAGE] && 0 == b[0]); /* the new pages are the hole's zeros */

    test_nranges = 0;
    errno = EDOM;
    CHECK(0 == fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 4 * PAGE + 100, PAGE));
    CHECK_MSG(EDOM == errno, "errno after a call that succeeds: %d, not as it was", errno);
    CHECK_MSG(events_are("a hole that cuts pages 4 and 5", 0, NULL, NULL),
              "zeroed in place, they keep their pages");
    CHECK(1 == a[4 * PAGE] && 0 == a[4 * PAGE + 100] && 1 == a[5 * PAGE + 100]);

    /* The 64-bit forms (other functions where off_t is 32 bits). */
    test_nranges = 0;
    CHECK(0 == fallocate64(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, PAGE));
    CHECK_MSG(file_pages_reported("fallocate64, a hole over page 0", 0, PAGE),
              "page 0 where it is mapped");

    test_nranges = 0;
    CHECK(0 == posix_fallocate(fd, 0, (PAGES + 4) * PAGE));
    CHECK_MSG(events_are("posix_fallocate", 0, NULL, NULL), "it allocates only");

    test_nranges = 0;
    CHECK(0 == ftruncate(fd, 5 * PAGE + 10));
    CHECK_MSG(file_pages_reported("ftruncate to 5 pages and 10 bytes", 6 * PAGE, PAGES * PAGE),
              "pages 6-7 in each mapping (the private copies are dropped too)");

    test_nranges = 0;
    CHECK(0 == ftruncate(fd, 5 * PAGE + 1));
    CHECK_MSG(events_are("ftruncate within the last page", 0, NULL, NULL),
              "its page stays, tail zeroed");

    test_nranges = 0;
    CHECK(0 == ftruncate64(fd, 4 * PAGE));
    CHECK_MSG(file_pages_reported("ftruncate64 to 4 pages", 4 * PAGE, PAGES * PAGE),
              "from page 4 to the end of each mapping");

    test_nranges = 0;
    errno = 0;
    CHECK(-1 == ftruncate(-1, 0) && EBADF == errno);
    CHECK_MSG(events_are("ftruncate of a bad fd", 0, NULL, NULL), "it releases nothing");

    munmap(a, PAGES * PAGE);
    munmap(b, (PAGES - 2) * PAGE);
    munmap(p, PAGES * PAGE);
    close(fd);

    /* An fd whose file is mapped nowhere. */
    fd = memfd_create("file_release_test_unmapped", 0);
    CHECK(fd >= 0 && 0 == ftruncate(fd, PAGES * PAGE));
    test_nranges = 0;
    CHECK(0 == fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 2 * PAGE));
    CHECK(0 == ftruncate(fd, 0));
    CHECK_MSG(events_are("a file mapped nowhere", 0, NULL, NULL), "nothing to release");
    close(fd);
}

/* More mappings than the intercept has frames for (8): each is reported. */
static void test_many_mappings(void)
{
    enum { N = 10 };
    int fd = memfd_create("file_release_test_many", 0);
    if (fd < 0 || 0 != ftruncate(fd, 2 * PAGE)) {
        printf("note: no memfd (%s): mappings beyond the frames are not checked\n",
               strerror(errno));
        return;
    }
    char *m[N];
    uintptr_t start[N], end[N];
    int n = 0;
    for (; n < N; n++) {
        m[n] = mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        CHECK(MAP_FAILED != m[n]);
        if (MAP_FAILED == m[n]) {
            break;
        }
        m[n][PAGE] = 1;
        start[n] = (uintptr_t) m[n] + PAGE;
        end[n] = (uintptr_t) m[n] + 2 * PAGE;
    }
    test_nranges = 0;
    CHECK(0 == ftruncate(fd, PAGE));
    CHECK_MSG(events_are("a shrink of a file mapped at ten places", n, start, end),
              "page 1 of each mapping");
    for (int i = 0; i < n; i++) {
        munmap(m[i], 2 * PAGE);
    }
    close(fd);
}

static void test_truncate_path(void)
{
    char path[] = "/tmp/file_release_test.XXXXXX";
    int fd = mkstemp(path);
    CHECK_MSG(fd >= 0, "mkstemp: %s", strerror(errno));
    if (fd < 0) {
        return;
    }
    CHECK(0 == ftruncate(fd, 4 * PAGE));
    char *m = mmap(NULL, 4 * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(MAP_FAILED != m);
    if (MAP_FAILED != m) {
        memset(m, 1, 4 * PAGE);
        /* Outside tmpfs a hole may be reported rounded out: its pages at least. */
        test_nranges = 0;
        if (0 == fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 2 * PAGE, PAGE)) {
            CHECK_MSG(test_ranges_cover((uintptr_t) m + 2 * PAGE, (uintptr_t) m + 3 * PAGE),
                      "a hole over page 2 of a file in /tmp: %d events, none covering it",
                      test_nranges);
        } else {
            printf("note: no hole punched in %s (%s): not checked\n", path, strerror(errno));
        }
        test_nranges = 0;
        CHECK(0 == truncate(path, PAGE));
        const uintptr_t start = (uintptr_t) m + PAGE, end = (uintptr_t) m + 4 * PAGE;
        CHECK_MSG(events_are("truncate by path to one page", 1, &start, &end),
                  "pages 1-3 of its mapping");
        munmap(m, 4 * PAGE);
    }
    close(fd);
    unlink(path);
}

int main(void)
{
    CHECK(OPAL_SUCCESS == opal_init_util(NULL, NULL));
    CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(test_ranges_record, NULL));
    printf("component: %s\n", mca_patcher_base_selected_name());
    test_memfd();
    test_many_mappings();
    test_truncate_path();
    CHECK(OPAL_SUCCESS == opal_mem_hooks_unregister_release(test_ranges_record));
    opal_finalize_util();
    return test_finish("file_release_test");
}
