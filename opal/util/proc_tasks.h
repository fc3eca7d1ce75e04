/*
 * The threads of this process, from /proc/self/task.
 */
#ifndef OPAL_UTIL_PROC_TASKS_H
#define OPAL_UTIL_PROC_TASKS_H

#include <stdbool.h>

/*
 * Whether the process has a thread besides the caller.  When it cannot be
 * told (no /proc), true: callers use it to decide whether code of theirs
 * can still be running somewhere.
 */
bool opal_proc_other_threads(void);

#endif
