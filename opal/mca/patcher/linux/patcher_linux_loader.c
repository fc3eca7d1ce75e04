/*
 * The bottom floor of the linux component: the loader's functions as our
 * own lookups call them.  What our dl intercepts chain to (never through
 * our own GOT, which is the program's when we are linked into it
 * statically), the loader's own definitions, and lookups in one loaded
 * object made with them.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <link.h>

#include "opal/mca/patcher/base/base_call_as.h"
#include "opal/mca/patcher/base/base_dl.h"
#include "opal/mca/patcher/linux/patcher_linux.h"

/* Weak: a static link must not need it (the component declines there). */
#pragma weak dlsym

typedef mca_patcher_base_dlopen_fn_t dlopen_fn_t;
typedef mca_patcher_base_dlmopen_fn_t dlmopen_fn_t;
typedef mca_patcher_base_dlsym_fn_t dlsym_fn_t;
typedef int (*dlclose_fn_t)(void *);

static const char *const symbols[MCA_PATCHER_LINUX_DL_COUNT] = {
    [MCA_PATCHER_LINUX_DLOPEN] = "dlopen",   [MCA_PATCHER_LINUX_DLMOPEN] = "dlmopen",
    [MCA_PATCHER_LINUX_DLCLOSE] = "dlclose", [MCA_PATCHER_LINUX_DLSYM] = "dlsym",
    [MCA_PATCHER_LINUX_DLVSYM] = "dlvsym",
};

/*
 * The real functions: what our intercepts chain to.  Kept after patch_fini
 * for a call still on its way through an intercept.
 */
static uintptr_t reals[MCA_PATCHER_LINUX_DL_COUNT];

/*
 * The loader's own functions (the definitions, not what slots reach), for
 * our lookups that load nothing (RTLD_NOLOAD handles): another hooker's
 * dlopen may do work of its own after each call (UCX's libucm re-patches
 * every object) and may be entered from inside its allocator, where that
 * work deadlocks.
 */
static uintptr_t own[MCA_PATCHER_LINUX_DL_COUNT];

#define REAL(name, index)   ((name##_fn_t) reals[index])
#define LOADER(name, index) ((name##_fn_t) mca_patcher_linux_loader_own(index))

const char *mca_patcher_linux_loader_symbol(int fn)
{
    return symbols[fn];
}

uintptr_t mca_patcher_linux_loader_real(int fn)
{
    return __atomic_load_n(&reals[fn], __ATOMIC_ACQUIRE);
}

uintptr_t mca_patcher_linux_loader_own(int fn)
{
    return own[fn] ? own[fn] : mca_patcher_linux_loader_real(fn);
}

void mca_patcher_linux_loader_set_real(int fn, uintptr_t real)
{
    __atomic_store_n(&reals[fn], real, __ATOMIC_RELEASE);
}

void mca_patcher_linux_loader_find_own(void)
{
    /* RTLD_DEFAULT finds definitions, whatever the slots hold, but for a
     * program's canonical PLT entry, which calls through its slot (ours
     * once patched): past it (0 if it cannot be: the real one then). */
    const uintptr_t real_dlsym = reals[MCA_PATCHER_LINUX_DLSYM];
    for (int i = 0; i < MCA_PATCHER_LINUX_DL_COUNT && 0 != real_dlsym; i++) {
        own[i] = mca_patcher_base_dl_past_plt_entry(
            (uintptr_t) REAL(dlsym, MCA_PATCHER_LINUX_DLSYM)(RTLD_DEFAULT, symbols[i]), symbols[i],
            real_dlsym);
    }
}

bool mca_patcher_linux_loader_foreign_dlopen(void)
{
    return 0 != own[MCA_PATCHER_LINUX_DLOPEN] &&
           reals[MCA_PATCHER_LINUX_DLOPEN] != own[MCA_PATCHER_LINUX_DLOPEN];
}

