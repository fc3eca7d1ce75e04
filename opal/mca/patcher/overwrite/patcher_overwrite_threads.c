/*
 * Rounds of requests to every other thread (see patcher_overwrite_threads.h).
 *
 * The request is SIGRTMAX, or the first real-time signal below it that can
 * be queued here (qemu-user 7.2 has no host signal for the guest's top
 * two: queueing them fails with EINVAL), chosen once, sent with
 * rt_tgsigqueueinfo and our cookie so that the handler tells our requests
 * from anyone else's use of the signal (those go to the handler that was
 * there before).  A real-time signal, not a standard one: a pending
 * standard signal absorbs another of the same number (two rounds' requests,
 * or ours and someone else's), a real-time one is queued apart.
 *
 * The asker publishes the round, sends the requests and waits (2 s at
 * most, or the round's own timeout) until every asked thread has noted
 * its answer.  A handler counts
 * itself as a reader (opal/util/readers.h) before it reads the round, so
 * the asker can end the round (unpublish, drain) and reuse or free what
 * the handlers read; a request taken after its round ended finds no round
 * and does nothing.
 *
 * A thread that blocks the request and every signal not raised by a fault
 * has opted out of signals for good (qemu-user's own threads, sigwait
 * threads, libraries' helpers): waiting for it cannot help.  If the kernel
 * shows it asleep in a system call at a PC off the bytes of the round, it
 * is not asked: a request it took after our handler is gone would kill
 * the process.  (Under an emulator that PC is the emulator's; the rule
 * holds for its own threads, which run no guest code.)
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "opal/mca/patcher/base/base_dl.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_threads.h"
#include "opal/util/proc_tasks.h"
#include "opal/util/readers.h"

/* Weak: a static program may be linked without the loader's functions. */
#pragma weak dlopen

#define ANSWER_TIMEOUT_NS 2000000000L
#define SIGNAL_TRIES      3 /* SIGRTMAX and the two below it */
#define HOLD_TRIES        3 /* rounds retried while new threads appear */

static int request_signal;
static int cookie; /* its address marks our own requests */
static struct sigaction prev_request;
static bool installed;

/* A thread asked in the round, and whether it has answered. */
typedef struct asked_thread_t {
    pid_t tid;
    _Atomic bool answered;
} asked_thread_t;

/* The round being run, and the threads asked in it. */
static const mca_patcher_overwrite_round_t *_Atomic current;
static asked_thread_t *asked;
static int nasked, cap_asked;
static int readers;            /* handlers that may be reading the round */
static _Atomic int released;   /* futex word: a hold is over */

static uintptr_t get_pc(void *uc)
{
    return MCA_PATCHER_OVERWRITE_ARCH->get_pc(uc);
}

/* Where a thread at pc must go for round r, or 0 if it stays. */
static uintptr_t moved_pc(const mca_patcher_overwrite_round_t *r, uintptr_t pc)
{
    for (unsigned i = 1; r->reloc && i < r->reloc->insns; i++) {
        if (pc == r->addr + r->reloc->insn_offset[i]) {
            return r->tramp + r->reloc->tramp_offset[i];
        }
    }
    if (r->restoring && pc > r->addr && pc < r->addr + r->len) {
        return r->hop;
    }
    return 0;
}

/* Hand a signal that is not ours to whatever handled it before (prev). */
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

