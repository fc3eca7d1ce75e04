/*
 * opal/util/proc_maps: a mapping's VmFlags and KernelPageSize from smaps
 * (what maps does not show, e.g. "bt" for an arm64 page guarded by BTI,
 * which a patch's mprotect must keep, or a hugetlb mapping's huge page).
 * Against a written smaps text (the flags of the mapping holding the
 * address only, none for an address between mappings or past the last
 * one, whole flags only; addresses that fit 32 bits), then natively
 * against /proc/self/smaps: a private read-write page says rd, wr and not
 * ex, and the small page size; a read-only one rd and not wr; and the
 * offset column of /proc/self/maps for a file mapped from its third page.
 * qemu-user passes the host's smaps through, so the second part is
 * skipped there (the first still runs).
 */
#include "opal_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/util/proc_maps.h"
#include "test/support/emulated.h"
#include "test/support/test_util.h"

static const char smaps_text[] = "400000-401000 r-xp 00000000 fe:00 12 /usr/bin/prog\n"
                                 "Size:                  4 kB\n"
                                 "AnonHugePages:         0 kB\n"
                                 "VmFlags: rd ex mr mw me bt \n"
                                 "7f000000-7f002000 rw-p 00000000 00:00 0 \n"
                                 "Size:                  8 kB\n"
                                 "KernelPageSize:     2048 kB\n"
                                 "VmFlags: rd wr mr mw me ac btx\n"
                                 "7f005000-7f006000 r-xp 00000000 fe:00 13 /usr/lib/libc.so.6\n"
                                 "VmFlags: rd ex mr mw me\n";

int main(void)
{
    char path[] = "/tmp/proc_maps_test.XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    CHECK((ssize_t) (sizeof(smaps_text) - 1) == write(fd, smaps_text, sizeof(smaps_text) - 1));
    close(fd);
    CHECK_MSG(opal_proc_maps_vmflag(path, 0x400800, "bt"), "bt of the first mapping not found");
    CHECK_MSG(opal_proc_maps_vmflag(path, 0x400000, "ex"), "ex at the first byte not found");
    CHECK_MSG(!opal_proc_maps_vmflag(path, 0x401000, "bt"),
              "an address past the mapping has its flags");
    CHECK_MSG(!opal_proc_maps_vmflag(path, 0x7f001000, "bt"), "btx taken for bt");
    CHECK_MSG(opal_proc_maps_vmflag(path, 0x7f001000, "ac"), "ac of the second mapping not found");
    CHECK_MSG(!opal_proc_maps_vmflag(path, 0x7f003000, "rd"), "a gap between mappings has flags");
    CHECK_MSG(opal_proc_maps_vmflag(path, 0x7f005fff, "rd") &&
                  !opal_proc_maps_vmflag(path, 0x7f005fff, "bt"),
              "the last mapping's flags are wrong");
    CHECK_MSG(!opal_proc_maps_vmflag(path, 0x7f006000, "rd"), "past the last mapping has flags");
    CHECK(!opal_proc_maps_vmflag("/nonexistent/smaps", 0x400000, "rd"));
    CHECK_MSG(2048 * 1024 == opal_proc_maps_page_size(path, 0x7f001000),
              "the second mapping's KernelPageSize is not 2 MiB");
    CHECK_MSG(0 == opal_proc_maps_page_size(path, 0x400000), "a page size where smaps gives none");
    CHECK_MSG(0 == opal_proc_maps_page_size(path, 0x7f003000),
              "a gap between mappings has a page size");
    unlink(path);

    if (test_emulated()) {
        printf("note: emulated: /proc/self/smaps is the host's, not checked\n");
        return test_finish("proc_maps_test");
    }
    const size_t page = (size_t) sysconf(_SC_PAGESIZE);
    unsigned char *rw = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                             0);
    unsigned char *ro = mmap(NULL, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(MAP_FAILED != rw && MAP_FAILED != ro);
    CHECK_MSG(opal_proc_maps_vmflag(NULL, (uintptr_t) rw, "rd") &&
                  opal_proc_maps_vmflag(NULL, (uintptr_t) rw + page - 1, "wr") &&
                  !opal_proc_maps_vmflag(NULL, (uintptr_t) rw, "ex"),
              "a private read-write page's VmFlags are not rd wr without ex");
    CHECK_MSG(page == opal_proc_maps_page_size(NULL, (uintptr_t) rw),
              "a private read-write page's KernelPageSize is not the page size");
    CHECK_MSG(opal_proc_maps_vmflag(NULL, (uintptr_t) ro, "rd") &&
                  !opal_proc_maps_vmflag(NULL, (uintptr_t) ro, "wr"),
              "a read-only page's VmFlags are not rd without wr");
    munmap(rw, page);
    munmap(ro, page);

    /* The offset column: a file of three pages mapped from its third. */
    char file[] = "/tmp/proc_maps_test.XXXXXX";
    fd = mkstemp(file);
    CHECK(fd >= 0 && 0 == ftruncate(fd, (off_t) (3 * page)));
    unsigned char *third = mmap(NULL, page, PROT_READ, MAP_SHARED, fd, (off_t) (2 * page));
    CHECK(MAP_FAILED != third);
    opal_proc_maps_entry_t entry;
    CHECK(OPAL_SUCCESS == opal_proc_maps_find((uintptr_t) third, &entry));
    CHECK_MSG(2 * page == entry.offset, "the offset column read as %#lx, not %#zx",
              (unsigned long) entry.offset, 2 * page);
    /* The dev and inode columns: stat's device (major:minor) and inode of the file. */
    struct stat st;
    CHECK(0 == fstat(fd, &st));
    CHECK_MSG(major(st.st_dev) == entry.dev_major && minor(st.st_dev) == entry.dev_minor &&
                  (uint64_t) st.st_ino == entry.inode,
              "the dev and inode columns read as %x:%x %llu, stat says %x:%x %llu", entry.dev_major,
              entry.dev_minor, (unsigned long long) entry.inode, major(st.st_dev), minor(st.st_dev),
              (unsigned long long) st.st_ino);
    munmap(third, page);
    close(fd);
    unlink(file);
    return test_finish("proc_maps_test");
}
