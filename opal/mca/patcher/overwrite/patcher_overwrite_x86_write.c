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
 * (b) int3 first, otherwise:
 *     1. Store int3 (0xcc) over the first byte; sync cores.  A thread that
 *        reaches the patch point now traps; our SIGTRAP handler sends it on
 *        through the trampoline, which runs the displaced instructions as
 *        they were (so a call made during the write is simply not yet
 *        intercepted, or no longer).
 *     2. Patching only, when a displaced instruction begins inside the
 *        bytes to write: a thread may be stopped right there.  Every other
 *        thread gets a move request (SIGRTMAX, see move_signal, sent with
 *        rt_tgsigqueueinfo and our cookie); its handler moves a PC found
 *        at such a boundary to the same instruction's copy in the
 *        trampoline.  We wait for every answer; without all of them the
 *        patch is declined.  A thread that will never answer (it blocks
 *        every signal not raised by a fault, as qemu-user's own threads
 *        do) is not asked when the kernel shows it asleep in a system
 *        call at a PC that is none of the boundaries: since step 1 it can
 *        reach them only through the int3.  (Under an emulator that PC is
 *        the emulator's: the rule holds for its own threads, which run no
 *        guest code.)
 *        (Restoring needs no such step: no thread stops inside a jmp.)
 *     3. Store the bytes after the first; sync cores.
 *     4. Store the first byte; sync cores.
 *     A trap taken during 1-4 but delivered after 4 finds the first byte
 *     final: the thread is re-run from the patch point.
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
 *   In (b) every store is one byte (8.1.1: always atomic), and the bytes
 *   after the first change only while every thread already sees the int3
 *   in front of them (synced after step 1), which traps before anything
 *   behind it is used; the first byte changes last, after the rest is
 *   synced.  So a thread runs the old instruction, the int3, or the new
 *   one, nothing mixed.  (a) is one aligned 8-byte store, atomic as a data
 *   access by 8.1.1 (Pentium and later, in 32-bit and 64-bit mode alike);
 *   that an unserialized fetch then sees all old or all new bytes is the
 *   one thing 8.1.3 does not promise, an assumption this path makes on
 *   x86-64 and i386 the same.
 * - 8.1.3's rule applies in IA-32 and Intel 64 alike; the kernel's
 *   membarrier SYNC_CORE is there for 32-bit processes too (x86 has it for
 *   both, and a 32-bit process on a 64-bit kernel makes the same call).
 *
 * The SIGTRAP and move handlers are installed at the first int3 write
 * and kept until the patcher's fini; signals that are not ours go to the
 * handler that was there before.  A trap in flight must still find them:
 * a thread can take the trap and be preempted before the kernel delivers
 * it.  So fini first asks every thread to run the move handler (a pending
 * SIGTRAP, a lower number, is delivered no later than that request), and
 * the patch points stay known to the trap handler for the life of the
 * process: a late trap finds its int3 gone and re-runs the instruction.
 * If a thread does not answer (and is not one that never will, asleep in
 * a system call, where no trap of ours can be pending), the handlers stay.
 * Either way a DSO component stays loaded while another thread may still
 * be returning through a handler (an answer is noted before the handler
 * returns).
 * Limits: a thread that blocks SIGTRAP and reaches the int3 is killed by
 * the kernel; under a debugger the int3 stops the program (continue passes
 * it to us); a thread blocking the move signal makes step 2 time out
 * (decline), unless it has opted out of signals and sleeps; only the
 * innermost PC of a thread is seen, not one saved by a signal handler it
 * is running (as with an answer).
 */
#include "opal_config.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/ucontext.h>
#include <time.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base_dl.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_x86.h"
#include "opal/util/proc_tasks.h"
#include "opal/util/readers.h"

/* Weak: a static program may be linked without the loader's functions. */
#pragma weak dlopen

/* The program counter in a signal's saved context. */
#if defined(__x86_64__)
#    define PC_REG REG_RIP
#else
#    define PC_REG REG_EIP
#endif

/* (a) needs a single 8-byte store: on i386 gcc makes it with fild/fistp (from i586 on). */
_Static_assert(__atomic_always_lock_free(8, 0), "an 8-byte store is not one instruction here");

#define INT3              0xcc
#define MAX_POINTS        256 /* patch points the handler knows (see point_for) */
#define ANSWER_TIMEOUT_NS 2000000000L
/*
 * Step 2's request: SIGRTMAX, or the first real-time signal below it that
 * can be queued here (qemu-user 7.2 has no host signal for the guest's top
 * two: queueing them fails with EINVAL).  Chosen once, at the first
 * install.  Not SIGTRAP: a pending standard signal absorbs another of the
 * same number, and an int3 trap merged with a request would be taken for a
 * request at the byte after the int3.  A real-time signal is queued apart,
 * and the kernel delivers the synchronous SIGTRAP first.
 */
