/*
 * Readers of shared state that a writer takes away without making them
 * take a lock (the hook paths, signal handlers).
 *
 * A reader enters (counts itself in) before it reads what makes the state
 * reachable (a pointer, a count), and leaves when it is done with it.  The
 * writer first makes the state unreachable, then drains: waits until no
 * reader is left.  Both sides are seq_cst, so either the reader sees the
 * state unreachable or the writer sees the reader counted (Dekker); after
 * the drain the state may be freed, cleared or reused.  Readers hold the
 * count for a bounded stretch, so the writer spins, yielding.
 */
#ifndef OPAL_UTIL_READERS_H
#define OPAL_UTIL_READERS_H

#include <sched.h>

static inline void opal_readers_enter(int *readers)
{
    __atomic_add_fetch(readers, 1, __ATOMIC_SEQ_CST);
}

static inline void opal_readers_leave(int *readers)
{
    __atomic_sub_fetch(readers, 1, __ATOMIC_SEQ_CST);
}

/*
 * Returns when at most own readers are left: those of the calling thread,
 * when it drains from inside its own read.
 *
 * The full fence keeps the writer's store (state unreachable) before its
 * first read of the count where the seq_cst accesses alone do not: on
 * hardware they do (x86's locked store; ARMv8's stlr then ldar, which the
 * architecture does not reorder), but qemu-user translating aarch64's stlr;
 * ldar for an x86 host puts no barrier between the two, and the host's
 * store buffer let a reader call a callback after its removal returned
 * (registry_test under qemu-aarch64, once in a CI run).  A drain is rare:
 * the fence costs nothing that matters.
 */
static inline void opal_readers_drain(int *readers, int own)
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    while (__atomic_load_n(readers, __ATOMIC_SEQ_CST) > own) {
        sched_yield();
    }
}

#endif
