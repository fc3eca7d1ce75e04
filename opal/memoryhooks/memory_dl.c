/*
 * What the loader does after our setup:
 *
 *  - a library loaded later may write over our jumps in its constructor
 *    (UCX's libucm in bistro mode, whose hooks make the system call
 *    themselves): when its dlopen returns, our jumps go back in front of
 *    its code (opal_mem_hooks_check_intercepts), before it can cost us an
 *    event;
 *  - dlmopen brings a copy of libc into each new namespace, whose munmap &
 *    co. (and its malloc calling them) are not the ones we patched: each
 *    copy is patched too, with entry points of its own (its functions by
 *    an address-based patcher; the calls reaching its allocator by a GOT
 *    patcher).  A copy unloaded with its namespace is forgotten without
 *    writing: its pages are gone, another object may be mapped there now.
 *
 * For an address-based patcher libc's dlopen, dlmopen and dlclose are
 * patched here, by address; their intercepts call the loader for the
 * caller (base_dl.h: it searches and places as without us), then report
 * through mca_patcher_base_loader_changed(), as a GOT patcher, which
 * watches them itself, does.  The loader callback (the API on top, under
 * its lock) then checks the source: the sync of the copies here, then the
 * jumps in memory_intercepts.c.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <gnu/lib-names.h>
#include <link.h>
#include <string.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/mca/patcher/base/base_dl.h"
#include "opal/memoryhooks/memory_patch.h"
#include "opal/util/output.h"

#pragma weak dlopen
#pragma weak dlsym
#pragma weak dlclose
#pragma weak dlinfo
#pragma weak dlmopen

static struct {
    mca_patcher_base_dlopen_fn_t dlopen;
    mca_patcher_base_dlmopen_fn_t dlmopen;
    int (*dlclose)(void *);
} chain;

/* Whether copies are patched (the loader watched); the copies: guarded by
 * the hooks' lock. */
static bool watching;
typedef struct {
    const struct link_map *map; /* 0 when the slot is free */
    uintptr_t base;             /* its load address: a map reused for another load differs */
} libc_copy_t;
static libc_copy_t copies[OPAL_MEM_HOOKS_MAX_COPIES];

/* After a successful open, for the caller: our work, then no error left by it. */
static void *opened(void *handle)
{
    if (NULL != handle) {
        mca_patcher_base_loader_changed();
        mca_patcher_base_dl_clear_error();
    }
    return handle;
}

/* Entered from dlopen's patched entry: the caller is mca_patcher_base_patched_caller(). */
static void *watch_dlopen(const char *file, int mode)
{
    return opened(
        mca_patcher_base_dlopen_as(mca_patcher_base_patched_caller(), chain.dlopen, file, mode));
}

static void *watch_dlmopen(Lmid_t lmid, const char *file, int mode)
{
    return opened(mca_patcher_base_dlmopen_as(mca_patcher_base_patched_caller(), chain.dlmopen,
                                              lmid, file, mode));
}

static int watch_dlclose(void *handle)
{
    int rc = chain.dlclose(handle);
    mca_patcher_base_loader_changed();
    return rc;
}

static void watch_by_address(mca_patcher_base_module_t *patcher)
{
    static const char *const names[] = {"dlopen", "dlmopen", "dlclose"};
    const uintptr_t entries[] = {(uintptr_t) watch_dlopen, (uintptr_t) watch_dlmopen,
                                 (uintptr_t) watch_dlclose};
    uintptr_t *chains[] = {(uintptr_t *) &chain.dlopen, (uintptr_t *) &chain.dlmopen,
                           (uintptr_t *) &chain.dlclose};
    /* libc's own definitions: another hooker's may sit in front (its GOT
     * redirections reach ours through them). */
    void *libc = dlopen(LIBC_SO, RTLD_LAZY | RTLD_NOLOAD);
    for (int i = 0; i < 3 && NULL != libc; i++) {
        uintptr_t def = (uintptr_t) dlsym(libc, names[i]);
        int rc = 0 == def ? OPAL_ERR_NOT_FOUND : patcher->patch_address_chain(def, entries[i], chains[i]);
        if (OPAL_SUCCESS != rc) {
            opal_output("memory hooks: cannot watch %s (%s): libraries loaded from now on may "
                        "write over our hooks unnoticed until the next registration, and the "
                        "libc of a dlmopen namespace is not patched",
                        names[i], opal_strerror(rc));
            break;
        }
        mca_patcher_base_name_patch(patcher, def, names[i]);
        watching = (2 == i);
    }
    if (NULL != libc) {
        dlclose(libc);
    }
}

