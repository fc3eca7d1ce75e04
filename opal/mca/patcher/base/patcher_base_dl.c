/*
 * For the dl intercepts of every component: the calls that judge their
 * caller made for the caller (base_call_as.h: nothing of the loader's
 * search is done here), the namespaces, keeping an object loaded.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <link.h>

#include "opal/mca/patcher/base/base.h"
#include "opal/mca/patcher/base/base_call_as.h"
#include "opal/mca/patcher/base/base_dl.h"
#include "opal/util/output.h"

#pragma weak dladdr
#pragma weak dladdr1
#pragma weak dlerror
#pragma weak dlinfo
#pragma weak _r_debug

/*
 * The base's r_debug heads a chain of r_debug_extended, one per namespace,
 * from version 2 on (link.h).  The declared type is the short struct: the
 * pointer's origin is hidden from the compiler, which would otherwise
 * judge r_next out of bounds.
 */
const struct r_debug_extended *mca_patcher_base_dl_namespaces(void)
{
    if (NULL == &_r_debug) {
        return NULL;
    }
    uintptr_t p = (uintptr_t) &_r_debug;
    __asm__("" : "+r"(p));
    return (const struct r_debug_extended *) p;
}

const struct r_debug_extended *mca_patcher_base_dl_next_namespace(const struct r_debug_extended *ns)
{
    /* The chain exists when the base namespace's r_debug says version 2. */
    return _r_debug.r_version >= 2 ? ns->r_next : NULL;
}

bool mca_patcher_base_dyn_get(const ElfW(Dyn) *dyn, ElfW(Sxword) tag, uintptr_t *value)
{
    for (; dyn->d_tag != DT_NULL; dyn++) {
        if (dyn->d_tag == tag) {
            *value = dyn->d_un.d_val;
            return true;
        }
    }
    return false;
}

uintptr_t mca_patcher_base_dl_past_plt_entry(uintptr_t def, const char *symbol,
                                             uintptr_t dlsym_fn)
{
    Dl_info info;
    const ElfW(Sym) *sym = NULL;
    uintptr_t next;
    const char *why;
    if (0 == def || NULL == dladdr1 ||
        0 == dladdr1((void *) def, &info, (void **) &sym, RTLD_DL_SYMENT) || NULL == sym ||
        SHN_UNDEF != sym->st_shndx) {
        return def;
    }
    return 0 != dlsym_fn && mca_patcher_base_call_as((const void *) def, dlsym_fn,
                                                     (uintptr_t) RTLD_NEXT, (uintptr_t) symbol, 0,
                                                     &next, &why)
               ? next
               : 0;
}

struct link_map *mca_patcher_base_dl_caller(const void *addr, Lmid_t *lmid)
{
    Dl_info info;
    struct link_map *map = NULL;
    *lmid = LM_ID_BASE;
    if (NULL == dladdr1 || 0 == dladdr1(addr, &info, (void **) &map, RTLD_DL_LINKMAP) ||
        NULL == map) {
        /* As the loader does for code it cannot place: the program. */
        return &_r_debug ? _r_debug.r_map : NULL;
    }
    if (NULL != dlinfo) {
        dlinfo(map, RTLD_DI_LMID, lmid);
    }
    return map;
}

uintptr_t mca_patcher_base_dyn_addr(const struct link_map *map, uintptr_t d_ptr)
{
    /* Adjusted in place by glibc (a writable dynamic section), or not. */
    return d_ptr >= map->l_addr ? d_ptr : map->l_addr + d_ptr;
}

/* The file of the object holding addr, for messages. */
static const char *object_name(const void *addr)
{
    Dl_info info;
    if (NULL == dladdr || 0 == dladdr(addr, &info) || NULL == info.dli_fname) {
        return "code in no object";
    }
    return '\0' == info.dli_fname[0] ? "the program" : info.dli_fname;
}

/* fn(a0, a1, a2) for the caller; false when that cannot be done (said in the verbose log). */
static bool call_for(const void *caller_ret, uintptr_t fn, uintptr_t a0, uintptr_t a1, uintptr_t a2,
                     const char *what, const char *name, uintptr_t *result)
{
    const char *why = NULL;
    if (mca_patcher_base_call_as(caller_ret, fn, a0, a1, a2, result, &why)) {
        return true;
    }
    opal_output_verbose(opal_patcher_base_framework.framework_verbose, 1,
                        "patcher: %s(\"%s\") from %s is judged by the loader as called from %s "
                        "(its search paths, namespace and scope): %s",
                        what, name ? name : "NULL", object_name(caller_ret),
                        object_name((const void *) &mca_patcher_base_call_as), why);
    return false;
}

void *mca_patcher_base_dlopen_as(const void *caller_ret, mca_patcher_base_dlopen_fn_t real,
                                 const char *file, int mode)
{
    uintptr_t r;
    if (call_for(caller_ret, (uintptr_t) real, (uintptr_t) file, (uintptr_t) mode, 0, "dlopen",
                 file, &r)) {
        return (void *) r;
    }
    return real(file, mode);
}

void *mca_patcher_base_dlmopen_as(const void *caller_ret, mca_patcher_base_dlmopen_fn_t real,
                                  Lmid_t lmid, const char *file, int mode)
{
    uintptr_t r;
    if (call_for(caller_ret, (uintptr_t) real, (uintptr_t) lmid, (uintptr_t) file, (uintptr_t) mode,
                 "dlmopen", file, &r)) {
        return (void *) r;
    }
    return real(lmid, file, mode);
}

void *mca_patcher_base_dlsym_as(const void *caller_ret, mca_patcher_base_dlsym_fn_t real,
                                void *handle, const char *symbol)
{
    uintptr_t r;
    if (call_for(caller_ret, (uintptr_t) real, (uintptr_t) handle, (uintptr_t) symbol, 0, "dlsym",
                 symbol, &r)) {
        return (void *) r;
    }
    return real(handle, symbol);
}

void *mca_patcher_base_dlvsym_as(const void *caller_ret, mca_patcher_base_dlvsym_fn_t real,
                                 void *handle, const char *symbol, const char *version)
{
    uintptr_t r;
    if (call_for(caller_ret, (uintptr_t) real, (uintptr_t) handle, (uintptr_t) symbol,
                 (uintptr_t) version, "dlvsym", symbol, &r)) {
        return (void *) r;
    }
    return real(handle, symbol, version);
}

void mca_patcher_base_dl_clear_error(void)
{
    if (NULL != dlerror) {
        (void) dlerror();
    }
}

void mca_patcher_base_dl_keep_loaded(const void *code, mca_patcher_base_dlopen_fn_t real_dlopen,
                                     const char *why)
{
    Dl_info info;
    void *map;
    if (NULL == dladdr1 || NULL == real_dlopen || 0 == dladdr1(code, &info, &map, RTLD_DL_LINKMAP) ||
        NULL == info.dli_fname || NULL == ((struct link_map *) map)->l_prev) {
        return;
    }
    (void) real_dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
    opal_output_verbose(opal_patcher_base_framework.framework_verbose, 10, "patcher: %s: %s stays loaded",
                        why, info.dli_fname);
}
