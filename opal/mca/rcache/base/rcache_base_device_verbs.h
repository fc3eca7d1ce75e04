/*
 * Verbs memory regions as a registration device: an rcache whose
 * register_mem is ibv_reg_mr on the caller's protection domain and whose
 * deregister_mem is ibv_dereg_mr.  The rcache access flags map to
 * IBV_ACCESS_LOCAL_WRITE / REMOTE_READ / REMOTE_WRITE.
 *
 *     mca_rcache_base_resources_t res;
 *     mca_rcache_base_device_verbs_resources(pd, &res);
 *     mca_rcache_base_module_t *rc = mca_rcache_base_module_create(NULL, NULL, &res);
 *     ... rc->rcache_register(rc, buf, len, 0, MCA_RCACHE_ACCESS_LOCAL_WRITE, &reg);
 *     ((mca_rcache_base_device_verbs_reg_t *) reg)->mr->lkey ...
 *
 * Needs libibverbs (OPAL_HAVE_VERBS).
 */
#ifndef OPAL_MCA_RCACHE_BASE_RCACHE_BASE_DEVICE_VERBS_H
#define OPAL_MCA_RCACHE_BASE_RCACHE_BASE_DEVICE_VERBS_H

#include <infiniband/verbs.h>

#include "opal/mca/rcache/rcache.h"

typedef struct mca_rcache_base_device_verbs_reg_t {
    mca_rcache_base_registration_t base;
    struct ibv_mr *mr;
} mca_rcache_base_device_verbs_reg_t;

/* Fill res for mca_rcache_base_module_create(); pd must outlive the rcache. */
void mca_rcache_base_device_verbs_resources(struct ibv_pd *pd, mca_rcache_base_resources_t *res);

/* The ibv_access_flags for rcache access flags. */
int mca_rcache_base_device_verbs_access(int32_t access_flags);

#endif
