/*
 * A thread held in the request handler during a code write must run
 * nothing else until it is released: an application's signal handler that
 * interrupts it there may call the function being written.
 *
 * The target is "push %rbx; mov (%rdi),%eax; pop %rbx; nop; ret" (its first
 * instruction one byte: the x86 write holds every other thread), called
 * with rdi in a PROT_NONE page.  A third thread, which blocks the request
 * signal (the write waits for its answer), sends thread H SIGUSR1 once H
 * is in the request handler (its status shows the request signal blocked),
 * and answers when H has faulted, or after 3 ms.  If H takes SIGUSR1 while
 * held, its handler calls the target, runs the push and faults at +1; the
 * SIGSEGV handler, seeing the request signal blocked (the request handler
 * is below it), waits until the jump is written, makes the page readable
 * and returns to +1: the middle of the jump.  Released first, H takes
 * SIGUSR1 afterwards and the SIGSEGV handler returns at once, whether H
 * ran the original code or the patched one.  (A thread stopped in a
 * function under a handler of its own while it answers is a limit of the
 * component: only its innermost PC is seen.)
 *
 * Runs in a child (10 s alarm), whose exit says what happened.  x86 only
 * (its hand-assembled target); the same hold protects the writes of the
 * other architectures.
 */
#include "opal_config.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>

#include "test/mca/patcher/overwrite/overwrite_test_util.h"

#if defined(__x86_64__)
static const unsigned char target_code[] = {
    0x53,       /* push %rbx */
    0x8b, 0x07, /* mov (%rdi),%eax */
    0x5b,       /* pop %rbx */
    0x90,       /* nop */
    0xc3,       /* ret */
};
typedef int (*target_fn_t)(const int *);

static mca_patcher_base_module_t *patcher;
static target_fn_t target, chain;
static int *guarded; /* PROT_NONE until the SIGSEGV handler opens it */
static pthread_t held;
static atomic_int held_tid, request;
static atomic_bool usr1_ran, in_fault, go;
static atomic_int result;

static void pause_ms(long ms)
{
    const struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static int intercept(const int *p)
{
    return chain(p);
}

static void on_segv(int sig, siginfo_t *info, void *uc)
{
    (void) uc;
    if (info->si_addr != (void *) guarded) {
        signal(sig, SIG_DFL); /* anything else: crash on return */
        return;
    }
    sigset_t now;
    pthread_sigmask(SIG_BLOCK, NULL, &now);
    if (1 == sigismember(&now, atomic_load(&request))) {
        atomic_store(&in_fault, true);
        /* Until the write is done: the first byte is the jump's (e9). */
        for (int ms = 0; ms < 3000 && 0xe9 != *(volatile unsigned char *) target; ms++) {
            pause_ms(1);
        }
    }
    syscall(SYS_mprotect, guarded, (size_t) sysconf(_SC_PAGESIZE), PROT_READ | PROT_WRITE);
}

static void on_usr1(int sig)
{
    (void) sig;
    atomic_store(&result, target(guarded));
    atomic_store(&usr1_ran, true);
}

static void *idle(void *arg)
{
    (void) arg;
    atomic_store(&held_tid, (int) syscall(SYS_gettid));
    while (!atomic_load(&usr1_ran)) {
        pause_ms(1);
    }
    return NULL;
}

/* The request signal pending here, or 0. */
static int request_pending(void)
{
    sigset_t pending;
    sigpending(&pending);
    for (int sig = SIGRTMAX - 2; sig <= SIGRTMAX; sig++) {
        if (sigismember(&pending, sig)) {
            return sig;
        }
    }
    return 0;
}

/* Whether thread tid blocks sig now (/proc/self/task/<tid>/status). */
static bool blocks(int tid, int sig)
{
    char path[64], buf[2048];
    snprintf(path, sizeof(path), "/proc/self/task/%d/status", tid);
    FILE *f = fopen(path, "r");
    size_t len = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f) {
        fclose(f);
    }
    buf[len] = '\0';
    const char *blk = strstr(buf, "SigBlk:");
    return blk && (strtoull(blk + 7, NULL, 16) >> (sig - 1)) & 1;
}

/* Blocks the request signal; once asked, sends H SIGUSR1 in its hold. */
static void *late_answer(void *arg)
{
    (void) arg;
    sigset_t req;
    sigemptyset(&req);
    for (int sig = SIGRTMAX - 2; sig <= SIGRTMAX; sig++) {
        sigaddset(&req, sig);
    }
    pthread_sigmask(SIG_BLOCK, &req, NULL);
    atomic_store(&go, true);
    int sig = 0;
    for (long n = 0; n < 50000000 && (0 == sig || !blocks(atomic_load(&held_tid), sig)); n++) {
        sig = request_pending();
    }
    atomic_store(&request, sig);
    pthread_kill(held, SIGUSR1);
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while (!atomic_load(&in_fault) &&
             (now.tv_sec - start.tv_sec) * 1000000000L + now.tv_nsec - start.tv_nsec < 3000000L);
    pthread_sigmask(SIG_UNBLOCK, &req, NULL);
    return NULL;
}

static int scenario(void)
{
    alarm(10);
    const size_t page = (size_t) sysconf(_SC_PAGESIZE);
    guarded = (int *) test_raw_mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
    *guarded = 42;
    syscall(SYS_mprotect, guarded, page, PROT_NONE);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigaction(SIGSEGV, &sa, NULL);
    signal(SIGUSR1, on_usr1);

    pthread_t answerer;
    pthread_create(&held, NULL, idle, NULL);
    pthread_create(&answerer, NULL, late_answer, NULL);
    while (!atomic_load(&go) || 0 == atomic_load(&held_tid)) {
        pause_ms(1);
    }
    if (OPAL_SUCCESS != patcher->patch_address_chain((uintptr_t) target, (uintptr_t) intercept,
                                                     (uintptr_t *) &chain)) {
        return 2;
    }
    pthread_join(answerer, NULL);
    pthread_join(held, NULL);
    return 42 == atomic_load(&result) ? 0 : 3;
}

int main(void)
{
    patcher = overwrite_test_setup();
    code_page_t cp;
    code_page_init(&cp);
    target = (target_fn_t) code_page_add(&cp, target_code, sizeof(target_code), 0);
    code_page_seal(&cp);

    const pid_t pid = fork();
    if (0 == pid) {
        _exit(scenario());
    }
    test_child_ok(pid, "the scenario", "(2: the patch failed, 3: a wrong value)");
    opal_finalize_util();
    return test_finish("overwrite_held_signal_test");
}
#else
int main(void)
{
    TEST_SKIP("the target is hand-assembled for x86-64");
}
#endif
