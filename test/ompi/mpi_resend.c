/*
 * Two ranks: rank 0 sends a buffer, unmaps it, maps one again (the kernel
 * gives the same address back) with new contents and sends again; rank 1
 * receives each time into a buffer it unmaps and maps again the same way.
 * With leave_pinned, a transport that registers memory through Open MPI's
 * rcache finds a cached registration for the second round's address
 * unless the release was reported: the rcache's statistics (a hit, or a
 * second miss) tell which, and the data must be the new data in both.
 *
 * Each rank prints "rank R round K <addr> data ok|BAD"; exit 1 on bad
 * data or when the address was not reused (the test would prove nothing).
 *
 * OPATCH_TEST_UNPATCHABLE=<libc function>: make it impossible to patch
 * for an overwrite patcher before MPI_Init (test/support/unpatchable.h).
 * OPATCH_TEST_SNAPSHOT=1 (with LD_BIND_NOW=1): compare what a patcher may
 * write (test/support/snapshot.h) before and after MPI_Init, and print
 * "rank R nothing patched" or "rank R patched: N regions changed".
 */
#define _GNU_SOURCE /* dladdr, dl_iterate_phdr */
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "../support/snapshot.h"
#include "../support/unpatchable.h"

#define LEN (4 << 20)

int main(int argc, char **argv)
{
    const char *broken = getenv("OPATCH_TEST_UNPATCHABLE");
    test_unpatchable_t unpatchable;
    if (NULL != broken) {
        test_make_unpatchable(&unpatchable, broken);
    }
    const bool snapshot = NULL != getenv("OPATCH_TEST_SNAPSHOT");
    static snapshot_t before;
    if (snapshot) {
        snapshot_take(&before);
    }
    int rank, status = 0;
    void *first = NULL;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (snapshot) {
        const int changed = snapshot_diff(&before, "after MPI_Init");
        if (0 == changed) {
            printf("rank %d nothing patched\n", rank);
        } else {
            printf("rank %d patched: %d regions changed\n", rank, changed);
        }
        snapshot_free(&before);
    }
    for (int round = 0; round < 2; round++) {
        char *buf = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        const char fill = (char) ('a' + round);
        if (0 == rank) {
            memset(buf, fill, LEN);
            MPI_Send(buf, LEN, MPI_CHAR, 1, round, MPI_COMM_WORLD);
        } else {
            memset(buf, 0, LEN);
            MPI_Recv(buf, LEN, MPI_CHAR, 0, round, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        const bool ok = buf[0] == fill && buf[LEN / 2] == fill && buf[LEN - 1] == fill;
        printf("rank %d round %d %p data %s\n", rank, round, (void *) buf, ok ? "ok" : "BAD");
        if (!ok || (1 == round && buf != first)) {
            status = 1;
        }
        first = buf;
        munmap(buf, LEN);
    }
    if (NULL != broken) {
        test_make_patchable_again(&unpatchable);
    }
    MPI_Finalize();
    return status;
}
