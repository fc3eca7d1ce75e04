/*
 * opal_patcher_info: what is built, what is selected, every parameter, and
 * a self-check of the memory hooks — like ompi_info.
 */
#include "opal_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opal/constants.h"
#include "opal/mca/base/mca_base_framework.h"
#include "opal/mca/base/mca_base_var.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/mca/patcher/linux/patcher_linux_reloc.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_arch.h"
#include "opal/mca/rcache/base/rcache_base_hugemem.h"
#include "opal/memoryhooks/memory.h"
#include "opal/memoryhooks/memory_patch.h"
#include "opal/memoryhooks/memory_uffd.h"
#include "opal/runtime/opal.h"
#include "opal/tools/opal_patcher_info/selftest.h"

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: opal_patcher_info [--mca NAME VALUE]... [OPTION]\n"
            "  (no option)               version, build, frameworks and components\n"
            "  --param FRAMEWORK COMP    parameters of a component ('all' for every one;\n"
            "                            framework 'all' for every framework)\n"
            "  --all                     everything, with every parameter\n"
            "  --selftest                set up the hooks, print the patches, check every event\n"
            "  --selftest --claim STYLE  the same after mca_patcher_base_claim(STYLE) (ucx)\n"
            "  --version                 the version\n"
            "  --help                    this text\n");
}

static void print_components(void)
{
    printf("Frameworks and components:\n");
    for (int i = 0; mca_base_frameworks[i]; i++) {
        mca_base_framework_t *fw = mca_base_frameworks[i];
        /* Opened here, it stays open until finalize: --all lists its parameters. */
        if (!mca_base_framework_is_open(fw) && OPAL_SUCCESS != mca_base_framework_open(fw)) {
            printf("  %s: cannot open (see above)\n", fw->framework_name);
            continue;
        }
        printf("  %s: %s\n", fw->framework_name, fw->framework_description);
        mca_base_component_list_item_t *item;
        OPAL_LIST_FOREACH (item, &fw->framework_components, mca_base_component_list_item_t) {
            printf("    %-10s %s\n               %s\n", item->cli_component->mca_component_name,
                   item->cli_component->mca_component_description,
                   item->cli_dso_path ? item->cli_dso_path : "built into the library");
        }
    }
}

typedef struct param_filter_t {
    const char *framework; /* NULL: all */
    const char *component; /* NULL: all */
} param_filter_t;

static bool name_matches(const char *full_name, const param_filter_t *filter)
{
    size_t flen = filter->framework ? strlen(filter->framework) : 0;
    if (filter->framework &&
        (strncmp(full_name, filter->framework, flen) || (full_name[flen] != '_' && full_name[flen] != '\0'))) {
        return false;
    }
    if (filter->component && filter->framework) {
        const char *rest = full_name + flen + (full_name[flen] == '_');
        size_t clen = strlen(filter->component);
        return 0 == strncmp(rest, filter->component, clen) && rest[clen] == '_';
    }
    return true;
}

static void print_param(const mca_base_var_info_t *info, void *arg)
{
    if (!name_matches(info->full_name, arg)) {
        return;
    }
    printf("  %-36s = %-12s (%s%s%s)\n      %s\n", info->full_name, info->value[0] ? info->value : "\"\"",
           mca_base_var_source_name(info->source),
           info->source == MCA_BASE_VAR_SOURCE_FILE ? ": " : "",
           info->source == MCA_BASE_VAR_SOURCE_FILE ? info->source_detail : "", info->help);
}

static void print_params(const char *framework, const char *component)
{
    param_filter_t filter = {
        .framework = (framework && strcmp(framework, "all")) ? framework : NULL,
        .component = (component && strcmp(component, "all")) ? component : NULL,
    };
    printf("MCA parameters%s%s%s%s:\n", filter.framework ? " of " : "", filter.framework ? filter.framework : "",
           filter.component ? " " : "", filter.component ? filter.component : "");
    mca_base_var_foreach(print_param, &filter);
}

