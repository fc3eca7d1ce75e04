/*
 * Writing the patch bytes while other threads may be running the function,
 * on x86-64 and i386 alike (the architecture's rules for code that other
 * processors execute are the same in both modes).
 *
 * Instruction fetch on another CPU can see a multi-byte change half done,
 * and a thread can be stopped (preempted, or in the kernel) between two
 * displaced instructions.  The rest of the patch must never be executed
 * half written, so one of three protocols is used:
 *
 * (a) Single store.  The bytes lie in one aligned 8-byte word and, when
 *     patching, no displaced instruction other than the first begins inside
 *     them: one atomic 8-byte store replaces the first instruction whole.
 *
 * (b) Self-loop first, otherwise, when the instruction now at the patch
 *     point is 2 bytes or more (our jump, when restoring) and its first
 *     two bytes lie in one cache line:
 *     1. Store "jmp ." (EB FE) over the first two bytes in one 2-byte
 *        store; sync cores.  A thread that reaches the patch point now
 *        waits there, running nothing of the function, with no signal
 *        needed (Go and other runtimes call mmap with every signal
 *        blocked: they cannot take a trap).
 *     2. Patching only, when a displaced instruction begins inside the
 *        bytes to write: a thread may be stopped right there.  Every other
 *        thread runs a round of patcher_overwrite_threads.c, whose handler
 *        moves a PC found at such a boundary to the same instruction's
 *        copy in the trampoline.  A thread waiting at the loop with its
 *        signals blocked cannot answer: after a short wait the first two
 *        bytes go back to what they were (sync cores), the waiting threads
 *        run on, and the round is tried again, waiting twice as long each
 *        time; after about 2 s in all the patch is declined.  A thread
 *        that will never answer is not asked when it sleeps at a PC that
 *        is none of the boundaries: since step 1 it can reach them only
 *        through the loop.  (Restoring needs no such step: no thread
 *        stops inside a jmp.)
 *     3. Store the bytes after the first two; sync cores.
 *     4. Store the first two bytes in one 2-byte store; sync cores.  A
 *        thread at the loop runs the new first instruction.
 *     From step 1 to 4 the writer calls nothing that may be patched or
 *     take a lock (a waiting thread may be inside malloc, holding its
 *     lock: the round's lists are kernel pages) and blocks its own
 *     asynchronous signals (a handler of its own entering the function
 *     would wait at the loop forever).
 *
 * (c) int3 first, for a 1-byte first instruction (push %rbx in dlopen):
 *     as (b) with the one-byte int3 (0xcc) in place of the loop in steps 1
 *     and 4: a thread that reaches the patch point traps, and our SIGTRAP
 *     handler sends it on through the trampoline, which runs the displaced
 *     instructions as they were (so a call made during the write is simply
 *     not yet intercepted, or no longer).  Without every answer in step 2
 *     the patch is declined.  A trap taken during 1-4 but delivered after
 *     4 finds the first byte final: the thread is re-run from the patch
 *     point.
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
 *   In (b) and (c) the bytes after the head (the loop, the int3) change
 *   only while every thread already sees the head in front of them
 *   (synced after step 1), which stops or traps before anything behind it
 *   is used; the head changes last, after the rest is synced.  So a thread
 *   runs the old instruction, the head, or the new one, nothing mixed.
 *   Each store is atomic as a data access by 8.1.1: a byte always; 2 bytes
 *   within a cache line and an aligned 8-byte word from the P6 family
 *   (Pentium) on, in 32-bit and 64-bit mode alike.  That an unserialized
 *   fetch then sees all old or all new bytes of a 2- or 8-byte store is
 *   the one thing 8.1.3 does not promise, an assumption (a) and (b) make
 *   on x86-64 and i386 the same (the int3 of (c) does not need it).
 * - 8.1.3's rule applies in IA-32 and Intel 64 alike; the kernel's
 *   membarrier SYNC_CORE is there for 32-bit processes too (x86 has it for
 *   both, and a 32-bit process on a 64-bit kernel makes the same call).
 *
 * The SIGTRAP and request handlers are installed at the first int3
 * write and kept until the patcher's fini; signals that are not ours go
 * to the handler that was there before.  A trap in flight must still find
 * them: a thread can take the trap and be preempted before the kernel
 * delivers it.  So fini first runs a round (a pending SIGTRAP, a lower
 * number, is delivered no later than that request), and the patch points
 * stay known to the trap handler for the life of the process: a late
 * trap finds its int3 gone and re-runs the instruction.  If a thread does
 * not answer (and is not one that never will, asleep in a system call,
 * where no trap of ours can be pending), the handlers stay.
 * Limits: a thread that blocks SIGTRAP and reaches an int3 of (c) is
 * killed by the kernel; under a debugger that int3 stops the program
 * (continue passes it to us); a thread blocking the move signal makes
 * step 2 decline, unless it has opted out of signals and sleeps; a thread
 * of higher real-time priority waiting at the loop on the writer's only
 * CPU keeps the writer from running; only the innermost PC of a thread is
 * seen, not one saved by a signal handler it is running (as with an
 * answer).
 */
