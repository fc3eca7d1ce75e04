/*
 * rcache_bench --count DRIVER N: the operations of the timing run, counted in
 * instructions by callgrind instead of timed (bench/rcache/callgrind.sh runs
 * it).  The host's timings swing by 1.5-2x; the instructions of the same loop
 * on the same data do not.
 *
 * Run under valgrind --tool=callgrind --instr-atstart=no --collect-atstart=no.
 * Each phase does COUNT_WARM + COUNT_OPS operations, collects only the
 * operation itself (the address and any re-registration after it are not
 * collected) from the COUNT_WARM-th on, and dumps as "callgrind.out.*.<k>"
 * named by the phase.  The "loop" phase calls an empty operation the same
 * way: the script subtracts it, so the counts are what the cache's calls
 * cost, the driver's few wrapper instructions included.
 *
 * The first phase, "fill", collects the N registrations that fill the empty
 * cache (N operations, not COUNT_OPS: the script divides by N).
 *
 * With --warm (callgrind.sh -c, under --cache-sim=yes), every cached page is
 * hit once, in order and not collected, before the first phase: the
 * simulated caches then start in the state a long run leaves them in, not
 * empty (else most of the lines of a large N would count as first touches).
 */
#include "opal_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bench/rcache/rcache_bench.h"
#include "opal/runtime/opal.h"
#ifdef HAVE_VALGRIND_VALGRIND_H
#    include <valgrind/callgrind.h>
#endif

#define COUNT_OPS 20000
#define COUNT_WARM 1000 /* lazy binding, first-use paths: not counted */

#ifdef HAVE_VALGRIND_VALGRIND_H
static const bench_driver_t *drv;
static void *last_handle;

typedef void (*op_fn)(void *addr);

/* noinline: every phase, "loop" included, pays the same call. */
static __attribute__((noinline)) void op_none(void *p)
{
    __asm__ volatile("" ::: "memory");
}
static __attribute__((noinline)) void op_hit(void *p)
{
    drv->put(drv->get(p, bench_page));
}
/* The registration alone; its deregistration follows, not collected. */
static __attribute__((noinline)) void op_get(void *p)
{
    last_handle = drv->get(p, bench_page);
}
static void op_put_last(void *p)
{
    drv->put(last_handle);
}
static __attribute__((noinline)) void op_find(void *p)
{
    drv->put(drv->find(p, bench_page));
}
static __attribute__((noinline)) void op_release(void *p)
{
    drv->release(p, bench_page);
}
/* The release and the next registration of the page: UCX only queues the range
 * in the release and invalidates at its next call, grdma in the release. */
static __attribute__((noinline)) void op_release_reg(void *p)
{
    op_release(p);
    op_hit(p);
}

/*
 * One phase: op on a page of the set of n at base (a random one, or with
 * in_order the i-th), then 'after' (not collected) on the same page.
 */
static void count_phase(const char *name, unsigned char *base, size_t n, bool in_order, op_fn op,
                        op_fn after)
{
    for (size_t i = 0; i < COUNT_WARM + COUNT_OPS; i++) {
        void *p = in_order ? bench_set_page(base, n, i) : bench_cached_page(base, n, i * 7);
        if (COUNT_WARM == i) {
            CALLGRIND_ZERO_STATS;
        }
        CALLGRIND_TOGGLE_COLLECT;
        op(p);
        CALLGRIND_TOGGLE_COLLECT;
        if (after) {
            after(p);
        }
    }
    CALLGRIND_DUMP_STATS_AT(name);
}

int bench_count_main(const char *driver, size_t n, bool warm)
{
    if (!RUNNING_ON_VALGRIND) {
        fprintf(stderr, "rcache_bench --count: run it under valgrind --tool=callgrind "
                        "(bench/rcache/callgrind.sh does)\n");
        return 2;
    }
    if (0 == strcmp(driver, bench_grdma_driver.name)) {
        setenv("OMPI_MCA_mpi_leave_pinned", "1", 1);
        if (OPAL_SUCCESS != opal_init_util(NULL, NULL)) {
            return 1;
        }
        drv = &bench_grdma_driver;
#    ifdef BENCH_HAVE_UCX_HEADERS
    } else if (0 == strcmp(driver, bench_ucx_driver.name)) {
        bench_ucx_external_events = true; /* libucm's hooks do not come up under valgrind */
        drv = &bench_ucx_driver;
#    endif
    } else {
        fprintf(stderr, "rcache_bench --count: unknown or unavailable driver '%s'\n", driver);
        return 2;
    }
    if (0 != drv->create()) {
        fprintf(stderr, "rcache_bench --count: %s could not be created here\n", drv->name);
        return 1;
    }
    unsigned char *cached = bench_map_set(n);
    unsigned char *plain = bench_map_set(COUNT_OPS);
    unsigned char *fresh = bench_map_set(COUNT_WARM + COUNT_OPS);
    /* The fill: the N registrations of an empty cache, one after the other, collected. */
    CALLGRIND_START_INSTRUMENTATION;
    CALLGRIND_ZERO_STATS;
    for (size_t i = 0; i < n; i++) {
        CALLGRIND_TOGGLE_COLLECT;
        op_hit(bench_set_page(cached, n, i));
        CALLGRIND_TOGGLE_COLLECT;
    }
    CALLGRIND_DUMP_STATS_AT("fill");
    for (size_t i = 0; warm && i < n; i++) {
        op_hit(bench_set_page(cached, n, i));
    }
    count_phase("loop", cached, n, false, op_none, NULL);
    count_phase("hit", cached, n, false, op_hit, NULL);
    count_phase("get", cached, n, false, op_get, op_put_last);
    if (drv->find) {
        count_phase("find", cached, n, false, op_find, NULL);
    }
    count_phase("rel u", plain, COUNT_OPS, false, op_release, NULL);
    count_phase("rel c", cached, n, false, op_release, op_hit);
    count_phase("rel c+reg", cached, n, false, op_release_reg, NULL);
    count_phase("miss", fresh, COUNT_WARM + COUNT_OPS, true, op_hit, NULL); /* last: it grows the cache */
    CALLGRIND_STOP_INSTRUMENTATION;
    printf("%s N=%zu ops=%d\n", drv->name, n, COUNT_OPS);
    drv->destroy();
    if (drv == &bench_grdma_driver) {
        opal_finalize_util();
    }
    return 0;
}
#else
int bench_count_main(const char *driver, size_t n, bool warm)
{
    fprintf(stderr, "rcache_bench --count: built without <valgrind/callgrind.h>\n");
    return 2;
}
#endif
