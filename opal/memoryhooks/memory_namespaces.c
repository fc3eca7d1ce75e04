/*
 * The copies of libc that dlmopen brings into other namespaces: their
 * munmap & co. (and their malloc calling them) are not the ones we
 * patched.  Each copy is patched too, with entry points of its own (its
 * functions by an address-based patcher; the calls reaching it and its
 * allocator by a GOT patcher).  A copy unloaded with its namespace is
 * forgotten without writing: its pages are gone, another object may be
 * mapped there now.
 *
 * The copies are followed only where the patcher watches the loader
 * (mca_patcher_base_watch_loader): after each dlopen, dlmopen and
 * dlclose its loader callback reaches the API on top, which checks the
 * source (under its lock): the sync here, then the jumps in
 * memory_intercepts.c.
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

/* Weak: a static program has no loader, and glibc warns about one naming dlmopen. */
#pragma weak dlopen
#pragma weak dlsym
#pragma weak dlinfo
#pragma weak dlmopen

/* The patcher's dlmopen and dlclose past its watch, for our own lookups. */
static mca_patcher_base_loader_t loader;

/* Whether copies are patched (the loader watched); the copies: guarded by
 * the hooks' lock. */
static bool watching;
typedef struct {
    const struct link_map *map; /* 0 when the slot is free */
    uintptr_t base;             /* its load address: a map reused for another load differs */
} libc_copy_t;
static libc_copy_t copies[OPAL_MEM_HOOKS_MAX_COPIES];

void opal_mem_hooks_watch_copies(void)
{
    if (NULL == dlopen || NULL == dlsym || NULL == dlmopen) {
        return; /* a static program has no loader to watch */
    }
    int rc = mca_patcher_base_watch_loader(&loader);
    if (OPAL_SUCCESS != rc) {
        opal_output("memory hooks: the loader is not watched (%s): libraries loaded from now on "
                    "may write over our hooks unnoticed until the next registration, and the "
                    "libc of a dlmopen namespace is not patched", opal_strerror(rc));
        return;
    }
    watching = true;
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
     * Past the patcher's watch, so not reported again. */
    void *handle = loader.dlmopen(lmid, map->l_name, RTLD_LAZY | RTLD_NOLOAD);
    if (NULL == handle) {
        return -1;
    }
    int rc = opal_mem_hooks_patch_copy(style, OPAL_MEM_HOOKS_FIRST_COPY_VARIANT + slot,
                                       lookup_in_copy, handle);
    loader.dlclose(handle);
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