#define MOVE_SIGNAL_TRIES 3
static int move_signal;

/* A patch point the SIGTRAP handler must recognise. */
typedef struct trap_point_t {
    _Atomic uintptr_t addr;
    _Atomic uintptr_t tramp;
    mca_patcher_overwrite_reloc_t reloc; /* boundaries to move threads off (patching) */
    _Atomic bool move_boundaries;
} trap_point_t;

static trap_point_t points[MAX_POINTS];
static _Atomic unsigned npoints;
static int cookie; /* its address marks our own move requests */
static struct sigaction prev_trap, prev_move;
static bool handlers_installed;
static int sync_core_state; /* 0 unknown, 1 registered, -1 unavailable */

/* Threads asked to run the handler in step 2, and which have. */
static pid_t *asked;
static _Atomic bool *answered;
static _Atomic int nasked; /* published once asked[] is filled */
static int answering;      /* handlers that may be reading asked[] (opal/util/readers.h) */

/*
 * The asker frees or moves asked[] once every answer is in (or it gave
 * up), while an answering thread may still be inside this loop: a reader
 * of nasked, drained by end_round.  One that enters late reads nasked == 0
 * and touches nothing.
 */
static void note_answer(void)
{
    pid_t self = (pid_t) syscall(SYS_gettid);
    opal_readers_enter(&answering);
    int n = atomic_load(&nasked);
    for (int k = 0; k < n; k++) {
        if (asked[k] == self) {
            atomic_store(&answered[k], true);
            break;
        }
    }
    opal_readers_leave(&answering);
}

/* No handler reads asked[] after this returns. */
static void end_round(void)
{
    atomic_store(&nasked, 0);
    opal_readers_drain(&answering, 0);
}

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

/* Hand a signal that is not ours to whatever handled it before. */
static void forward(const struct sigaction *prev, int sig, siginfo_t *info, void *uc)
{
    if (prev->sa_flags & SA_SIGINFO) {
        prev->sa_sigaction(sig, info, uc);
    } else if (prev->sa_handler == SIG_IGN) {
        return;
    } else if (prev->sa_handler != SIG_DFL) {
        prev->sa_handler(sig);
    } else {
        /* The default action: restore it and take the signal again. */
        signal(sig, SIG_DFL);
        raise(sig);
    }
}

/* SIGTRAP: a thread ran one of our int3s. */
static void trap_handler(int sig, siginfo_t *info, void *ucv)
{
    ucontext_t *uc = ucv;
    uintptr_t pc = (uintptr_t) uc->uc_mcontext.gregs[PC_REG];
    unsigned n = atomic_load(&npoints);

    for (unsigned k = 0; info->si_code == SI_KERNEL && k < n && k < MAX_POINTS; k++) {
        uintptr_t addr = atomic_load(&points[k].addr);
        if (addr != 0 && pc == addr + 1) {
            /* Through the trampoline while the int3 is there, else run again. */
            bool int3 = *(volatile const unsigned char *) addr == INT3;
            uc->uc_mcontext.gregs[PC_REG] = (greg_t) (int3 ? atomic_load(&points[k].tramp) : addr);
            return;
        }
    }
    forward(&prev_trap, sig, info, ucv);
}

/* The move signal (step 2): leave a displaced instruction boundary for its copy. */
static void move_handler(int sig, siginfo_t *info, void *ucv)
{
    if (info->si_code != SI_QUEUE || info->si_value.sival_ptr != &cookie) {
        forward(&prev_move, sig, info, ucv);
        return;
    }
    ucontext_t *uc = ucv;
    uintptr_t pc = (uintptr_t) uc->uc_mcontext.gregs[PC_REG];
    unsigned n = atomic_load(&npoints);
    for (unsigned k = 0; k < n && k < MAX_POINTS; k++) {
        uintptr_t addr = atomic_load(&points[k].addr);
        if (addr == 0 || !atomic_load(&points[k].move_boundaries) || pc <= addr) {
            continue;
        }
        const mca_patcher_overwrite_reloc_t *r = &points[k].reloc;
        for (unsigned i = 1; i < r->insns; i++) {
            if (pc == addr + r->insn_offset[i]) {
                uc->uc_mcontext.gregs[PC_REG] = (greg_t) (atomic_load(&points[k].tramp) +
                                                          r->tramp_offset[i]);
            }
        }
    }
    note_answer();
}

