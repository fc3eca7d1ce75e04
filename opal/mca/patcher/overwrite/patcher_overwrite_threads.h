/*
 * Asking every other thread of the process to run a signal handler of
 * ours once (a "round"), for the code writes: the handler moves a thread
 * that stands on bytes about to change, and may hold it until the write
 * is done.  Shared by patcher_overwrite_x86_write.c and
 * patcher_overwrite_stopped_write.c; the program counter is read and set
 * through the architecture table.
 */
#ifndef MCA_PATCHER_OVERWRITE_THREADS_H
#define MCA_PATCHER_OVERWRITE_THREADS_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "opal/mca/patcher/overwrite/patcher_overwrite_arch.h"

typedef struct mca_patcher_overwrite_round_t {
    uintptr_t addr;  /* the patch point */
    size_t len;      /* the bytes written there */
    uintptr_t tramp; /* its trampoline */
    uintptr_t hop;   /* where the entry jump goes */
    /* Patching: a PC at an inner boundary of the displaced instructions
     * goes to that instruction's copy in the trampoline.  NULL: no such move. */
    const mca_patcher_overwrite_reloc_t *reloc;
    /* Restoring: a PC strictly inside the entry jump goes to the hop (the
     * jump's first instructions ran; what is left of it only goes there). */
    bool restoring;
    /* Keep each thread in the handler until mca_patcher_overwrite_threads_release(). */
    bool hold;
    /* How long to wait for every answer, in ns (0: 2 s). */
    long timeout_ns;
} mca_patcher_overwrite_round_t;

/* Every signal but those a fault raises (blocked, a fault kills the process). */
void mca_patcher_overwrite_async_signals(sigset_t *set);

/* The request signal's handler (installed once, kept until fini): 0, or -1 if refused. */
int mca_patcher_overwrite_threads_init(void);

/*
 * Every other thread runs the handler for this round; with round->hold,
 * they are all held there on return (release them with
 * mca_patcher_overwrite_threads_release, and take no lock meanwhile: a
 * held thread may own it).  A thread that has opted out of signals for
 * good and sleeps in a system call off the bytes is not asked (see the
 * .c).  False, with no thread held, if one did not answer in time (the
 * signal blocked), or new threads kept appearing during a hold.
 */
bool mca_patcher_overwrite_threads_run(const mca_patcher_overwrite_round_t *round);

/*
 * mca_patcher_overwrite_threads_run, tried again while a thread does not
 * answer: one that blocks signals for a moment (Go's runtime does, around
 * pthread_create) answers a later try.  The first try waits 10 ms for the
 * answers, each next one twice as long up to 160 ms; after about 2 s of
 * waiting in all, false.  Between two tries, set_aside(arg, true) (may be
 * NULL) takes away what keeps such a thread from going on (the x86
 * writer's self-loop), 2 ms pass, and set_aside(arg, false) puts it back.
 * It sets round->timeout_ns for each try.  The handlers read the round
 * itself: with a hold it must live until the release.
 */
bool mca_patcher_overwrite_threads_run_patiently(mca_patcher_overwrite_round_t *round,
                                                 void (*set_aside)(void *arg, bool aside),
                                                 void *arg);

/* In a child after fork: no round is run, no handler reads one (its
 * threads are not there). */
void mca_patcher_overwrite_threads_atfork_child(void);

/* The end of a hold: the held threads return from the handler. */
void mca_patcher_overwrite_threads_release(void);

/*
 * patch_fini: one round that moves nothing, then (if every thread
 * answered: nothing of ours can be pending anywhere) the old disposition
 * of the request signal back.  Otherwise, and while another thread may
 * still be returning from the handler, the component's code stays loaded.
 */
void mca_patcher_overwrite_threads_fini(void);

#endif
