/*
 * A thread asleep in a system call with every signal blocked, its PC just
 * past the bytes a patch would write: the kernel may restart that call (a
 * SIGSTOP and SIGCONT, ptrace), moving the PC back onto the system call
 * instruction, inside what is by then our jump.  Such a thread cannot be
 * asked to move, so the patch must decline unless the PC is clear of the
 * window by the longest system call instruction (4 bytes): riscv64 glibc's
 * munmap is 'li a7; ecall', the 8 bytes written, the PC just past them.
 * x86-64 here: 'xor %eax,%eax; nop; syscall; ret', a read(2) whose syscall
 * ends where the 5-byte jump ends.  The patch declines while the thread
 * sleeps there, and succeeds once it has gone.
 */
#include "opal_config.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include "test/mca/patcher/overwrite/overwrite_test_util.h"
#include "test/support/emulated.h"

#if !defined(__x86_64__)
int main(void)
{
    TEST_SKIP("the sleeping target is written for x86-64 only");
}
#else
static const unsigned char read_fn[] = {
    0x31, 0xc0, /* xor %eax,%eax: SYS_read */
    0x90,       /* nop */
    0x0f, 0x05, /* syscall: ends at +5, where the jump ends */
    0xc3,       /* ret */
};

typedef long (*read_fn_t)(long fd, long buf, long count);

static read_fn_t target;
static int fds[2];

static long intercept(long fd, long buf, long count)
{
    (void) fd;
    (void) buf;
    (void) count;
    return -1;
}

/* Reads one byte through the target with every signal blocked. */
static void *sleeper(void *arg)
{
    (void) arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    char c;
    return (void *) target(fds[0], (long) &c, 1);
}

/* Whether thread tid sleeps in a read (/proc's syscall file starts with SYS_read's number, 0). */
static bool asleep_in_read(pid_t tid)
{
    char path[64], buf[256] = "";
    snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", (int) tid);
    FILE *f = fopen(path, "r");
    if (NULL == f) {
        return false;
    }
    bool in_read = NULL != fgets(buf, sizeof(buf), f) && 0 == strncmp(buf, "0 ", 2);
    fclose(f);
    return in_read;
}

int main(void)
{
    if (test_emulated()) {
        TEST_SKIP("under an emulator /proc shows the host thread's system call, not the guest's");
    }
    mca_patcher_base_module_t *patcher = overwrite_test_setup();
    code_page_t cp;
    code_page_init(&cp);
    target = (read_fn_t) code_page_add(&cp, read_fn, sizeof(read_fn), 0);
    code_page_seal(&cp);
    CHECK(0 == pipe(fds));

    pthread_t th;
    CHECK(0 == pthread_create(&th, NULL, sleeper, NULL));
    /* Wait until the other thread sleeps in the read. */
    bool asleep = false;
    for (int i = 0; i < 2000 && !asleep; i++) {
        usleep(1000);
        DIR *d = opendir("/proc/self/task");
        for (struct dirent *e; d && (e = readdir(d));) {
            pid_t tid = (pid_t) atoi(e->d_name);
            asleep |= tid > 0 && tid != getpid() && asleep_in_read(tid);
        }
        if (d) {
            closedir(d);
        }
    }
    CHECK_MSG(asleep, "the thread never slept in its read");
    uintptr_t chain;
    int rc = patcher->patch_address_chain((uintptr_t) target, (uintptr_t) intercept, &chain);
    CHECK_MSG(OPAL_ERR_NOT_SUPPORTED == rc,
              "the patch with a thread asleep just past the window returned %d, not a decline", rc);
    if (OPAL_SUCCESS == rc) {
        mca_patcher_base_restore_patches(patcher, NULL, NULL);
    }
    CHECK(1 == write(fds[1], "x", 1));
    void *got;
    pthread_join(th, &got);
    CHECK_MSG(1 == (long) got, "the sleeper's read returned %ld", (long) got);

    /* Gone: the same patch succeeds, and calls reach the intercept. */
    rc = patcher->patch_address_chain((uintptr_t) target, (uintptr_t) intercept, &chain);
    CHECK_MSG(OPAL_SUCCESS == rc, "the patch without the sleeper failed: %d", rc);
    CHECK(-1 == target(fds[0], 0, 0));
    mca_patcher_base_restore_patches(patcher, NULL, NULL);
    opal_finalize_util();
    return test_finish("overwrite_restart_test");
}
#endif
