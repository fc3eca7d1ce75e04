/*
 * The load-time checks of the Open MPI components (opatch_glue.h).
 */
#include "opatch_glue.h"

#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "opal/class/opal_list.h"
#include "opal/constants.h"
#include "opal/mca/base/base.h"
#include "opal/mca/base/mca_base_var.h"
#include "opal/runtime/opal_params.h"
#include "opal/threads/mutex.h"
#include "opal/util/output.h"

/* In libopen-pal since 1.x: the version of the running library. */
extern const char opal_version_string[];

/* The file that holds addr, or "?". */
static const char *file_of(const void *addr)
{
    Dl_info info;
    return 0 != dladdr(addr, &info) && NULL != info.dli_fname ? info.dli_fname : "?";
}

/*
 * The structures the components share with libopen-pal, whose size the
 * running library records in its class descriptors: a debug build adds
 * fields to every object, list item and mutex.
 */
static const char *layout_mismatch(char *buf, size_t len)
{
    const struct {
        const char *name;
        const opal_class_t *cls;
        size_t ours;
    } shared[] = {
        {"opal_list_item_t", &opal_list_item_t_class, sizeof(opal_list_item_t)},
        {"opal_list_t", &opal_list_t_class, sizeof(opal_list_t)},
        {"opal_mutex_t", &opal_mutex_t_class, sizeof(opal_mutex_t)},
    };
    for (size_t i = 0; i < sizeof(shared) / sizeof(shared[0]); i++) {
        if (shared[i].cls->cls_sizeof != shared[i].ours) {
            snprintf(buf, len, "its %s is %zu bytes, not %zu: a %sdebug build", shared[i].name,
                     shared[i].cls->cls_sizeof, shared[i].ours, OPAL_ENABLE_DEBUG ? "non-" : "");
            return buf;
        }
    }
    if (opal_built_with_cuda_support != (0 != OPAL_CUDA_SUPPORT)) {
        snprintf(buf, len, "it is built %s CUDA support", opal_built_with_cuda_support ? "with" : "without");
        return buf;
    }
    return NULL;
}

int opatch_glue_check_runtime(const mca_base_component_t *component)
{
    int major = -1, minor = -1;
    char why[160];
    const char *mismatch = NULL;
    if (2 != sscanf(opal_version_string, "%d.%d", &major, &minor) ||
        major != OPATCH_BUILT_FOR_MAJOR || minor != OPATCH_BUILT_FOR_MINOR) {
        snprintf(why, sizeof(why), "another series");
        mismatch = why;
    } else {
        mismatch = layout_mismatch(why, sizeof(why));
    }
    if (NULL == mismatch) {
        return OPAL_SUCCESS;
    }
    opal_output(0, "opal-patcher: %s %s (%s) was built for Open MPI %d.%d (%s, %s CUDA), but this "
                "process runs Open MPI %s (%s; %s): declining, Open MPI's own %s components take over",
                component->mca_type_name, component->mca_component_name, file_of(component),
                OPATCH_BUILT_FOR_MAJOR, OPATCH_BUILT_FOR_MINOR, OPAL_ENABLE_DEBUG ? "debug" : "non-debug",
                OPAL_CUDA_SUPPORT ? "with" : "without", opal_version_string, file_of(opal_version_string),
                mismatch, component->mca_type_name);
    return OPAL_ERR_NOT_AVAILABLE;
}

/* One directory of mca_base_component_path, its USER_DEFAULT/SYS_DEFAULT expanded as Open MPI does. */
static const char *expand_dir(const char *dir)
{
    if (0 == strcmp(dir, "USER_DEFAULT") || 0 == strcmp(dir, "USR_DEFAULT")) {
        return mca_base_user_default_path;
    }
    if (0 == strcmp(dir, "SYS_DEFAULT") || 0 == strcmp(dir, "SYSTEM_DEFAULT")) {
        return mca_base_system_default_path;
    }
    return dir;
}

/* Whether dir can be read as Open MPI reads it (opendir): it stops at the first that cannot. */
static bool readable_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (NULL != d) {
        closedir(d);
    }
    return NULL != d;
}

void opatch_glue_check_path(const mca_base_component_t *component, bool report_stop)
{
    char **path = NULL;
    int index = mca_base_var_find("opal", "mca", "base", "component_path");
    if (index < 0 || OPAL_SUCCESS != mca_base_var_get_value(index, &path, NULL, NULL) || NULL == path ||
        NULL == *path) {
        return;
    }
    char own[PATH_MAX];
    if (NULL == realpath(file_of(component), own)) {
        return;
    }
    char *dirs = strdup(*path), *save = NULL;
    if (NULL == dirs) {
        return;
    }
    const char *stopped_at = NULL;
    for (char *dir = strtok_r(dirs, ":", &save); NULL != dir; dir = strtok_r(NULL, ":", &save)) {
        const char *expanded = expand_dir(dir);
        if (NULL == expanded) {
            continue;
        }
        if (NULL != stopped_at) {
            if (report_stop) {
                    opal_output(0, "opal-patcher: %s %s: mca_base_component_path: %s cannot be read, and "
                            "Open MPI loads nothing from the directories after it: %s is ignored",
                            component->mca_type_name, component->mca_component_name, stopped_at,
                            expanded);
            }
            continue;
        }
        if (!readable_dir(expanded)) {
            stopped_at = dir;
            continue;
        }
        char file[PATH_MAX], real[PATH_MAX];
        snprintf(file, sizeof(file), "%s/mca_%s_%s.so", expanded, component->mca_type_name,
                 component->mca_component_name);
        if (NULL != realpath(file, real) && 0 != strcmp(real, own)) {
            opal_output(0, "opal-patcher: %s %s: Open MPI loaded %s, the first of that name along "
                        "mca_base_component_path; it ignores %s", component->mca_type_name,
                        component->mca_component_name, own, file);
        }
    }
    free(dirs);
}

bool opatch_glue_stay_loaded(const mca_base_component_t *component)
{
    const char *file = file_of(component);
    if (NULL == dlopen(file, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE)) {
        opal_output(0, "opal-patcher: %s %s: cannot keep %s loaded: %s", component->mca_type_name,
                    component->mca_component_name, file, dlerror());
        return false;
    }
    return true;
}

int opatch_glue_register_verbose(const mca_base_component_t *component, int *storage)
{
    *storage = 0;
    int rc = mca_base_component_var_register(component, "verbose",
                                             "Verbosity of opal-patcher inside this component: > 0 says "
                                             "what is installed, and is its patcher_base_verbose",
                                             MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_1,
                                             MCA_BASE_VAR_SCOPE_LOCAL, storage);
    return rc < 0 ? rc : OPAL_SUCCESS;
}
