/*
 * Registration cache framework base: module creation and destruction, the
 * one release callback that feeds every live module, fork handling, the
 * framework's parameters and the page-frame sanitizer.
 *
 * Its floors, each file calling only those below it:
 *   rcache_base_frame.c            the framework object and its parameters
 *   rcache_base_module.c           create, destroy, the release callback, fork
 *   rcache_base_pageframe_check.c  the page-frame sanitizer (/proc/self/pagemap)
 *   rcache_base_pgindex.c          the page index the components build on
 * Beside them, for the users of a cache, the device helpers that fill
 * mca_rcache_base_resources_t: rcache_base_device_uring.h (io_uring fixed
 * buffers) and rcache_base_device_verbs.h (verbs memory regions).
 */
#ifndef OPAL_MCA_RCACHE_BASE_BASE_H
#define OPAL_MCA_RCACHE_BASE_BASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "opal/mca/base/mca_base_framework.h"
#include "opal/mca/rcache/rcache.h"

/* Public: part of the documented API (README, "Using it"). */
mca_rcache_base_module_t *mca_rcache_base_module_create(const char *name, void *user_data,
                                                         mca_rcache_base_resources_t *resources);
int mca_rcache_base_module_destroy(mca_rcache_base_module_t *module);

extern mca_base_framework_t opal_rcache_base_framework;

/* Parameters (valid once the framework is open). */
extern int mca_rcache_base_leave_pinned;   /* mpi_leave_pinned: -1 auto, 0 off, 1 on */
extern int mca_rcache_base_verify_frames;  /* 0 off, 1 report stale hits, 2 report and abort */
extern bool mca_rcache_base_release_hooks; /* false: test-only, no release callback */
/* rcache_base_uffd: the userfaultfd source (opal/memoryhooks/memory_uffd.h) */
enum { MCA_RCACHE_BASE_UFFD_OFF, MCA_RCACHE_BASE_UFFD_ON, MCA_RCACHE_BASE_UFFD_STRICT };
extern int mca_rcache_base_uffd;
extern const char *const mca_rcache_base_uffd_names[]; /* "off", "on", "strict" */

/*
 * Incremented in the child after fork(): registrations made under an older
 * generation belong to the parent and are dropped without deregister_mem.
 */
extern volatile uint32_t mca_rcache_base_fork_gen;

/* The release callback the base registers with the memory hooks. */
void mca_rcache_base_release_cb(void *buf, size_t length, void *cbdata, bool from_alloc);

/* Destroy the modules still alive when the framework closes. */
void mca_rcache_base_destroy_all(void);

/*
 * Page-frame sanitizer (rcache_base_verify_frames).  record: remember the
 * physical frames behind reg at registration (allocates; never from a hook).
 * check: compare at a cache hit, report a mismatch loudly naming 'call', and
 * count it; returns false on a mismatch.  release: forget them.
 */
void mca_rcache_base_frames_record(mca_rcache_base_registration_t *reg);
bool mca_rcache_base_frames_check(mca_rcache_base_registration_t *reg, const char *call);
/* The same without a word (rcache_base_uffd=strict confirms hits with it). */
bool mca_rcache_base_frames_same(const mca_rcache_base_registration_t *reg);
void mca_rcache_base_frames_release(mca_rcache_base_registration_t *reg);
/* Stale hits the sanitizer has caught so far. */
uint64_t mca_rcache_base_frames_mismatches(void);

/*
 * Read the page frame numbers behind npages pages starting at the page of
 * addr from /proc/self/pagemap; 0 where a page is not present.
 * OPAL_ERR_NOT_AVAILABLE when frames cannot be read here (no pagemap, or
 * not privileged: the kernel then reports every frame as 0).
 */
int mca_rcache_base_frames_read(const void *addr, size_t npages, uint64_t *pfns);

#endif
