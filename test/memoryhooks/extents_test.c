/*
 * Where the kernel releases more or less than a call's arguments say, the
 * event says what the kernel does (memory_extents.c):
 *
 *  - shmdt detaches every fragment of the segment that munmap left, also
 *    when the page at its address was unmapped first;
 *  - shmdt of a segment whose IPC_STAT the caller may not make (its read
 *    permission taken away after the attach) still reports the segment;
 *  - brk below the heap's start moves nothing (glibc's brk returns 0): no
 *    event; a real shrink of the break still gives one;
 *  - mmap(MAP_FIXED) of a file at an address no huge page size divides
 *    asks nothing of the file (it cannot be on hugetlbfs, which refuses
 *    such an address): no fstatfs on the hook path, counted by a seccomp
 *    filter that traps fstatfs.
 *
 * The huge-page cases are in hugetlb_extents_test.c.
 */
#include "opal_config.h"

#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"
#include "test/support/emulated.h"
#include "test/support/ranges.h"
#include "test/support/test_util.h"

#define PAGE          ((size_t) sysconf(_SC_PAGESIZE))
#define SEGMENT_PAGES 4

/* A private segment of SEGMENT_PAGES pages attached (its id in *id), removed at its last detach. */
static char *attach_segment(int *id)
{
    *id = shmget(IPC_PRIVATE, SEGMENT_PAGES * PAGE, IPC_CREAT | 0600);
    CHECK_MSG(*id >= 0, "shmget: %s", strerror(errno));
    if (*id < 0) {
        return NULL;
    }
    char *p = shmat(*id, NULL, 0);
    (void) shmctl(*id, IPC_RMID, NULL);
    CHECK_MSG((void *) -1 != p, "shmat: %s", strerror(errno));
    return (void *) -1 == p ? NULL : p;
}

static void test_shmdt_fragments(void)
{
    int id;
    char *p = attach_segment(&id);
    if (NULL == p) {
        return;
    }
    CHECK(0 == munmap(p, PAGE)); /* the first page goes: pages 1-3 stay, fragments of it */
    test_nranges = 0;
    CHECK(0 == shmdt(p));
    CHECK_MSG(test_ranges_cover((uintptr_t) p + PAGE, (uintptr_t) p + SEGMENT_PAGES * PAGE),
              "shmdt detached pages 1-%d, left by munmap of page 0: %d events, none covering them",
              SEGMENT_PAGES - 1, test_nranges);
}

/* In this process: IPC_STAT refused (no CAP_IPC_OWNER), shmdt still reports. */
static void shmdt_without_stat(void)
{
    int id;
    char *p = attach_segment(&id);
    if (NULL == p) {
        return;
    }
    /* Its owner takes the read permission away (IPC_SET): IPC_STAT then fails. */
    struct shmid_ds ds = {.shm_perm = {.uid = geteuid(), .gid = getegid(), .mode = 0200}};
    CHECK_MSG(0 == shmctl(id, IPC_SET, &ds), "IPC_SET: %s", strerror(errno));
    CHECK_MSG(shmctl(id, IPC_STAT, &ds) < 0, "IPC_STAT still allowed: the case is not made");
    test_nranges = 0;
    CHECK(0 == shmdt(p));
    CHECK_MSG(test_ranges_cover((uintptr_t) p, (uintptr_t) p + SEGMENT_PAGES * PAGE),
              "shmdt of a segment the caller may not IPC_STAT: %d events, none covering it",
              test_nranges);
}

static void test_shmdt_without_stat(void)
{
    if (0 != geteuid()) {
        shmdt_without_stat();
        return;
    }
    /* root may IPC_STAT anything (CAP_IPC_OWNER): a child as nobody. */
    fflush(NULL);
    const pid_t pid = fork();
    if (0 == pid) {
        if (0 != setgid(65534) || 0 != setuid(65534)) {
            fprintf(stderr, "setuid(65534): %s\n", strerror(errno));
            _exit(2);
        }
        shmdt_without_stat();
        _exit(test_failures ? 1 : 0);
    }
    int status = 0;
    CHECK(pid > 0 && pid == waitpid(pid, &status, 0));
    CHECK_MSG(WIFEXITED(status) && 0 == WEXITSTATUS(status), "the child as nobody: status %#x",
              status);
}

