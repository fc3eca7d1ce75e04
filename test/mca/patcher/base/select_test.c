/*
 * Patcher selection through the whole stack: include lists, exclude lists,
 * priorities, and bad selections that must fail with a clear message and
 * leave nothing behind; how the selected component patches (its style),
 * known from the selection to the last finalize only.
 */
#include "opal_config.h"

#include <stdlib.h>
#include <string.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_arch.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"
#include "test/support/capture.h"
#include "test/support/test_util.h"

static void callback(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) buf, (void) len, (void) cbdata, (void) from_alloc;
}

static mca_patcher_base_style_t style_seen; /* the last selection's */

/* Init with the given environment settings, set up, return the selection. */
static char *select_with(const char *selection, const char *priority_name, const char *priority)
{
    static char name[32];
    selection ? setenv("OMPI_MCA_patcher", selection, 1) : unsetenv("OMPI_MCA_patcher");
    if (priority_name) {
        setenv(priority_name, priority, 1);
    }
    name[0] = '\0';
    style_seen = MCA_PATCHER_BASE_STYLE_NONE;
    CHECK(NULL == mca_patcher_base_selected_name());
    CHECK(MCA_PATCHER_BASE_STYLE_NONE == mca_patcher_base_style());
    if (OPAL_SUCCESS == opal_init_util(NULL, NULL)) {
        CHECK(NULL == mca_patcher_base_selected_name()); /* nothing before the delayed setup */
        if (OPAL_SUCCESS == opal_mem_hooks_register_release(callback, NULL)) {
            snprintf(name, sizeof(name), "%s", mca_patcher_base_selected_name());
            style_seen = mca_patcher_base_style();
            opal_mem_hooks_unregister_release(callback);
        }
        opal_finalize_util();
    }
    if (priority_name) {
        unsetenv(priority_name);
    }
    return name;
}

static void expect_bad_selection(const char *selection, const char *bad_name)
{
    setenv("OMPI_MCA_patcher", selection, 1);
    test_capture_t cap;
    test_capture_begin(&cap);
    int rc = opal_init_util(NULL, NULL);
    const char *msg = test_capture_end(&cap);
    CHECK_MSG(OPAL_SUCCESS != rc, "patcher=%s accepted", selection);
    if (OPAL_SUCCESS == rc) {
        opal_finalize_util();
    }
    CHECK_MSG(strstr(msg, "'patcher'") && strstr(msg, selection) && strstr(msg, bad_name) &&
                  strstr(msg, "linux") && strstr(msg, "overwrite"),
              "message for patcher=%s was: %s", selection, msg);
}

int main(void)
{
    CHECK(0 == strcmp(select_with("linux", NULL, NULL), "linux"));
    CHECK(MCA_PATCHER_BASE_STYLE_BY_SYMBOL == style_seen);
    CHECK(0 == strcmp(select_with("^overwrite", NULL, NULL), "linux"));
    /* Where it has instructions, the code overwrite wins on priority by
     * default; elsewhere it declines and linux is chosen. */
    const char *overwrite = MCA_PATCHER_OVERWRITE_HAVE_ARCH ? "overwrite" : "";
    CHECK(0 == strcmp(select_with("overwrite", NULL, NULL), overwrite));
    CHECK((MCA_PATCHER_OVERWRITE_HAVE_ARCH ? MCA_PATCHER_BASE_STYLE_BY_ADDRESS
                                           : MCA_PATCHER_BASE_STYLE_NONE) == style_seen);
    CHECK(0 == strcmp(select_with("^linux", NULL, NULL), overwrite));
    CHECK(0 == strcmp(select_with(NULL, NULL, NULL),
                      MCA_PATCHER_OVERWRITE_HAVE_ARCH ? "overwrite" : "linux"));
    CHECK(0 == strcmp(select_with(NULL, "OMPI_MCA_patcher_linux_priority", "100"), "linux"));
    CHECK(0 == strcmp(select_with("linux,overwrite", "OMPI_MCA_patcher_overwrite_priority", "1"), "linux"));

    expect_bad_selection("foo", "foo");
    expect_bad_selection("linux,bogus", "bogus");
    expect_bad_selection("^nothing", "nothing");

    /* A bad priority value names the parameter; afterwards all is well. */
    unsetenv("OMPI_MCA_patcher");
    setenv("OMPI_MCA_patcher_linux_priority", "high", 1);
    test_capture_t cap;
    test_capture_begin(&cap);
    int rc = opal_init_util(NULL, NULL);
    const char *msg = test_capture_end(&cap);
    CHECK(OPAL_SUCCESS != rc);
    CHECK_MSG(strstr(msg, "patcher_linux_priority") && strstr(msg, "high"), "message was: %s", msg);
    unsetenv("OMPI_MCA_patcher_linux_priority");
    CHECK(0 == strcmp(select_with("linux", NULL, NULL), "linux"));

    /* --mca on the command line beats the environment. */
    setenv("OMPI_MCA_patcher", "linux", 1);
    char *args[] = {"prog", "--mca", "patcher", "overwrite", NULL};
    char **argv = args;
    int argc = 4;
    CHECK(OPAL_SUCCESS == opal_init_util(&argc, &argv));
    CHECK(1 == argc);
    if (MCA_PATCHER_OVERWRITE_HAVE_ARCH) {
        CHECK(OPAL_SUCCESS == opal_mem_hooks_register_release(callback, NULL));
        CHECK(NULL != mca_patcher_base_selected_name() &&
              0 == strcmp(mca_patcher_base_selected_name(), "overwrite"));
    } else {
        CHECK(OPAL_ERR_NOT_SUPPORTED == opal_mem_hooks_register_release(callback, NULL));
    }
    opal_finalize_util();
    return test_finish("select_test");
}
