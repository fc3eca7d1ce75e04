#include "opal_config.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "opal/util/proc_tasks.h"

/* The kernel's record of getdents64 (glibc 2.36 declares no struct for it). */
typedef struct task_dirent_t {
    uint64_t ino;
    int64_t off;
    unsigned short reclen;
    unsigned char type;
    char name[];
} task_dirent_t;

bool opal_proc_foreach_task(bool (*fn)(pid_t tid, void *arg), void *arg)
{
    int fd = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        return false;
    }
    /* 8-aligned: the records are laid out for 64-bit fields */
    _Alignas(8) char buf[2048];
    bool more = true, ok = true;
    while (more) {
        long len = syscall(SYS_getdents64, fd, buf, sizeof(buf));
        if (len <= 0) {
            ok = 0 == len;
            break;
        }
        for (long at = 0; more && at < len;) {
            const task_dirent_t *de = (const task_dirent_t *) (buf + at);
            pid_t tid = (pid_t) atoi(de->name); /* "." and ".." give 0 */
            more = tid <= 0 || fn(tid, arg);
            at += de->reclen;
        }
    }
    close(fd);
    return ok;
}

static bool count_task(pid_t tid, void *arg)
{
    (void) tid;
    return ++*(int *) arg < 2; /* stop at the second */
}

bool opal_proc_other_threads(void)
{
    int n = 0;
    return !opal_proc_foreach_task(count_task, &n) || n > 1;
}