static void test_brk_below_heap(void)
{
    char *const before = sbrk(0);
    test_nranges = 0;
    CHECK(0 == brk((void *) (uintptr_t) PAGE)); /* glibc: 0, though nothing moved */
    CHECK(before == sbrk(0));
    if (test_emulated()) {
        printf("note: emulated: qemu-user keeps the break itself and /proc/self/stat has no "
               "start_brk: an event for brk below the heap is not checked\n");
    } else {
        CHECK_MSG(0 == test_nranges,
                  "brk below the heap's start moved nothing, yet %d events (the "
                  "first [%#lx, %#lx))",
                  test_nranges, (unsigned long) test_range_start[0],
                  (unsigned long) test_range_end[0]);
    }
    /* The control: a break grown by two pages and shrunk by one gives that page. */
    char *grown = sbrk((intptr_t) (2 * PAGE));
    CHECK((void *) -1 != grown);
    if ((void *) -1 == grown) {
        return;
    }
    char *const top = sbrk(0);
    test_nranges = 0;
    CHECK((void *) -1 != sbrk(-(intptr_t) PAGE));
    CHECK_MSG(test_ranges_cover(((uintptr_t) top - PAGE) & ~(PAGE - 1),
                                (uintptr_t) top & ~(PAGE - 1)),
              "a shrink of the break by one page: %d events, none covering it", test_nranges);
    (void) sbrk(-(intptr_t) PAGE);
}

static volatile sig_atomic_t statfs_calls;

static void count_trapped(int sig)
{
    (void) sig;
    statfs_calls++;
}

/* From here on fstatfs (and fstatfs64) raise SIGSYS instead of running; false if not allowed. */
static bool trap_fstatfs(void)
{
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_fstatfs, 2, 0),
#ifdef SYS_fstatfs64
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_fstatfs64, 1, 0),
#else
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_fstatfs, 1, 0),
#endif
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
    };
    struct sock_fprog prog = {.len = sizeof(code) / sizeof(code[0]), .filter = code};
    signal(SIGSYS, count_trapped);
    return 0 == prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) &&
           0 == prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

/* In a child (the filter stays for life): a file mapped over an unaligned page, and a control. */
static void test_file_mmap_asks_no_statfs(void)
{
    char path[] = "/tmp/extents_test.XXXXXX";
    const int fd = mkstemp(path);
    CHECK_MSG(fd >= 0, "mkstemp: %s", strerror(errno));
    if (fd < 0) {
        return;
    }
    (void) unlink(path);
    CHECK(0 == ftruncate(fd, (off_t) PAGE));
    /* Two pages: the second is at an odd page, which no huge page size divides. */
    char *area = mmap(NULL, 4 * PAGE, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(MAP_FAILED != area);
    char *odd = area + ((uintptr_t) area / PAGE % 2 ? 0 : PAGE);
    fflush(NULL);
    const pid_t pid = fork();
    if (0 == pid) {
        if (!trap_fstatfs()) {
            _exit(77);
        }
        statfs_calls = 0;
        (void) syscall(SYS_fstatfs, fd, NULL); /* the control: the filter counts */
        const int trapped = statfs_calls;
        statfs_calls = 0;
        test_nranges = 0;
        const bool mapped = MAP_FAILED !=
                            mmap(odd, PAGE, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0);
        const bool reported = test_ranges_cover((uintptr_t) odd, (uintptr_t) odd + PAGE);
        _exit(1 != trapped ? 3 : !mapped ? 4 : !reported ? 5 : 0 != statfs_calls ? 6 : 0);
    }
    int status = 0;
    CHECK(pid > 0 && pid == waitpid(pid, &status, 0));
    if (WIFEXITED(status) && 77 == WEXITSTATUS(status)) {
        printf("note: seccomp filters are not allowed here: fstatfs on mmap(MAP_FIXED) of a file "
               "not checked\n");
    } else {
        static const char *const why[] = {[3] = "the seccomp filter did not trap fstatfs",
                                          [4] = "mmap(MAP_FIXED) of the file failed",
                                          [5] = "mmap(MAP_FIXED) of the file gave no event",
                                          [6] = "mmap(MAP_FIXED) of a file at an address no huge "
                                                "page size divides made an fstatfs"};
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
        CHECK_MSG(WIFEXITED(status) && 0 == code, "the child: %s (status %#x)",
                  code >= 3 && code <= 6 ? why[code] : "died", status);
    }
    munmap(area, 4 * PAGE);
    close(fd);
}

int main(void)
{
    CHECK(OPAL_SUCCESS == opal_init_util(NULL, NULL));
    CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(test_ranges_record, NULL));
    test_shmdt_fragments();
    test_shmdt_without_stat();
    test_brk_below_heap();
    test_file_mmap_asks_no_statfs();
    CHECK(OPAL_SUCCESS == opal_mem_hooks_unregister_release(test_ranges_record));
    opal_finalize_util();
    return test_finish("extents_test");
}
