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

/* Returns when at most own readers are left: those of the calling thread,
 * when it drains from inside its own read. */
static inline void opal_readers_drain(int *readers, int own)
{
    while (__atomic_load_n(readers, __ATOMIC_SEQ_CST) > own) {
        sched_yield();
    }
}

#endif
