/*
 * OPAL only: a program built against the installed Open MPI's headers and
 * linked with its libopen-pal (no MPI), which opens Open MPI's memory
 * framework the way its rcache does and registers a release callback
 * with Open MPI's own opal_mem_hooks_register_release.  Which memory
 * component Open MPI selects is up to the caller (OMPI_MCA_memory,
 * OMPI_MCA_mca_base_component_path); the program prints it, then runs
 * each case and prints one line per case:
 *
 *   case <name> caught|MISSED|WRONG <what was seen>
 *
 * caught: exactly one callback overlapping the released range, with
 * exactly that range, made while the pages were still mapped.  Then the
 * framework is closed: the patched code is as before, and a munmap makes
 * no callback any more ("restored yes|NO").  Exit 0 when it ran (the
 * verdicts are the caller's: opal_table.sh), 1 on a broken harness.
 */
#define _GNU_SOURCE
#include "opal_config.h"

#include <dlfcn.h>
#include <gnu/lib-names.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/base/mca_base_framework.h"
#include "opal/mca/memory/base/base.h"
#include "opal/mca/memory/memory.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"

#define LEN (1 << 20)

/* What the callback saw for the range under watch.  volatile: munmap & co.
 * are declared leaf, which the hooks make untrue. */
static volatile uintptr_t watch_start, watch_end;
static volatile int seen;
static volatile uintptr_t seen_start, seen_end;
static volatile int seen_unmapped; /* a callback came after the pages were gone */

static bool mapped(uintptr_t addr)
{
    unsigned char vec;
    return 0 == mincore((void *) (addr & ~(uintptr_t) 4095), 4096, &vec);
}

static void on_release(void *buf, size_t length, void *cbdata, bool from_alloc)
{
    const uintptr_t start = (uintptr_t) buf, end = start + length;
    if (end <= watch_start || start >= watch_end) {
        return;
    }
    if (seen++ == 0) {
        seen_start = start;
        seen_end = end;
    }
    if (!mapped(watch_start)) {
        seen_unmapped = 1;
    }
}

static void watch(uintptr_t start, size_t len)
{
    seen = seen_unmapped = 0;
    seen_start = seen_end = 0;
    watch_start = start;
    watch_end = start + len;
}

static void verdict(const char *name)
{
    const char *v = 0 == seen ? "MISSED"
                  : 1 == seen && seen_start == watch_start && seen_end == watch_end && !seen_unmapped
                      ? "caught"
                      : "WRONG";
    printf("case %s %s (%d callbacks; first [%#lx, %#lx) for [%#lx, %#lx)%s)\n", name, v, seen,
           (unsigned long) seen_start, (unsigned long) seen_end, (unsigned long) watch_start,
           (unsigned long) watch_end, seen_unmapped ? "; after the release" : "");
    watch_start = watch_end = 0;
}

static char *map(size_t len)
{
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (MAP_FAILED == p) {
        perror("mmap");
        exit(1);
    }
    memset(p, 1, len);
    return p;
}

static void case_munmap(void)
{
    char *p = map(LEN);
    watch((uintptr_t) p, LEN);
    munmap(p, LEN);
    verdict("munmap");
}