static long queue_request(pid_t pid, pid_t tid, int sig)
{
    siginfo_t si;
    memset(&si, 0, sizeof(si));
    si.si_signo = sig;
    si.si_code = SI_QUEUE;
    si.si_pid = pid;
    si.si_uid = getuid();
    si.si_value.sival_ptr = &cookie;
    return syscall(SYS_rt_tgsigqueueinfo, pid, tid, sig, &si);
}

/* Whether sig can be queued: to this thread, blocked meanwhile, then taken back. */
static bool can_queue(int sig)
{
    sigset_t one, old, pending;
    sigemptyset(&one);
    sigaddset(&one, sig);
    pthread_sigmask(SIG_BLOCK, &one, &old);
    sigpending(&pending);
    bool ok = sigismember(&pending, sig); /* one is queued already: so it can be */
    if (!ok && queue_request(getpid(), (pid_t) syscall(SYS_gettid), sig) == 0) {
        struct timespec zero = {0, 0};
        sigtimedwait(&one, NULL, &zero);
        ok = true;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return ok;
}

static int install_handlers(void)
{
    if (handlers_installed) {
        return 0;
    }
    for (int k = 0; k < MOVE_SIGNAL_TRIES && 0 == move_signal; k++) {
        if (can_queue(SIGRTMAX - k)) {
            move_signal = SIGRTMAX - k;
        }
    }
    if (0 == move_signal) {
        return -1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sa.sa_sigaction = trap_handler;
    if (sigaction(SIGTRAP, &sa, &prev_trap) != 0) {
        return -1;
    }
    sa.sa_sigaction = move_handler;
    if (sigaction(move_signal, &sa, &prev_move) != 0) {
        sigaction(SIGTRAP, &prev_trap, NULL);
        return -1;
    }
    handlers_installed = true;
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

static bool ask(pid_t pid, pid_t tid)
{
    /* ESRCH: the thread has exited meanwhile; nothing to move. */
    return queue_request(pid, tid, move_signal) == 0 || errno != ESRCH;
}

/* /proc/self/task/<tid>/<name> into buf (NUL terminated); false if it cannot be read. */
static bool read_task_file(pid_t tid, const char *name, char *buf, size_t size)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/task/%d/%s", (int) tid, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return false;
    }
    ssize_t len = read(fd, buf, size - 1);
    close(fd);
    if (len <= 0) {
        return false;
    }
    buf[len] = '\0';
    return true;
}

/*
 * Whether thread tid blocks the move signal and every signal that is not
 * raised by a fault (such a thread has opted out of signals for good, as
 * qemu-user's own threads, sigwait threads and libraries' helpers do):
 * waiting longer for its answer cannot help.
 */
static bool opted_out_of_signals(pid_t tid)
{
    char buf[2048];
    const char *blk = read_task_file(tid, "status", buf, sizeof(buf)) ? strstr(buf, "SigBlk:")
                                                                      : NULL;
    if (NULL == blk) {
        return false;
    }
    unsigned long long blocked = strtoull(blk + 7, NULL, 16), need = 0;
    for (int sig = 1; sig < 32; sig++) {
        if (sig != SIGKILL && sig != SIGSTOP && sig != SIGILL && sig != SIGTRAP && sig != SIGBUS &&
            sig != SIGFPE && sig != SIGSEGV) {
            need |= 1ULL << (sig - 1);
        }
    }
    need |= 1ULL << (move_signal - 1);
    return (blocked & need) == need;
}

/*
 * Whether thread tid has opted out of signals and is asleep in a system
 * call (/proc/self/task/<tid>/syscall: "running", "-1 sp pc" when in the
 * kernel for another reason, else "nr args... sp pc") at a user PC that is
 * none of p's inner boundaries (p NULL: any PC).  Such a thread has no
 * int3 trap in flight, and it can come to a boundary only through the
 * patch point's int3.
 */
static bool asleep_opted_out(pid_t tid, const trap_point_t *p)
{
    char buf[256];
    if (!opted_out_of_signals(tid) || !read_task_file(tid, "syscall", buf, sizeof(buf))) {
        return false;
    }
    char *end;
    long nr = strtol(buf, &end, 10);
    const char *last = strrchr(buf, ' ');
    if (end == buf || nr < 0 || NULL == last) {
        return false;
    }
    unsigned long long pc = strtoull(last + 1, NULL, 16);
    for (unsigned i = 1; p && i < p->reloc.insns; i++) {
        if (pc == (unsigned long long) (atomic_load(&p->addr) + p->reloc.insn_offset[i])) {
            return false;
        }
    }
    return true;
}

/*
 * Step 2 (p: the point being patched), and fini (p NULL): every other
 * thread runs move_handler once, but one that will never answer and is
 * asleep off p's boundaries, which is not asked: a request it took after
 * the handlers are gone would kill the process.  Returns false if one did
 * not answer in time (the signal blocked, or the thread stopped, where it
 * may be stopped at a boundary).
 */
static bool move_threads_off(const trap_point_t *p)
{
    pid_t pid = getpid(), self = (pid_t) syscall(SYS_gettid);
    int cap = 0, n = 0;
    DIR *dir = opendir("/proc/self/task");
    if (!dir) {
        return false;
    }
    struct dirent *de;
    while ((de = readdir(dir)) != NULL) {
        pid_t tid = (pid_t) atoi(de->d_name);
        if (tid <= 0 || tid == self || asleep_opted_out(tid, p)) {
            continue;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            pid_t *t = realloc(asked, cap * sizeof(*t));
            _Atomic bool *a = realloc((void *) answered, cap * sizeof(*a));
            if (t) {
                asked = t;
            }
            if (a) {
                answered = a;
            }
            if (!t || !a) {
                closedir(dir);
                return false;
            }
        }
        atomic_store(&answered[n], false);
        asked[n++] = tid;
    }
    closedir(dir);
    atomic_store(&nasked, n);

    /* A thread that has exited meanwhile counts as answered. */
    for (int k = 0; k < n; k++) {
        if (!ask(pid, asked[k])) {
            atomic_store(&answered[k], true);
        }
    }
    struct timespec start, now, pause = {0, 100000};
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        bool all = true;
        for (int k = 0; k < n && all; k++) {
            all = atomic_load(&answered[k]);
        }
        if (all) {
            break;
        }
        nanosleep(&pause, NULL);
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec) >
            ANSWER_TIMEOUT_NS) {
            end_round();
            return false;
        }
    }
    end_round();
    return true;
}

