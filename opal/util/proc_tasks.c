#include "opal_config.h"

#include <dirent.h>
#include <stddef.h>

#include "opal/util/proc_tasks.h"

bool opal_proc_other_threads(void)
{
    DIR *dir = opendir("/proc/self/task");
    if (NULL == dir) {
        return true;
    }
    int n = 0;
    for (struct dirent *de; n < 2 && NULL != (de = readdir(dir));) {
        n += '.' != de->d_name[0]; /* not "." or ".." */
    }
    closedir(dir);
    return n > 1;
}
