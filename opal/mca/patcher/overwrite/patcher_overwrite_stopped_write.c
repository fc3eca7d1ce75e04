/*
 * Writing the patch bytes with every other thread held in a signal
 * handler, for architectures where no instruction may change while
 * another processor can run it.  Their manuals allow that only between
 * a few instructions (aarch64: B, BL, NOP, BRK, SVC, HVC, SMC, ISB, in
 * the Arm ARM's rule on concurrent modification and execution; Power: its
 * "patch class" b, bl, ba, bla and the preferred nop), and the first
 * instruction of a function we patch is anything (stp, mflr, addi ...);
 * RISC-V promises nothing for a fetch that races a store, and its 8-byte
 * auipc+jalr could be seen half written.  So:
 *
 *   1. Every other thread runs the request handler of a round
 *      (patcher_overwrite_threads.c) and stays in it.  Patching, a PC at
 *      an inner boundary of the displaced instructions goes to that
 *      instruction's copy in the trampoline; restoring, a PC strictly
 *      inside the entry jump goes to the hop, where the rest of the jump
 *      would have taken it.  A round that misses an answer (a thread
 *      blocking signals for a moment) is tried again; without every answer
 *      in about 2 s the write is declined.
 *   2. The bytes are stored, and mca_patcher_overwrite_icache_sync
 *      (__builtin___clear_cache, or Power's own sequence where GCC's is
 *      empty: patcher_overwrite_icache.h) makes them what every processor
 *      fetches: each architecture's file says what that does and which
 *      rule of its manual it meets (D-cache clean to the point of
 *      unification, I-cache invalidate, the barriers).
 *   3. The threads are released.  Each one leaves the handler through the
 *      kernel's signal return (eret, rfid, sret); that none then runs an
 *      instruction it fetched before step 2 is each architecture's own
 *      rule, in its file (on RISC-V not sret, which synchronizes no fetch,
 *      but the FENCE.I that step 2 has the kernel run on every hart).
 *
 * Nothing in steps 1-3 allocates or takes a lock: a held thread may own
 * one.  Limits: a thread that has opted out of signals for good and
 * sleeps in a system call off the bytes is not held (see
 * patcher_overwrite_threads.c); if it wakes during the few instructions
 * of step 2 and enters the function, it may fetch an instruction the
 * manual lets come out mixed.  A thread that blocks the request signal
 * otherwise makes the write decline.
 */
#include "opal_config.h"

#include <stdint.h>
#include <string.h>

#include "opal/constants.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_icache.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_stopped_write.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_threads.h"

void mca_patcher_overwrite_stopped_code_write(mca_patcher_overwrite_write_t *w)
{
    mca_patcher_overwrite_round_t hold = {
        .addr = w->addr,
        .len = w->len,
        .tramp = w->tramp,
        .hop = w->hop,
        .reloc = w->reloc,
        .restoring = NULL == w->reloc,
        .hold = true,
    };
    w->rc = OPAL_SUCCESS;
    w->reason = NULL;
    if (mca_patcher_overwrite_threads_init() != 0) {
        w->rc = OPAL_ERR_OUT_OF_RESOURCE;
        w->reason = "cannot install the signal handler that holds threads during the code write";
        return;
    }
    if (!mca_patcher_overwrite_threads_run_patiently(&hold, NULL, NULL)) { /* 1 */
        w->rc = OPAL_ERR_NOT_SUPPORTED;
        w->reason = "a thread did not answer the signal (SIGRTMAX, or a little below under "
                    "qemu-user) that holds it during the code write (signal blocked?)";
        return;
    }
    /* 2: one single-copy atomic store where the bytes are one aligned word
     * (what a thread that is not held is least likely to see torn) */
    uint32_t word;
    if (sizeof(word) == w->len && 0 == (w->addr & (sizeof(word) - 1))) {
        memcpy(&word, w->bytes, sizeof(word));
        __atomic_store_n((uint32_t *) w->addr, word, __ATOMIC_RELAXED);
    } else {
        memcpy((void *) w->addr, w->bytes, w->len);
    }
    mca_patcher_overwrite_icache_sync(w->addr, w->len);
    mca_patcher_overwrite_threads_release(); /* 3 */
}
