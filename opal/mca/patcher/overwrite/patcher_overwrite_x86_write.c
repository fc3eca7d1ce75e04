/*
 * Writing the patch bytes while other threads may be running the function,
 * on x86-64 and i386 alike (the architecture's rules for code that other
 * processors execute are the same in both modes).
 *
 * Instruction fetch on another CPU can see a multi-byte change half done,
 * and a thread can be stopped (preempted, or in the kernel) between two
 * displaced instructions.  The rest of the patch must never be executed
 * half written, so one of two protocols is used:
 *
 * (a) Single store.  The bytes lie in one aligned 8-byte word and, when
 *     patching, no displaced instruction other than the first begins inside
 *     them: one atomic 8-byte store replaces the first instruction whole.
 *
 * (b) Self-loop first, otherwise:
 *     0. When the instruction now at the patch point is one byte (push
 *        %ebp begins glibc's i386 mmap, madvise, free ...), the loop's
 *        second byte lands on the next instruction, where a thread may
 *        stand; and when the first two bytes straddle a cache line, the
 *        loop is no single store.  Then every other thread is first held
 *        in the request handler of a round (patcher_overwrite_threads.c),
 *        one found at an inner boundary of the displaced instructions
 *        moved to that instruction's copy in the trampoline, until step 4
 *        is done.
 *     1. Store "jmp ." (EB FE) over the first two bytes in one 2-byte
 *        store; sync cores.  A thread that reaches the patch point now
 *        waits there, running nothing of the function, with no signal
 *        needed (Go and other runtimes call mmap with every signal
 *        blocked: a trap would kill them).
 *     2. Patching, when the threads are not held and a displaced
 *        instruction begins inside the bytes to write: a thread may be
 *        stopped right there.  Every other thread runs a round whose
 *        handler moves a PC found at such a boundary to the copy.  A
 *        thread waiting at the loop with its signals blocked cannot
 *        answer: the round is tried again with the first two bytes put
 *        back meanwhile, so that it goes on (run_patiently).  A thread
 *        that will never answer is not asked when it sleeps at a PC that
 *        is none of the boundaries: since step 1 it can reach them only
 *        through the loop.  (Restoring needs no such step: no thread
 *        stops inside a jmp.)
 *     3. Store the bytes after the first two; sync cores.
 *     4. Store the first two bytes in one 2-byte store; sync cores.  A
 *        thread at the loop runs the new first instruction.  Held threads
 *        are released.
 *     Without every answer in about 2 s (step 0 or 2) the patch is
 *     declined, the bytes as they were.  From step 0 to 4 the writer calls
 *     nothing that may be patched or take a lock (a waiting or held
 *     thread may be inside malloc, holding its lock: the round's lists are
 *     kernel pages) and blocks its own asynchronous signals (a handler of
 *     its own entering the function would wait at the loop forever).
 *
 * "Sync cores" is membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE)
 * where the kernel has it: every running thread of the process executes a
 * serializing instruction before it returns, so none runs stale code.
 *
 * Why this is right by the Intel SDM (vol. 3A), which qemu-user cannot
 * show (it re-translates written code and never tears a store):
 * - 8.1.3, cross-modifying code: a processor may run code that another one
 *   changed only after it has seen the stores AND then executed a
 *   serializing instruction.  After each "sync cores" every thread of the
 *   process has done so, so each step below starts from code that all of
 *   them see as written.
 * - Before a thread has serialized, it may fetch the old or the new bytes.
 *   In (b) the bytes after the loop change only while every thread
 *   already sees the loop in front of them (synced after step 1), which
 *   stops it before anything behind is used; the first two bytes change
 *   last, after the rest is synced.  So a thread runs the old instruction,
 *   the loop, or the new one, nothing mixed.  Each store is atomic as a
 *   data access by 8.1.1: 2 bytes within a cache line and an aligned
 *   8-byte word from the P6 family (Pentium) on, in 32-bit and 64-bit mode
 *   alike.  That an unserialized fetch then sees all old or all new bytes
 *   of a 2- or 8-byte store is the one thing 8.1.3 does not promise, an
 *   assumption (a) and (b) make on x86-64 and i386 the same.  A held
 *   thread does not fetch at all until it leaves the handler through
 *   sigreturn (IRET: serializing).
 * - 8.1.3's rule applies in IA-32 and Intel 64 alike; the kernel's
 *   membarrier SYNC_CORE is there for 32-bit processes too (x86 has it for
 *   both, and a 32-bit process on a 64-bit kernel makes the same call).
 *
 * The request handler is installed at the first round and kept until the
 * patcher's fini (patcher_overwrite_threads.c).
 * Limits: a thread blocking the request signal for good makes a write
 * that needs a round decline, unless it has opted out of signals and
 * sleeps; such a sleeper, not held, waking during a write whose first
 * two bytes straddle a cache line could fetch them half written (entries
 * are 16-byte aligned, the patch point at most 4 bytes in: not seen in
 * compiled code); a thread of higher real-time priority waiting at the
 * loop on the writer's only CPU keeps the writer from running; only the
 * innermost PC of a thread is seen, not one saved by a signal handler it
 * is running (as with an answer).
 */
