/*
 * Registration cache benchmark: what its parts share.  rcache_bench.c times
 * the caches, rcache_bench_count.c counts their instructions under callgrind,
 * rcache_bench_drivers.c drives grdma and UCX's ucs_rcache through one table.
 */
#ifndef BENCH_RCACHE_BENCH_H
#define BENCH_RCACHE_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if __has_include(<ucs/memory/rcache.h>) && __has_include(<ucm/api/ucm.h>)
#    define BENCH_HAVE_UCX_HEADERS 1
#endif

#define BENCH_RND 1000000 /* random numbers drawn once, the same for every driver */

/* One cache under test, with a no-op register_mem / deregister_mem. */
typedef struct bench_driver_t {
    const char *name;
    size_t sizeof_reg; /* what the caller's registration struct costs */
    int (*create)(void);
    void *(*get)(void *addr, size_t len); /* NULL on failure */
    void (*put)(void *handle);
    void *(*find)(void *addr, size_t len); /* NULL: not supported or not found */
    void (*destroy)(void);
    void (*release)(void *addr, size_t len); /* deliver a release event, pages untouched */
} bench_driver_t;

extern size_t bench_page;
extern uint32_t *bench_rnd;

extern const bench_driver_t bench_grdma_driver; /* needs opal_init_util with leave_pinned 1 */
#ifdef BENCH_HAVE_UCX_HEADERS
extern const bench_driver_t bench_ucx_driver;
/*
 * Set before bench_ucx_driver.create: declare UCM_EVENT_VM_UNMAPPED external,
 * so that libucm installs no memory hooks (which do not come up under
 * valgrind) and the cache hears of releases only from the driver's release().
 */
extern bool bench_ucx_external_events;
#endif

double bench_now_ns(void);
unsigned char *bench_map(size_t len); /* anonymous, exits on failure */

/*
 * A set of n pages for the caches to register: one run (bench_regions 1, the
 * default), or bench_regions runs of equal length, each at the start of its
 * own stretch of address space (1 GiB, 16 MiB with 32-bit pointers): dense
 * regions far apart, as a program with several buffers makes them.  The
 * environment's BENCH_RCACHE_REGIONS sets it (rcache_bench's main).
 */
extern unsigned bench_regions;
unsigned char *bench_map_set(size_t n);                    /* exits on failure */
void bench_unmap_set(unsigned char *base, size_t n);
void *bench_set_page(unsigned char *base, size_t n, size_t k); /* page k of the set */
void *bench_cached_page(unsigned char *base, size_t n, size_t i); /* page rnd[i] % n of the set */

/*
 * rcache_bench --count DRIVER N [--warm]: the callgrind mode; returns the exit
 * status.  warm: hit every cached page once before counting (for the cache
 * simulation).
 */
int bench_count_main(const char *driver, size_t n, bool warm);

#endif
