/*
 * Patching and restoring while other threads call the function: 4 threads
 * call two targets in a loop (one patched with a single 8-byte store, one
 * whose displaced instructions need the other threads moved off the
 * bytes) while the main thread patches and restores both 200
 * times.  Every call must return the original's value, nothing may crash,
 * and the intercepts must have run.
 */
#include "opal_config.h"

#include <pthread.h>
#include <stdatomic.h>

#include "test/mca/patcher/overwrite/overwrite_test_util.h"
#include "test/support/emulated.h"

#define THREADS 4
#define ROUNDS 200

typedef long (*fn6_t)(long, long, long, long, long, long);

static fn6_t chain_simple, chain_mmap;
static atomic_long hits, calls, wrong;
static atomic_bool stop;

static long intercept_simple(long a, long b, long c, long d, long e, long f)
{
    atomic_fetch_add_explicit(&hits, 1, memory_order_relaxed);
    return chain_simple(a, b, c, d, e, f);
}

static long intercept_mmap(long a, long b, long c, long d, long e, long f)
{
    atomic_fetch_add_explicit(&hits, 1, memory_order_relaxed);
    return chain_mmap(a, b, c, d, e, f);
}

static fn6_t simple, mmapl;

static void *caller(void *arg)
{
    long seed = (long) (uintptr_t) arg;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        for (long i = 0; i < 64; i++) {
            long x = seed * 1000 + i;
            long r9 = i & 1;
            if (simple(x, 0, 0, 0, 0, 0) != x + 42 || mmapl(x, 0, 0, 0, 0, r9) != x + 1 + r9) {
                atomic_fetch_add(&wrong, 1);
            }
            atomic_fetch_add_explicit(&calls, 2, memory_order_relaxed);
        }
    }
    return NULL;
}

int main(void)
{
    mca_patcher_base_module_t *patcher = overwrite_test_setup();
    code_page_t cp;
    code_page_init(&cp);
    simple = (fn6_t) code_page_add(&cp, test_fn_plus42, sizeof(test_fn_plus42), 0);
    mmapl = (fn6_t) code_page_add(&cp, test_fn_mmap_like, sizeof(test_fn_mmap_like), 0);
    code_page_seal(&cp);
    unsigned char snap_simple[16], snap_mmap[16];
    memcpy(snap_simple, (void *) simple, sizeof(snap_simple));
    memcpy(snap_mmap, (void *) mmapl, sizeof(snap_mmap));

    pthread_t th[THREADS];
    for (long t = 0; t < THREADS; t++) {
        CHECK(0 == pthread_create(&th[t], NULL, caller, (void *) (uintptr_t) (t + 1)));
    }
    int failures = 0;
    const int rounds = test_rounds(ROUNDS);
    for (int round = 0; round < rounds && failures == 0; round++) {
        /* The chains are stored before the jumps go live. */
        int rc1 = patcher->patch_address_chain((uintptr_t) simple, (uintptr_t) intercept_simple,
                                               (uintptr_t *) &chain_simple);
        int rc2 = patcher->patch_address_chain((uintptr_t) mmapl, (uintptr_t) intercept_mmap,
                                               (uintptr_t *) &chain_mmap);
        if (OPAL_SUCCESS != rc1 || OPAL_SUCCESS != rc2 ||
            (uintptr_t) chain_simple != mca_patcher_base_chain_of(patcher, (uintptr_t) simple) ||
            (uintptr_t) chain_mmap != mca_patcher_base_chain_of(patcher, (uintptr_t) mmapl)) {
            fprintf(stderr, "FAIL: round %d: patch_address_chain returned %d, %d, or wrong chains\n",
                    round, rc1, rc2);
            failures++;
        }
        /* Let the callers run through the patched code for a moment. */
        long seen = atomic_load(&calls);
        while (atomic_load(&calls) < seen + 2 * THREADS) {
            sched_yield();
        }
        mca_patcher_base_restore_patches(patcher, NULL, NULL);
    }
    atomic_store(&stop, true);
    for (int t = 0; t < THREADS; t++) {
        pthread_join(th[t], NULL);
    }
    test_failures += failures;
    printf("%ld calls, %ld intercepted, %ld wrong\n", (long) calls, (long) hits, (long) wrong);
    CHECK_MSG(wrong == 0, "%ld calls returned a wrong value", (long) wrong);
    CHECK_MSG(hits > 0, "the intercepts never ran");
    CHECK(0 == memcmp(snap_simple, (void *) simple, sizeof(snap_simple)));
    CHECK(0 == memcmp(snap_mmap, (void *) mmapl, sizeof(snap_mmap)));
    opal_finalize_util();
    return test_finish("overwrite_threads_test");
}