/* The architecture this build is for, and how each component patches there. */
static void print_arch(void)
{
#if defined(__x86_64__)
    const char *arch = "x86_64";
#elif defined(__aarch64__)
    const char *arch = "aarch64";
#elif defined(__i386__)
    const char *arch = "i386";
#elif defined(__powerpc64__) && defined(__LITTLE_ENDIAN__)
    const char *arch = "ppc64le";
#elif defined(__riscv) && 64 == __riscv_xlen
    const char *arch = "riscv64";
#else
    const char *arch = "unknown";
#endif
    printf("  Architecture: %s\n", arch);
#if MCA_PATCHER_LINUX_HAVE_RELOC
    printf("    linux: GOT slots, one aligned pointer store each (relocations %s)\n",
           MCA_PATCHER_LINUX_RELOC_NAMES);
#else
    printf("    linux: declines (its GOT relocation types are not known for %s)\n", arch);
#endif
    /* The shape of each patch (the slot, or the jump written) is in the
     * self-test's list of patches applied. */
    if (MCA_PATCHER_OVERWRITE_HAVE_ARCH) {
        printf("    overwrite: a jump written over each target's entry\n");
    } else {
        printf("    overwrite: declines (no instruction support for %s)\n", arch);
    }
}

static void print_header(void)
{
    printf("opal-patcher %s\n", OPAL_PATCHER_VERSION);
    printf("  Components: %s\n", OPAL_ENABLE_DLOPEN ? "DSO plugins (mca_base_component_path)"
                                                      : "built into the library (--disable-dlopen)");
    const char *names[32];
    size_t n = opal_mem_hooks_intercept_names(names, 32);
    printf("  Intercepted calls:");
    for (size_t i = 0; i < n; i++) {
        printf(" %s", names[i]);
    }
    printf("\n");
    print_arch();
    printf("  Limit: calls that bypass every libc entry point (a raw syscall(SYS_munmap, ...),\n"
           "         a runtime with its own system call layer) are seen by no component.\n");
    /* The source that sees them, for the ranges the rcache caches (rcache_base_uffd). */
    const char *uffd_off = opal_mem_uffd_probe();
    printf("  userfaultfd source (rcache_base_uffd=on|strict): %s%s\n",
           uffd_off ? "not available: " : "available", uffd_off ? uffd_off : "");
    /* Where a large registration cache keeps its index and registrations (rcache_base_hugemem.h). */
    const char *huge_off = mca_rcache_base_hugemem_unavailable();
    printf("  Huge pages for large registration caches: %s%s\n",
           huge_off ? "not available: " : "available", huge_off ? huge_off : "");
}

static int check_known_framework(const char *name)
{
    if (0 == strcmp(name, "all")) {
        return OPAL_SUCCESS;
    }
    for (int i = 0; mca_base_frameworks[i]; i++) {
        if (0 == strcmp(mca_base_frameworks[i]->framework_name, name)) {
            return OPAL_SUCCESS;
        }
    }
    fprintf(stderr, "opal_patcher_info: --param: unknown framework '%s' (valid: all", name);
    for (int i = 0; mca_base_frameworks[i]; i++) {
        fprintf(stderr, ", %s", mca_base_frameworks[i]->framework_name);
    }
    fprintf(stderr, ")\n");
    return OPAL_ERR_BAD_PARAM;
}

int main(int argc, char **argv)
{
    int rc = opal_init_util(&argc, &argv);
    if (OPAL_SUCCESS != rc) {
        fprintf(stderr, "opal_patcher_info: initialization failed: %s\n", opal_strerror(rc));
        return 1;
    }
    int status = 0;
    if (argc == 1) {
        print_header();
        print_components();
    } else if (argc == 2 && 0 == strcmp(argv[1], "--version")) {
        printf("opal-patcher %s\n", OPAL_PATCHER_VERSION);
    } else if (argc == 2 && 0 == strcmp(argv[1], "--help")) {
        usage(stdout);
    } else if (argc == 2 && 0 == strcmp(argv[1], "--all")) {
        print_header();
        print_components();
        print_params(NULL, NULL);
    } else if (argc == 4 && 0 == strcmp(argv[1], "--param")) {
        status = OPAL_SUCCESS == check_known_framework(argv[2]) ? 0 : 2;
        if (0 == status) {
            print_components();
            print_params(argv[2], argv[3]);
        }
    } else if ((argc == 2 || (argc == 4 && 0 == strcmp(argv[2], "--claim"))) &&
               0 == strcmp(argv[1], "--selftest")) {
        print_header();
        if (argc == 4 && OPAL_SUCCESS != mca_patcher_base_claim(argv[3])) {
            status = 2;
        } else {
            int failed = opal_patcher_info_selftest();
            status = failed ? 1 : 0;
        }
    } else {
        fprintf(stderr, "opal_patcher_info: bad arguments:");
        for (int i = 1; i < argc; i++) {
            fprintf(stderr, " '%s'", argv[i]);
        }
        fprintf(stderr, "\n");
        usage(stderr);
        status = 2;
    }
    opal_finalize_util();
    return status;
}