#include "opal_config.h"

#include <linux/membarrier.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_threads.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_x86.h"

/* (a) needs a single 8-byte store: on i386 gcc makes it with fild/fistp (from i586 on). */
_Static_assert(__atomic_always_lock_free(8, 0), "an 8-byte store is not one instruction here");

#define INT3       0xcc
#define MAX_POINTS 256 /* patch points the handler knows (see point_for) */

/* A patch point the SIGTRAP handler must recognise. */
typedef struct trap_point_t {
    _Atomic uintptr_t addr;
    _Atomic uintptr_t tramp;
} trap_point_t;

static trap_point_t points[MAX_POINTS];
static _Atomic unsigned npoints;
static struct sigaction prev_trap;
static bool trap_installed;
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

/* SIGTRAP: a thread ran one of our int3s. */
static void trap_handler(int sig, siginfo_t *info, void *ucv)
{
    const mca_patcher_overwrite_arch_t *arch = MCA_PATCHER_OVERWRITE_ARCH;
    uintptr_t pc = arch->get_pc(ucv);
    unsigned n = atomic_load(&npoints);

    for (unsigned k = 0; info->si_code == SI_KERNEL && k < n && k < MAX_POINTS; k++) {
        uintptr_t addr = atomic_load(&points[k].addr);
        if (addr != 0 && pc == addr + 1) {
            /* Through the trampoline while the int3 is there, else run again. */
            bool int3 = *(volatile const unsigned char *) addr == INT3;
            arch->set_pc(ucv, int3 ? atomic_load(&points[k].tramp) : addr);
            return;
        }
    }
    mca_patcher_overwrite_threads_forward(&prev_trap, sig, info, ucv);
}

