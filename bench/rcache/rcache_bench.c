/*
 * Registration cache benchmark: ns per operation for grdma and, in the same
 * run, UCX's ucs_rcache (loaded with dlopen where libucs is installed).
 *
 *   hit     register + deregister of a random one of N cached one-page regions
 *   miss    the same on a region not cached (no-op register_mem)
 *   fill    a fresh cache filled with the N regions one after the other, per
 *           registration: every growth of the cache's index included
 *   find    rcache_find + deregister (grdma only: ucs_rcache has no find)
 *   hit xT  the hit, T threads at once (ns per operation per thread)
 *   unmap+  what the release event adds to munmap of one page that a
 *           registration covers / that none covers: the median of munmap
 *           through the hooks minus the median of the raw system call on a
 *           like page (another cached page / a plain one: the kernel's part
 *           differs between the two sets by up to 250 ns, with where the
 *           process's address space put them), samples interleaved so that
 *           the host's drift cancels (the kernel's munmap, 2-6 us here,
 *           swings by more than the cache's part: see rel)
 *   rel     the release event alone, as the memory hooks deliver it (for
 *           grdma mca_rcache_base_release_cb, for UCX ucm_vm_munmap), on a
 *           covered / an uncovered page: median ns.  Both leave the
 *           deregistration to their next call; grdma also leaves there the
 *           invalidation of a registration whose whole index block the
 *           pages hold (it does not read it in the event)
 *   rel w   the release event on a covered page just hit (its registration's
 *           lines, the index's and the TLB entries cached): the event's own
 *           cost, against rel c's, which is mostly the lines it must fetch
 *   floor   ns per dependent load of a random cache line in a set as large as
 *           grdma's cache at this N (a pointer chase): what one cold line of
 *           the cache costs on this host, the least a covered release pays
 *   B/reg   bytes per cached registration beyond the caller's struct (which,
 *           for grdma, holds the cache's own fields: see the header line)
 * Then a send loop through the io_uring helper, leave_pinned on vs off.
 *
 * UCX runs in a child process so that its memory hooks (libucm) and ours
 * never meet in one process.  The two take turns round by round (a UCX
 * round, a grdma round, the order swapped every round), so both sample the
 * same stretch of this noisy host's time.  Per side: hit, miss and find are
 * the best batch of BATCH operations over all rounds, the threaded hits the
 * best round, unmap and rel the median of the samples of all rounds.
 *
 * Usage: rcache_bench [max_N]            (default 1000000)
 *        rcache_bench --bytes N            (grdma's B/reg alone, a fresh cache of N: bytes.sh)
 *        rcache_bench --count DRIVER N [--warm]   (under callgrind: rcache_bench_count.c)
 */
#include "opal_config.h"

#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/rcache/rcache_bench.h"
#include "opal/mca/rcache/base/base.h"
#include "opal/runtime/opal.h"
#if OPAL_HAVE_LIBURING
#    include "opal/mca/rcache/base/rcache_base_device_uring.h"
#endif

#define ROUNDS 10       /* per side and measurement, taking turns */
#define OPS 100000      /* hits (or finds) per round */
#define BATCH 1000      /* hits, finds or misses timed at once */
#define UNMAPS 2000     /* samples of unmap and release, over all rounds */
#define MISSES 20000    /* over all rounds */
#define FILL_ROUNDS 4   /* fills per side and N (10^6 registrations take 0.1-1 s) */
#define FLOOR_LOADS 100000 /* dependent loads per round */
#define LINE 64
#define MAX_THREADS 4

typedef struct result_t {
    double hit[MAX_THREADS + 1], miss, fill, find, unmap_cov, unmap_unc, munmap_cov, rel_cov, rel_reg,
        rel_warm, rel_unc, floor, bytes;
    int valid;
} result_t;

