/*
 * The copy's side of the bridge (opatch_inner.h): the public API of
 * opal-patcher and the patcher base, called for the Open MPI glue.
 * Compiled against our headers, with the rest of the copy.
 */
#include "opal_config.h"

#include <stdio.h>

#include "ompi/opatch_inner.h"
#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"

static opatch_inner_deliver_fn_t *deliver;

static void forward(void *buf, size_t length, void *cbdata, bool from_alloc)
{
    (void) cbdata;
    deliver(buf, length, from_alloc);
}

int opatch_inner_start(const char *patcher, int verbose)
{
    /* Open MPI's verbose parameters take any integer, ours 0..100: a level only says more. */
    char verbose_text[16];
    snprintf(verbose_text, sizeof(verbose_text), "%d",
             verbose < 0 ? 0 : verbose > 100 ? 100 : verbose);
    char *args[] = {
        "opal-patcher",
        "--mca", "patcher", (char *) patcher,
        "--mca", "patcher_base_verbose", verbose_text,
        /* The built-in components only: never a DSO plugin of our library. */
        "--mca", "mca_base_component_path", "",
        /* Open MPI's opal_common_ucx forwards the events to UCX itself. */
        "--mca", "opal_mem_hooks_ucx_feed", "0",
        NULL,
    };
    int argc = (int) (sizeof(args) / sizeof(args[0])) - 1;
    char **argv = args;
    return opal_init_util(&argc, &argv);
}

void opatch_inner_stop(void)
{
    (void) opal_finalize_util();
}

int opatch_inner_hooks_install(opatch_inner_deliver_fn_t *to)
{
    deliver = to;
    return opal_mem_hooks_register_release(forward, NULL);
}

int opatch_inner_hooks_support(void)
{
    const int ours = opal_mem_hooks_support_level();
    return (ours & OPAL_MEMORY_FREE_SUPPORT ? OPATCH_INNER_FREE_SUPPORT : 0) |
           (ours & OPAL_MEMORY_MUNMAP_SUPPORT ? OPATCH_INNER_MUNMAP_SUPPORT : 0) |
           (ours & OPAL_MEMORY_CHUNK_SUPPORT ? OPATCH_INNER_CHUNK_SUPPORT : 0);
}

const char *opatch_inner_hooks_selected(void)
{
    return mca_patcher_base_selected_name();
}

void opatch_inner_hooks_uninstall(void)
{
    (void) opal_mem_hooks_unregister_release(forward);
}

int opatch_inner_patcher_select(void)
{
    return mca_patcher_base_select();
}

int opatch_inner_patch_symbol(const char *symbol, uintptr_t new_addr, uintptr_t *old_addr)
{
    if (NULL == opal_patcher || NULL == opal_patcher->patch_symbol) {
        return OPAL_ERR_NOT_AVAILABLE;
    }
    return opal_patcher->patch_symbol(symbol, new_addr, old_addr);
}

const char *opatch_inner_version(void)
{
    return OPAL_PATCHER_VERSION;
}
