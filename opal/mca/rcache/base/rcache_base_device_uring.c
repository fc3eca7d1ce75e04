/*
 * Registration device on an io_uring sparse fixed-buffer table: a slot per
 * registration, updated in place (IORING_REGISTER_BUFFERS_UPDATE), so no
 * registration disturbs the others or in-flight I/O on them.
 */
#include "opal_config.h"

#include <errno.h>
#include <stdlib.h>

#include "opal/constants.h"
#include "opal/mca/rcache/base/rcache_base_device_uring.h"

static int errno_to_opal(int err)
{
    switch (err) {
    case ENOMEM: /* RLIMIT_MEMLOCK or kernel memory */
    case EAGAIN:
        return OPAL_ERR_OUT_OF_RESOURCE;
    case EFAULT: /* not mapped, or not memory that can be pinned */
    case EINVAL:
    case EOVERFLOW:
        return OPAL_ERR_BAD_PARAM;
    default:
        return OPAL_ERROR;
    }
}

static int uring_register(void *data, void *base, size_t size, mca_rcache_base_registration_t *reg)
{
    mca_rcache_base_device_uring_t *dev = data;
    mca_rcache_base_device_uring_reg_t *ureg = (mca_rcache_base_device_uring_reg_t *) reg;
    pthread_mutex_lock(&dev->lock);
    if (0 == dev->nfree) {
        pthread_mutex_unlock(&dev->lock);
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    unsigned slot = dev->free_slots[--dev->nfree];
    pthread_mutex_unlock(&dev->lock);

    struct iovec iov = {.iov_base = base, .iov_len = size};
    __u64 tag = 0;
    int rc = io_uring_register_buffers_update_tag(dev->ring, slot, &iov, &tag, 1);
    if (1 != rc) {
        pthread_mutex_lock(&dev->lock);
        dev->free_slots[dev->nfree++] = slot;
        pthread_mutex_unlock(&dev->lock);
        return errno_to_opal(rc < 0 ? -rc : EIO);
    }
    ureg->buf_index = (int) slot;
    return OPAL_SUCCESS;
}

static int uring_deregister(void *data, mca_rcache_base_registration_t *reg)
{
    mca_rcache_base_device_uring_t *dev = data;
    mca_rcache_base_device_uring_reg_t *ureg = (mca_rcache_base_device_uring_reg_t *) reg;
    /* An empty iovec empties the slot; the kernel unpins once no request uses it. */
    struct iovec iov = {.iov_base = NULL, .iov_len = 0};
    __u64 tag = 0;
    int rc = io_uring_register_buffers_update_tag(dev->ring, (unsigned) ureg->buf_index, &iov, &tag,
                                                  1);
    pthread_mutex_lock(&dev->lock);
    dev->free_slots[dev->nfree++] = (unsigned) ureg->buf_index;
    pthread_mutex_unlock(&dev->lock);
    ureg->buf_index = -1;
    return 1 == rc ? OPAL_SUCCESS : errno_to_opal(rc < 0 ? -rc : EIO);
}

int mca_rcache_base_device_uring_init(mca_rcache_base_device_uring_t *dev, struct io_uring *ring,
                                      unsigned nslots)
{
    if (NULL == dev || NULL == ring || 0 == nslots) {
        return OPAL_ERR_BAD_PARAM;
    }
    dev->free_slots = malloc(nslots * sizeof(*dev->free_slots));
    if (NULL == dev->free_slots) {
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    int rc = io_uring_register_buffers_sparse(ring, nslots);
    if (0 != rc) {
        free(dev->free_slots);
        dev->free_slots = NULL;
        return -EBUSY == rc                           ? OPAL_ERR_NOT_AVAILABLE
               : (-EINVAL == rc || -EOPNOTSUPP == rc) ? OPAL_ERR_NOT_SUPPORTED
                                                      : errno_to_opal(-rc);
    }
    dev->ring = ring;
    dev->nslots = nslots;
    pthread_mutex_init(&dev->lock, NULL);
    /* Hand out low slots first. */
    for (unsigned i = 0; i < nslots; i++) {
        dev->free_slots[i] = nslots - 1 - i;
    }
    dev->nfree = nslots;
    return OPAL_SUCCESS;
}

void mca_rcache_base_device_uring_fini(mca_rcache_base_device_uring_t *dev)
{
    if (NULL == dev->free_slots) {
        return;
    }
    io_uring_unregister_buffers(dev->ring);
    pthread_mutex_destroy(&dev->lock);
    free(dev->free_slots);
    dev->free_slots = NULL;
}

void mca_rcache_base_device_uring_resources(mca_rcache_base_device_uring_t *dev,
                                            mca_rcache_base_resources_t *res)
{
    res->cache_name = "io_uring";
    res->reg_data = dev;
    res->sizeof_reg = sizeof(mca_rcache_base_device_uring_reg_t);
    res->register_mem = uring_register;
    res->deregister_mem = uring_deregister;
}