static void request_handler(int sig, siginfo_t *info, void *uc)
{
    if (info->si_code != SI_QUEUE || info->si_value.sival_ptr != &cookie) {
        forward(&prev_request, sig, info, uc);
        return;
    }
    pid_t self = (pid_t) syscall(SYS_gettid);
    opal_readers_enter(&readers);
    const mca_patcher_overwrite_round_t *r = atomic_load(&current);
    if (r) {
        uintptr_t to = moved_pc(r, get_pc(uc));
        if (to) {
            MCA_PATCHER_OVERWRITE_ARCH->set_pc(uc, to);
        }
        for (int k = 0; k < nasked; k++) {
            if (asked[k].tid == self) {
                atomic_store(&asked[k].answered, true);
                break;
            }
        }
        /* Held: sleep on the futex word until the asker releases us. */
        while (r->hold && 0 == atomic_load(&released)) {
            syscall(SYS_futex, &released, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
        }
    }
    opal_readers_leave(&readers);
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

void mca_patcher_overwrite_async_signals(sigset_t *set)
{
    sigfillset(set);
    sigdelset(set, SIGSEGV);
    sigdelset(set, SIGBUS);
    sigdelset(set, SIGILL);
    sigdelset(set, SIGFPE);
    sigdelset(set, SIGTRAP);
}

int mca_patcher_overwrite_threads_init(void)
{
    if (installed) {
        return 0;
    }
    for (int k = 0; k < SIGNAL_TRIES && 0 == request_signal; k++) {
        if (can_queue(SIGRTMAX - k)) {
            request_signal = SIGRTMAX - k;
        }
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    /* SA_ONSTACK: on a thread with an alternate signal stack, run there.
     * Go's threads run goroutines on small stacks with no room for a
     * signal frame and keep an alternate stack for signals (Go's cgo rule:
     * a handler installed by non-Go code must use SA_ONSTACK); without one
     * it means nothing. */
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    /* A held thread runs nothing else until it is released: a handler of
     * the application's taken there could call the function being written
     * and stop inside the bytes that change. */
    mca_patcher_overwrite_async_signals(&sa.sa_mask);
    sa.sa_sigaction = request_handler;
    if (0 == request_signal || sigaction(request_signal, &sa, &prev_request) != 0) {
        return -1;
    }
    installed = true;
    return 0;
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

/* Whether thread tid blocks the request and every signal not raised by a fault. */
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
    need |= 1ULL << (request_signal - 1);
    return (blocked & need) == need;
}

/*
 * The longest system call instruction of our architectures (svc, sc,
 * ecall: 4 bytes; syscall, int $0x80: 2).  A thread asleep in a system call
 * has its PC after that instruction, and a restarted call (after SIGSTOP,
 * the freezer, ptrace) moves it back over it: on riscv64 glibc's munmap is
 * "li a7; ecall", the 8 bytes we write, so a restart would run our jalr.
 */
#define MAX_SYSCALL_INSN 4

/*
 * Whether thread tid has opted out of signals and is asleep in a system
 * call (/proc/self/task/<tid>/syscall: "running", "-1 sp pc" when in the
 * kernel for another reason, else "nr args... sp pc") with its PC, and
 * the PC a restart would give it, off round r's window.
 */
static bool asleep_opted_out(pid_t tid, const mca_patcher_overwrite_round_t *r)
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
    uintptr_t pc = (uintptr_t) strtoull(last + 1, NULL, 16);
    return pc <= r->addr || pc >= r->addr + r->len + MAX_SYSCALL_INSN;
}

static bool was_asked(pid_t tid)
{
    for (int k = 0; k < nasked; k++) {
        if (asked[k].tid == tid) {
            return true;
        }
    }
    return false;
}

/* Anonymous pages straight from the kernel (mmap2 where mmap is the old
 * one-argument call, i386), or NULL. */
static void *raw_pages(size_t len)
{
#ifdef SYS_mmap2
    long nr = SYS_mmap2;
#else
    long nr = SYS_mmap;
#endif
    void *p = (void *) syscall(nr, NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                               -1, 0);
    return MAP_FAILED == p ? NULL : p;
}

/*
 * Room for one more asked thread.  From the kernel, not malloc: on x86
 * the list is made while another thread may wait at the patch point
 * inside malloc, holding its lock (patcher_overwrite_x86_write.c).
 * asked[] grows only before a round is published, when no handler reads it.
 */
static bool room_to_ask(void)
{
    if (nasked < cap_asked) {
        return true;
    }
    int cap = cap_asked ? 2 * cap_asked : 256;
    asked_thread_t *grown = raw_pages(cap * sizeof(*grown));
    if (NULL == grown) {
        return false;
    }
    if (asked) {
        memcpy((void *) grown, (void *) asked, nasked * sizeof(*asked));
        syscall(SYS_munmap, asked, cap_asked * sizeof(*asked));
    }
    asked = grown;
    cap_asked = cap;
    return true;
}

/* What list_threads carries through the walk of /proc/self/task. */
typedef struct listing_t {
    const mca_patcher_overwrite_round_t *round;
    pid_t self;
    bool add, ok;
} listing_t;

static bool list_one(pid_t tid, void *arg)
{
    listing_t *l = arg;
    if (tid == l->self || was_asked(tid) || asleep_opted_out(tid, l->round)) {
        return true;
    }
    l->ok = l->add && room_to_ask();
    if (l->ok) {
        asked[nasked].tid = tid;
        atomic_store(&asked[nasked].answered, false);
        nasked++;
    }
    return l->ok;
}

/*
 * The threads to ask (with add: into asked[]; without: only whether one is
 * missing from it).  False if /proc/self/task cannot be read, memory runs
 * out, or (without add) a thread is missing.  Allocates nothing.
 */
static bool list_threads(const mca_patcher_overwrite_round_t *r, bool add)
{
    listing_t l = {.round = r, .self = (pid_t) syscall(SYS_gettid), .add = add, .ok = true};
    return opal_proc_foreach_task(list_one, &l) && l.ok;
}

/*
 * Whether every asked thread has answered, or has exited meanwhile: a
 * thread just joined may still be listed while it exits (under qemu-user
 * the emulator's host thread outlives the guest's join for a while), and
 * takes no signal any more.
 */
static bool all_answered(pid_t pid)
{
    for (int k = 0; k < nasked; k++) {
        if (atomic_load(&asked[k].answered)) {
            continue;
        }
        if (syscall(SYS_tgkill, pid, asked[k].tid, 0) != 0 && errno == ESRCH) {
            atomic_store(&asked[k].answered, true);
            continue;
        }
        return false;
    }
    return true;
}

static bool wait_answers(long timeout_ns)
{
    struct timespec start, now, pause = {0, 100000};
    const pid_t pid = getpid();
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (!all_answered(pid)) {
        nanosleep(&pause, NULL);
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec) >
            timeout_ns) {
            return false;
        }
    }
    return true;
}

