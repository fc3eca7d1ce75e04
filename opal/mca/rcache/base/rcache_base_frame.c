/*
 * The rcache framework object and its parameters.  The framework is opened
 * by the first mca_rcache_base_module_create() and closed by the last
 * opal_finalize_util(), which destroys the modules still alive.
 */
#include "opal_config.h"

#include <string.h>

#include "opal/constants.h"
#include "opal/mca/base/mca_base_var.h"
#include "opal/mca/rcache/base/base.h"
#include "opal/util/output.h"

int mca_rcache_base_leave_pinned = -1;
int mca_rcache_base_verify_frames = 0;
bool mca_rcache_base_release_hooks = true;
int mca_rcache_base_uffd = MCA_RCACHE_BASE_UFFD_OFF;
static char *uffd_value = "off";

const char *const mca_rcache_base_uffd_names[] = {"off", "on", "strict"};

/* rcache_base_uffd: one of the names, or a message naming the value and where it came from. */
static int parse_uffd(void)
{
    for (int i = 0; i < 3; i++) {
        if (NULL != uffd_value && 0 == strcmp(uffd_value, mca_rcache_base_uffd_names[i])) {
            mca_rcache_base_uffd = i;
            return OPAL_SUCCESS;
        }
    }
    mca_base_var_source_t source;
    const char *detail = NULL;
    (void) mca_base_var_lookup("rcache_base_uffd", &source, &detail);
    opal_output("rcache_base_uffd: invalid value \"%s\" (from %s); valid values: off, on, strict",
                uffd_value ? uffd_value : "", detail ? detail : "the default");
    mca_rcache_base_uffd = MCA_RCACHE_BASE_UFFD_OFF;
    return OPAL_ERR_BAD_PARAM;
}

static int rcache_base_register(void)
{
    const mca_base_var_t vars[] = {
        {.framework = "mpi",
         .name = "leave_pinned",
         .help = "Keep registrations cached after their last use: -1 when the memory release "
                 "hooks can be installed, 0 never, 1 always (creating a cache fails if the hooks "
                 "cannot be installed)",
         .type = MCA_BASE_VAR_TYPE_INT,
         .storage = &mca_rcache_base_leave_pinned,
         .min = -1,
         .max = 1,
         .synonym = "opal_leave_pinned"},
        {.framework = "rcache",
         .component = "base",
         .name = "verify_frames",
         .help = "Stale-hit sanitizer: record the physical page frames of each registration "
                 "(/proc/self/pagemap, needs root) and compare them at every cache hit; 0 off, "
                 "1 report and count mismatches, 2 report and abort",
         .type = MCA_BASE_VAR_TYPE_INT,
         .storage = &mca_rcache_base_verify_frames,
         .min = 0,
         .max = 2},
        {.framework = "rcache",
         .component = "base",
         .name = "release_hooks",
         .help = "Register the memory release callback when leave_pinned is in effect.  Only "
                 "for tests: false with mpi_leave_pinned=1 makes the cache hand out stale "
                 "registrations (the negative control of the integrity tests)",
         .type = MCA_BASE_VAR_TYPE_BOOL,
         .storage = &mca_rcache_base_release_hooks},
        {.framework = "rcache",
         .component = "base",
         .name = "uffd",
         .help = "The userfaultfd event source beside the patcher, for releases no patch sees "
                 "(raw system calls, Go, static musl): off; on (each cached range is watched by "
                 "the kernel, every lookup first takes the events read; a registration costs a "
                 "few microseconds more, a release of watched memory a kernel round trip); "
                 "strict (also reads the kernel's queue at every lookup and confirms a hit's "
                 "page frames, needs /proc/self/pagemap frames).  on and strict fail the cache's "
                 "creation where userfaultfd is refused, saying why",
         .type = MCA_BASE_VAR_TYPE_STRING,
         .storage = &uffd_value},
    };
    int rc = mca_base_var_register_array(vars, sizeof(vars) / sizeof(vars[0]));
    return OPAL_SUCCESS == rc ? parse_uffd() : rc;
}

static int rcache_base_close(void)
{
    mca_rcache_base_destroy_all();
    return OPAL_SUCCESS;
}

mca_base_framework_t opal_rcache_base_framework = {
    .framework_name = "rcache",
    .framework_description = "Registration cache: leave memory registered, drop it when released",
    .framework_register = rcache_base_register,
    .framework_close = rcache_base_close,
};
