/*
 * Registration device on verbs memory regions.
 */
#include "opal_config.h"

#include <errno.h>

#include "opal/constants.h"
#include "opal/mca/rcache/base/rcache_base_device_verbs.h"

int mca_rcache_base_device_verbs_access(int32_t access_flags)
{
    int access = 0;
    /* Remote write needs local write as well (verbs rule). */
    if (access_flags & (MCA_RCACHE_ACCESS_LOCAL_WRITE | MCA_RCACHE_ACCESS_REMOTE_WRITE)) {
        access |= IBV_ACCESS_LOCAL_WRITE;
    }
    if (access_flags & MCA_RCACHE_ACCESS_REMOTE_READ) {
        access |= IBV_ACCESS_REMOTE_READ;
    }
    if (access_flags & MCA_RCACHE_ACCESS_REMOTE_WRITE) {
        access |= IBV_ACCESS_REMOTE_WRITE;
    }
    return access;
}

static int verbs_register(void *data, void *base, size_t size, mca_rcache_base_registration_t *reg)
{
    mca_rcache_base_device_verbs_reg_t *vreg = (mca_rcache_base_device_verbs_reg_t *) reg;
    vreg->mr = ibv_reg_mr((struct ibv_pd *) data, base, size,
                          mca_rcache_base_device_verbs_access(reg->access_flags));
    if (NULL == vreg->mr) {
        /* ENOMEM: out of pinnable memory or device resources: the cache may evict. */
        return ENOMEM == errno || EAGAIN == errno ? OPAL_ERR_OUT_OF_RESOURCE : OPAL_ERROR;
    }
    return OPAL_SUCCESS;
}

static int verbs_deregister(void *data, mca_rcache_base_registration_t *reg)
{
    mca_rcache_base_device_verbs_reg_t *vreg = (mca_rcache_base_device_verbs_reg_t *) reg;
    int rc = ibv_dereg_mr(vreg->mr);
    vreg->mr = NULL;
    return 0 == rc ? OPAL_SUCCESS : OPAL_ERROR;
}

void mca_rcache_base_device_verbs_resources(struct ibv_pd *pd, mca_rcache_base_resources_t *res)
{
    res->cache_name = "verbs";
    res->reg_data = pd;
    res->sizeof_reg = sizeof(mca_rcache_base_device_verbs_reg_t);
    res->register_mem = verbs_register;
    res->deregister_mem = verbs_deregister;
}
