/*
 * The caches under test behind one table: grdma, and UCX's ucs_rcache loaded
 * with dlopen where libucs is installed.  Both get a no-op register_mem.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "bench/rcache/rcache_bench.h"
#include "opal/constants.h"
#include "opal/mca/rcache/base/base.h"
#include "test/support/rcache_noop.h"
#ifdef BENCH_HAVE_UCX_HEADERS
#    include <ucm/api/ucm.h>
#    include <ucs/memory/rcache.h>
#endif

size_t bench_page;
uint32_t *bench_rnd;

double bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

unsigned char *bench_map(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (MAP_FAILED == p) {
        perror("mmap");
        exit(1);
    }
    return p;
}

unsigned bench_regions = 1;

/* Pages per region of a set of n, and the distance between two regions. */
static size_t set_run(size_t n)
{
    return (n + bench_regions - 1) / bench_regions;
}
static size_t set_stride(size_t n)
{
    const size_t apart = sizeof(void *) > 4 ? (size_t) 1 << 30 : (size_t) 1 << 24;
    return (set_run(n) * bench_page + apart - 1) / apart * apart;
}

unsigned char *bench_map_set(size_t n)
{
    if (bench_regions <= 1) {
        return bench_map(n * bench_page);
    }
    /* The whole stretch reserved, then each region's run mapped into it. */
    unsigned char *base = mmap(NULL, bench_regions * set_stride(n), PROT_NONE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (MAP_FAILED == base) {
        perror("mmap");
        exit(1);
    }
    for (size_t k = 0; k < n; k += set_run(n)) {
        size_t pages = n - k < set_run(n) ? n - k : set_run(n);
        if (MAP_FAILED == mmap(bench_set_page(base, n, k), pages * bench_page,
                               PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0)) {
            perror("mmap");
            exit(1);
        }
    }
    return base;
}

void bench_unmap_set(unsigned char *base, size_t n)
{
    munmap(base, bench_regions <= 1 ? n * bench_page : bench_regions * set_stride(n));
}

void *bench_set_page(unsigned char *base, size_t n, size_t k)
{
    if (bench_regions <= 1) {
        return base + k * bench_page;
    }
    /* The run and stride of the last set asked (one division per page instead of three:
     * both sides of the timed loops pay it). */
    static size_t last_n, run, stride;
    if (n != last_n) {
        last_n = n;
        run = set_run(n);
        stride = set_stride(n);
    }
    const size_t region = k / run;
    return base + region * stride + (k - region * run) * bench_page;
}

void *bench_cached_page(unsigned char *base, size_t n, size_t i)
{
    return bench_set_page(base, n, bench_rnd[i % BENCH_RND] % n);
}

/* ---- grdma ---- */

static mca_rcache_base_module_t *ours;

static int ours_create(void)
{
    mca_rcache_base_resources_t res = rcache_noop_resources("bench");
    ours = mca_rcache_base_module_create("grdma", NULL, &res);
    return ours && ours->rcache_hooked ? 0 : -1;
}
static void *ours_get(void *addr, size_t len)
{
    mca_rcache_base_registration_t *reg;
    return OPAL_SUCCESS == ours->rcache_register(ours, addr, len, 0, 0, &reg) ? reg : NULL;
}
static void ours_put(void *h)
{
    ours->rcache_deregister(ours, h);
}
static void *ours_find(void *addr, size_t len)
{
    mca_rcache_base_registration_t *reg;
    return OPAL_SUCCESS == ours->rcache_find(ours, addr, len, &reg) ? reg : NULL;
}
static void ours_destroy(void)
{
    mca_rcache_base_module_destroy(ours);
}
static void ours_release(void *addr, size_t len)
{
    mca_rcache_base_release_cb(addr, len, NULL, false);
}
const bench_driver_t bench_grdma_driver = {"grdma",      sizeof(mca_rcache_base_registration_t),
                                           ours_create,  ours_get,
                                           ours_put,     ours_find,
                                           ours_destroy, ours_release};

/* ---- UCX ucs_rcache, through dlopen ---- */

#ifdef BENCH_HAVE_UCX_HEADERS
bool bench_ucx_external_events;

static ucs_rcache_t *ucx;
static ucs_status_t (*p_create)(const ucs_rcache_params_t *, const char *, ucs_stats_node_t *,
                                ucs_rcache_t **);
static ucs_status_t (*p_get)(ucs_rcache_t *, void *, size_t, int, void *, ucs_rcache_region_t **);
static void (*p_put)(ucs_rcache_t *, ucs_rcache_region_t *);
static void (*p_destroy)(ucs_rcache_t *);
static void (*p_vm_munmap)(void *, size_t);
static void (*p_set_external_event)(int);

static ucs_status_t ucx_noop_reg(void *c, ucs_rcache_t *r, void *a, ucs_rcache_region_t *reg,
                                 uint16_t f)
{
    return UCS_OK;
}
static void ucx_noop_dereg(void *c, ucs_rcache_t *r, ucs_rcache_region_t *reg)
{
}
static void ucx_dump(void *c, ucs_rcache_t *r, ucs_rcache_region_t *reg, char *buf, size_t max)
{
    buf[0] = '\0';
}
static const ucs_rcache_ops_t ucx_ops = {ucx_noop_reg, ucx_noop_dereg, ucx_dump};

static int ucx_create(void)
{
    void *h = dlopen("libucs.so.0", RTLD_NOW | RTLD_GLOBAL);
    if (NULL == h) {
        return -1;
    }
    p_create = (__typeof__(p_create)) dlsym(h, "ucs_rcache_create");
    p_get = (__typeof__(p_get)) dlsym(h, "ucs_rcache_get");
    p_put = (__typeof__(p_put)) dlsym(h, "ucs_rcache_region_put");
    p_destroy = (__typeof__(p_destroy)) dlsym(h, "ucs_rcache_destroy");
    /* libucm comes with libucs (RTLD_GLOBAL) */
    p_vm_munmap = (__typeof__(p_vm_munmap)) dlsym(RTLD_DEFAULT, "ucm_vm_munmap");
    p_set_external_event = (__typeof__(p_set_external_event))
        dlsym(RTLD_DEFAULT, "ucm_set_external_event");
    if (!p_create || !p_get || !p_put || !p_destroy || !p_vm_munmap || !p_set_external_event) {
        return -1;
    }
    if (bench_ucx_external_events) {
        p_set_external_event(UCM_EVENT_VM_UNMAPPED); /* before the handler is set */
    }
    ucs_rcache_params_t params;
    memset(&params, 0, sizeof(params));
    params.region_struct_size = sizeof(ucs_rcache_region_t);
    params.alignment = bench_page;
    params.max_alignment = bench_page;
    params.ucm_events = UCM_EVENT_VM_UNMAPPED;
    params.ucm_event_priority = 1000;
    params.ops = &ucx_ops;
    params.max_regions = (unsigned long) -1;
    params.max_size = SIZE_MAX;
    params.max_unreleased = SIZE_MAX;
    return UCS_OK == p_create(&params, "bench", NULL, &ucx) ? 0 : -1;
}
static void *ucx_get(void *addr, size_t len)
{
    ucs_rcache_region_t *r;
    return UCS_OK == p_get(ucx, addr, len, PROT_READ | PROT_WRITE, NULL, &r) ? r : NULL;
}
static void ucx_put(void *h)
{
    p_put(ucx, h);
}
static void ucx_destroy(void)
{
    p_destroy(ucx);
}
static void ucx_release(void *addr, size_t len)
{
    p_vm_munmap(addr, len);
}
const bench_driver_t bench_ucx_driver = {"ucs_rcache", sizeof(ucs_rcache_region_t),
                                         ucx_create,   ucx_get,
                                         ucx_put,      NULL,
                                         ucx_destroy,  ucx_release};
#endif
