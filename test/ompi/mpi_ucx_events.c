/*
 * With pml/ucx and opal_common_ucx_opal_mem_hooks=1, Open MPI declares
 * UCX's UCM_EVENT_VM_UNMAPPED external and forwards every release its
 * memory hooks report (ucm_vm_munmap): a handler of UCX's own counts what
 * arrives for a buffer unmapped after MPI_Init, and from where: Open MPI's
 * forwarding (UCX's ucm_vm_munmap) or UCX's own munmap hook (ucm_munmap),
 * read from the handler's callers.  Each rank prints
 *
 *   rank R: ucx events N (forwarded F, ucx hook H)
 */
#define _GNU_SOURCE /* dladdr, dl_iterate_phdr */
#include <dlfcn.h>
#include <execinfo.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <ucm/api/ucm.h>

#define LEN (4 << 20)

static volatile uintptr_t watch_start, watch_end;
static volatile int events, forwarded, ucx_hook;

/* Which of UCX's entry points dispatched the event being handled. */
static void count_origin(void)
{
    void *callers[8];
    const int n = backtrace(callers, 8);
    for (int i = 1; i < n; i++) {
        Dl_info info;
        if (0 != dladdr(callers[i], &info) && NULL != info.dli_sname) {
            if (0 == strcmp(info.dli_sname, "ucm_vm_munmap")) {
                forwarded++;
                return;
            }
            if (0 == strcmp(info.dli_sname, "ucm_munmap")) {
                ucx_hook++;
                return;
            }
        }
    }
}

static void on_unmapped(ucm_event_type_t type, ucm_event_t *event, void *arg)
{
    const uintptr_t start = (uintptr_t) event->vm_unmapped.address;
    const uintptr_t end = start + event->vm_unmapped.size;
    if (end > watch_start && start < watch_end) {
        events++;
        count_origin();
    }
}

int main(int argc, char **argv)
{
    int rank;
    void *warm[1];
    backtrace(warm, 1); /* loads the unwinder now, not inside the handler */
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (UCS_OK != ucm_set_event_handler(UCM_EVENT_VM_UNMAPPED, 0, on_unmapped, NULL)) {
        printf("rank %d: harness: ucm_set_event_handler failed\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    char *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memset(p, rank, LEN);
    watch_start = (uintptr_t) p;
    watch_end = watch_start + LEN;
    munmap(p, LEN);
    watch_start = watch_end = 0;
    ucm_unset_event_handler(UCM_EVENT_VM_UNMAPPED, on_unmapped, NULL);
    MPI_Barrier(MPI_COMM_WORLD);
    printf("rank %d: ucx events %d (forwarded %d, ucx hook %d)\n", rank, events, forwarded,
           ucx_hook);
    MPI_Finalize();
    return 0;
}
