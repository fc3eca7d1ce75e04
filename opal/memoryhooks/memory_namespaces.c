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
 *
 * Another thread may be in dlclose or dlmopen meanwhile.  So the sync
 * looks at the copies only where the loader holds its list still (a
 * dl_iterate_phdr callback: glibc holds the lock under which a dlclose
 * unmaps an object and frees its link_map), and patches only under the
 * patcher's loader lock (patch_loader_trylock: its dl intercepts hold it
 * across the loader's work), so that no watched dlclose empties the
 * namespace it opens its libc in nor unmaps the copy it writes to.  The
 * loader's counts of objects added and removed tell a call of the API
 * that nothing changed since the last sync: that is all it costs then.
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
#pragma weak dl_iterate_phdr
#if defined(DLFO_STRUCT_HAS_EH_DBASE) /* glibc 2.35: _dl_find_object */
#    pragma weak _dl_find_object
#    define HAVE_DL_FIND_OBJECT 1
#else
#    define HAVE_DL_FIND_OBJECT 0
#endif

/* The patcher's dlmopen and dlclose past its watch, for our own lookups. */
static mca_patcher_base_loader_t loader;

/* Whether copies are patched (the loader watched).  The copies are the
 * copy variants (memory_variants.h), guarded by the hooks' lock. */
static bool watching;

/*
 * The loader's counts of objects added and removed (dl_iterate_phdr's
 * dlpi_adds and dlpi_subs, over every namespace): a load raises the first,
 * an unload changes the second, so the pair differs after any change.
 * Compared, never read as numbers (glibc 2.36 counts subs oddly when other
 * namespaces exist).  matched: the counts when the copies were last in
 * line with the loaded ones (hooks' lock).
 */
typedef struct loader_counts_t {
    unsigned long long adds, subs;
} loader_counts_t;
static loader_counts_t matched;
static bool matched_once;

/* glibc makes 16 namespaces at most: the base one and 15 others. */
#define MAX_OTHER_NAMESPACES 15

static void copies_after_unload(void);

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
    mca_patcher_base_set_unload_callback(copies_after_unload);
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

static int read_counts(struct dl_phdr_info *info, size_t size, void *arg)
{
    loader_counts_t *counts = arg;
    (void) size;
    counts->adds = info->dlpi_adds;
    counts->subs = info->dlpi_subs;
    return 1; /* the first object says it */
}

static bool same_counts(loader_counts_t a, loader_counts_t b)
{
    return a.adds == b.adds && a.subs == b.subs;
}

/*
 * The extent of the object of map (the loader's own record, lock-free),
 * false where the loader has none yet (an object listed and not yet fully
 * loaded) or cannot say (glibc before 2.35: then [0, 0)).
 */
static bool extent_of(const struct link_map *map, uintptr_t *start, uintptr_t *end)
{
    *start = *end = 0;
#if HAVE_DL_FIND_OBJECT
    struct dl_find_object found;
    if (NULL != _dl_find_object) {
        if (0 != _dl_find_object((void *) map->l_ld, &found) || found.dlfo_link_map != map) {
            return false;
        }
        *start = (uintptr_t) found.dlfo_map_start;
        *end = (uintptr_t) found.dlfo_map_end;
    }
#else
    (void) map;
#endif
    return true;
}

/* What a look at the namespaces found, with the loader's list held still. */
typedef struct look_t {
    mca_patcher_base_style_t style;
    bool looked;
    loader_counts_t counts;
    /* Some copy could not be judged yet: look again at the next call. */
    bool again;
    /* Copies found loaded where we patched them, and still ours. */
    bool seen[NUM_VARIANTS];
    /* The namespaces whose libc has no variant (or a stale one). */
    int nnew;
    Lmid_t new_lmid[MAX_OTHER_NAMESPACES];
} look_t;

/*
 * A dl_iterate_phdr callback: glibc holds its list's lock meanwhile, under
 * which a dlclose unmaps and unlinks, and a dlopen lists: every object we
 * reach is mapped.  Only reads here, and the patch list's lock (taken
 * nowhere around a call of the loader): what needs the loader comes after.
 */
