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
#include "opal/memoryhooks/memory_variants.h"
#include "opal/util/output.h"

/* Weak: a static program has no loader, and glibc warns about one naming dlmopen. */
#pragma weak dlopen
#pragma weak dlsym
#pragma weak dlinfo
#pragma weak dlmopen

/* The patcher's dlmopen and dlclose past its watch, for our own lookups. */
static mca_patcher_base_loader_t loader;

/* Whether copies are patched (the loader watched).  The copies are the
 * copy variants (memory_variants.h), guarded by the hooks' lock. */
static bool watching;

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

/* Past the patcher's watch: a dlsym through our hooks would give our intercepts. */
static uintptr_t lookup_in_copy(const char *name, void *handle)
{
    return (uintptr_t) loader.dlsym(handle, name);
}

/* Patch the copy at map with a free copy variant: the variant, or NULL. */
static opal_mem_variant_t *patch_new_copy(mca_patcher_base_style_t style,
                                          const struct link_map *map)
{
    static bool said;
    Lmid_t lmid = LM_ID_BASE;
    if (NULL == dlinfo || 0 != dlinfo((void *) map, RTLD_DI_LMID, &lmid)) {
        return NULL;
    }
    opal_mem_variant_t *variant = opal_mem_variant_take_copy(map);
    if (NULL == variant) {
        if (!said) {
            said = true;
            opal_output("memory hooks: no variant left for the libc of namespace %ld (a build "
                        "with %d variants): its releases are not seen",
                        (long) lmid, NUM_VARIANTS);
        }
        return NULL;
    }
    /* A link_map is a handle for dlsym only once opened as one (a
     * dependency has no search list): open it again, loading nothing.
     * Past the patcher's watch, so not reported again. */
    void *handle = loader.dlmopen(lmid, map->l_name, RTLD_LAZY | RTLD_NOLOAD);
    int rc = OPAL_ERR_NOT_FOUND;
    if (NULL != handle) {
        rc = opal_mem_hooks_patch_copy(style, variant, lookup_in_copy, handle);
        loader.dlclose(handle);
        if (OPAL_SUCCESS != rc) {
            opal_output("memory hooks: cannot patch the libc of namespace %ld (%s): its "
                        "releases are not seen", (long) lmid, opal_strerror(rc));
        }
    }
    if (OPAL_SUCCESS != rc) {
        opal_mem_variant_put_copy(variant);
        return NULL;
    }
    return variant;
}

/* Forget a copy: unloaded (or loaded anew), nothing is written there. */
static void drop_copy(mca_patcher_base_style_t style, opal_mem_variant_t *variant)
{
    opal_mem_hooks_unpatch_copy(style, variant, true);
    opal_mem_variant_put_copy(variant);
}

/*
 * Drop the patched copies no longer loaded where we patched them, and
 * with patch_new patch each namespace's libc that has none.  The loader's
 * debugger interface is read without its lock (debuggers do so from
 * outside): called after the loader's work, as it is here.
 *
 * Every copy gone is dropped before any new one is patched: a namespace
 * closed and another opened before one check (a check left to the holder
 * of the hooks' lock, a fork's) often loads its libc where the old one
 * was, and dropping the old copy forgets the patches at its addresses,
 * which would then be the new copy's.
 */
static void match_copies(mca_patcher_base_style_t style, bool patch_new)
{
    bool seen[NUM_VARIANTS] = {false};
    const struct r_debug_extended *first = mca_patcher_base_dl_namespaces(), *ns;
    /* The base namespace's libc is patched by the setup itself. */
    for (ns = first; NULL != ns && NULL != (ns = mca_patcher_base_dl_next_namespace(ns));) {
        const struct link_map *map = libc_of(ns);
        opal_mem_variant_t *variant = NULL != map ? opal_mem_variant_copy_of(map) : NULL;
        /* One not intact was loaded again at the same place by a dlclose and a
         * dlmopen we did not see (made inside the namespace): fresh code. */
        if (NULL != variant && opal_mem_hooks_copy_intact(variant)) {
            seen[opal_mem_variant_index(variant)] = true;
        }
    }
    for (int v = VARIANT_FIRST_COPY; v < NUM_VARIANTS; v++) {
        if (NULL != opal_mem_variants[v].copy_map && !seen[v]) {
            drop_copy(style, &opal_mem_variants[v]);
        }
    }
    for (ns = first;
         patch_new && NULL != ns && NULL != (ns = mca_patcher_base_dl_next_namespace(ns));) {
        const struct link_map *map = libc_of(ns);
        if (NULL != map && NULL == opal_mem_variant_copy_of(map)) {
            (void) patch_new_copy(style, map);
        }
    }
}

void opal_mem_hooks_sync_copies(mca_patcher_base_style_t style)
{
    if (watching) {
        match_copies(style, true);
    }
}

void opal_mem_hooks_forget_copies(mca_patcher_base_style_t style)
{
    /* Those still loaded are restored with every other patch. */
    match_copies(style, false);
    for (int v = VARIANT_FIRST_COPY; v < NUM_VARIANTS; v++) {
        if (NULL != opal_mem_variants[v].copy_map) {
            opal_mem_variant_put_copy(&opal_mem_variants[v]);
        }
    }
    watching = false;
}