void opal_mem_hooks_install_dl_watch(mca_patcher_base_style_t style)
{
    if (NULL == dlopen || NULL == dlsym || NULL == dlmopen) {
        return; /* a static program has no loader to watch */
    }
    if (MCA_PATCHER_BASE_STYLE_BY_ADDRESS == style) {
        watch_by_address(opal_patcher);
    } else if (MCA_PATCHER_BASE_STYLE_BY_SYMBOL == style) {
        chain.dlmopen = dlmopen;
        chain.dlclose = dlclose;
        watching = true;
    }
}

/* The namespace's libc, or NULL. */
static const struct link_map *libc_of(const struct r_debug_extended *ns)
{
    for (const struct link_map *map = ns->base.r_map; NULL != map; map = map->l_next) {
        const char *slash = map->l_name ? strrchr(map->l_name, '/') : NULL;
        if (NULL != slash && 0 == strcmp(slash + 1, LIBC_SO)) {
            return map;
        }
    }
    return NULL;
}

static uintptr_t lookup_in_copy(const char *name, void *handle)
{
    return (uintptr_t) dlsym(handle, name);
}

/* Patch the copy at map in a free slot: the slot, or -1. */
static int patch_new_copy(mca_patcher_base_style_t style, const struct link_map *map)
{
    int slot = 0;
    while (slot < OPAL_MEM_HOOKS_MAX_COPIES && NULL != copies[slot].map) {
        slot++;
    }
    Lmid_t lmid = LM_ID_BASE;
    if (slot == OPAL_MEM_HOOKS_MAX_COPIES || NULL == dlinfo ||
        0 != dlinfo((void *) map, RTLD_DI_LMID, &lmid)) {
        return -1;
    }
    /* A link_map is a handle for dlsym only once opened as one (a
     * dependency has no search list): open it again, loading nothing.
     * Past our own watcher, so not reported again. */
    void *handle = chain.dlmopen(lmid, map->l_name, RTLD_LAZY | RTLD_NOLOAD);
    if (NULL == handle) {
        return -1;
    }
    int rc = opal_mem_hooks_patch_copy(style, OPAL_MEM_HOOKS_FIRST_COPY_VARIANT + slot,
                                       lookup_in_copy, handle);
    chain.dlclose(handle);
    if (OPAL_SUCCESS != rc) {
        opal_output("memory hooks: cannot patch the libc of namespace %ld (%s): its releases are "
                    "not seen", (long) lmid, opal_strerror(rc));
        return -1;
    }
    copies[slot] = (libc_copy_t){.map = map, .base = map->l_addr};
    return slot;
}

/* The slot of the copy patched where map is loaded now, or -1. */
static int copy_of(const struct link_map *map)
{
    for (int i = 0; i < OPAL_MEM_HOOKS_MAX_COPIES; i++) {
        if (copies[i].map == map && copies[i].base == map->l_addr) {
            return i;
        }
    }
    return -1;
}

/* Forget copy i: unloaded (or loaded anew), nothing is written there. */
static void drop_copy(mca_patcher_base_style_t style, int i)
{
    opal_mem_hooks_unpatch_copy(style, OPAL_MEM_HOOKS_FIRST_COPY_VARIANT + i, true);
    copies[i].map = NULL;
}

/*
 * Drop the patched copies no longer loaded where we patched them, and
 * with patch_new patch each namespace's libc that has none.  The loader's
 * debugger interface is read without its lock (debuggers do so from
 * outside): called after the loader's work, as it is here.
 */
static void sync(mca_patcher_base_style_t style, bool patch_new)
{
    bool seen[OPAL_MEM_HOOKS_MAX_COPIES] = {false};
    const struct r_debug_extended *ns = mca_patcher_base_dl_namespaces();
    /* The base namespace's libc is patched by the setup itself. */
    while (NULL != ns && NULL != (ns = mca_patcher_base_dl_next_namespace(ns))) {
        const struct link_map *map = libc_of(ns);
        if (NULL == map) {
            continue;
        }
        int i = copy_of(map);
        if (i >= 0 && !opal_mem_hooks_copy_intact(OPAL_MEM_HOOKS_FIRST_COPY_VARIANT + i)) {
            /* Loaded again at the same place by a dlclose and dlmopen we
             * did not see (made inside the namespace): fresh code. */
            drop_copy(style, i);
            i = -1;
        }
        if (i < 0 && patch_new) {
            i = patch_new_copy(style, map);
        }
        if (i >= 0) {
            seen[i] = true;
        }
    }
    for (int i = 0; i < OPAL_MEM_HOOKS_MAX_COPIES; i++) {
        if (NULL != copies[i].map && !seen[i]) {
            drop_copy(style, i);
        }
    }
}

void opal_mem_hooks_sync_copies(mca_patcher_base_style_t style)
{
    if (watching) {
        sync(style, true);
    }
}

void opal_mem_hooks_forget_copies(mca_patcher_base_style_t style)
{
    /* Those still loaded are restored with every other patch. */
    sync(style, false);
    memset(copies, 0, sizeof(copies));
    watching = false;
}
