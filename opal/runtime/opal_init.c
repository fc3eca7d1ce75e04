#include "opal_config.h"

#include <pthread.h>

#include "opal/constants.h"
#include "opal/mca/base/mca_base_component_repository.h"
#include "opal/mca/base/mca_base_framework.h"
#include "opal/mca/base/mca_base_var.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/memoryhooks/memory_hooks.h"
#include "opal/runtime/opal.h"

static pthread_mutex_t opal_init_lock = PTHREAD_MUTEX_INITIALIZER;
static int opal_util_refcount;

/*
 * Order matters: the users of the hooks (rcache …) close first; then the
 * intercepts are taken out, which restores every patch; only then does the
 * patcher framework close and unload its DSOs.
 */
static void close_frameworks(void)
{
    int n = 0;
    while (mca_base_frameworks[n]) {
        n++;
    }
    for (int i = n - 1; i >= 0; i--) {
        if (mca_base_frameworks[i] != &opal_patcher_base_framework) {
            while (mca_base_framework_is_open(mca_base_frameworks[i])) {
                mca_base_framework_close(mca_base_frameworks[i]);
            }
        }
    }
    opal_mem_hooks_finalize();
    while (mca_base_framework_is_open(&opal_patcher_base_framework)) {
        mca_base_framework_close(&opal_patcher_base_framework);
    }
}


int opal_init_util(int *pargc, char ***pargv)
{
    pthread_mutex_lock(&opal_init_lock);
    if (opal_util_refcount++ > 0) {
        pthread_mutex_unlock(&opal_init_lock);
        return OPAL_SUCCESS;
    }
    int rc = mca_base_var_init(pargc, pargv);
    if (OPAL_SUCCESS == rc) {
        rc = mca_base_component_repository_register();
    }
    if (OPAL_SUCCESS == rc) {
        rc = opal_mem_hooks_init();
    }
    if (OPAL_SUCCESS == rc) {
        rc = mca_base_framework_open(&opal_patcher_base_framework);
    }
    if (OPAL_SUCCESS != rc) {
        close_frameworks();
        mca_base_var_finalize();
        opal_util_refcount = 0;
    }
    pthread_mutex_unlock(&opal_init_lock);
    return rc;
}

int opal_finalize_util(void)
{
    pthread_mutex_lock(&opal_init_lock);
    if (opal_util_refcount <= 0) {
        pthread_mutex_unlock(&opal_init_lock);
        return OPAL_ERR_NOT_INITIALIZED;
    }
    if (--opal_util_refcount == 0) {
        close_frameworks();
        mca_base_var_finalize();
    }
    pthread_mutex_unlock(&opal_init_lock);
    return OPAL_SUCCESS;
}
