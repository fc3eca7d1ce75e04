/*
 * The threads of this process, from /proc/self/task.
 */
#ifndef OPAL_UTIL_PROC_TASKS_H
#define OPAL_UTIL_PROC_TASKS_H

#include <stdbool.h>
#include <sys/types.h>

/*
 * Call fn(tid, arg) for every thread of the process until it returns
 * false.  Allocates nothing and takes no lock (a buffer on the stack and
 * the getdents64 system call): the code writes call it while another
 * thread may be stopped inside malloc.  False if /proc/self/task cannot
 * be read; true otherwise, also when fn stopped the walk.
 */
bool opal_proc_foreach_task(bool (*fn)(pid_t tid, void *arg), void *arg);

/*
 * Whether the process has a thread besides the caller.  When it cannot be
 * told (no /proc), true: callers use it to decide whether code of theirs
 * can still be running somewhere.
 */
bool opal_proc_other_threads(void);

#endif