static int install_trap_handler(void)
{
    if (trap_installed) {
        return 0;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sa.sa_sigaction = trap_handler;
    if (mca_patcher_overwrite_threads_init() != 0 || sigaction(SIGTRAP, &sa, &prev_trap) != 0) {
        return -1;
    }
    trap_installed = true;
    return 0;
}

/*
 * The handler's record for addr, made if new.  Records are kept for the
 * life of the process (see the top), so when all are taken (copies of libc
 * come and go with dlmopen namespaces) the oldest is taken over: writes are
 * serialized and each is complete, so a trap still in flight for it would
 * have had to wait out MAX_POINTS writes.
 */
static trap_point_t *point_for(uintptr_t addr)
{
    static unsigned oldest;
    unsigned n = atomic_load(&npoints);
    for (unsigned k = 0; k < n; k++) {
        if (atomic_load(&points[k].addr) == addr) {
            return &points[k];
        }
    }
    if (n < MAX_POINTS) {
        atomic_store(&points[n].addr, addr);
        atomic_store(&npoints, n + 1);
        return &points[n];
    }
    trap_point_t *p = &points[oldest];
    oldest = (oldest + 1) % MAX_POINTS;
    atomic_store(&p->addr, addr);
    return p;
}

static void store_byte(uintptr_t at, unsigned char v)
{
    __atomic_store_n((unsigned char *) at, v, __ATOMIC_RELEASE);
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

/* Step 3 and 4: the bytes behind the head, then the head (head_len bytes). */
static void write_behind_head(const mca_patcher_overwrite_write_t *w, size_t head_len)
{
    for (size_t k = head_len; k < w->len; k++) { /* 3 */
        store_byte(w->addr + k, w->bytes[k]);
    }
    sync_cores();
    if (2 == head_len) { /* 4 */
        store_pair(w->addr, w->bytes);
    } else {
        store_byte(w->addr, w->bytes[0]);
    }
    sync_cores();
}

static const char no_answer[] = "a thread did not answer the signal (SIGRTMAX, or a little below "
                                "under qemu-user) that moves it off the bytes to patch (signal "
                                "blocked?)";

/* A round's wait for answers: 10 ms first, doubling up to 160 ms (a slow
 * emulator's rounds); 2 s of waiting in all.  Short waits and many tries:
 * a thread held at the loop with its signals blocked fails a round only
 * at the times it blocks them, and leaves when the head is put back. */
#define LOOP_FIRST_WAIT_NS 10000000L
#define LOOP_MAX_WAIT_NS   160000000L
#define LOOP_GIVE_UP_NS    2000000000L

/* (b) self-loop first. */
static void loop_write(mca_patcher_overwrite_write_t *w, bool inner_boundary)
{
    static const unsigned char self_loop[2] = {0xeb, 0xfe}; /* jmp . */
    const struct timespec let_them_run = {0, 2000000};
    unsigned char head[2];
    memcpy(head, (const void *) w->addr, sizeof(head));
    if (inner_boundary && mca_patcher_overwrite_threads_init() != 0) {
        w->rc = OPAL_ERR_OUT_OF_RESOURCE;
        w->reason = "cannot install the signal handler that moves threads during the code write";
        return;
    }

    sigset_t async, old;
    sigfillset(&async);
    sigdelset(&async, SIGSEGV); /* faults stay deliverable (blocked, they kill) */
    sigdelset(&async, SIGBUS);
    sigdelset(&async, SIGILL);
    sigdelset(&async, SIGFPE);
    sigdelset(&async, SIGTRAP);
    pthread_sigmask(SIG_BLOCK, &async, &old);

    mca_patcher_overwrite_round_t move = {.addr = w->addr,
                                          .len = w->len,
                                          .tramp = w->tramp,
                                          .hop = w->hop,
                                          .reloc = w->reloc,
                                          .timeout_ns = LOOP_FIRST_WAIT_NS};
    store_pair(w->addr, self_loop); /* 1 */
    sync_cores();
    for (long waited = 0; inner_boundary && !mca_patcher_overwrite_threads_run(&move);) { /* 2 */
        store_pair(w->addr, head); /* let a thread at the loop go on */
        sync_cores();
        waited += move.timeout_ns;
        if (waited >= LOOP_GIVE_UP_NS) {
            pthread_sigmask(SIG_SETMASK, &old, NULL);
            w->rc = OPAL_ERR_NOT_SUPPORTED;
            w->reason = no_answer;
            return;
        }
        nanosleep(&let_them_run, NULL);
        move.timeout_ns = move.timeout_ns < LOOP_MAX_WAIT_NS / 2 ? 2 * move.timeout_ns
                                                                 : LOOP_MAX_WAIT_NS;
        store_pair(w->addr, self_loop);
        sync_cores();
    }
    write_behind_head(w, 2); /* 3, 4 */
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* (c) int3 first. */
static void int3_write(mca_patcher_overwrite_write_t *w, bool inner_boundary)
{
    trap_point_t *p = point_for(w->addr);
    if (install_trap_handler() != 0) {
        w->rc = OPAL_ERR_OUT_OF_RESOURCE;
        w->reason = "cannot install the signal handlers that guard the code write";
        return;
    }
    atomic_store(&p->tramp, w->tramp);
    unsigned char first = *(volatile unsigned char *) w->addr;

    store_byte(w->addr, INT3); /* 1 */
    sync_cores();
    const mca_patcher_overwrite_round_t move = {
        .addr = w->addr, .len = w->len, .tramp = w->tramp, .hop = w->hop, .reloc = w->reloc};
    if (inner_boundary && !mca_patcher_overwrite_threads_run(&move)) { /* 2 */
        store_byte(w->addr, first);
        sync_cores();
        w->rc = OPAL_ERR_NOT_SUPPORTED;
        w->reason = no_answer;
        return;
    }
    write_behind_head(w, 1); /* 3, 4 */
}

#define CACHE_LINE 64 /* every x86 processor with SSE2 and later */

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
    if (head_insn_len(w) >= 2 && CACHE_LINE - 1 != (w->addr & (CACHE_LINE - 1))) {
        loop_write(w, inner_boundary); /* (b) */
    } else {
        int3_write(w, inner_boundary); /* (c) */
    }
}

/* Every thread has answered the fini round: no trap of ours can be pending. */
static void restore_trap_disposition(void)
{
    if (trap_installed) {
        sigaction(SIGTRAP, &prev_trap, NULL);
        trap_installed = false;
    }
}

void mca_patcher_overwrite_x86_write_fini(void)
{
    mca_patcher_overwrite_threads_fini(restore_trap_disposition);
}
