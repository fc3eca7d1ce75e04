/*
 * For the dl intercepts of every component: calling the loader for the
 * caller, the namespaces, and reading the dynamic sections of loaded
 * objects.  Not part of the installed API.
 */
#ifndef OPAL_MCA_PATCHER_BASE_BASE_DL_H
#define OPAL_MCA_PATCHER_BASE_BASE_DL_H

#include <dlfcn.h>
#include <link.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef void *(*mca_patcher_base_dlopen_fn_t)(const char *, int);
typedef void *(*mca_patcher_base_dlmopen_fn_t)(Lmid_t, const char *, int);
typedef void *(*mca_patcher_base_dlsym_fn_t)(void *, const char *);
typedef void *(*mca_patcher_base_dlvsym_fn_t)(void *, const char *, const char *);

/*
 * The loader's dlmopen, dlclose and dlsym past a module's watch
 * (patch_watch_loader): what they open or close is not reported, and the
 * dlsym gives definitions, never an intercept in their place.
 */
typedef struct mca_patcher_base_loader_t {
    mca_patcher_base_dlmopen_fn_t dlmopen;
    int (*dlclose)(void *);
    mca_patcher_base_dlsym_fn_t dlsym;
} mca_patcher_base_loader_t;

/*
 * The dl functions that judge their caller, called through real (what
 * the intercept chains to) for the code that called the intercept:
 * caller_ret is the intercept's __builtin_return_address(0), entered
 * straight from its caller (a GOT slot, or a jump at the function's
 * entry).  The loader then does everything it does without us, for that
 * caller (base_call_as.h).  Where that cannot be done, real is called
 * from here and judges us the caller: a verbose line says so.
 */
void *mca_patcher_base_dlopen_as(const void *caller_ret, mca_patcher_base_dlopen_fn_t real,
                                 const char *file, int mode);
void *mca_patcher_base_dlmopen_as(const void *caller_ret, mca_patcher_base_dlmopen_fn_t real,
                                  Lmid_t lmid, const char *file, int mode);
void *mca_patcher_base_dlsym_as(const void *caller_ret, mca_patcher_base_dlsym_fn_t real,
                                void *handle, const char *symbol);
void *mca_patcher_base_dlvsym_as(const void *caller_ret, mca_patcher_base_dlvsym_fn_t real,
                                 void *handle, const char *symbol, const char *version);

/*
 * In an intercept entered from the entry of a function patched by address
 * (the overwrite component): the return address of the code that called
 * that function, for the *_as calls above.  The patch jumps to the
 * intercept, so that is the intercept's own return address, except on
 * ppc64le: there the hop calls the intercept from a frame of its own (it
 * must give the caller its TOC pointer back, patcher_overwrite_ppc64le.c)
 * after saving the caller's return address where ELFv2 puts it, in the
 * caller's frame: the return address one frame up, through the back chain
 * that ELFv2 frames always keep.  Inlined, so that it is the intercept's.
 */
#if defined(__powerpc64__)
#    pragma GCC diagnostic push
#    pragma GCC diagnostic ignored "-Wframe-address" /* ELFv2 frames keep the back chain */
static inline __attribute__((always_inline)) const void *mca_patcher_base_patched_caller(void)
{
    return __builtin_return_address(1);
}
#    pragma GCC diagnostic pop
#else
static inline __attribute__((always_inline)) const void *mca_patcher_base_patched_caller(void)
{
    return __builtin_return_address(0);
}
#endif

/*
 * After a dl call of the caller succeeded and our own work followed: the
 * lookups of that work may have left an error for dlerror(), which the
 * caller must not see (without us it would see none).
 */
void mca_patcher_base_dl_clear_error(void);

/*
 * What a call binds to, from the address dlsym found for symbol.  A
 * program built without PIE has a canonical PLT entry for a function whose
 * address it takes (riscv64's linker gives one to every function such a
 * program calls): its symbol, undefined but with a value, which dlsym
 * finds and the binding of a PLT slot passes over (the loader's PLT class)
 * to the definition after the program: dlsym(RTLD_NEXT) made as the
 * program through dlsym_fn (base_call_as.h).  def itself when it is no
 * such entry, 0 when it is one that cannot be followed.
 */
uintptr_t mca_patcher_base_dl_past_plt_entry(uintptr_t def, const char *symbol,
                                             uintptr_t dlsym_fn);

/* The object that holds addr (the program's when none does), and its namespace. */
struct link_map *mca_patcher_base_dl_caller(const void *addr, Lmid_t *lmid);

/*
 * The loader's debugger interface, one r_debug per namespace (the base one
 * first): readable without any loader lock.  NULL when the program has no
 * dynamic loader.
 */
const struct r_debug_extended *mca_patcher_base_dl_namespaces(void);
const struct r_debug_extended *mca_patcher_base_dl_next_namespace(const struct r_debug_extended *ns);

/*
 * Keep the object that holds code loaded for the life of the process
 * (RTLD_NODELETE, opened with real_dlopen): code of a component may run
 * after its fini (a thread still returning from one of its signal handlers
 * or dl intercepts, an intercept that dlsym handed out).  why is for the
 * verbose log.  Nothing to do for the program itself, or without a loader.
 */
void mca_patcher_base_dl_keep_loaded(const void *code, mca_patcher_base_dlopen_fn_t real_dlopen,
                                     const char *why);

/* The value of tag in a dynamic section, and whether it is there. */
bool mca_patcher_base_dyn_get(const ElfW(Dyn) *dyn, ElfW(Sxword) tag, uintptr_t *value);

/* The address a d_ptr of map's dynamic section names (glibc adjusts some in place). */
uintptr_t mca_patcher_base_dyn_addr(const struct link_map *map, uintptr_t d_ptr);

#endif
