/*
 * The loader watch of each component (mca_patcher_base_watch_loader):
 * after it, a dlopen and a dlclose of the program reach the base's loader
 * callback, whether the component watches with GOT slots (linux) or with
 * jumps in libc's code (overwrite); the dlmopen and dlclose it hands out
 * for the caller's own lookups are not reported.  Watching twice is the
 * same watch; after the last finalize nothing is reported.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <gnu/lib-names.h>
#include <stdlib.h>
#include <string.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/mca/patcher/base/base_dl.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_arch.h"
#include "opal/runtime/opal.h"
#include "test/support/test_util.h"

static int reported;

static void loader_changed(void)
{
    reported++;
}

/* Open libc again (it is loaded: nothing else changes), then close it. */
static void open_and_close(const char *component, const char *what)
{
    int before = reported;
    void *handle = dlopen(LIBC_SO, RTLD_LAZY | RTLD_NOLOAD);
    CHECK_MSG(NULL != handle, "%s: dlopen(%s): %s", component, LIBC_SO, dlerror());
    CHECK_MSG(reported > before, "%s: %s: dlopen not reported", component, what);
    before = reported;
    if (NULL != handle) {
        dlclose(handle);
    }
    CHECK_MSG(reported > before, "%s: %s: dlclose not reported", component, what);
}

static void check_component(const char *component)
{
    setenv("OMPI_MCA_patcher", component, 1);
    if (OPAL_SUCCESS != opal_init_util(NULL, NULL) || OPAL_SUCCESS != mca_patcher_base_select()) {
        CHECK_MSG(false, "%s: not selected", component);
        return;
    }
    mca_patcher_base_set_loader_callback(loader_changed);
    mca_patcher_base_loader_t unwatched = {NULL, NULL, NULL}, again = {NULL, NULL, NULL};
    int rc = mca_patcher_base_watch_loader(&unwatched);
    CHECK_MSG(OPAL_SUCCESS == rc, "%s: watch_loader: %d", component, rc);
    CHECK_MSG(NULL != unwatched.dlmopen && NULL != unwatched.dlclose && NULL != unwatched.dlsym,
              "%s: no unwatched dlmopen/dlclose/dlsym handed out", component);
    open_and_close(component, "watched");

    /* Our own lookups: opening a loaded object again, closing it. */
    if (NULL != unwatched.dlmopen && NULL != unwatched.dlclose && NULL != unwatched.dlsym) {
        const int before = reported;
        void *handle = unwatched.dlmopen(LM_ID_BASE, LIBC_SO, RTLD_LAZY | RTLD_NOLOAD);
        CHECK_MSG(NULL != handle, "%s: the unwatched dlmopen(%s) failed", component, LIBC_SO);
        if (NULL != handle) {
            /* A definition, not the watch's intercept that a hooked dlsym gives for dlopen. */
            Dl_info info = {0};
            void *def = unwatched.dlsym(handle, "dlopen");
            CHECK_MSG(NULL != def && 0 != dladdr(def, &info) && NULL != info.dli_fname &&
                          NULL != strstr(info.dli_fname, LIBC_SO),
                      "%s: the unwatched dlsym gave dlopen at %p in %s, not in %s", component,
                      def, info.dli_fname ? info.dli_fname : "nothing", LIBC_SO);
            unwatched.dlclose(handle);
        }
        CHECK_MSG(reported == before, "%s: the unwatched dlmopen/dlclose were reported (%d)",
                  component, reported - before);
    }

    rc = mca_patcher_base_watch_loader(&again);
    CHECK_MSG(OPAL_SUCCESS == rc && again.dlmopen == unwatched.dlmopen &&
                  again.dlclose == unwatched.dlclose && again.dlsym == unwatched.dlsym,
              "%s: a second watch differs (%d)", component, rc);
    open_and_close(component, "watched twice");

    mca_patcher_base_set_loader_callback(NULL);
    opal_finalize_util();
    mca_patcher_base_set_loader_callback(loader_changed);
    const int before = reported;
    void *handle = dlopen(LIBC_SO, RTLD_LAZY | RTLD_NOLOAD);
    if (NULL != handle) {
        dlclose(handle);
    }
    CHECK_MSG(reported == before, "%s: reported after the last finalize", component);
    mca_patcher_base_set_loader_callback(NULL);
}

int main(void)
{
    check_component("linux");
    if (MCA_PATCHER_OVERWRITE_HAVE_ARCH) {
        check_component("overwrite");
    } else {
        printf("note: the overwrite component has no instructions here: linux only\n");
    }
    return test_finish("loader_watch_test");
}
