/*
 * Registration cache benchmark: ns per operation for grdma and, in the same
 * run, UCX's ucs_rcache (loaded with dlopen where libucs is installed).
 *
 *   hit     register + deregister of a random one of N cached one-page regions
 *   miss    the same on a region not cached (no-op register_mem)
 *   find    rcache_find + deregister (grdma only: ucs_rcache has no find)
 *   hit xT  the hit, T threads at once (ns per operation per thread)
 *   unmap+  what the release event adds to munmap of one page that a
 *           registration covers / that none covers: the median of munmap
 *           through the hooks minus the median of the raw system call on a
 *           like page, samples interleaved so that the host's drift cancels
 *           (the kernel's munmap, 3-6 us here, swings by more than the
 *           cache's part: see rel)
 *   rel     the release event alone, as the memory hooks deliver it (for
 *           grdma mca_rcache_base_release_cb, for UCX ucm_vm_munmap), on a
 *           covered / an uncovered page: median ns.  UCX only queues the
 *           range there and invalidates at its next rcache call; grdma
 *           invalidates in the event
 *   B/reg   bytes per cached registration beyond the caller's struct (which,
 *           for grdma, holds the cache's own fields: see the header line)
 * Then a send loop through the io_uring helper, leave_pinned on vs off.
 *
 * UCX runs in a child process so that its memory hooks (libucm) and ours
 * never meet in one process.  Usage: rcache_bench [max_N] (default 1000000).
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "opal/mca/rcache/base/base.h"
#include "opal/runtime/opal.h"
#if OPAL_HAVE_LIBURING
#    include "opal/mca/rcache/base/rcache_uring.h"
#endif
#if __has_include(<ucs/memory/rcache.h>) && __has_include(<ucm/api/ucm.h>)
#    include <ucm/api/ucm.h>
#    include <ucs/memory/rcache.h>
#    define BENCH_HAVE_UCX_HEADERS 1
#endif

#define OPS 1000000
#define ROUNDS 5 /* hit and find: the best of ROUNDS rounds of OPS / ROUNDS (a noisy host) */
#define UNMAPS 2000
#define MISSES 20000
#define MAX_THREADS 4

/* One cache under test. */
typedef struct driver_t {
    const char *name;
    size_t sizeof_reg; /* what the caller's registration struct costs */
    int (*create)(void);
    void *(*get)(void *addr, size_t len); /* NULL on failure */
    void (*put)(void *handle);
    void *(*find)(void *addr, size_t len); /* NULL: not supported or not found */
    void (*destroy)(void);
    void (*release)(void *addr, size_t len); /* deliver a release event, pages untouched */
} driver_t;

typedef struct result_t {
    double hit, miss, find, hit_t[MAX_THREADS + 1], unmap_cov, unmap_unc, rel_cov, rel_unc, bytes;
    int valid;
} result_t;

static const size_t ns[] = {100, 1000, 10000, 100000, 1000000};
#define NN (sizeof(ns) / sizeof(ns[0]))
static size_t page;
static uint32_t *rnd; /* OPS random numbers */

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static long rss_bytes(void)
{
    long size = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (2 != fscanf(f, "%ld %ld", &size, &resident)) {
            resident = 0;
        }
        fclose(f);
    }
    return resident * (long) page;
}

static unsigned char *map(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (MAP_FAILED == p) {
        perror("mmap");
        exit(1);
    }
    return p;
}

/* ---- grdma ---- */

static mca_rcache_base_module_t *ours;

