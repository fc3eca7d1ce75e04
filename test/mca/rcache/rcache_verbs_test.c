/*
 * The verbs helper: access flag mapping always; with an RDMA device, real
 * ibv_reg_mr through the rcache (hit, invalidation on munmap, pairing).
 */
#include "opal_config.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "opal/mca/rcache/base/base.h"
#include "opal/mca/rcache/base/rcache_base_device_verbs.h"
#include "opal/runtime/opal.h"
#include "test/support/test_util.h"

int main(void)
{
    CHECK(IBV_ACCESS_LOCAL_WRITE ==
          mca_rcache_base_device_verbs_access(MCA_RCACHE_ACCESS_LOCAL_WRITE));
    CHECK((IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) ==
          mca_rcache_base_device_verbs_access(MCA_RCACHE_ACCESS_REMOTE_WRITE));
    CHECK(IBV_ACCESS_REMOTE_READ ==
          mca_rcache_base_device_verbs_access(MCA_RCACHE_ACCESS_REMOTE_READ));
    CHECK(0 == mca_rcache_base_device_verbs_access(0));
    if (test_failures) {
        return test_finish("rcache_verbs_test");
    }

    int n = 0;
    struct ibv_device **devs = ibv_get_device_list(&n);
    if (NULL == devs || 0 == n) {
        TEST_SKIP("no RDMA device here (ibv_get_device_list found none); access mapping checked");
    }
    struct ibv_context *ctx = ibv_open_device(devs[0]);
    struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
    if (NULL == pd) {
        TEST_SKIP("cannot open %s or allocate a protection domain", ibv_get_device_name(devs[0]));
    }
    setenv("OMPI_MCA_mpi_leave_pinned", "-1", 0);
    CHECK(OPAL_SUCCESS == opal_init_util(NULL, NULL));
    mca_rcache_base_resources_t res;
    mca_rcache_base_device_verbs_resources(pd, &res);
    mca_rcache_base_module_t *rc = mca_rcache_base_module_create(NULL, NULL, &res);
    CHECK(NULL != rc);
    size_t len = 16 * (size_t) sysconf(_SC_PAGESIZE);
    unsigned char *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    mca_rcache_base_registration_t *a, *b;
    CHECK(OPAL_SUCCESS == rc->rcache_register(rc, buf, len, 0, MCA_RCACHE_ACCESS_LOCAL_WRITE, &a));
    struct ibv_mr *mr = ((mca_rcache_base_device_verbs_reg_t *) a)->mr;
    CHECK(mr && mr->addr == (void *) buf && mr->length == len);
    rc->rcache_deregister(rc, a);
    CHECK(OPAL_SUCCESS == rc->rcache_register(rc, buf + 100, 100, 0, 0, &b));
    CHECK(b == a || !rc->rcache_hooked);
    rc->rcache_deregister(rc, b);
    munmap(buf, len);
    if (rc->rcache_hooked) {
        CHECK(OPAL_ERR_NOT_FOUND == rc->rcache_find(rc, buf, len, &b));
    }
    CHECK(OPAL_SUCCESS == mca_rcache_base_module_destroy(rc));
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    ibv_free_device_list(devs);
    opal_finalize_util();
    return test_finish("rcache_verbs_test");
}
