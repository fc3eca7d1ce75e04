/*
 * The userfaultfd event source (memory_uffd.c): the kernel tells us of
 * releases of the ranges subscribed to it however they were made (a raw
 * system call, a Go runtime, a static musl binary sharing memory, io_uring
 * madvise), where no patch can see them.
 */
#ifndef OPAL_MEMORYHOOKS_MEMORY_UFFD_H
#define OPAL_MEMORYHOOKS_MEMORY_UFFD_H

#include <stddef.h>
#include <stdint.h>

#include "opal/memoryhooks/memory_source.h"

/* The table: start, stop, subscribe, unsubscribe, drain (memory_source.h). */
extern const opal_mem_source_t opal_mem_uffd_source;

/*
 * Whether the source could start here: NULL, or static text saying why
 * not (seccomp, a security module, an old kernel).  Opens and
 * closes a probe descriptor; for opal_patcher_info.
 */
const char *opal_mem_uffd_probe(void);

typedef struct {
    int started;
    size_t cap;         /* most subscribed (merged) ranges: below the VMA limit */
    size_t ranges;      /* subscribed (merged) ranges now */
    uint64_t events;    /* read from the kernel */
    uint64_t overflows; /* ring full: dispatched as "everything released" */
    uint64_t refused;   /* subscriptions refused at the cap */
} opal_mem_uffd_stats_t;

void opal_mem_uffd_stats(opal_mem_uffd_stats_t *stats);

#endif