static int noop_reg(void *d, void *b, size_t s, mca_rcache_base_registration_t *r)
{
    return OPAL_SUCCESS;
}
static int noop_dereg(void *d, mca_rcache_base_registration_t *r)
{
    return OPAL_SUCCESS;
}
static int ours_create(void)
{
    mca_rcache_base_resources_t res = {.cache_name = "bench",
                                       .sizeof_reg = sizeof(mca_rcache_base_registration_t),
                                       .register_mem = noop_reg,
                                       .deregister_mem = noop_dereg};
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
static const driver_t grdma_driver = {"grdma",      sizeof(mca_rcache_base_registration_t),
                                      ours_create,  ours_get,
                                      ours_put,     ours_find,
                                      ours_destroy, ours_release};

/* ---- UCX ucs_rcache, through dlopen ---- */

#ifdef BENCH_HAVE_UCX_HEADERS
static ucs_rcache_t *ucx;
static ucs_status_t (*p_create)(const ucs_rcache_params_t *, const char *, ucs_stats_node_t *,
                                ucs_rcache_t **);
static ucs_status_t (*p_get)(ucs_rcache_t *, void *, size_t, int, void *, ucs_rcache_region_t **);
static void (*p_put)(ucs_rcache_t *, ucs_rcache_region_t *);
static void (*p_destroy)(ucs_rcache_t *);
static void (*p_vm_munmap)(void *, size_t);

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
    p_vm_munmap = (__typeof__(p_vm_munmap)) dlsym(RTLD_DEFAULT, "ucm_vm_munmap");
    if (!p_create || !p_get || !p_put || !p_destroy || !p_vm_munmap) {
        return -1;
    }
    ucs_rcache_params_t params;
    memset(&params, 0, sizeof(params));
    params.region_struct_size = sizeof(ucs_rcache_region_t);
    params.alignment = page;
    params.max_alignment = page;
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
static const driver_t ucx_driver = {"ucs_rcache", sizeof(ucs_rcache_region_t),
                                    ucx_create,   ucx_get,
                                    ucx_put,      NULL,
                                    ucx_destroy,  ucx_release};
#endif

/* ---- measurements ---- */

static unsigned char *cached; /* N cached one-page regions, one per page */
static size_t ncached;
static const driver_t *drv;

static void *hit_thread(void *arg)
{
    size_t t = (size_t) arg, nthreads = t >> 16, per = OPS / ROUNDS / (nthreads ? nthreads : 1);
    t &= 0xffff;
    for (size_t i = 0; i < per; i++) {
        void *h = drv->get(cached + (rnd[(i + t * 7919) % OPS] % ncached) * page, page);
        drv->put(h);
    }
    return NULL;
}

/* ns per hit per thread, nthreads at once; the best round. */
static double hit_threads(size_t nthreads)
{
    pthread_t th[MAX_THREADS];
    double best = 0;
    for (int r = 0; r < ROUNDS; r++) {
        double t0 = now_ns();
        for (size_t i = 0; i < nthreads; i++) {
            pthread_create(&th[i], NULL, hit_thread, (void *) ((nthreads << 16) | i));
        }
        for (size_t i = 0; i < nthreads; i++) {
            pthread_join(th[i], NULL);
        }
        double ns_op = (now_ns() - t0) / (OPS / ROUNDS / nthreads);
        best = 0 == r || ns_op < best ? ns_op : best;
    }
    return best;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return x < y ? -1 : x > y;
}

static double median(double *sample, size_t n)
{
    qsort(sample, n, sizeof(sample[0]), cmp_double);
    return sample[n / 2];
}

static double timed_unmap(unsigned char *p, bool raw)
{
    double t0 = now_ns();
    if (raw) {
        syscall(SYS_munmap, p, page); /* around the hooks */
    } else {
        munmap(p, page);
    }
    double t = now_ns() - t0;
    mmap(p, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    return t;
}

/*
 * What a release event adds to munmap of one page: of a random cached
 * (registered, re-registered after) page, and of a random page of 'plain'
 * that no registration covers, against the raw system call on 'plain'.
 */
static void unmap_costs(unsigned char *plain, size_t nplain, double *covered, double *uncovered)
{
    static double cov[UNMAPS], unc[UNMAPS], raw[UNMAPS];
    for (size_t i = 0; i < UNMAPS; i++) {
        unsigned char *p = cached + (rnd[i * 13 % OPS] % ncached) * page;
        cov[i] = timed_unmap(p, false);
        drv->put(drv->get(p, page));
        raw[i] = timed_unmap(plain + (rnd[i * 17 % OPS] % nplain) * page, true);
        unc[i] = timed_unmap(plain + (rnd[i * 19 % OPS] % nplain) * page, false);
    }
    double r = median(raw, UNMAPS);
    *covered = median(cov, UNMAPS) - r;
    *uncovered = median(unc, UNMAPS) - r;
}

/* The release event alone on a covered (then registered again) / an uncovered page. */
static void release_costs(unsigned char *plain, size_t nplain, double *covered, double *uncovered)
{
    static double cov[UNMAPS], unc[UNMAPS];
    for (size_t i = 0; i < UNMAPS; i++) {
        unsigned char *p = cached + (rnd[i * 23 % OPS] % ncached) * page;
        double t0 = now_ns();
        drv->release(p, page);
        cov[i] = now_ns() - t0;
        drv->put(drv->get(p, page));
        p = plain + (rnd[i * 29 % OPS] % nplain) * page;
        t0 = now_ns();
        drv->release(p, page);
        unc[i] = now_ns() - t0;
    }
    *covered = median(cov, UNMAPS);
    *uncovered = median(unc, UNMAPS);
}

/* Bytes the process holds: the malloc heap and mapped chunks, and what is resident. */
static double held_bytes(void)
{
    struct mallinfo2 mi = mallinfo2();
    return (double) (mi.uordblks + mi.hblkhd);
}

static void run_driver(const driver_t *d, size_t max_n, result_t *res)
{
    drv = d;
    size_t nplain = max_n > UNMAPS ? max_n : UNMAPS;
    unsigned char *plain = map(nplain * page);
    unsigned char *miss = map(MISSES * page);
    /* A fresh cache for each N: what it holds is what N registrations cost. */
    for (size_t k = 0; k < NN && ns[k] <= max_n && 0 == d->create(); k++) {
        result_t *r = &res[k];
        ncached = ns[k];
        cached = map(ncached * page);
        long rss0 = rss_bytes();
        double heap0 = held_bytes();
        for (size_t i = 0; i < ncached; i++) {
            d->put(d->get(cached + i * page, page));
        }
        /* The larger of the two: a cache may take memory from malloc or map its own. */
        double heap = held_bytes() - heap0, rss = (double) (rss_bytes() - rss0);
        r->bytes = (heap > rss ? heap : rss) / ncached - (double) d->sizeof_reg;
        r->hit = hit_threads(1);
        for (size_t t = 2; t <= MAX_THREADS; t *= 2) {
            r->hit_t[t] = hit_threads(t);
        }
        for (int round = 0; d->find && round < ROUNDS; round++) {
            double t0 = now_ns();
            for (size_t i = 0; i < OPS / ROUNDS; i++) {
                d->put(d->find(cached + (rnd[i] % ncached) * page, page));
            }
            double ns_op = (now_ns() - t0) / (OPS / ROUNDS);
            r->find = 0 == round || ns_op < r->find ? ns_op : r->find;
        }
        double t0 = now_ns();
        for (size_t i = 0; i < MISSES; i++) {
            d->put(d->get(miss + i * page, page));
        }
        r->miss = (now_ns() - t0) / MISSES;
        munmap(miss, MISSES * page); /* drop them again: N stays N */
        miss = map(MISSES * page);
        unmap_costs(plain, nplain, &r->unmap_cov, &r->unmap_unc);
        release_costs(plain, nplain, &r->rel_cov, &r->rel_unc);
        r->valid = 1;
        munmap(cached, ncached * page);
        d->destroy();
    }
    munmap(miss, MISSES * page);
    munmap(plain, nplain * page);
}

#if OPAL_HAVE_LIBURING
/* Send 64 KiB from one buffer through the io_uring helper, n times; ns per send. */
static double uring_send_loop(const char *leave_pinned)
{
    setenv("OMPI_MCA_mpi_leave_pinned", leave_pinned, 1);
    opal_init_util(NULL, NULL);
    struct io_uring ring;
    mca_rcache_uring_t dev;
    double result = -1;
    if (0 == io_uring_queue_init(8, &ring, 0)) {
        if (OPAL_SUCCESS == mca_rcache_uring_init(&dev, &ring, 16)) {
            mca_rcache_base_resources_t res;
            mca_rcache_uring_resources(&dev, &res);
            mca_rcache_base_module_t *rc = mca_rcache_base_module_create(NULL, NULL, &res);
            int fd = memfd_create("bench", 0);
            size_t len = 64 * 1024, iters = 20000;
            unsigned char *buf = map(len);
            memset(buf, 1, len);
            double t0 = now_ns();
            for (size_t i = 0; rc && i < iters; i++) {
                mca_rcache_base_registration_t *reg;
                rc->rcache_register(rc, buf, len, 0, 0, &reg);
                struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
                io_uring_prep_write_fixed(sqe, fd, buf, len, 0,
                                          ((mca_rcache_uring_reg_t *) reg)->buf_index);
                io_uring_submit(&ring);
                struct io_uring_cqe *cqe;
                io_uring_wait_cqe(&ring, &cqe);
                io_uring_cqe_seen(&ring, cqe);
                rc->rcache_deregister(rc, reg);
            }
            result = rc ? (now_ns() - t0) / iters : -1;
            if (rc) {
                mca_rcache_base_module_destroy(rc);
            }
            close(fd);
            munmap(buf, len);
            mca_rcache_uring_fini(&dev);
        }
        io_uring_queue_exit(&ring);
    }
    opal_finalize_util();
    return result;
}
#endif

static void print_ratio(double a, double b)
{
    if (b > 0 && a > 0) {
        printf(" %5.2f", a / b);
    } else {
        printf(" %5s", "-");
    }
}

int main(int argc, char **argv)
{
    size_t max_n = argc > 1 ? strtoul(argv[1], NULL, 10) : 1000000;
    page = (size_t) sysconf(_SC_PAGESIZE);
    rnd = malloc(OPS * sizeof(*rnd));
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < OPS; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        rnd[i] = (uint32_t) (x >> 16);
    }
    /* UCX first, in a child, results through shared memory. */
    result_t *ucx_res = mmap(NULL, sizeof(result_t) * NN, PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(ucx_res, 0, sizeof(result_t) * NN);
#ifdef BENCH_HAVE_UCX_HEADERS
    fflush(NULL);
    pid_t pid = fork();
    if (0 == pid) {
        run_driver(&ucx_driver, max_n, ucx_res);
        _exit(0);
    }
    waitpid(pid, NULL, 0);
#endif
    setenv("OMPI_MCA_mpi_leave_pinned", "1", 1);
    if (OPAL_SUCCESS != opal_init_util(&argc, &argv)) {
        return 1;
    }
    result_t our_res[NN];
    memset(our_res, 0, sizeof(our_res));
    run_driver(&grdma_driver, max_n, our_res);
    opal_finalize_util();
    if (!our_res[0].valid) {
        fprintf(stderr, "grdma could not run with memory hooks here\n");
        return 1;
    }

    printf("ns per operation; ratio = grdma / ucs_rcache (%s); unmap+ is the median added to "
           "munmap of a covered (c) / uncovered (u) page; sizeof registration: grdma %zu",
           ucx_res[0].valid ? "UCX measured in the same run" : "UCX not available",
           sizeof(mca_rcache_base_registration_t));
#ifdef BENCH_HAVE_UCX_HEADERS
    printf(", ucs_rcache %zu", sizeof(ucs_rcache_region_t));
#endif
    printf("\n");
    printf("%8s %6s %6s %5s %6s %6s %5s %6s %7s %7s %7s %7s %7s %7s %5s %5s %5s %5s %5s %5s\n",
           "N", "hit", "ucx", "ratio", "miss", "ucx", "ratio", "find", "hit x2", "hit x4",
           "unmap+c", "ucx", "unmap+u", "ucx", "rel c", "ucx", "rel u", "ucx", "B/reg", "ucx");
    for (size_t k = 0; k < NN && our_res[k].valid; k++) {
        result_t *o = &our_res[k], z = {0}, *u = ucx_res[k].valid ? &ucx_res[k] : &z;
        printf("%8zu %6.1f %6.1f", ns[k], o->hit, u->hit);
        print_ratio(o->hit, u->hit);
        printf(" %6.1f %6.1f", o->miss, u->miss);
        print_ratio(o->miss, u->miss);
        printf(" %6.1f %7.1f %7.1f %7.0f %7.0f %7.0f %7.0f %5.0f %5.0f %5.0f %5.0f %5.0f %5.0f\n",
               o->find, o->hit_t[2], o->hit_t[4], o->unmap_cov, u->unmap_cov, o->unmap_unc,
               u->unmap_unc, o->rel_cov, u->rel_cov, o->rel_unc, u->rel_unc, o->bytes, u->bytes);
    }
    if (ucx_res[0].valid) {
        printf("ucs_rcache hit x2 / x4:");
        for (size_t k = 0; k < NN && ucx_res[k].valid; k++) {
            printf("  N=%zu %.1f / %.1f", ns[k], ucx_res[k].hit_t[2], ucx_res[k].hit_t[4]);
        }
        printf("\n");
    }
#if OPAL_HAVE_LIBURING
    double on = uring_send_loop("1"), off = uring_send_loop("0");
    if (on > 0 && off > 0) {
        printf("io_uring send of 64 KiB from one buffer: leave_pinned on %.0f ns, off %.0f ns, "
               "off/on %.2fx\n",
               on, off, off / on);
    }
#endif
    return 0;
}