/* mremap that must move: a guard page right after the mapping. */
static void case_mremap(void)
{
    char *p = map(2 * LEN);
    munmap(p + LEN, LEN);
    char *guard = mmap(p + LEN, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    watch((uintptr_t) p, LEN);
    char *q = mremap(p, LEN, 2 * LEN, MREMAP_MAYMOVE);
    verdict("mremap");
    munmap(guard, 4096);
    munmap(MAP_FAILED != q ? q : p, MAP_FAILED != q ? 2 * LEN : LEN);
}

static void case_mmap_fixed(void)
{
    char *p = map(LEN);
    watch((uintptr_t) p, LEN);
    mmap(p, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    verdict("mmap_fixed");
    munmap(p, LEN);
}

static void case_madvise(void)
{
    char *p = map(LEN);
    watch((uintptr_t) p, LEN);
    madvise(p, LEN, MADV_DONTNEED);
    verdict("madvise_dontneed");
    munmap(p, LEN);
}

static void case_shmdt(void)
{
    int id = shmget(IPC_PRIVATE, LEN, IPC_CREAT | 0600);
    char *p = id >= 0 ? shmat(id, NULL, 0) : (void *) -1;
    if (id >= 0) {
        shmctl(id, IPC_RMID, NULL);
    }
    if ((void *) -1 == p) {
        printf("case shmdt MISSED (no System V shared memory here)\n");
        return;
    }
    watch((uintptr_t) p, LEN);
    shmdt(p);
    verdict("shmdt");
}

/* The heap top shrinking: sbrk back by what it grew, from a page boundary. */
static void case_sbrk(void)
{
    const uintptr_t cur = (uintptr_t) sbrk(0), page = 4096;
    sbrk((intptr_t) (((cur + page - 1) & ~(page - 1)) - cur));
    char *top = sbrk(64 * 1024);
    if ((void *) -1 == top) {
        printf("case sbrk_shrink MISSED (sbrk cannot grow here)\n");
        return;
    }
    memset(top, 1, 64 * 1024);
    watch((uintptr_t) top, 64 * 1024);
    sbrk(-64 * 1024);
    verdict("sbrk_shrink");
}

static void *thread_munmap(void *p)
{
    munmap(p, LEN);
    return NULL;
}

static void case_thread(void)
{
    char *p = map(LEN);
    pthread_t t;
    watch((uintptr_t) p, LEN);
    pthread_create(&t, NULL, thread_munmap, p);
    pthread_join(t, NULL);
    verdict("thread_munmap");
}

/* A library opened after the hooks are installed, in the base namespace or a new one. */
static void case_library(const char *library, bool own_namespace)
{
    void *h = own_namespace ? dlmopen(LM_ID_NEWLM, library, RTLD_NOW) : dlopen(library, RTLD_NOW);
    int (*lib_munmap)(void *, size_t) = h ? (int (*)(void *, size_t)) dlsym(h, "unmapper_munmap") : NULL;
    const char *name = own_namespace ? "dlmopen_munmap" : "dlopen_munmap";
    if (NULL == lib_munmap) {
        printf("harness: %s: cannot open %s: %s\n", name, library, dlerror());
        exit(1);
    }
    char *p = map(LEN);
    watch((uintptr_t) p, LEN);
    lib_munmap(p, LEN);
    verdict(name);
}

/* The first bytes of each function a hooker may patch, in libc and where callers reach it. */
static const char *const functions[] = {"munmap", "mremap", "madvise", "mmap", "brk", "sbrk",
                                        "shmdt", "shmat", NULL};
#define NFUNCS (sizeof(functions) / sizeof(functions[0]))

static void snapshot(unsigned char bytes[2][NFUNCS][16])
{
    memset(bytes, 0, 2 * NFUNCS * 16);
    void *libc = dlopen(LIBC_SO, RTLD_LAZY | RTLD_NOLOAD);
    for (int i = 0; functions[i]; i++) {
        void *defs[2] = {dlsym(libc, functions[i]), dlsym(RTLD_DEFAULT, functions[i])};
        for (int d = 0; d < 2; d++) {
            memcpy(bytes[d][i], defs[d], 16);
        }
    }
    dlclose(libc);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s LIBUNMAPPER\n", argv[0]);
        return 1;
    }
    unsigned char before[2][NFUNCS][16], after[2][NFUNCS][16];
    snapshot(before);
    if (OPAL_SUCCESS != opal_init_util(&argc, &argv) || OPAL_SUCCESS != opal_mem_hooks_init() ||
        OPAL_SUCCESS != mca_base_framework_open(&opal_memory_base_framework, 0)) {
        printf("harness: cannot open Open MPI's memory framework\n");
        return 1;
    }
    printf("selected %s, support 0x%x\n", opal_memory->memoryc_version.mca_component_name,
           opal_mem_hooks_support_level());
    if (OPAL_SUCCESS != opal_mem_hooks_register_release(on_release, NULL)) {
        printf("harness: opal_mem_hooks_register_release failed\n");
        return 1;
    }
    fflush(stdout);
    case_munmap();
    case_mremap();
    case_mmap_fixed();
    case_madvise();
    case_shmdt();
    case_sbrk();
    case_thread();
    case_library(argv[1], false);
    case_library(argv[1], true);
    fflush(stdout);

    mca_base_framework_close(&opal_memory_base_framework);
    char *p = map(LEN);
    watch((uintptr_t) p, LEN);
    munmap(p, LEN);
    const int late = seen;
    watch_start = watch_end = 0;
    snapshot(after);
    for (int i = 0; functions[i]; i++) {
        for (int d = 0; d < 2; d++) {
            if (0 != memcmp(before[d][i], after[d][i], 16)) {
                printf("changed: %s (%s)\n", functions[i], d ? "where callers reach it" : "libc");
            }
        }
    }
    printf("restored %s (%d callbacks after the close; code %s)\n",
           0 == late && 0 == memcmp(before, after, sizeof(before)) ? "yes" : "NO", late,
           0 == memcmp(before, after, sizeof(before)) ? "as before" : "changed");
    opal_mem_hooks_unregister_release(on_release);
    opal_mem_hooks_finalize();
    opal_finalize_util();
    return 0;
}