typedef enum step_t {
    STEP_SETUP,    /* a fresh cache with N registrations; bytes per registration */
    STEP_HIT,      /* a round of hits with 1, 2 and 4 threads */
    STEP_FIND,     /* a round of finds */
    STEP_MISS,     /* a round of misses; the last round drops them again */
    STEP_UNMAP,    /* a round of unmap samples; the last round takes the medians */
    STEP_RELEASE,  /* a round of release samples; the last round takes the medians */
    STEP_FILL,     /* the first FILL_ROUNDS rounds: a fresh cache filled again, timed */
    STEP_TEARDOWN, /* destroy the cache */
} step_t;

typedef struct command_t {
    step_t step;
    size_t k; /* index into ns */
    int round;
} command_t;

static const step_t rounds_of[] = {STEP_HIT,    STEP_FIND,    STEP_MISS,
                                   STEP_UNMAP,  STEP_RELEASE, STEP_FILL};
static const size_t ns[] = {100, 1000, 10000, 100000, 1000000};
#define NN (sizeof(ns) / sizeof(ns[0]))

/* One side's state (each side is its own process). */
static const bench_driver_t *drv;
static unsigned char *cached, *plain, *missing; /* N cached pages; pages none covers */
static size_t ncached, nplain;
static double cov[UNMAPS], unc[UNMAPS], raw[UNMAPS], raw_cov[UNMAPS], both[UNMAPS], warm[UNMAPS];

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
    return resident * (long) bench_page;
}

