/*
 * What the hooks cost each operation.
 *
 *   hooks_bench time [ROUNDS]          ns per operation, bare and with each
 *                                      component (one empty callback),
 *                                      interleaved in one run; prints medians
 *   hooks_bench count CONFIG OP N      run OP N times under CONFIG (bare,
 *                                      linux, overwrite) for callgrind to count
 *
 * Timings on a noisy machine swing; run.sh adds instruction counts from
 * callgrind, which do not.
 */
#include "opal_config.h"

#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "opal/constants.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"

typedef void (*op_fn_t)(void);

static void op_munmap_einval(void)
{
    /* Page aligned, but longer than any address space: the kernel says
     * EINVAL at once, so what is left is the interception path.  (32 bits:
     * past the end of even a 64-bit kernel's 4 GiB for a 32-bit process.) */
#if SIZE_MAX > 0xffffffffu
    munmap((void *) 0x10000, (size_t) 1 << 62);
#else
    munmap((void *) 0x10000, (size_t) 0xffff0000u);
#endif
}

static void op_mmap_munmap(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    munmap(p, len);
}

static void op_mmap_munmap_4k(void) { op_mmap_munmap(4096); }
static void op_mmap_munmap_1m(void) { op_mmap_munmap(1 << 20); }

static void op_malloc_free(size_t len)
{
    void *p = malloc(len);
    __asm__ volatile("" : : "r"(p) : "memory"); /* keep the pair */
    free(p);
}

static void op_malloc_free_256k(void) { op_malloc_free(256 << 10); }
static void op_malloc_free_64(void) { op_malloc_free(64); }

static const struct {
    const char *name;
    op_fn_t fn;
} ops[] = {
    {"munmap_einval", op_munmap_einval},
    {"mmap_munmap_4k", op_mmap_munmap_4k},
    {"mmap_munmap_1m", op_mmap_munmap_1m},
    {"malloc_free_256k", op_malloc_free_256k},
    {"malloc_free_64", op_malloc_free_64},
};
#define NUM_OPS (int) (sizeof(ops) / sizeof(ops[0]))

static const char *const configs[] = {"bare", "linux", "overwrite"};
#define NUM_CONFIGS 3

static void empty_callback(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) buf, (void) len, (void) cbdata, (void) from_alloc;
}

static int config_start(const char *config)
{
    if (0 == strcmp(config, "bare")) {
        return OPAL_SUCCESS;
    }
    setenv("OMPI_MCA_patcher", config, 1);
    int rc = opal_init_util(NULL, NULL);
    if (OPAL_SUCCESS == rc) {
        rc = opal_mem_hooks_register_release(empty_callback, NULL);
    }
    return rc;
}

static void config_stop(const char *config)
{
    if (strcmp(config, "bare")) {
        opal_finalize_util();
    }
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return x < y ? -1 : x > y;
}

static int time_all(int rounds)
{
    const long iters = 20000;
    double *samples = calloc((size_t) rounds * NUM_OPS * NUM_CONFIGS, sizeof(double));
#define SAMPLE(r, o, c) samples[((size_t) (o) * NUM_CONFIGS + (c)) * rounds + (r)]
    /* Interleave configurations round by round, so that drifts of the
     * machine's speed hit all of them alike. */
    for (int r = 0; r < rounds; r++) {
        for (int c = 0; c < NUM_CONFIGS; c++) {
            if (OPAL_SUCCESS != config_start(configs[c])) {
                fprintf(stderr, "cannot set up %s\n", configs[c]);
                return 1;
            }
            for (int o = 0; o < NUM_OPS; o++) {
                ops[o].fn(); /* warm */
                double t0 = now_ns();
                for (long i = 0; i < iters; i++) {
                    ops[o].fn();
                }
                SAMPLE(r, o, c) = (now_ns() - t0) / iters;
            }
            config_stop(configs[c]);
        }
    }
    printf("%-18s %10s %10s %10s %8s %8s\n", "ns/op (median)", "bare", "linux", "overwrite", "linux/", "overw/");
    for (int o = 0; o < NUM_OPS; o++) {
        double med[NUM_CONFIGS];
        for (int c = 0; c < NUM_CONFIGS; c++) {
            qsort(&SAMPLE(0, o, c), rounds, sizeof(double), cmp_double);
            med[c] = SAMPLE(rounds / 2, o, c);
        }
        printf("%-18s %10.1f %10.1f %10.1f %7.2fx %7.2fx\n", ops[o].name, med[0], med[1], med[2],
               med[1] / med[0], med[2] / med[0]);
    }
    free(samples);
    return 0;
}

static int count_one(const char *config, const char *op, long n)
{
    for (int o = 0; o < NUM_OPS; o++) {
        if (0 == strcmp(op, ops[o].name)) {
            if (OPAL_SUCCESS != config_start(config)) {
                fprintf(stderr, "cannot set up %s\n", config);
                return 1;
            }
            for (long i = 0; i < n; i++) {
                ops[o].fn();
            }
            config_stop(config);
            return 0;
        }
    }
    fprintf(stderr, "unknown operation '%s'\n", op);
    return 2;
}

int main(int argc, char **argv)
{
    /* A fixed mmap threshold: 256 KiB blocks are mmapped every time. */
    mallopt(M_MMAP_THRESHOLD, 128 << 10);
    if (argc >= 2 && 0 == strcmp(argv[1], "time")) {
        return time_all(argc >= 3 ? atoi(argv[2]) : 15);
    }
    if (argc == 5 && 0 == strcmp(argv[1], "count")) {
        return count_one(argv[2], argv[3], atol(argv[4]));
    }
    fprintf(stderr, "usage: hooks_bench time [ROUNDS] | hooks_bench count CONFIG OP N\n");
    return 2;
}
