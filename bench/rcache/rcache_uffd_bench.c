/*
 * What the userfaultfd source costs (rcache_base_uffd, set by the caller:
 * bench/rcache/uffd_run.sh runs off, on and strict).  One line:
 *
 *   reg   a new registration of a one-page region (register + deregister,
 *         no-op register_mem): with on/strict it includes the kernel
 *         registration of the range (UFFDIO_REGISTER)
 *   hit   register + deregister of a cached region (the drain first)
 *   rel   syscall(SYS_munmap) of one covered page, as the releasing thread
 *         sees it (with on/strict it sleeps until our reader read the event)
 *         plus the next lookup that takes the event
 *
 * Each: the median of BATCH-operation samples, ns per operation.
 */
#include "opal_config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "opal/mca/rcache/base/base.h"
#include "opal/runtime/opal.h"
#include "test/support/rcache_noop.h"

#define N 2000
#define PAGE 4096
#define SAMPLES 15

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e9 * (double) ts.tv_sec + (double) ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t) n, sizeof(*v), cmp);
    return v[n / 2];
}

static mca_rcache_base_module_t *rc;

static void touch(char *p)
{
    mca_rcache_base_registration_t *reg;
    if (OPAL_SUCCESS == rc->rcache_register(rc, p, PAGE, 0, MCA_RCACHE_ACCESS_LOCAL_WRITE, &reg)) {
        rc->rcache_deregister(rc, reg);
    }
}

int main(int argc, char **argv)
{
    opal_init_util(&argc, &argv);
    mca_rcache_base_resources_t res = rcache_noop_resources("uffd-bench");
    rc = mca_rcache_base_module_create(NULL, NULL, &res);
    if (NULL == rc) {
        fprintf(stderr, "cannot create the rcache\n");
        return 1;
    }
    double reg[SAMPLES], hit[SAMPLES], rel[SAMPLES];
    for (int s = 0; s < SAMPLES; s++) {
        /* Separate mappings: a registration may not merge with its neighbour's VMA. */
        char *p[N];
        for (int i = 0; i < N; i++) {
            p[i] = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            p[i][0] = 1;
        }
        double t0 = now();
        for (int i = 0; i < N; i++) {
            touch(p[i]);
        }
        double t1 = now();
        for (int i = 0; i < N; i++) {
            touch(p[(i * 7919) % N]);
        }
        double t2 = now();
        for (int i = 0; i < N; i++) {
            syscall(SYS_munmap, p[i], PAGE);
            touch(p[(i + 1) % N]); /* the lookup that takes the event */
        }
        double t3 = now();
        reg[s] = (t1 - t0) / N;
        hit[s] = (t2 - t1) / N;
        rel[s] = (t3 - t2) / N - hit[s];
        rc->rcache_invalidate_range(rc, NULL, UINTPTR_MAX);
    }
    printf("%-6s reg %8.0f  hit %6.1f  rel %8.0f  (ns, median of %d samples of %d)\n",
           mca_rcache_base_uffd_names[mca_rcache_base_uffd], median(reg, SAMPLES),
           median(hit, SAMPLES), median(rel, SAMPLES), SAMPLES, N);
    mca_rcache_base_module_destroy(rc);
    opal_finalize_util();
    return 0;
}