void *mca_patcher_linux_loader_dlsym(void *handle, const char *symbol)
{
    dlsym_fn_t fn = (dlsym_fn_t) mca_patcher_linux_loader_real(MCA_PATCHER_LINUX_DLSYM);
    if (NULL == fn) {
        fn = dlsym;
    }
    return NULL == fn ? NULL : fn(handle, symbol);
}

/* The loader's own dlsym, or dlsym itself before it is known. */
static uintptr_t own_dlsym(void)
{
    uintptr_t fn = mca_patcher_linux_loader_own(MCA_PATCHER_LINUX_DLSYM);
    return 0 != fn ? fn : (uintptr_t) dlsym;
}

bool mca_patcher_linux_loader_dlsym_as(const void *object, void *handle, const char *symbol,
                                       uintptr_t *def)
{
    const uintptr_t fn = own_dlsym();
    const char *why;
    return 0 != fn && mca_patcher_base_call_as(object, fn, (uintptr_t) handle, (uintptr_t) symbol,
                                               0, def, &why);
}

uintptr_t mca_patcher_linux_loader_past_plt_entry(uintptr_t def, const char *symbol)
{
    const uintptr_t past = mca_patcher_base_dl_past_plt_entry(def, symbol, own_dlsym());
    return 0 != past || 0 == def ? past
                                 : (uintptr_t) mca_patcher_linux_loader_dlsym(RTLD_NEXT, symbol);
}

void *mca_patcher_linux_dlsym_in(struct link_map *map, Lmid_t lmid, const char *symbol)
{
    /* A link_map is a handle only once the loader has built its search
     * list (dlopen did): a plain dependency has none.  Opening it again
     * (RTLD_NOLOAD: nothing is loaded, no constructor runs) builds it. */
    const bool program = LM_ID_BASE == lmid && NULL == map->l_prev;
    void *handle = NULL;
    if (0 == reals[MCA_PATCHER_LINUX_DLOPEN] || 0 == reals[MCA_PATCHER_LINUX_DLMOPEN] ||
        0 == reals[MCA_PATCHER_LINUX_DLCLOSE] || 0 == reals[MCA_PATCHER_LINUX_DLSYM] ||
        (!program && (NULL == map->l_name || '\0' == map->l_name[0]))) {
        return NULL;
    }
    if (program) {
        handle = LOADER(dlopen, MCA_PATCHER_LINUX_DLOPEN)(NULL, RTLD_LAZY);
    } else if (LM_ID_BASE == lmid) {
        handle = LOADER(dlopen, MCA_PATCHER_LINUX_DLOPEN)(map->l_name, RTLD_LAZY | RTLD_NOLOAD);
    } else {
        handle = LOADER(dlmopen, MCA_PATCHER_LINUX_DLMOPEN)(lmid, map->l_name,
                                                            RTLD_LAZY | RTLD_NOLOAD);
    }
    if (NULL == handle) {
        return NULL;
    }
    void *addr = LOADER(dlsym, MCA_PATCHER_LINUX_DLSYM)(handle, symbol);
    LOADER(dlclose, MCA_PATCHER_LINUX_DLCLOSE)(handle);
    return addr;
}

/*
 * One of our dl intercepts may run after we are finalized: handed out by
 * dlsym and kept by its caller (a hooker chaining to "the real dlopen", as
 * UCX's libucm does), or still running in another thread.  The object
 * holding it must then stay loaded.
 */
void mca_patcher_linux_pin_self(const char *why)
{
    static bool pinned;
    if (!__atomic_exchange_n(&pinned, true, __ATOMIC_ACQ_REL)) {
        mca_patcher_base_dl_keep_loaded((void *) &mca_patcher_linux_component,
                                        0 != reals[MCA_PATCHER_LINUX_DLOPEN]
                                            ? LOADER(dlopen, MCA_PATCHER_LINUX_DLOPEN)
                                            : NULL,
                                        why);
    }
}
