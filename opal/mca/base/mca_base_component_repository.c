#include "opal_config.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if OPAL_ENABLE_DLOPEN
#include <dlfcn.h>
#endif

#include "opal/constants.h"
#include "opal/mca/base/mca_base_component_repository.h"
#include "opal/mca/base/mca_base_static_components.h"
#include "opal/mca/base/mca_base_var.h"
#include "opal/util/output.h"

static char *component_path;

int mca_base_component_repository_register(void)
{
    component_path = OPAL_COMPONENT_DIR;
    mca_base_var_t var = {
        .framework = "mca", .component = "base", .name = "component_path",
        .help = "Colon-separated directories searched for DSO components",
        .type = MCA_BASE_VAR_TYPE_STRING, .storage = &component_path,
    };
    return mca_base_var_register(&var);
}

static int add_component(mca_base_framework_t *framework, const mca_base_component_t *component,
                         void *handle, const char *path)
{
    if (component->mca_major_version != MCA_BASE_VERSION_MAJOR) {
        opal_output("component %s (%s) was built for MCA %d, this is %d: ignored",
                    component->mca_component_name, path ? path : "built in",
                    component->mca_major_version, MCA_BASE_VERSION_MAJOR);
        return OPAL_ERR_NOT_SUPPORTED;
    }
    mca_base_component_list_item_t *item = calloc(1, sizeof(*item));
    if (NULL == item || (path && NULL == (item->cli_dso_path = strdup(path)))) {
        free(item);
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    item->cli_component = component;
    item->cli_dso_handle = handle;
    opal_list_append(&framework->framework_components, &item->super);
    return OPAL_SUCCESS;
}

#if OPAL_ENABLE_DLOPEN
static mca_base_component_list_item_t *find_item(mca_base_framework_t *framework, const char *name)
{
    mca_base_component_list_item_t *item;
    OPAL_LIST_FOREACH (item, &framework->framework_components, mca_base_component_list_item_t) {
        if (0 == strcmp(item->cli_component->mca_component_name, name)) {
            return item;
        }
    }
    return NULL;
}

/* Load dir/mca_<fw>_<name>.so unless a component of that name is known already. */
static int load_dso(mca_base_framework_t *framework, const char *dir, const char *file)
{
    const char *fw = framework->framework_name;
    size_t prefix_len = strlen("mca_") + strlen(fw) + 1, len = strlen(file);
    if (len <= prefix_len + 3 || strcmp(file + len - 3, ".so")) {
        return OPAL_SUCCESS;
    }
    char name[MCA_BASE_MAX_COMPONENT_NAME_LEN + 1];
    size_t name_len = len - prefix_len - 3;
    if (name_len > MCA_BASE_MAX_COMPONENT_NAME_LEN) {
        return OPAL_SUCCESS;
    }
    memcpy(name, file + prefix_len, name_len);
    name[name_len] = '\0';
    if (find_item(framework, name)) {
        return OPAL_SUCCESS; /* first in the path wins */
    }

    char path[4096], symbol[128];
    if ((size_t) snprintf(path, sizeof(path), "%s/%s", dir, file) >= sizeof(path)) {
        opal_output("%s: %s/%s: path too long: ignored", fw, dir, file);
        return OPAL_SUCCESS;
    }
    snprintf(symbol, sizeof(symbol), "mca_%s_%s_component", fw, name);
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (NULL == handle) {
        opal_output_verbose(framework->framework_verbose, 1, "%s: cannot load %s: %s", fw, path, dlerror());
        return OPAL_SUCCESS;
    }
    const mca_base_component_t *component = dlsym(handle, symbol);
    if (NULL == component) {
        opal_output("%s: %s has no symbol %s: ignored", fw, path, symbol);
        dlclose(handle);
        return OPAL_SUCCESS;
    }
    int rc = add_component(framework, component, handle, path);
    if (OPAL_SUCCESS != rc) {
        dlclose(handle);
    }
    return OPAL_ERR_OUT_OF_RESOURCE == rc ? rc : OPAL_SUCCESS;
}

static int find_dsos(mca_base_framework_t *framework)
{
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "mca_%s_", framework->framework_name);
    char *paths = strdup(component_path ? component_path : "");
    if (NULL == paths) {
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    int rc = OPAL_SUCCESS;
    char *save = NULL;
    for (char *dir = strtok_r(paths, ":", &save); dir && OPAL_SUCCESS == rc;
         dir = strtok_r(NULL, ":", &save)) {
        /* Load in name order, so that the result does not depend on readdir.
         * The 64-bit interface also where off_t has 32 bits (i386): a
         * file system's 64-bit directory offsets fail the other with
         * EOVERFLOW (ext4 under qemu-user, NFS). */
        struct dirent64 **entries;
        int n = scandir64(dir, &entries, NULL, alphasort64);
        for (int i = 0; i < n; i++) {
            if (OPAL_SUCCESS == rc && 0 == strncmp(entries[i]->d_name, prefix, strlen(prefix))) {
                rc = load_dso(framework, dir, entries[i]->d_name);
            }
            free(entries[i]);
        }
        if (n >= 0) {
            free(entries);
        }
    }
    free(paths);
    return rc;
}
#endif

int mca_base_component_repository_find(mca_base_framework_t *framework)
{
    for (int i = 0; mca_base_static_components[i]; i++) {
        const mca_base_component_t *component = mca_base_static_components[i];
        if (0 == strcmp(component->mca_type_name, framework->framework_name)) {
            int rc = add_component(framework, component, NULL, NULL);
            if (OPAL_ERR_OUT_OF_RESOURCE == rc) {
                return rc;
            }
        }
    }
#if OPAL_ENABLE_DLOPEN
    return find_dsos(framework);
#else
    return OPAL_SUCCESS;
#endif
}

void mca_base_component_repository_release(mca_base_component_list_item_t *item)
{
    /* Its parameters' storage may live in the DSO: forget them first. */
    mca_base_var_release_component(item->cli_component->mca_type_name,
                                   item->cli_component->mca_component_name);
#if OPAL_ENABLE_DLOPEN
    if (item->cli_dso_handle) {
        dlclose(item->cli_dso_handle);
    }
#endif
    free(item->cli_dso_path);
    free(item);
}
