/*
 * The linux component linked into a fully static executable (-static, no
 * -ldl): it links (the dl functions are weak references), and its query
 * declines with the reason.  The few framework functions it calls are
 * stubbed here: the query must not need them.
 */
#include "opal_config.h"

#include <stdlib.h>

#include <string.h>
#include <sys/auxv.h>

#include "opal/constants.h"
#include "opal/mca/base/mca_base_framework.h"
#include "opal/mca/base/mca_base_var.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/mca/patcher/linux/patcher_linux.h"
#include "test/support/test_util.h"

mca_base_framework_t opal_patcher_base_framework;

int mca_base_var_register(const mca_base_var_t *var)
{
    return OPAL_SUCCESS;
}

mca_patcher_base_patch_t *mca_patcher_base_patch_new(void)
{
    return NULL;
}

void mca_patcher_base_patch_add(mca_patcher_base_module_t *module, mca_patcher_base_patch_t *patch)
{
}

void mca_patcher_base_loader_changed(void)
{
}

void mca_patcher_base_loader_unloaded(void)
{
}

void mca_patcher_base_restore_patches(mca_patcher_base_module_t *module,
                                      bool (*filter)(mca_patcher_base_patch_t *, void *), void *arg)
{
}

int mca_patcher_base_with_writable(uintptr_t addr, size_t len, void (*write)(void *arg), void *arg,
                                   const char **reason)
{
    return OPAL_ERR_NOT_SUPPORTED;
}

void opal_output(const char *fmt, ...)
{
}

const char *opal_strerror(int rc)
{
    return "error";
}

int main(void)
{
    if (getenv("OPAL_TEST_SANITIZER")) {
        TEST_SKIP("sanitizer runtimes cannot be linked into a fully static executable");
    }
    /* No program interpreter: really static. */
    CHECK_MSG(0 == getauxval(AT_BASE), "this test program is not a static executable");
    mca_base_module_t *module = NULL;
    int priority = 0;
    const char *reason = NULL;
    const mca_base_component_t *c = &mca_patcher_linux_component.patcherc_version;
    CHECK(0 == strcmp("linux", c->mca_component_name));
    CHECK(OPAL_SUCCESS == c->mca_register_component_params());
    int rc = c->mca_query_component(&module, &priority, &reason);
    CHECK(OPAL_ERR_NOT_SUPPORTED == rc);
    CHECK_MSG(NULL != reason && NULL != strstr(reason, "no dynamic linking"), "reason: %s",
              reason ? reason : "(none)");
    if (reason) {
        printf("declined: %s\n", reason);
    }
    return test_finish("static_decline");
}