static int look_at_copies(struct dl_phdr_info *info, size_t size, void *arg)
{
    look_t *look = arg;
    read_counts(info, size, &look->counts);
    look->looked = true;
    const struct r_debug_extended *ns = mca_patcher_base_dl_namespaces();
    /* The base namespace's libc is patched by the setup itself. */
    while (NULL != ns && NULL != (ns = mca_patcher_base_dl_next_namespace(ns))) {
        const struct link_map *map = libc_of(ns);
        if (NULL == map) {
            continue;
        }
        opal_mem_variant_t *variant = opal_mem_variant_copy_of(map);
        if (NULL != variant && !__atomic_load_n(&variant->copy_unloaded, __ATOMIC_ACQUIRE)) {
            uintptr_t start, end;
            if (!extent_of(map, &start, &end)) {
                /* Being loaded (again?): kept until it can be judged. */
                look->seen[opal_mem_variant_index(variant)] = true;
                look->again = true;
                continue;
            }
            if (opal_mem_hooks_copy_intact(look->style, variant, start, end)) {
                look->seen[opal_mem_variant_index(variant)] = true;
                continue;
            }
            /* Loaded again at the same place by a dlclose and dlmopen we
             * did not see in between: fresh code, dropped and patched anew. */
        }
        Lmid_t lmid = LM_ID_BASE;
        if (NULL != dlinfo && 0 == dlinfo((void *) map, RTLD_DI_LMID, &lmid) &&
            look->nnew < MAX_OTHER_NAMESPACES) {
            look->new_lmid[look->nnew++] = lmid;
        }
    }
    return 1;
}

/* Whether map is in some namespace's list (the loader's list held still). */
static bool listed(const struct link_map *map)
{
    const struct r_debug_extended *ns = mca_patcher_base_dl_namespaces();
    for (; NULL != ns; ns = mca_patcher_base_dl_next_namespace(ns)) {
        for (const struct link_map *m = ns->base.r_map; NULL != m; m = m->l_next) {
            if (m == map) {
                return true;
            }
        }
    }
    return false;
}

/* A dl_iterate_phdr callback: each patched copy no longer listed is marked unloaded. */
static int mark_unloaded(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void) info, (void) size, (void) arg;
    for (int v = VARIANT_FIRST_COPY; v < NUM_VARIANTS; v++) {
        opal_mem_variant_t *variant = &opal_mem_variants[v];
        if (NULL != variant->copy_map && !listed(variant->copy_map)) {
            __atomic_store_n(&variant->copy_unloaded, true, __ATOMIC_RELEASE);
        }
    }
    return 1;
}

/*
 * After each watched dlclose, the patcher's loader lock held (the unload
 * callback): the copies it unloaded are marked, before a dlmopen can load
 * a libc with the same link_map at the same place.  The sync that runs
 * later (often later than the next dlmopen: one left to a fork's holder of
 * the hooks' lock) cannot tell that new copy from the old one by its code
 * when its patches were GOT slots, which the unload forgot.  The variants
 * change only under the same lock (sync_copies), or at finalize.
 */
static void copies_after_unload(void)
{
    if (NULL != dl_iterate_phdr) {
        dl_iterate_phdr(mark_unloaded, NULL);
    }
}

/* Past the patcher's watch: a dlsym through our hooks would give our intercepts. */
static uintptr_t lookup_in_copy(const char *name, void *handle)
{
    return (uintptr_t) loader.dlsym(handle, name);
}

/*
 * Patch the libc of namespace lmid with a free copy variant (the
 * patcher's loader lock held: no watched dlclose empties the namespace,
 * where glibc's dlmopen would fail holding its own lock for good).
 */
