/*
 * fork while another thread is inside dlopen.  The linux component's
 * dlopen intercept holds its lock across the loader's work, a library's
 * constructor included; the child has only the forking thread, so it must
 * not inherit that lock held.  glibc re-creates its own loader's lock in
 * the child, and a dlopen there works without us: it must with us too.
 *
 * A thread opens libslow.so, whose constructor says it runs and waits;
 * the main thread forks meanwhile, and the child opens libother.so under
 * an alarm.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"
#include "test/support/helper_libs.h"
#include "test/support/linux_hooks.h"
#include "test/support/test_util.h"

static void on_release(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) buf, (void) len, (void) cbdata, (void) from_alloc;
}

static void *open_slow(void *arg)
{
    (void) arg;
    return test_helper_open("libslow.so", RTLD_NOW);
}

int main(void)
{
    test_helper_mkdir("opal_got_fork_dlopen");
    test_write_file(test_helper_dir, "slow.c",
                    "#include <stdlib.h>\n"
                    "#include <unistd.h>\n"
                    "__attribute__((constructor)) static void wait_for_fork(void)\n"
                    "{\n"
                    "    char c = 0;\n"
                    "    if (1 == write(atoi(getenv(\"SLOW_OUT\")), &c, 1)) {\n"
                    "        (void) !read(atoi(getenv(\"SLOW_IN\")), &c, 1);\n"
                    "    }\n"
                    "}\n");
    test_write_file(test_helper_dir, "other.c", "int other(void) { return 7; }\n");
    test_helper_compile("libslow.so", "slow.c", "");
    test_helper_compile("libother.so", "other.c", "");
    int entered[2], release[2];
    CHECK(0 == pipe(entered) && 0 == pipe(release));
    char fd[16];
    snprintf(fd, sizeof(fd), "%d", entered[1]);
    setenv("SLOW_OUT", fd, 1);
    snprintf(fd, sizeof(fd), "%d", release[0]);
    setenv("SLOW_IN", fd, 1);

    if (!test_hooks_by_linux(on_release)) {
        return test_finish("got_fork_dlopen_test");
    }
    pthread_t opener;
    CHECK(0 == pthread_create(&opener, NULL, open_slow, NULL));
    char c;
    CHECK(1 == read(entered[0], &c, 1)); /* its constructor runs: inside dlopen */
    const pid_t child = fork();
    if (0 == child) {
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/libother.so", test_helper_dir);
        alarm(20);
        void *h = dlopen(path, RTLD_NOW);
        int (*other)(void) = NULL == h ? NULL : (int (*)(void)) dlsym(h, "other");
        _exit(NULL != other && 7 == other() ? 0 : 2);
    }
    CHECK(1 == write(release[1], &c, 1));
    void *slow = NULL;
    pthread_join(opener, &slow);
    CHECK(NULL != slow);
    test_child_ok(child, "the child's dlopen",
                  "(SIGALRM: it hung, the lock inherited held; 2: it failed)");
    CHECK(OPAL_SUCCESS == opal_mem_hooks_unregister_release(on_release));
    CHECK(OPAL_SUCCESS == opal_finalize_util());
    test_helper_cleanup();
    return test_finish("got_fork_dlopen_test");
}
