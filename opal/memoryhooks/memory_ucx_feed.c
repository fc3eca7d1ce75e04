/*
 * Our release events as the source of UCX's.
 *
 * With UCX_MEM_MMAP_HOOK_MODE=none, libucm installs no hooks: its
 * UCM_EVENT_VM_UNMAPPED handlers (UCX's registration cache) would get no
 * event, and ucm_set_event_handler refuses them.  libucm's external-event
 * API fills that gap: once the event is declared external, a handler for
 * it is accepted without hooks, and ucm_vm_munmap() dispatches to the
 * handlers.  When our patcher owns the hooks we declare it and forward
 * every release event we see.
 *
 * Never while UCX's own hooks are on (bistro, reloc): UCX would see every
 * release twice.  libucm is only found (RTLD_NOLOAD), never loaded here,
 * and never unloaded: our hook calls into it.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <link.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <ucm/api/ucm.h>

#include "opal/constants.h"
#include "opal/mca/base/mca_base_var.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/memoryhooks/memory_registry.h"
#include "opal/memoryhooks/memory_ucx_feed.h"
#include "opal/util/output.h"

/* Weak: a static executable may be linked without the loader's functions. */
#pragma weak dlopen
#pragma weak dlsym

/* libucm.so.0, or another name of the same file (libucm.so …). */
#define UCM_NAME_PREFIX "libucm.so"

static bool feed_enabled = true; /* opal_mem_hooks_ucx_feed */

/* What we use of libucm, looked up once libucm is there, then kept. */
static struct {
    bool looked_up; /* found, and its symbols looked up (complete or not) */
    const ucm_global_config_t *opts;
    void (*set_external_event)(int events);
    void (*unset_external_event)(int events);
    void (*vm_munmap)(void *addr, size_t length);
} ucm;

static bool feeding;          /* read without the lock by opal_mem_hooks_ucx_fed */
static const char *last_said; /* the decision last printed, to print each once */

int opal_mem_hooks_ucx_feed_register(void)
{
    const mca_base_var_t var = {
        .framework = "opal",
        .component = "mem_hooks",
        .name = "ucx_feed",
        .help = "When our patcher owns the memory hooks and UCX's libucm is loaded with its own "
                "mmap hooks off (UCX_MEM_MMAP_HOOK_MODE=none), declare UCM_EVENT_VM_UNMAPPED "
                "external to libucm and feed it every release event we see (ucm_vm_munmap), so "
                "that UCX's registration cache is told too.  Never done while UCX's own hooks "
                "are on.  false: UCX's handlers get no events in that case (libucm refuses them)",
        .type = MCA_BASE_VAR_TYPE_BOOL,
        .storage = &feed_enabled,
    };
    return mca_base_var_register(&var);
}

#define OWN_HOOKS_ON                                                                               \
    "UCX's own mmap hooks are on (UCX_MEM_MMAP_HOOK_MODE is not none): not feeding its "           \
    "handlers from ours, they would see each release twice"

/* Print a decision at verbose level 1, once until it changes. */
static void say(const char *decision)
{
    if (decision != last_said) {
        last_said = decision;
        opal_output_verbose(opal_patcher_base_framework.framework_verbose, 1, "memory hooks: %s",
                            decision);
    }
}

/*
 * A release callback like any other (the registry's slot protocol makes it
 * safe against stop).  libucm takes its event lock for reading around the
 * dispatch, as its own hooks do on this path; its handlers must not
 * allocate, like ours (from_alloc is always possible here).
 */
static void feed_release(void *buf, size_t length, void *cbdata, bool from_alloc)
{
    (void) cbdata, (void) from_alloc;
    ucm.vm_munmap(buf, length);
}

/* dl_iterate_phdr: the path of libucm, if loaded. */
static int find_ucm_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void) size;
    const char *name = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
    name = name ? name + 1 : info->dlpi_name;
    if (NULL == name || 0 != strncmp(name, UCM_NAME_PREFIX, strlen(UCM_NAME_PREFIX))) {
        return 0;
    }
    *(const char **) arg = info->dlpi_name;
    return 1;
}