static void patch_new_copy(mca_patcher_base_style_t style, Lmid_t lmid)
{
    static bool said;
    /* A link_map is a handle for dlsym only once opened as one (a
     * dependency has no search list): open it again, loading nothing.
     * Past the patcher's watch, so not reported again.  The handle keeps
     * the copy loaded while we write to it. */
    void *handle = loader.dlmopen(lmid, LIBC_SO, RTLD_LAZY | RTLD_NOLOAD);
    struct link_map *map = NULL;
    if (NULL == handle) {
        return;
    }
    if (NULL == dlinfo || 0 != dlinfo(handle, RTLD_DI_LINKMAP, &map) || NULL == map ||
        NULL != opal_mem_variant_copy_of(map)) {
        loader.dlclose(handle);
        return;
    }
    opal_mem_variant_t *variant = opal_mem_variant_take_copy(map);
    if (NULL == variant) {
        if (!said) {
            said = true;
            opal_output("memory hooks: no variant left for the libc of namespace %ld (a build "
                        "with %d variants): its releases are not seen",
                        (long) lmid, NUM_VARIANTS);
        }
        loader.dlclose(handle);
        return;
    }
    int rc = opal_mem_hooks_patch_copy(style, variant, lookup_in_copy, handle);
    loader.dlclose(handle);
    if (OPAL_SUCCESS != rc) {
        opal_output("memory hooks: cannot patch the libc of namespace %ld (%s): its "
                    "releases are not seen",
                    (long) lmid, opal_strerror(rc));
        opal_mem_variant_put_copy(variant);
    }
}

/* Forget a copy: unloaded (or loaded anew), nothing is written there. */
static void drop_copy(mca_patcher_base_style_t style, opal_mem_variant_t *variant)
{
    opal_mem_hooks_unpatch_copy(style, variant, true);
    opal_mem_variant_put_copy(variant);
}

/* Look at the copies (see look_at_copies), and forget the patched ones not seen. */
static void look_and_drop(look_t *look)
{
    if (NULL != dl_iterate_phdr) {
        dl_iterate_phdr(look_at_copies, look);
    }
    for (int v = VARIANT_FIRST_COPY; v < NUM_VARIANTS; v++) {
        if (NULL != opal_mem_variants[v].copy_map && !look->seen[v]) {
            drop_copy(look->style, &opal_mem_variants[v]);
        }
    }
}

void opal_mem_hooks_sync_copies(mca_patcher_base_style_t style)
{
    if (!watching || NULL == dl_iterate_phdr) {
        return;
    }
    /* The hot path of every call of the API: one call of the loader. */
    loader_counts_t now = {0, 0};
    dl_iterate_phdr(read_counts, &now);
    if (matched_once && same_counts(now, matched)) {
        return;
    }
    /* Held by a dl intercept in another thread: its call, when done,
     * reports, and that report's check runs this sync (after_load).  Not
     * waited for: a constructor run under it may call the API. */
    if (!mca_patcher_base_loader_trylock()) {
        return;
    }
    look_t look = {.style = style};
    /* Every copy gone is dropped before a new one is patched: a namespace
     * closed and another opened before one sync (one left to a fork's
     * holder of the hooks' lock) often has its libc where the old one was,
     * and dropping the old copy forgets the patches at its addresses. */
    look_and_drop(&look);
    for (int i = 0; i < look.nnew; i++) {
        patch_new_copy(style, look.new_lmid[i]);
    }
    if (look.looked && !look.again) {
        matched = look.counts;
        matched_once = true;
    }
    mca_patcher_base_loader_unlock();
}

void opal_mem_hooks_forget_copies(mca_patcher_base_style_t style)
{
    /* Those still loaded are restored with every other patch. */
    mca_patcher_base_set_unload_callback(NULL);
    look_t look = {.style = style};
    look_and_drop(&look);
    for (int v = VARIANT_FIRST_COPY; v < NUM_VARIANTS; v++) {
        if (NULL != opal_mem_variants[v].copy_map) {
            opal_mem_variant_put_copy(&opal_mem_variants[v]);
        }
    }
    watching = false;
    matched_once = false;
}
