/*
 * For the intercepts of dlopen and dlmopen of every component: opening for
 * the caller (its namespace and search paths), and reading the dynamic
 * sections of loaded objects.  Not part of the installed API.
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

/*
 * What dlopen(file, mode) (explicit_ns false) or dlmopen(lmid, file, mode)
 * called from caller_addr would open, opened by the real functions given.
 */
void *mca_patcher_base_dl_open_for(const void *caller_addr, bool explicit_ns, Lmid_t lmid,
                                   const char *file, int mode, mca_patcher_base_dlopen_fn_t real_dlopen,
                                   mca_patcher_base_dlmopen_fn_t real_dlmopen);

/*
 * For a name without '/': the path the loader would find searching the
 * caller's DT_RPATH (and the executable's), LD_LIBRARY_PATH and the
 * caller's DT_RUNPATH, written to path.  False when the name is found
 * there in no file (the loader's cache and default directories remain).
 */
bool mca_patcher_base_dl_search(struct link_map *caller, const char *name, char *path, size_t size);

/* Whether a loaded object of the caller's namespace answers to name (file name or soname). */
bool mca_patcher_base_dl_loaded(struct link_map *caller, const char *name);

/* Expand $ORIGIN, $LIB and $PLATFORM as the loader does for the caller; false if it cannot. */
bool mca_patcher_base_dl_expand(struct link_map *caller, const char *in, char *out, size_t size);

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

#endif
