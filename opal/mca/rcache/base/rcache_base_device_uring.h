/*
 * io_uring fixed buffers as a registration device: an rcache whose
 * register_mem puts the range into a free slot of the ring's sparse
 * fixed-buffer table (a real long-term pin of the pages) and whose
 * deregister_mem empties the slot again.  Use reg->buf_index with
 * IORING_OP_READ_FIXED / WRITE_FIXED.
 *
 *     mca_rcache_base_device_uring_t dev;
 *     mca_rcache_base_device_uring_init(&dev, &ring, 1024);
 *     mca_rcache_base_resources_t res;
 *     mca_rcache_base_device_uring_resources(&dev, &res);
 *     mca_rcache_base_module_t *rc = mca_rcache_base_module_create(NULL, NULL, &res);
 *
 * Destroy the rcache before mca_rcache_base_device_uring_fini().  Needs liburing
 * (OPAL_HAVE_LIBURING) and a kernel with sparse buffer tables (5.19).
 */
#ifndef OPAL_MCA_RCACHE_BASE_RCACHE_BASE_DEVICE_URING_H
#define OPAL_MCA_RCACHE_BASE_RCACHE_BASE_DEVICE_URING_H

#include <liburing.h>
#include <pthread.h>

#include "opal/mca/rcache/rcache.h"

typedef struct mca_rcache_base_device_uring_reg_t {
    mca_rcache_base_registration_t base;
    int buf_index; /* slot in the ring's fixed-buffer table */
} mca_rcache_base_device_uring_reg_t;

typedef struct mca_rcache_base_device_uring_t {
    struct io_uring *ring;
    unsigned nslots;
    pthread_mutex_t lock; /* guards the free-slot stack (never taken in a release hook) */
    unsigned *free_slots;
    unsigned nfree;
} mca_rcache_base_device_uring_t;

/*
 * Give the ring a sparse table of nslots fixed buffers.  Fails with
 * OPAL_ERR_NOT_SUPPORTED when the kernel has no sparse tables, or
 * OPAL_ERR_NOT_AVAILABLE when the ring has a table already.
 */
int mca_rcache_base_device_uring_init(mca_rcache_base_device_uring_t *dev, struct io_uring *ring,
                                      unsigned nslots);
/* Unregister the table.  Every registration must be gone (destroy the rcache first). */
void mca_rcache_base_device_uring_fini(mca_rcache_base_device_uring_t *dev);
/*
 * Fill res for mca_rcache_base_module_create().  A full table or the
 * locked-memory limit yields OPAL_ERR_OUT_OF_RESOURCE, so the cache evicts
 * and retries.
 */
void mca_rcache_base_device_uring_resources(mca_rcache_base_device_uring_t *dev,
                                            mca_rcache_base_resources_t *res);

#endif