/* No handler reads the round after this returns: held ones are let go first. */
static void end_round(void)
{
    atomic_store(&current, NULL);
    mca_patcher_overwrite_threads_release();
    opal_readers_drain(&readers, 0);
    nasked = 0;
}

typedef enum { ROUND_DONE, ROUND_NO_ANSWER, ROUND_NEW_THREADS } round_result_t;

/* One round: ask, wait; with a hold, no thread may have appeared meanwhile. */
static round_result_t run_once(const mca_patcher_overwrite_round_t *r)
{
    pid_t pid = getpid();
    atomic_store(&released, 0);
    nasked = 0;
    if (!list_threads(r, true)) {
        nasked = 0;
        return ROUND_NO_ANSWER;
    }
    atomic_store(&current, r);
    for (int k = 0; k < nasked; k++) {
        /* ESRCH: the thread has exited meanwhile, nothing to ask. */
        if (queue_request(pid, asked[k].tid, request_signal) != 0 && errno == ESRCH) {
            atomic_store(&asked[k].answered, true);
        }
    }
    long timeout_ns = r->timeout_ns > 0 ? r->timeout_ns : ANSWER_TIMEOUT_NS;
    round_result_t result = !wait_answers(timeout_ns)              ? ROUND_NO_ANSWER
                            : r->hold && !list_threads(r, false) ? ROUND_NEW_THREADS
                                                                   : ROUND_DONE;
    if (ROUND_DONE != result || !r->hold) {
        end_round();
    }
    return result;
}

bool mca_patcher_overwrite_threads_run(const mca_patcher_overwrite_round_t *round)
{
    round_result_t result = ROUND_NEW_THREADS;
    for (int k = 0; k < HOLD_TRIES && ROUND_NEW_THREADS == result; k++) {
        result = run_once(round);
    }
    return ROUND_DONE == result;
}

/* A patient run's waits: 10 ms first, doubling up to 160 ms (a slow
 * emulator's rounds), about 2 s of waiting in all. */
#define PATIENT_FIRST_WAIT_NS 10000000L
#define PATIENT_MAX_WAIT_NS   160000000L
#define PATIENT_GIVE_UP_NS    2000000000L

bool mca_patcher_overwrite_threads_run_patiently(mca_patcher_overwrite_round_t *round,
                                                 void (*set_aside)(void *arg, bool aside),
                                                 void *arg)
{
    const struct timespec let_them_run = {0, 2000000};
    round->timeout_ns = PATIENT_FIRST_WAIT_NS;
    for (long waited = 0; !mca_patcher_overwrite_threads_run(round); waited += round->timeout_ns) {
        if (waited + round->timeout_ns >= PATIENT_GIVE_UP_NS) {
            return false;
        }
        if (set_aside) {
            set_aside(arg, true);
        }
        nanosleep(&let_them_run, NULL);
        if (set_aside) {
            set_aside(arg, false);
        }
        round->timeout_ns = round->timeout_ns < PATIENT_MAX_WAIT_NS / 2 ? 2 * round->timeout_ns
                                                                        : PATIENT_MAX_WAIT_NS;
    }
    return true;
}

void mca_patcher_overwrite_threads_atfork_child(void)
{
    atomic_store(&current, NULL);
    __atomic_store_n(&readers, 0, __ATOMIC_SEQ_CST);
    nasked = 0;
}

void mca_patcher_overwrite_threads_release(void)
{
    if (0 == atomic_exchange(&released, 1)) {
        syscall(SYS_futex, &released, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
    }
    if (atomic_load(&current) && atomic_load(&current)->hold) {
        end_round();
    }
}

void mca_patcher_overwrite_threads_fini(void)
{
    if (installed) {
        const mca_patcher_overwrite_round_t nothing = {.addr = 0};
        bool all = mca_patcher_overwrite_threads_run(&nothing);
        if (all) {
            sigaction(request_signal, &prev_request, NULL);
            installed = false;
        }
        /* Our handlers' code must outlive the component's close when they
         * stay installed, and when another thread may still be returning
         * through them: an answer is noted before the handler returns. */
        if (!all || opal_proc_other_threads()) {
            mca_patcher_base_dl_keep_loaded((void *) request_handler, dlopen,
                                            all ? "another thread may still be returning "
                                                  "from a code-write signal handler"
                                                : "a thread did not answer: the code-write "
                                                  "signal handlers stay installed");
        }
    }
    if (asked) {
        syscall(SYS_munmap, asked, cap_asked * sizeof(*asked));
    }
    asked = NULL;
    cap_asked = 0;
}
