/*
 * UCX's memory events as the source of ours.
 *
 * libucm is found at run time, not linked: linking it would load libucs
 * into every process that uses us, and libucs patches libc's entry points
 * as soon as it loads (bistro mode).  A consumer that claims "ucx" has
 * libucm loaded already; otherwise it is loaded here and kept (its hooks
 * cannot be unloaded).
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <ucm/api/ucm.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/memoryhooks/memory.h"
#include "opal/memoryhooks/memory_ucx.h"

/* Weak: a static executable may be linked without the loader's functions. */
#pragma weak dlopen
#pragma weak dlsym

#define UCM_SONAME "libucm.so.0"
#define UCS_SONAME "libucs.so.0"

/* Our place among UCX's handlers: after UCX's own users (its rcache uses
 * 1000 too); every handler runs before the pages go away. */
#define UCX_HANDLER_PRIORITY 1000

typedef ucs_status_t (*set_handler_fn_t)(int events, int priority, ucm_event_callback_t cb, void *arg);
typedef void (*unset_handler_fn_t)(int events, ucm_event_callback_t cb, void *arg);

static unset_handler_fn_t unset_handler;

/* Called by libucm with its event lock held: allocation free, like our hooks. */
static void forward_event(ucm_event_type_t type, ucm_event_t *event, void *arg)
{
    (void) arg;
    if (UCM_EVENT_VM_UNMAPPED == type) {
        opal_mem_hooks_release_hook(event->vm_unmapped.address, event->vm_unmapped.size, true);
    }
}

static int ucx_start(const char **reason)
{
    if (NULL == dlopen || NULL == dlsym) {
        *reason = "this program is linked statically, without the dynamic loader";
        return OPAL_ERR_NOT_SUPPORTED;
    }
    /* In reloc mode UCX patches GOT slots only and hands nothing out
     * through dlsym: a pointer to munmap from dlsym, and libc calling
     * itself, bypass it.  Our linux component covers both. */
    const char *mode = getenv("UCX_MEM_MMAP_HOOK_MODE");
    if (NULL != mode && 0 != strcmp(mode, "bistro")) {
        *reason = "UCX_MEM_MMAP_HOOK_MODE is not bistro: UCX's hooks do not see every caller";
        return OPAL_ERR_NOT_SUPPORTED;
    }
    void *ucm = dlopen(UCM_SONAME, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
    if (NULL == ucm) {
        /* Not loaded yet: libucm needs libucs (its configuration). */
        (void) dlopen(UCS_SONAME, RTLD_LAZY | RTLD_GLOBAL | RTLD_NODELETE);
        ucm = dlopen(UCM_SONAME, RTLD_LAZY | RTLD_GLOBAL | RTLD_NODELETE);
    }
    if (NULL == ucm) {
        *reason = "UCX's " UCM_SONAME " cannot be loaded";
        return OPAL_ERR_NOT_SUPPORTED;
    }
    set_handler_fn_t set_handler = (set_handler_fn_t) dlsym(ucm, "ucm_set_event_handler");
    unset_handler_fn_t unset = (unset_handler_fn_t) dlsym(ucm, "ucm_unset_event_handler");
    if (NULL == set_handler || NULL == unset) {
        *reason = UCM_SONAME " has no ucm_set_event_handler/ucm_unset_event_handler";
        return OPAL_ERR_NOT_SUPPORTED;
    }
    if (UCS_OK != set_handler(UCM_EVENT_VM_UNMAPPED, UCX_HANDLER_PRIORITY, forward_event, NULL)) {
        *reason = "libucm refused a UCM_EVENT_VM_UNMAPPED handler (its memory hooks are "
                  "disabled or cannot be installed: UCX_MEM_MMAP_HOOK_MODE=none?)";
        return OPAL_ERR_NOT_SUPPORTED;
    }
    unset_handler = unset;
    mca_patcher_base_set_selected_name("ucx"); /* what delivers our events */
    return OPAL_SUCCESS;
}

static int ucx_support_level(void)
{
    return OPAL_MEMORY_FREE_SUPPORT | OPAL_MEMORY_MUNMAP_SUPPORT;
}

static void ucx_stop(void)
{
    /* libucm removes the handler under its event lock (write side): no
     * call of it is in flight when this returns. */
    if (NULL != unset_handler) {
        unset_handler(UCM_EVENT_VM_UNMAPPED, forward_event, NULL);
        unset_handler = NULL;
    }
}

const opal_mem_source_t opal_mem_ucx_source = {
    .name = "ucx", /* the claim that selects it */
    .start = ucx_start,
    .support_level = ucx_support_level,
    .stop = ucx_stop,
};