static void store_byte(uintptr_t at, unsigned char v)
{
    __atomic_store_n((unsigned char *) at, v, __ATOMIC_RELEASE);
}

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

    /* (b) int3 first */
    trap_point_t *p = point_for(w->addr);
    if (install_handlers() != 0) {
        w->rc = OPAL_ERR_OUT_OF_RESOURCE;
        w->reason = "cannot install the signal handlers that guard the code write";
        return;
    }
    atomic_store(&p->move_boundaries, false);
    atomic_store(&p->tramp, w->tramp);
    if (r) {
        p->reloc = *r;
    }
    unsigned char first = *(volatile unsigned char *) w->addr;

    store_byte(w->addr, INT3); /* 1 */
    sync_cores();
    if (inner_boundary) { /* 2 */
        atomic_store(&p->move_boundaries, true);
        bool moved = move_threads_off(p);
        atomic_store(&p->move_boundaries, false);
        if (!moved) {
            store_byte(w->addr, first);
            sync_cores();
            w->rc = OPAL_ERR_NOT_SUPPORTED;
            w->reason = "a thread did not answer the signal (SIGRTMAX, or a little below under "
                        "qemu-user) that moves it off the "
                        "bytes to patch (signal blocked?)";
            return;
        }
    }
    for (size_t k = 1; k < w->len; k++) { /* 3 */
        store_byte(w->addr + k, w->bytes[k]);
    }
    sync_cores();
    store_byte(w->addr, w->bytes[0]); /* 4 */
    sync_cores();
}

void mca_patcher_overwrite_x86_write_fini(void)
{
    if (handlers_installed) {
        /* No trap may be delivered after the old dispositions are back. */
        bool all_moved = move_threads_off(NULL);
        if (all_moved) {
            sigaction(SIGTRAP, &prev_trap, NULL);
            sigaction(move_signal, &prev_move, NULL);
            handlers_installed = false;
        }
        /* Our handlers' code must outlive the component's close when they
         * stay installed, and when another thread may still be returning
         * through them: an answer is noted before its handler returns. */
        if (!all_moved || opal_proc_other_threads()) {
            mca_patcher_base_dl_keep_loaded((void *) trap_handler, dlopen,
                                            all_moved ? "another thread may still be returning "
                                                        "from a code-write signal handler"
                                                      : "a thread did not answer: the code-write "
                                                        "signal handlers stay installed");
        }
    }
    free(asked);
    free((void *) answered);
    asked = NULL;
    answered = NULL;
}