#include "opal_config.h"

#include <linux/membarrier.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_threads.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_x86.h"

/* (a) needs a single 8-byte store: on i386 gcc makes it with fild/fistp (from i586 on). */
_Static_assert(__atomic_always_lock_free(8, 0), "an 8-byte store is not one instruction here");

static int sync_core_state; /* 0 unknown, 1 registered, -1 unavailable */

static void sync_cores(void)
{
    atomic_thread_fence(memory_order_seq_cst);
    if (sync_core_state == 0) {
        sync_core_state = syscall(SYS_membarrier,
                                  MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE, 0, 0) == 0
                              ? 1
                              : -1;
    }
    if (sync_core_state == 1) {
        syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE, 0, 0);
    }
}

/* One 2-byte store, at any alignment (in asm: C would call it misaligned). */
static void store_pair(uintptr_t at, const unsigned char *v)
{
    uint16_t pair;
    memcpy(&pair, v, sizeof(pair));
    atomic_thread_fence(memory_order_release);
    __asm__ volatile("movw %w1, (%0)" : : "r"(at), "r"(pair) : "memory");
}

/* Bytes of the instruction now at the patch point: the first displaced
 * one when patching, our entry jump when restoring. */
static size_t head_insn_len(const mca_patcher_overwrite_write_t *w)
{
    const mca_patcher_overwrite_reloc_t *r = w->reloc;
    return NULL == r ? w->len : r->insns > 1 ? r->insn_offset[1] : r->window;
}

#define CACHE_LINE 64 /* every x86 processor with SSE2 and later */

static const unsigned char self_loop[2] = {0xeb, 0xfe}; /* jmp . */

/* What step 2's set-aside puts back and takes away again. */
typedef struct loop_point_t {
    uintptr_t addr;
    unsigned char head[2]; /* the first two bytes before the write */
} loop_point_t;

/* Between two tries of step 2: the old first bytes back, so that a thread
 * waiting at the loop with its signals blocked goes on; then the loop again. */
static void set_loop_aside(void *arg, bool aside)
{
    const loop_point_t *p = arg;
    store_pair(p->addr, aside ? p->head : self_loop);
    sync_cores();
}

static const char no_answer[] = "a thread did not answer the signal (SIGRTMAX, or a little below "
                                "under qemu-user) that moves it off the bytes to patch (signal "
                                "blocked?)";

void mca_patcher_overwrite_x86_code_write(mca_patcher_overwrite_write_t *w)
{
    const mca_patcher_overwrite_reloc_t *r = w->reloc;
    bool inner_boundary = false;
    for (unsigned i = 1; r && i < r->insns; i++) {
        inner_boundary |= r->insn_offset[i] < w->len;
    }
    w->rc = OPAL_SUCCESS;
    w->reason = NULL;

    /* (a) one aligned 8-byte store */
    uintptr_t word = w->addr & ~(uintptr_t) 7;
    if (!inner_boundary && w->addr + w->len <= word + 8) {
        uint64_t v = __atomic_load_n((uint64_t *) word, __ATOMIC_ACQUIRE);
        memcpy((unsigned char *) &v + (w->addr - word), w->bytes, w->len);
        __atomic_store_n((uint64_t *) word, v, __ATOMIC_SEQ_CST);
        sync_cores();
        return;
    }

    /* (b) self-loop first */
    const bool hold = head_insn_len(w) < 2 || CACHE_LINE - 1 == (w->addr & (CACHE_LINE - 1));
    mca_patcher_overwrite_round_t round = {.addr = w->addr,
                                           .len = w->len,
                                           .tramp = w->tramp,
                                           .hop = w->hop,
                                           .reloc = w->reloc,
                                           .restoring = NULL == w->reloc,
                                           .hold = hold};
    loop_point_t point = {.addr = w->addr};
    memcpy(point.head, (const void *) w->addr, sizeof(point.head));
    if ((hold || inner_boundary) && mca_patcher_overwrite_threads_init() != 0) {
        w->rc = OPAL_ERR_OUT_OF_RESOURCE;
        w->reason = "cannot install the signal handler that moves threads during the code write";
        return;
    }
    sigset_t async, old;
    mca_patcher_overwrite_async_signals(&async);
    pthread_sigmask(SIG_BLOCK, &async, &old);

    bool answered = !hold ||
                    mca_patcher_overwrite_threads_run_patiently(&round, NULL, NULL); /* 0 */
    if (answered) {
        store_pair(w->addr, self_loop); /* 1 */
        sync_cores();
        if (!hold && inner_boundary && /* 2 */
            !mca_patcher_overwrite_threads_run_patiently(&round, set_loop_aside, &point)) {
            set_loop_aside(&point, true);
            answered = false;
        }
    }
    if (answered) {
        memcpy((void *) (w->addr + 2), w->bytes + 2, w->len - 2); /* 3 */
        sync_cores();
        store_pair(w->addr, w->bytes); /* 4 */
        sync_cores();
        if (hold) {
            mca_patcher_overwrite_threads_release();
        }
    } else {
        w->rc = OPAL_ERR_NOT_SUPPORTED;
        w->reason = no_answer;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}
