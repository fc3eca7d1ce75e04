/*
 * The fixed-size lock-free ring between the userfaultfd reader thread (the
 * one producer) and the rcache lookups that drain it (any number of
 * consumers).  Nothing here allocates, blocks or takes a lock: the reader
 * must never wait for a thread that may itself be waiting for the reader
 * (a thread releasing watched memory sleeps in the kernel until its event
 * is read).
 *
 * A full ring does not make the reader wait either: it raises overflow,
 * and the consumer that takes it treats it as a release of everything
 * (more invalidation than needed, never less).
 */
#ifndef OPAL_MEMORYHOOKS_MEMORY_UFFD_RING_H
#define OPAL_MEMORYHOOKS_MEMORY_UFFD_RING_H

#include <stdbool.h>
#include <stdint.h>

#define OPAL_MEM_UFFD_RING_SLOTS 1024 /* a power of two */

typedef struct {
    uintptr_t start;
    uintptr_t len;
} opal_mem_uffd_range_t;

typedef struct {
    /* Next slot to take: consumers advance it with a compare-and-swap. */
    uint64_t head __attribute__((aligned(64)));
    /* Next slot to fill: written by the producer only. */
    uint64_t tail __attribute__((aligned(64)));
    int overflow; /* a push found the ring full */
    opal_mem_uffd_range_t slot[OPAL_MEM_UFFD_RING_SLOTS] __attribute__((aligned(64)));
} opal_mem_uffd_ring_t;

/* Producer only.  False (and overflow raised) when the ring is full. */
static inline bool opal_mem_uffd_ring_push(opal_mem_uffd_ring_t *r, uintptr_t start, uintptr_t len)
{
    const uint64_t t = __atomic_load_n(&r->tail, __ATOMIC_RELAXED);
    /* Acquire: the consumers' reads of the slot we reuse are done. */
    if (t - __atomic_load_n(&r->head, __ATOMIC_ACQUIRE) >= OPAL_MEM_UFFD_RING_SLOTS) {
        __atomic_store_n(&r->overflow, 1, __ATOMIC_RELEASE);
        return false;
    }
    opal_mem_uffd_range_t *s = &r->slot[t & (OPAL_MEM_UFFD_RING_SLOTS - 1)];
    __atomic_store_n(&s->start, start, __ATOMIC_RELAXED);
    __atomic_store_n(&s->len, len, __ATOMIC_RELAXED);
    /* Release: a consumer that sees the new tail sees the slot. */
    __atomic_store_n(&r->tail, t + 1, __ATOMIC_RELEASE);
    return true;
}

/*
 * Any thread.  The slot is read before the head is claimed: if the
 * producer reused the slot meanwhile, the head moved past it and the
 * claim fails, so a successful claim always holds what was pushed.
 */
static inline bool opal_mem_uffd_ring_pop(opal_mem_uffd_ring_t *r, opal_mem_uffd_range_t *out)
{
    uint64_t h = __atomic_load_n(&r->head, __ATOMIC_ACQUIRE);
    while (h != __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE)) {
        const opal_mem_uffd_range_t *s = &r->slot[h & (OPAL_MEM_UFFD_RING_SLOTS - 1)];
        out->start = __atomic_load_n(&s->start, __ATOMIC_RELAXED);
        out->len = __atomic_load_n(&s->len, __ATOMIC_RELAXED);
        if (__atomic_compare_exchange_n(&r->head, &h, h + 1, false, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
            return true;
        }
    }
    return false;
}

/* Nothing pushed and not taken (a hint: the producer may push right after). */
static inline bool opal_mem_uffd_ring_empty(opal_mem_uffd_ring_t *r)
{
    return __atomic_load_n(&r->head, __ATOMIC_ACQUIRE) ==
               __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE) &&
           0 == __atomic_load_n(&r->overflow, __ATOMIC_RELAXED);
}

/* Take the overflow: true once per raise. */
static inline bool opal_mem_uffd_ring_take_overflow(opal_mem_uffd_ring_t *r)
{
    return 0 != __atomic_load_n(&r->overflow, __ATOMIC_RELAXED) &&
           0 != __atomic_exchange_n(&r->overflow, 0, __ATOMIC_ACQ_REL);
}

#endif