/* Bytes the process holds: the malloc heap and mapped chunks. */
static double held_bytes(void)
{
    struct mallinfo2 mi = mallinfo2();
    return (double) (mi.uordblks + mi.hblkhd);
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

static void keep_best(double *best, int round, double value)
{
    *best = 0 == round || value < *best ? value : *best;
}

static void *hit_thread(void *arg)
{
    size_t t = (size_t) arg, nthreads = t >> 16, per = OPS / nthreads;
    t &= 0xffff;
    for (size_t i = 0; i < per; i++) {
        drv->put(drv->get(bench_cached_page(cached, ncached, i + t * 7919), bench_page));
    }
    return NULL;
}

/* ns per hit per thread, nthreads at once. */
static double threads_round(size_t nthreads)
{
    pthread_t th[MAX_THREADS];
    double t0 = bench_now_ns();
    for (size_t i = 0; i < nthreads; i++) {
        pthread_create(&th[i], NULL, hit_thread, (void *) ((nthreads << 16) | i));
    }
    for (size_t i = 0; i < nthreads; i++) {
        pthread_join(th[i], NULL);
    }
    return (bench_now_ns() - t0) / (OPS / nthreads);
}

static void op_hit(size_t i)
{
    drv->put(drv->get(bench_cached_page(cached, ncached, i), bench_page));
}
static void op_find(size_t i)
{
    drv->put(drv->find(bench_cached_page(cached, ncached, i), bench_page));
}
static void op_miss(size_t i) /* registers (and keeps cached) page i of 'missing' */
{
    drv->put(drv->get(bench_set_page(missing, MISSES, i), bench_page));
}

/*
 * ns per operation of the best batch of BATCH operations op(first .. first + n - 1).
 * A batch (20-500 us) mostly falls between the time slices of the host's other
 * jobs, and the best one over all rounds is what the operation costs undisturbed:
 * steadier from run to run here than the best whole round.
 */
static double best_batch(void (*op)(size_t i), size_t first, size_t n)
{
    double best = 0;
    for (size_t b = first; b + BATCH <= first + n; b += BATCH) {
        double t0 = bench_now_ns();
        for (size_t i = b; i < b + BATCH; i++) {
            op(i);
        }
        double t = (bench_now_ns() - t0) / BATCH;
        best = b == first || t < best ? t : best;
    }
    return best;
}

/*
 * One page's munmap, timed, and the page mapped again.  The page is written
 * first, untimed: memory a program unmaps was in use, and a registration
 * pins its pages.  An untouched page's munmap costs the kernel less, by an
 * amount that depends on what else shares its page table: a matter of
 * each process's layout, which made the kernel's part of the two sides
 * differ by up to 950 ns (README, "munmap c: a written page").
 */
static double timed_unmap(unsigned char *p, bool raw_call)
{
    *(volatile unsigned char *) p = 1;
    double t0 = bench_now_ns();
    if (raw_call) {
        syscall(SYS_munmap, p, bench_page); /* around the hooks */
    } else {
        munmap(p, bench_page);
    }
    double t = bench_now_ns() - t0;
    mmap(p, bench_page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    return t;
}

/*
 * Samples [at, at + n) of what a release event adds to munmap of one page: of
 * a random cached page (registered again after), against the raw system call
 * on another cached page, and of a random page of 'plain' that no
 * registration covers, against the raw system call on 'plain'.  The raw call
 * on a cached page goes around the hooks: its release event is delivered
 * by hand after it, untimed, before the page is registered again.
 */
static void unmap_samples(size_t at, size_t n)
{
    for (size_t i = at; i < at + n; i++) {
        unsigned char *p = bench_cached_page(cached, ncached, i * 13);
        cov[i] = timed_unmap(p, false);
        drv->put(drv->get(p, bench_page));
        p = bench_cached_page(cached, ncached, i * 29 + 7);
        raw_cov[i] = timed_unmap(p, true);
        drv->release(p, bench_page);
        drv->put(drv->get(p, bench_page));
        raw[i] = timed_unmap(bench_cached_page(plain, nplain, i * 17), true);
        unc[i] = timed_unmap(bench_cached_page(plain, nplain, i * 19), false);
    }
}

/*
 * Samples [at, at + n) of the release event alone on a covered page, of that
 * event and the next registration of the page together (UCX leaves its
 * deregistration to that call: the fair whole), of the event on an
 * uncovered page, and of the event on a covered page hit just before.
 */
static void release_samples(size_t at, size_t n)
{
    for (size_t i = at; i < at + n; i++) {
        unsigned char *p = bench_cached_page(cached, ncached, i * 23);
        double t0 = bench_now_ns();
        drv->release(p, bench_page);
        double t1 = bench_now_ns();
        drv->put(drv->get(p, bench_page));
        double t2 = bench_now_ns();
        cov[i] = t1 - t0;
        both[i] = t2 - t0;
        p = bench_cached_page(plain, nplain, i * 29);
        t0 = bench_now_ns();
        drv->release(p, bench_page);
        unc[i] = bench_now_ns() - t0;
        p = bench_cached_page(cached, ncached, i * 31);
        drv->put(drv->get(p, bench_page));
        t0 = bench_now_ns();
        drv->release(p, bench_page);
        warm[i] = bench_now_ns() - t0;
        drv->put(drv->get(p, bench_page));
    }
}

/* Register (and keep cached) the N pages of 'cached', in order; ns per registration. */
static double fill_cache(void)
{
    double t0 = bench_now_ns();
    for (size_t i = 0; i < ncached; i++) {
        drv->put(drv->get(bench_set_page(cached, ncached, i), bench_page));
    }
    return (bench_now_ns() - t0) / ncached;
}

static int setup(size_t n, result_t *r)
{
    if (0 != drv->create()) {
        return -1;
    }
    ncached = n;
    cached = bench_map_set(ncached);
    nplain = n > UNMAPS ? n : UNMAPS;
    plain = bench_map_set(nplain);
    missing = bench_map_set(MISSES);
    long rss0 = rss_bytes();
    double heap0 = held_bytes();
    r->fill = fill_cache();
    /* The larger of the two: a cache may take memory from malloc or map its own. */
    double heap = held_bytes() - heap0, rss = (double) (rss_bytes() - rss0);
    r->bytes = (heap > rss ? heap : rss) / ncached - (double) drv->sizeof_reg;
    return 0;
}

static void run_step(const command_t *c, result_t *r)
{
    size_t per = UNMAPS / ROUNDS, at = c->round * per, misses = MISSES / ROUNDS;
    bool last = ROUNDS - 1 == c->round;
    switch (c->step) {
    case STEP_SETUP:
        r->valid = 0 == setup(ns[c->k], r);
        break;
    case STEP_HIT:
        keep_best(&r->hit[1], c->round, best_batch(op_hit, 0, OPS));
        for (size_t t = 2; t <= MAX_THREADS; t *= 2) {
            keep_best(&r->hit[t], c->round, threads_round(t));
        }
        break;
    case STEP_FIND:
        if (drv->find) {
            keep_best(&r->find, c->round, best_batch(op_find, 0, OPS));
        }
        break;
    case STEP_MISS:
        keep_best(&r->miss, c->round, best_batch(op_miss, c->round * misses, misses));
        if (last) {
            bench_unmap_set(missing, MISSES); /* drop them again: N stays N */
        }
        break;
    case STEP_UNMAP:
        unmap_samples(at, per);
        if (last) {
            r->munmap_cov = median(cov, UNMAPS);
            r->unmap_cov = r->munmap_cov - median(raw_cov, UNMAPS);
            r->unmap_unc = median(unc, UNMAPS) - median(raw, UNMAPS);
        }
        break;
    case STEP_RELEASE:
        release_samples(at, per);
        if (last) {
            r->rel_cov = median(cov, UNMAPS);
            r->rel_reg = median(both, UNMAPS);
            r->rel_warm = median(warm, UNMAPS);
            r->rel_unc = median(unc, UNMAPS);
        }
        break;
    case STEP_FILL:
        /* The set of N cached pages again, in a fresh cache (the old one destroyed first). */
        if (c->round < FILL_ROUNDS) {
            drv->destroy();
            if (0 != drv->create()) {
                fprintf(stderr, "rcache_bench: %s could not be created again\n", drv->name);
                exit(1);
            }
            keep_best(&r->fill, c->round, fill_cache());
        }
        break;
    case STEP_TEARDOWN:
        bench_unmap_set(cached, ncached);
        bench_unmap_set(plain, nplain);
        drv->destroy();
        break;
    }
}

/* ---- the UCX side: a child that runs the steps it is sent ---- */

static int to_child = -1, from_child = -1;

#ifdef BENCH_HAVE_UCX_HEADERS
static void start_ucx_child(result_t *res)
{
    int cmd[2], ack[2];
    if (0 != pipe(cmd) || 0 != pipe(ack)) {
        perror("pipe");
        exit(1);
    }
    fflush(NULL);
    pid_t pid = fork();
    if (0 == pid) {
        close(cmd[1]);
        close(ack[0]);
        drv = &bench_ucx_driver;
        command_t c;
        while (sizeof(c) == read(cmd[0], &c, sizeof(c))) {
            run_step(&c, &res[c.k]);
            if (1 != write(ack[1], "", 1)) {
                break;
            }
        }
        _exit(0);
    }
    close(cmd[0]);
    close(ack[1]);
    if (pid > 0) {
        to_child = cmd[1];
        from_child = ack[0];
    }
}
#endif

static void stop_ucx_child(void)
{
    if (to_child >= 0) {
        close(to_child);
        close(from_child);
        to_child = from_child = -1;
        wait(NULL);
    }
}

static void ucx_step(const command_t *c, const result_t *res)
{
    char ack;
    if (to_child < 0) {
        return;
    }
    if (sizeof(*c) != write(to_child, c, sizeof(*c)) || 1 != read(from_child, &ack, 1)) {
        stop_ucx_child(); /* it died: the table says UCX not measured from here on */
    } else if (STEP_SETUP == c->step && !res[c->k].valid) {
        stop_ucx_child();
    }
}

/* Both sides, one after the other; which one goes first alternates by round. */
static void both_step(step_t step, size_t k, int round, result_t *ours, result_t *ucx)
{
    command_t c = {step, k, round};
    if (round & 1) {
        run_step(&c, &ours[k]);
        ucx_step(&c, ucx);
    } else {
        ucx_step(&c, ucx);
        run_step(&c, &ours[k]);
    }
}

/* ---- the memory floor ---- */

/*
 * ns per dependent load of a random line of a set of 'bytes': a pointer chase
 * through one random cycle over all its lines (Sattolo's shuffle), so every
 * load waits for the one before and none is predictable.
 */
static double memory_floor(size_t bytes)
{
    size_t lines = bytes / LINE > 2 ? bytes / LINE : 2;
    unsigned char *set = bench_map(lines * LINE);
    uint32_t *order = malloc(lines * sizeof(*order));
    uint64_t x = 0x2545f4914f6cdd1dull;
    for (size_t i = 0; i < lines; i++) {
        order[i] = (uint32_t) i;
    }
    for (size_t i = lines - 1; i > 0; i--) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t j = x % i, t = order[i];
        order[i] = order[j], order[j] = (uint32_t) t;
    }
    for (size_t i = 0; i < lines; i++) {
        *(void **) (set + i * LINE) = set + (size_t) order[i] * LINE;
    }
    free(order);
    double sample[ROUNDS];
    void *p = set;
    for (int r = 0; r < ROUNDS; r++) {
        double t0 = bench_now_ns();
        for (size_t i = 0; i < FLOOR_LOADS; i++) {
            p = *(void **) p;
        }
        sample[r] = (bench_now_ns() - t0) / FLOOR_LOADS;
    }
    __asm__ volatile("" : : "r"(p)); /* the chase is used */
    munmap(set, lines * LINE);
    return median(sample, ROUNDS);
}

#if OPAL_HAVE_LIBURING
/* Send 64 KiB from one buffer through the io_uring helper, n times; ns per send. */
static double uring_send_loop(const char *leave_pinned)
{
    setenv("OMPI_MCA_mpi_leave_pinned", leave_pinned, 1);
    opal_init_util(NULL, NULL);
    struct io_uring ring;
    mca_rcache_base_device_uring_t dev;
    double result = -1;
    if (0 == io_uring_queue_init(8, &ring, 0)) {
        if (OPAL_SUCCESS == mca_rcache_base_device_uring_init(&dev, &ring, 16)) {
            mca_rcache_base_resources_t res;
            mca_rcache_base_device_uring_resources(&dev, &res);
            mca_rcache_base_module_t *rc = mca_rcache_base_module_create(NULL, NULL, &res);
            int fd = memfd_create("bench", 0);
            size_t len = 64 * 1024, iters = 20000;
            unsigned char *buf = bench_map(len);
            memset(buf, 1, len);
            double t0 = bench_now_ns();
            for (size_t i = 0; rc && i < iters; i++) {
                mca_rcache_base_registration_t *reg;
                rc->rcache_register(rc, buf, len, 0, 0, &reg);
                struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
                io_uring_prep_write_fixed(sqe, fd, buf, len, 0,
                                          ((mca_rcache_base_device_uring_reg_t *) reg)->buf_index);
                io_uring_submit(&ring);
                struct io_uring_cqe *cqe;
                io_uring_wait_cqe(&ring, &cqe);
                io_uring_cqe_seen(&ring, cqe);
                rc->rcache_deregister(rc, reg);
            }
            result = rc ? (bench_now_ns() - t0) / iters : -1;
            if (rc) {
                mca_rcache_base_module_destroy(rc);
            }
            close(fd);
            munmap(buf, len);
            mca_rcache_base_device_uring_fini(&dev);
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

/* grdma's value, UCX's and their ratio. */
static void print_pair(double ours, double ucx, const char *fmt)
{
    printf(fmt, ours);
    printf(fmt, ucx);
    print_ratio(ours, ucx);
}

static void print_table(const result_t *our_res, const result_t *ucx_res)
{
    static const result_t none;
    printf("ns per operation; ratio = grdma / ucs_rcache (%s); sizeof registration: grdma %zu",
           ucx_res[0].valid ? "UCX measured in the same run, rounds taking turns"
                            : "UCX not available",
           bench_grdma_driver.sizeof_reg);
#ifdef BENCH_HAVE_UCX_HEADERS
    printf(", ucs_rcache %zu", bench_ucx_driver.sizeof_reg);
#endif
    if (bench_regions > 1) {
        printf("; the pages in %u regions far apart (BENCH_RCACHE_REGIONS)", bench_regions);
    }
    printf("\ncache (hit, miss, find: the best batch of %d; fill: a fresh cache filled, per "
           "registration, the best of %d; hit x2/x4: the best of %d rounds, per thread; floor: "
           "one dependent cold load)\n",
           BATCH, FILL_ROUNDS, ROUNDS);
    printf("%8s %6s %6s %5s %6s %6s %5s %6s %6s %5s %6s %7s %7s %7s %7s %5s %5s %5s %5s\n", "N",
           "hit", "ucx", "ratio", "miss", "ucx", "ratio", "fill", "ucx", "ratio", "find", "hit x2",
           "ucx", "hit x4", "ucx", "ratio", "floor", "B/reg", "ucx");
    for (size_t k = 0; k < NN && our_res[k].valid; k++) {
        const result_t *o = &our_res[k], *u = ucx_res[k].valid ? &ucx_res[k] : &none;
        printf("%8zu", ns[k]);
        print_pair(o->hit[1], u->hit[1], " %6.1f");
        print_pair(o->miss, u->miss, " %6.1f");
        print_pair(o->fill, u->fill, " %6.1f");
        printf(" %6.1f %7.1f %7.1f", o->find, o->hit[2], u->hit[2]);
        print_pair(o->hit[4], u->hit[4], " %7.1f");
        printf(" %5.0f %5.0f %5.0f\n", o->floor, o->bytes, u->bytes);
    }
    printf("release events (medians of %d samples: rel c/u the event on a covered/uncovered page, "
           "rel c+reg the event and the next registration of the page, rel w the event on a page just hit, munmap c the whole munmap "
           "of a covered page, unmap+c/u what the hooks add to munmap)\n",
           UNMAPS);
    printf("%8s %6s %6s %5s %9s %6s %5s %5s %5s %5s %8s %6s %5s %5s %5s %7s %7s %7s %7s\n", "N",
           "rel c", "ucx", "ratio", "rel c+reg", "ucx", "ratio", "rel w", "ucx", "ratio", "munmap c", "ucx", "ratio", "rel u", "ucx",
           "unmap+c", "ucx", "unmap+u", "ucx");
    for (size_t k = 0; k < NN && our_res[k].valid; k++) {
        const result_t *o = &our_res[k], *u = ucx_res[k].valid ? &ucx_res[k] : &none;
        printf("%8zu", ns[k]);
        print_pair(o->rel_cov, u->rel_cov, " %6.0f");
        print_pair(o->rel_reg, u->rel_reg, " %9.0f");
        print_pair(o->rel_warm, u->rel_warm, " %5.0f");
        print_pair(o->munmap_cov, u->munmap_cov, " %8.0f");
        printf(" %5.0f %5.0f %7.0f %7.0f %7.0f %7.0f\n", o->rel_unc, u->rel_unc, o->unmap_cov,
               u->unmap_cov, o->unmap_unc, u->unmap_unc);
    }
}

/*
 * --bytes N: what grdma holds per registration (B/reg) in a fresh cache
 * filled with N pages, in this process alone (no UCX child): the column's
 * measure at any N, not only at the decades (bytes.sh runs it for a list).
 */
static int bytes_main(int argc, char **argv)
{
    char *end = NULL;
    size_t n = 3 == argc ? strtoul(argv[2], &end, 10) : 0;
    if (0 == n || *end) {
        fprintf(stderr, "usage: rcache_bench --bytes N (N >= 1)\n");
        return 2;
    }
    setenv("OMPI_MCA_mpi_leave_pinned", "1", 1);
    if (OPAL_SUCCESS != opal_init_util(&argc, &argv)) {
        return 1;
    }
    drv = &bench_grdma_driver;
    result_t r;
    memset(&r, 0, sizeof(r));
    if (0 != setup(n, &r)) {
        fprintf(stderr, "rcache_bench: grdma could not be created\n");
        return 1;
    }
    printf("%zu %.1f\n", n, r.bytes);
    command_t c = {.step = STEP_TEARDOWN};
    run_step(&c, &r);
    opal_finalize_util();
    return 0;
}

int main(int argc, char **argv)
{
    bench_page = (size_t) sysconf(_SC_PAGESIZE);
    bench_rnd = malloc(BENCH_RND * sizeof(*bench_rnd));
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < BENCH_RND; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        bench_rnd[i] = (uint32_t) (x >> 16);
    }
    const char *regions = getenv("BENCH_RCACHE_REGIONS");
    if (regions) {
        char *end = NULL;
        unsigned long r = strtoul(regions, &end, 10);
        if (*end || r < 1 || r > 4096) {
            fprintf(stderr, "rcache_bench: BENCH_RCACHE_REGIONS=%s: not a number of regions "
                            "from 1 to 4096\n", regions);
            return 2;
        }
        bench_regions = (unsigned) r;
    }
    if (argc > 1 && 0 == strcmp(argv[1], "--count")) {
        char *end = NULL;
        bool warm = 5 == argc && 0 == strcmp(argv[4], "--warm");
        size_t n = 4 == argc || warm ? strtoul(argv[3], &end, 10) : 0;
        if (0 == n || *end) {
            fprintf(stderr, "usage: rcache_bench --count grdma|ucs_rcache N [--warm] (N >= 1)\n");
            return 2;
        }
        return bench_count_main(argv[2], n, warm);
    }
    if (argc > 1 && 0 == strcmp(argv[1], "--bytes")) {
        return bytes_main(argc, argv);
    }
    char *end = NULL;
    size_t max_n = argc > 1 ? strtoul(argv[1], &end, 10) : ns[NN - 1];
    if (argc > 2 || (end && *end) || max_n < ns[0]) {
        fprintf(stderr, "usage: rcache_bench [max_N >= %zu] | rcache_bench --count DRIVER N\n",
                ns[0]);
        return 2;
    }

    /* UCX's side first forks, before our hooks are installed in this process. */
    result_t *ucx_res = mmap(NULL, sizeof(result_t) * NN, PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(ucx_res, 0, sizeof(result_t) * NN);
#ifdef BENCH_HAVE_UCX_HEADERS
    start_ucx_child(ucx_res);
#endif
    setenv("OMPI_MCA_mpi_leave_pinned", "1", 1);
    if (OPAL_SUCCESS != opal_init_util(&argc, &argv)) {
        return 1;
    }
    drv = &bench_grdma_driver;
    result_t our_res[NN];
    memset(our_res, 0, sizeof(our_res));
    for (size_t k = 0; k < NN && ns[k] <= max_n; k++) {
        both_step(STEP_SETUP, k, 0, our_res, ucx_res);
        if (!our_res[k].valid) {
            break;
        }
        for (size_t s = 0; s < sizeof(rounds_of) / sizeof(rounds_of[0]); s++) {
            for (int round = 0; round < ROUNDS; round++) {
                both_step(rounds_of[s], k, round, our_res, ucx_res);
            }
        }
        /* the set grdma's cache holds, as its release events see it */
        our_res[k].floor = memory_floor((size_t) ((our_res[k].bytes + drv->sizeof_reg) * ns[k]));
        both_step(STEP_TEARDOWN, k, 0, our_res, ucx_res);
    }
    stop_ucx_child();
    opal_finalize_util();
    if (!our_res[0].valid) {
        fprintf(stderr, "grdma could not run with memory hooks here\n");
        return 1;
    }
    print_table(our_res, ucx_res);
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
