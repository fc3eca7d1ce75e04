/*
 * Nothing is patched before the delayed setup; after the last finalize
 * every patched byte and GOT slot is as before, the DSO components are
 * unloaded, and 1000 init/setup/finalize rounds (250 under the emulator)
 * leak nothing.
 */
#include "opal_config.h"

#include <dirent.h>
#include <malloc.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"
#include "test/support/emulated.h"
#include "test/support/snapshot.h"
#include "test/support/test_util.h"

static volatile int events; /* volatile: munmap is declared "leaf" */

static void count_event(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) buf, (void) len, (void) cbdata, (void) from_alloc;
    events++;
}

static int dso_components_loaded(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void) size;
    if (strstr(info->dlpi_name, "mca_patcher_") || strstr(info->dlpi_name, "mca_rcache_")) {
        (*(int *) arg)++;
    }
    return 0;
}

static int count_dsos(void)
{
    int n = 0;
    dl_iterate_phdr(dso_components_loaded, &n);
    return n;
}

static int count_entries(const char *dir)
{
    int n = 0;
    DIR *d = opendir(dir);
    while (d && readdir(d)) {
        n++;
    }
    if (d) {
        closedir(d);
    }
    return n;
}

static int count_maps(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    int n = 0, c;
    while (EOF != (c = fgetc(f))) {
        n += ('\n' == c);
    }
    fclose(f);
    return n;
}

static bool one_round(void)
{
    if (OPAL_SUCCESS != opal_init_util(NULL, NULL)) {
        return false;
    }
    bool ok = OPAL_SUCCESS == opal_mem_hooks_register_release(count_event, NULL);
    opal_finalize_util();
    return ok;
}

int main(int argc, char **argv)
{
    (void) argc;
    snapshot_bind_now(argv);
    snapshot_t before;
    snapshot_take(&before);

    CHECK(OPAL_SUCCESS == opal_init_util(NULL, NULL));
    CHECK_MSG(0 == snapshot_diff(&before, "after opal_init_util"), "patched before the delayed setup");
    CHECK(NULL == opal_patcher);

    CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(count_event, NULL));
    CHECK(snapshot_diff(&before, "(expected) after setup") > 0);
    void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    events = 0;
    munmap(p, 4096);
    CHECK(1 == events);
    opal_finalize_util();

    CHECK_MSG(0 == snapshot_diff(&before, "after the last finalize"), "not restored");
    /* Under qemu-user /proc/self/task lists the emulator's own threads too,
     * so the components stay loaded as in a process with other threads. */
    if (NULL == getenv("OPAL_TEST_EMULATOR") || '\0' == getenv("OPAL_TEST_EMULATOR")[0]) {
        CHECK_MSG(0 == count_dsos(), "DSO components still loaded after finalize");
    } else {
        printf("not checked under the emulator: the DSO components' unload at the last "
               "finalize (qemu-user shows its own threads in /proc/self/task)\n");
    }
    p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    events = 0;
    munmap(p, 4096);
    CHECK_MSG(0 == events, "a callback ran after finalize");

    /* Nested init: only the last finalize restores. */
    CHECK(OPAL_SUCCESS == opal_init_util(NULL, NULL));
    CHECK(OPAL_SUCCESS == opal_init_util(NULL, NULL));
    CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(count_event, NULL));
    opal_finalize_util();
    CHECK(NULL != opal_patcher);
    opal_finalize_util();
    CHECK(NULL == opal_patcher);
    CHECK(OPAL_ERR_NOT_INITIALIZED == opal_finalize_util());
    CHECK(0 == snapshot_diff(&before, "after nested finalize"));

    /* Rounds: the first ones may warm caches; then nothing may grow. */
    for (int i = 0; i < 10; i++) {
        CHECK(one_round());
    }
    int fds = count_entries("/proc/self/fd"), maps = count_maps();
    size_t heap = mallinfo2().uordblks;
    int failures = 0;
    const int rounds = test_rounds(1000);
    for (int i = 0; i < rounds; i++) {
        failures += !one_round();
    }
    CHECK_MSG(0 == failures, "%d of %d rounds failed", failures, rounds);
    CHECK_MSG(count_entries("/proc/self/fd") == fds, "file descriptors leaked");
    if (getenv("OPAL_TEST_SANITIZER")) {
        /* ASan's allocator maps as it pleases and mallinfo is not its;
         * LeakSanitizer checks for leaks at exit instead. */
        printf("sanitizer build: mapping and heap growth left to LeakSanitizer\n");
    } else {
        CHECK_MSG(count_maps() <= maps + 2, "mappings grew from %d to %d", maps, count_maps());
        size_t heap_after = mallinfo2().uordblks;
        CHECK_MSG(heap_after <= heap + 4096, "heap in use grew from %zu to %zu bytes", heap, heap_after);
    }
    CHECK(0 == snapshot_diff(&before, "after the rounds"));
    snapshot_free(&before);
    return test_finish("restore_test");
}