/*
 * libucm, if some library loaded it already and its hooks are off.  Looked
 * for without dlopen, which is called only then: with its hooks on (reloc
 * mode) UCX's dlopen hook writes its GOT entries into every object again
 * after each call, over those of our linux component.  The environment
 * tells the mode before we can read libucm's options (a link_map is no
 * dlsym handle for a library loaded as a dependency).
 */
static bool find_ucm(void)
{
    if (ucm.looked_up) {
        return NULL != ucm.vm_munmap;
    }
    const char *path = NULL;
    if (NULL == dlopen || NULL == dlsym || 0 == dl_iterate_phdr(find_ucm_object, &path)) {
        return false;
    }
    const char *mode = getenv("UCX_MEM_MMAP_HOOK_MODE");
    if (NULL == mode || 0 != strcmp(mode, "none")) {
        say(OWN_HOOKS_ON);
        return false;
    }
    /* NODELETE: our hook calls into it until we stop, whoever unloads it. */
    void *handle = dlopen(path, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
    if (NULL == handle) {
        return false;
    }
    ucm.looked_up = true;
    ucm.opts = (const ucm_global_config_t *) dlsym(handle, "ucm_global_opts");
    ucm.set_external_event = (void (*)(int)) dlsym(handle, "ucm_set_external_event");
    ucm.unset_external_event = (void (*)(int)) dlsym(handle, "ucm_unset_external_event");
    void (*vm_munmap)(void *, size_t) = (void (*)(void *, size_t)) dlsym(handle, "ucm_vm_munmap");
    if (NULL == ucm.opts || NULL == ucm.set_external_event || NULL == ucm.unset_external_event ||
        NULL == vm_munmap) {
        say("libucm is loaded but lacks ucm_global_opts or the external-event API "
            "(ucm_set_external_event, ucm_vm_munmap): UCX's handlers cannot be fed");
        return false;
    }
    ucm.vm_munmap = vm_munmap; /* last: marks the lookup complete */
    return true;
}

void opal_mem_hooks_ucx_feed_check(void)
{
    if (feeding || NULL == opal_patcher || !find_ucm()) {
        return;
    }
    /* Read now, not cached: libucs sets libucm's options when it loads,
     * which may be after libucm. */
    if (!ucm.opts->enable_events) {
        say("UCX's memory events are disabled (UCX_MEM_EVENTS=no): nothing to feed");
        return;
    }
    if (UCM_MMAP_HOOK_NONE != ucm.opts->mmap_hook_mode) {
        say(OWN_HOOKS_ON);
        return;
    }
    if (!feed_enabled) {
        say("UCX's mmap hooks are off and opal_mem_hooks_ucx_feed is false: UCX's "
            "UCM_EVENT_VM_UNMAPPED handlers get no events");
        return;
    }
    /* Our callback first, then the declaration: a UCX handler accepted
     * thanks to it never misses an event. */
    if (OPAL_SUCCESS != opal_mem_hooks_registry_add(feed_release, NULL)) {
        say("no callback slot left for feeding UCX: its UCM_EVENT_VM_UNMAPPED handlers get no events");
        return;
    }
    ucm.set_external_event(UCM_EVENT_VM_UNMAPPED);
    __atomic_store_n(&feeding, true, __ATOMIC_RELEASE);
    say("UCX's mmap hooks are off (UCX_MEM_MMAP_HOOK_MODE=none): feeding our release events to "
        "its UCM_EVENT_VM_UNMAPPED handlers (ucm_vm_munmap)");
}

void opal_mem_hooks_ucx_feed_stop(void)
{
    if (feeding) {
        /* Drained first: no thread is inside libucm because of us when the
         * event stops being external. */
        opal_mem_hooks_registry_remove(feed_release);
        ucm.unset_external_event(UCM_EVENT_VM_UNMAPPED);
        __atomic_store_n(&feeding, false, __ATOMIC_RELEASE);
    }
    last_said = NULL;
}

bool opal_mem_hooks_ucx_fed(void)
{
    return __atomic_load_n(&feeding, __ATOMIC_ACQUIRE);
}
