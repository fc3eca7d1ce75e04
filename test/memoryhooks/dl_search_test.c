/*
 * dlopen, dlmopen and dlsym through our intercepts find exactly what they
 * find without us: for each case of glibc's search, the outcome (the object
 * loaded, or the error string) of a probe process with our hooks installed
 * is compared with that of one without, and every target library loaded
 * with hooks gives exactly one event for one munmap.  Run with each
 * component (OMPI_MCA_patcher).
 *
 *   dl_search_test                  the driver: builds the tree, runs the cases
 *   dl_search_test secure           the cases of secure mode: a setuid-root
 *                                   copy of this program run as nobody
 *   dl_search_test probe CASE 0|1   one case, without or with our hooks
 *
 * The tree is built by the test (its compiler: TEST_CC) in TREE_DIR, whose
 * exe/ directory is in this program's DT_RPATH.
 */
#define _GNU_SOURCE
#include "opal_config.h"

#include <dlfcn.h>
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"
#include "test/support/test_util.h"
#include "test/support/watch.h"

static char tree[PATH_MAX / 4];

/* ------------------------------------------------------------------ the tree */

static const char caller_c[] =
    "#define _GNU_SOURCE\n"
    "#include <dlfcn.h>\n"
    "void *caller_open(const char *f, int m) { return dlopen(f, m); }\n"
    "void *caller_mopen(const char *f, int m) { return dlmopen(LM_ID_NEWLM, f, m); }\n"
    "void *caller_sym(void *h, const char *s) { return dlsym(h, s); }\n"
    "void *caller_next(const char *s) { return dlsym(RTLD_NEXT, s); }\n"
    "const char *caller_error(void) { return dlerror(); }\n";

static const char target_c[] = "#include <stddef.h>\n"
                               "#include <sys/mman.h>\n"
                               "#ifdef WHICH\n"
                               "const char *target_name(void) { return NAME; }\n"
                               "#else\n"
                               "extern const char *dl_which(void);\n"
                               "const char *target_name(void) { return dl_which(); }\n"
                               "#endif\n"
                               "int target_munmap(void *p, size_t n) { return munmap(p, n); }\n";

static const char which_c[] = "const char *dl_which(void) { return NAME; }\n";

static void make_dir(const char *rel)
{
    char path[PATH_MAX], *p;
    snprintf(path, sizeof(path), "%s/%s", tree, rel);
    for (p = path + strlen(tree) + 1;; p++) {
        if ('/' == *p || '\0' == *p) {
            char c = *p;
            *p = '\0';
            if (0 != mkdir(path, 0755) && EEXIST != errno) {
                TEST_SKIP("cannot create %s: %s", path, strerror(errno));
            }
            *p = c;
            if ('\0' == c) {
                break;
            }
        }
    }
}

/* Build tree/out from src with extra flags ("%T" in flags is the tree). */
static void build(const char *out, const char *src, const char *defs, const char *flags)
{
    char cmd[8 * PATH_MAX], expanded[4 * PATH_MAX], dir[PATH_MAX];
    size_t o = 0;
    for (const char *f = flags; *f && o + PATH_MAX < sizeof(expanded); f++) {
        if ('%' == f[0] && 'T' == f[1]) {
            o += (size_t) snprintf(expanded + o, sizeof(expanded) - o, "%s", tree);
            f++;
        } else {
            expanded[o++] = *f;
        }
    }
    expanded[o] = '\0';
    snprintf(dir, sizeof(dir), "%s", out);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = '\0';
        make_dir(dir);
    }
    /* Every -l a dependency, used or not (--as-needed would drop them). */
    snprintf(cmd, sizeof(cmd), "cd %s && %s -shared -fPIC -o %s %s %s -Wl,--no-as-needed %s 2>&1",
             tree, TEST_CC, out, defs, src, expanded);
    if (0 != system(cmd)) {
        TEST_SKIP("the C compiler cannot build the tree (%s)", cmd);
    }
}

static void target(const char *out, const char *name)
{
    char defs[256];
    snprintf(defs, sizeof(defs), "-DWHICH -DNAME='\"%s\"'", name);
    build(out, "target.c", defs, "");
}

/* The first directory the loader searches for the object at rel (its DT_RPATH, expanded). */
static void first_search_dir(const char *rel, char *out, size_t size)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", tree, rel);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    Dl_serinfo head;
    if (NULL == h || 0 != dlinfo(h, RTLD_DI_SERINFOSIZE, &head)) {
        TEST_SKIP("cannot ask the loader for the search path of %s: %s", path, dlerror());
    }
    Dl_serinfo *info = malloc(head.dls_size);
    if (NULL == info) {
        TEST_SKIP("out of memory");
    }
    *info = head;
    if (0 != dlinfo(h, RTLD_DI_SERINFOSIZE, info) || 0 != dlinfo(h, RTLD_DI_SERINFO, info) ||
        0 == info->dls_cnt || 0 != strncmp(info->dls_serpath[0].dls_name, tree, strlen(tree))) {
        TEST_SKIP("the loader's first search directory for %s is not in the tree", path);
    }
    snprintf(out, size, "%s", info->dls_serpath[0].dls_name + strlen(tree) + 1);
    free(info);
    dlclose(h);
}

/* glibc-hwcaps subdirectory searched before each directory on this machine, or NULL. */
static const char *hwcaps_subdir(void)
{
#if defined(__x86_64__)
    return "x86-64-v2";
#elif defined(__powerpc64__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return "power9";
#elif defined(__s390x__)
    return "z13";
#else
    return NULL;
#endif
}

static void build_tree(void)
{
    char rel[PATH_MAX], out[PATH_MAX + 32];
    test_write_file(tree, "caller.c", caller_c);
    test_write_file(tree, "target.c", target_c);
    test_write_file(tree, "which.c", which_c);

    /* The caller's DT_RPATH and DT_RUNPATH. */
    build("libcaller_rpath.so", "caller.c", "", "-Wl,--disable-new-dtags -Wl,-rpath,%T/r");
    target("r/libt_rpath.so", "rpath");
    build("libcaller_runpath.so", "caller.c", "", "-Wl,--enable-new-dtags -Wl,-rpath,%T/u");
    target("u/libt_runpath.so", "runpath");
    target("u/libt_order.so", "runpath");
    /* The DT_RPATH of the object that loaded the caller (a dependency). */
    target("chain2/libt_chain.so", "chain");
    build("chain/libq.so", "caller.c", "", "");
    build("libp.so", "which.c", "-DNAME='\"p\"'",
          "-L%T/chain -lq -Wl,--disable-new-dtags -Wl,-rpath,%T/chain:%T/chain2");
    /* ... which a DT_RUNPATH of the caller's own switches off. */
    target("chain3/libt_chain3.so", "chain3");
    build("chain3/libq2.so", "caller.c", "", "-Wl,--enable-new-dtags -Wl,-rpath,%T/none");
    build("libp2.so", "which.c", "-DNAME='\"p2\"'",
          "-L%T/chain3 -lq2 -Wl,--disable-new-dtags -Wl,-rpath,%T/chain3");
    /* No paths of its own: the executable's DT_RPATH, LD_LIBRARY_PATH, the cache. */
    build("libcaller_plain.so", "caller.c", "", "");
    target("exe/libt_exe.so", "exe");
    target("llp/libt_llp.so", "llp");
    target("llp/libt_order.so", "llp");
    /* $ORIGIN, $LIB, $PLATFORM (where the loader expands them, asked with dlinfo). */
    build("libcaller_origin.so", "caller.c", "", "-Wl,--disable-new-dtags -Wl,-rpath,'$ORIGIN/o'");
    target("o/libt_origin.so", "origin");
    target("o2/libt_origin2.so", "origin-in-name");
    build("libcaller_lib.so", "caller.c", "", "-Wl,--disable-new-dtags -Wl,-rpath,'$ORIGIN/$LIB'");
    first_search_dir("libcaller_lib.so", rel, sizeof(rel));
    snprintf(out, sizeof(out), "%s/libt_lib.so", rel);
    target(out, "lib");
    build("libcaller_platform.so", "caller.c", "",
          "-Wl,--disable-new-dtags -Wl,-rpath,'$ORIGIN/$PLATFORM'");
    first_search_dir("libcaller_platform.so", rel, sizeof(rel));
    snprintf(out, sizeof(out), "%s/libt_platform.so", rel);
    target(out, "platform");
    /* glibc-hwcaps: the subdirectory's copy comes first. */
    build("libcaller_hwcaps.so", "caller.c", "", "-Wl,--disable-new-dtags -Wl,-rpath,%T/h");
    target("h/libt_hwcaps.so", "plain directory");
    if (NULL != hwcaps_subdir()) {
        snprintf(out, sizeof(out), "h/glibc-hwcaps/%s/libt_hwcaps.so", hwcaps_subdir());
        target(out, "hwcaps subdirectory");
    }
    /* Names already loaded: under the name asked, under the soname. */
    build("libcaller_named_a.so", "caller.c", "", "-Wl,--disable-new-dtags -Wl,-rpath,%T/n");
    build("libcaller_named_b.so", "caller.c", "", "-Wl,--disable-new-dtags -Wl,-rpath,%T/m");
    target("n/libt_named.so", "first found");
    target("m/libt_named.so", "found second");
    build("s/libt_file.so", "target.c", "-DWHICH -DNAME='\"soname\"'",
          "-Wl,-soname,libt_soname.so.1");
    /* RTLD_DEEPBIND: the object's own dependency before the global scope. */
    build("libglobal.so", "which.c", "-DNAME='\"global scope\"'", "");
    build("deep/libdeepdep.so", "which.c", "-DNAME='\"own dependency\"'", "");
    build("deep/libt_deep.so", "target.c", "", "-L%T/deep -ldeepdep -Wl,-rpath,'$ORIGIN'");
    build("libcaller_deep.so", "caller.c", "", "-Wl,--disable-new-dtags -Wl,-rpath,%T/deep");
    /* A caller in a dlmopen namespace. */
    build("libcaller_ns.so", "caller.c", "", "-Wl,--disable-new-dtags -Wl,-rpath,%T/ns");
    target("ns/libt_ns.so", "namespace");
    /* dlsym's RTLD_DEFAULT and RTLD_NEXT judge by the caller's scope. */
    build("local/libdefdep.so", "which.c", "-DNAME='\"local dependency\"'", "");
    build("liblocal.so", "caller.c", "", "-L%T/local -ldefdep -Wl,-rpath,%T/local");
    build("next/libnextdep.so", "which.c", "-DNAME='\"next after the caller\"'", "");
    build("libnext.so", "caller.c which.c", "-DNAME='\"the caller itself\"'",
          "-L%T/next -lnextdep -Wl,-rpath,%T/next");
    make_dir("suid");
}

/* ------------------------------------------------------------------ the probe */

typedef void *(*open_fn_t)(const char *, int);
typedef void *(*sym_fn_t)(void *, const char *);
typedef void *(*next_fn_t)(const char *);
typedef const char *(*error_fn_t)(void);

/* A caller library of the tree, loaded by path (its own search is not at stake). */
typedef struct caller_t {
    void *handle;
    open_fn_t open, mopen;
    sym_fn_t sym;
    next_fn_t next;
    error_fn_t error;
} caller_t;

static bool with_hooks;

/* Where a path is: relative to the tree, or as is. */
static const char *where(const char *path)
{
    size_t n = strlen(tree);
    if (NULL == path || '\0' == path[0]) {
        return "<the program>";
    }
    return 0 == strncmp(path, tree, n) && '/' == path[n] ? path + n + 1 : path;
}

static Lmid_t lmid_of(void *handle)
{
    Lmid_t lmid = -1;
    return 0 == dlinfo(handle, RTLD_DI_LMID, &lmid) ? lmid : -1;
}

static void fill_caller(caller_t *c, void *handle, const char *what)
{
    c->handle = handle;
    if (NULL == handle) {
        printf("R: cannot load the caller %s: %s\n", what, dlerror());
        exit(2);
    }
    c->open = (open_fn_t) dlsym(handle, "caller_open");
    c->mopen = (open_fn_t) dlsym(handle, "caller_mopen");
    c->sym = (sym_fn_t) dlsym(handle, "caller_sym");
    c->next = (next_fn_t) dlsym(handle, "caller_next");
    c->error = (error_fn_t) dlsym(handle, "caller_error");
    if (!c->open || !c->mopen || !c->sym || !c->next || !c->error) {
        printf("R: %s is not a caller library\n", what);
        exit(2);
    }
}

/* A library of the tree that is not a caller, by path. */
static void load(const char *rel, int mode)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", tree, rel);
    if (NULL == dlopen(path, mode)) {
        printf("R: cannot load %s: %s\n", rel, dlerror());
        exit(2);
    }
}

static caller_t caller_at(const char *rel, int mode)
{
    char path[PATH_MAX];
    caller_t c;
    snprintf(path, sizeof(path), "%s/%s", tree, rel);
    fill_caller(&c, dlopen(path, mode), rel);
    return c;
}

static caller_t caller_in_new_namespace(const char *rel)
{
    char path[PATH_MAX];
    caller_t c;
    snprintf(path, sizeof(path), "%s/%s", tree, rel);
    fill_caller(&c, dlmopen(LM_ID_NEWLM, path, RTLD_NOW), rel);
    return c;
}

/* One munmap through a target loaded with hooks: exactly one event. */
static void check_event(void *handle, const char *what)
{
    int (*unmap)(void *, size_t) = (int (*)(void *, size_t)) dlsym(handle, "target_munmap");
    if (!with_hooks || NULL == unmap) {
        return;
    }
    char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (MAP_FAILED == p) {
        printf("E: %s: cannot map a page\n", what);
        return;
    }
    p[0] = 1;
    watched = (uintptr_t) p;
    events = 0;
    int rc = unmap(p, 4096);
    printf("E: %s: munmap %s, %d events\n", what, 0 == rc ? "done" : "failed", events);
}

/* The outcome of an open made by c: the object (and its namespace), or the error. */
static void *report_open(const caller_t *c, void *h, const char *what)
{
    if (NULL == h) {
        const char *err = c->error();
        printf("R: %s: %s%s\n", what, err ? "error: " : "NULL without an error", err ? err : "");
        return NULL;
    }
    struct link_map *map = NULL;
    const char *err = c->error();
    const char *(*name)(void) = (const char *(*) (void)) dlsym(h, "target_name");
    Lmid_t ns = lmid_of(h), caller_ns = lmid_of(c->handle);
    if (0 != dlinfo(h, RTLD_DI_LINKMAP, &map) || NULL == map) {
        printf("R: %s: a handle the loader does not know\n", what);
        return h;
    }
    printf("R: %s: %s%s%s%s, %s%s%s\n", what, where(map->l_name), name ? " (" : "",
           name ? name() : "", name ? ")" : "",
           ns == caller_ns    ? "the caller's namespace"
           : LM_ID_BASE == ns ? "the base namespace"
                              : "another namespace",
           err ? "; then dlerror: " : "", err ? err : "");
    check_event(h, what);
    return h;
}

static void *open_as(const caller_t *c, const char *file, int mode)
{
    char what[2 * PATH_MAX];
    snprintf(what, sizeof(what), "dlopen(%s, %#x)", file ? file : "NULL", mode);
    return report_open(c, c->open(file, mode), what);
}

static void *mopen_as(const caller_t *c, const char *file, int mode)
{
    char what[2 * PATH_MAX];
    snprintf(what, sizeof(what), "dlmopen(LM_ID_NEWLM, %s, %#x)", file, mode);
    return report_open(c, c->mopen(file, mode), what);
}

/* The outcome of a lookup made by c: whose definition, or the error. */
static void report_sym(const caller_t *c, void *addr, const char *what)
{
    Dl_info info;
    if (NULL == addr) {
        const char *err = c->error();
        printf("R: %s: %s%s\n", what, err ? "error: " : "NULL without an error", err ? err : "");
    } else if (0 == dladdr(addr, &info)) {
        printf("R: %s: an address in no object\n", what);
    } else {
        /* Our definitions of dl_which say whose they are. */
        const bool which = NULL != info.dli_sname && 0 == strcmp(info.dli_sname, "dl_which");
        printf("R: %s: %s in %s%s%s\n", what, info.dli_sname ? info.dli_sname : "?",
               where(info.dli_fname), which ? ": " : "",
               which ? ((const char *(*) (void)) addr)() : "");
    }
}

/* --- the cases --- */

static void case_rpath(void)
{
    open_as((caller_t[]){caller_at("libcaller_rpath.so", RTLD_NOW)}, "libt_rpath.so", RTLD_NOW);
}

static void case_runpath(void)
{
    open_as((caller_t[]){caller_at("libcaller_runpath.so", RTLD_NOW)}, "libt_runpath.so", RTLD_NOW);
}

/* The caller (libq, no paths) was loaded as a dependency of libp. */
static void case_loader_rpath(void)
{
    load("libp.so", RTLD_NOW);
    open_as((caller_t[]){caller_at("chain/libq.so", RTLD_NOW | RTLD_NOLOAD)}, "libt_chain.so",
            RTLD_NOW);
}

static void case_runpath_stops_chain(void)
{
    load("libp2.so", RTLD_NOW);
    open_as((caller_t[]){caller_at("chain3/libq2.so", RTLD_NOW | RTLD_NOLOAD)}, "libt_chain3.so",
            RTLD_NOW);
}

static void case_exe_rpath(void)
{
    open_as((caller_t[]){caller_at("libcaller_plain.so", RTLD_NOW)}, "libt_exe.so", RTLD_NOW);
}

static void case_ld_library_path(void)
{
    caller_t c = caller_at("libcaller_plain.so", RTLD_NOW);
    open_as(&c, "libt_llp.so", RTLD_NOW);
    /* LD_LIBRARY_PATH comes before the caller's DT_RUNPATH. */
    open_as((caller_t[]){caller_at("libcaller_runpath.so", RTLD_NOW)}, "libt_order.so", RTLD_NOW);
}

static void case_origin(void)
{
    caller_t c = caller_at("libcaller_origin.so", RTLD_NOW);
    open_as(&c, "libt_origin.so", RTLD_NOW);
    open_as(&c, "$ORIGIN/o2/libt_origin2.so", RTLD_NOW);
    open_as(&c, "${ORIGIN}/o/libt_origin.so", RTLD_NOW | RTLD_NOLOAD);
}

static void case_lib_platform(void)
{
    open_as((caller_t[]){caller_at("libcaller_lib.so", RTLD_NOW)}, "libt_lib.so", RTLD_NOW);
    open_as((caller_t[]){caller_at("libcaller_platform.so", RTLD_NOW)}, "libt_platform.so",
            RTLD_NOW);
}

static void case_hwcaps(void)
{
    open_as((caller_t[]){caller_at("libcaller_hwcaps.so", RTLD_NOW)}, "libt_hwcaps.so", RTLD_NOW);
}

/* A library of the loader's cache (chosen by the driver: CACHED). */
static void case_cache(void)
{
    open_as((caller_t[]){caller_at("libcaller_rpath.so", RTLD_NOW)}, getenv("CACHED"), RTLD_NOW);
}

static void case_loaded_names(void)
{
    caller_t a = caller_at("libcaller_named_a.so", RTLD_NOW),
             b = caller_at("libcaller_named_b.so", RTLD_NOW);
    caller_t plain = caller_at("libcaller_plain.so", RTLD_NOW);
    char path[PATH_MAX];
    open_as(&a, "libt_named.so", RTLD_NOW);
    /* b's DT_RPATH has another libt_named.so: the name loaded already wins. */
    open_as(&b, "libt_named.so", RTLD_NOW);
    open_as(&plain, "libt_named.so", RTLD_NOW | RTLD_NOLOAD);
    snprintf(path, sizeof(path), "%s/s/libt_file.so", tree);
    open_as(&plain, path, RTLD_NOW);
    open_as(&plain, "libt_soname.so.1", RTLD_NOW);
}

static void case_noload(void)
{
    caller_t c = caller_at("libcaller_rpath.so", RTLD_NOW),
             plain = caller_at("libcaller_plain.so", RTLD_NOW);
    char path[PATH_MAX];
    open_as(&c, "libt_rpath.so", RTLD_NOW | RTLD_NOLOAD);
    snprintf(path, sizeof(path), "%s/r/libt_rpath.so", tree);
    open_as(&plain, path, RTLD_NOW);
    open_as(&c, "libt_rpath.so", RTLD_NOW | RTLD_NOLOAD);
    open_as(&plain, "libt_rpath.so", RTLD_NOW | RTLD_NOLOAD);
    open_as(&plain, "libt_not_anywhere.so", RTLD_NOW | RTLD_NOLOAD);
}

static void case_deepbind(void)
{
    load("libglobal.so", RTLD_NOW | RTLD_GLOBAL);
    caller_t c = caller_at("libcaller_deep.so", RTLD_NOW);
    void *deep = open_as(&c, "libt_deep.so", RTLD_NOW | RTLD_DEEPBIND);
    if (deep) {
        dlclose(deep);
    }
    open_as(&c, "libt_deep.so", RTLD_NOW);
}

static void case_null(void)
{
    open_as((caller_t[]){caller_at("libcaller_rpath.so", RTLD_NOW)}, NULL, RTLD_NOW);
    open_as((caller_t[]){caller_at("libcaller_rpath.so", RTLD_NOW)}, "", RTLD_NOW);
}

static void case_errors(void)
{
    caller_t c = caller_at("libcaller_rpath.so", RTLD_NOW);
    open_as(&c, "libt_not_anywhere.so", RTLD_NOW);
    open_as(&c, "/nonexistent/libt_not_anywhere.so", RTLD_NOW);
    open_as(&c, "libt_rpath.so", 0); /* neither RTLD_LAZY nor RTLD_NOW */
}

static void case_namespace(void)
{
    caller_t c = caller_in_new_namespace("libcaller_ns.so");
    open_as(&c, "libt_ns.so", RTLD_NOW);
    open_as(&c, "libt_not_anywhere.so", RTLD_NOW);
    open_as(&c, NULL, RTLD_NOW);
    report_sym(&c, c.sym(RTLD_DEFAULT, "caller_error"), "dlsym(RTLD_DEFAULT, caller_error)");
    /* dlmopen from a caller with a DT_RPATH: the caller's search, a new namespace. */
    mopen_as((caller_t[]){caller_at("libcaller_rpath.so", RTLD_NOW)}, "libt_rpath.so", RTLD_NOW);
}

static void case_dlsym_scope(void)
{
    caller_t local = caller_at("liblocal.so", RTLD_NOW | RTLD_LOCAL);
    caller_t next = caller_at("libnext.so", RTLD_NOW | RTLD_LOCAL);
    report_sym(&local, local.sym(RTLD_DEFAULT, "dl_which"), "dlsym(RTLD_DEFAULT, dl_which)");
    report_sym(&next, next.sym(RTLD_DEFAULT, "dl_which"), "dlsym(RTLD_DEFAULT, dl_which)");
    report_sym(&next, next.next("dl_which"), "dlsym(RTLD_NEXT, dl_which)");
    report_sym(&local, local.next("dl_which"), "dlsym(RTLD_NEXT, dl_which)");
    report_sym(&local, local.next("no_such_symbol_anywhere"),
               "dlsym(RTLD_NEXT, no_such_symbol_anywhere)");
}

typedef struct case_t {
    const char *name;
    void (*run)(void);
    bool ld_library_path; /* run with tree/llp in LD_LIBRARY_PATH */
    bool secure;          /* also run in secure mode */
    const char *expect;   /* in the outcome without hooks (the case tests what it says) */
} case_t;

static const case_t cases[] = {
    {"caller's DT_RPATH", case_rpath, false, true, "r/libt_rpath.so (rpath)"},
    {"caller's DT_RUNPATH", case_runpath, false, true, "u/libt_runpath.so (runpath)"},
    {"DT_RPATH of the object that loaded the caller", case_loader_rpath, false, true,
     "chain2/libt_chain.so (chain)"},
    {"caller's DT_RUNPATH switches the loading chain's DT_RPATH off", case_runpath_stops_chain,
     false, false, "libt_chain3.so: cannot open shared object file"},
    {"executable's DT_RPATH", case_exe_rpath, false, true, "exe/libt_exe.so (exe)"},
    {"LD_LIBRARY_PATH", case_ld_library_path, true, true, "llp/libt_order.so (llp)"},
    {"$ORIGIN in DT_RPATH and in the name", case_origin, false, true, "o2/libt_origin2.so"},
    {"$LIB and $PLATFORM", case_lib_platform, false, true, "libt_platform.so (platform)"},
    {"glibc-hwcaps subdirectories", case_hwcaps, false, true, "libt_hwcaps.so"},
    {"the loader's cache", case_cache, false, true, NULL},
    {"names already loaded (file name, name asked, soname)", case_loaded_names, false, false,
     "n/libt_named.so (first found)"},
    {"RTLD_NOLOAD", case_noload, false, false, "NULL without an error"},
    {"RTLD_DEEPBIND", case_deepbind, false, false, "(own dependency)"},
    {"dlopen(NULL) and dlopen(\"\")", case_null, false, false, "<the program>"},
    {"errors", case_errors, false, true, "invalid mode"},
    {"a caller in a dlmopen namespace", case_namespace, false, false,
     "ns/libt_ns.so (namespace), the caller's namespace"},
    {"dlsym's RTLD_DEFAULT and RTLD_NEXT", case_dlsym_scope, false, false, "next after the caller"},
};
#define NUM_CASES (sizeof(cases) / sizeof(cases[0]))

static int probe(const char *which, const char *hooks)
{
    const case_t *c = NULL;
    for (size_t i = 0; i < NUM_CASES; i++) {
        if (0 == strcmp(cases[i].name, which)) {
            c = &cases[i];
        }
    }
    if (NULL == c) {
        printf("R: no case named \"%s\"\n", which);
        return 2;
    }
    with_hooks = 0 == strcmp(hooks, "1");
    if (OPAL_SUCCESS != opal_init_util(NULL, NULL)) {
        printf("R: opal_init_util failed\n");
        return 2;
    }
    if (with_hooks) {
        if (OPAL_SUCCESS != opal_mem_hooks_register_release(on_release, NULL)) {
            printf("R: the memory hooks cannot be installed\n");
            return 2;
        }
        printf("C: %s\n", mca_patcher_base_selected_name());
    }
    printf("S: %s\n", getauxval(AT_SECURE) ? "secure" : "not secure");
    fflush(stdout);
    c->run();
    fflush(stdout);
    /* No finalize: objects of the tree stay loaded to the end. */
    return 0;
}

/* ------------------------------------------------------------------ the driver */

static char self[PATH_MAX];

/* Run the probe of case c (as uid/gid when uid >= 0): its output, or NULL. */
static char *run_probe(const case_t *c, bool hooks, const char *exe, int uid)
{
    int fds[2];
    if (0 != pipe(fds)) {
        return NULL;
    }
    pid_t pid = fork();
    if (0 == pid) {
        char llp[2 * PATH_MAX + 8];
        const char *old = getenv("LD_LIBRARY_PATH");
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[0]);
        if (c->ld_library_path) {
            snprintf(llp, sizeof(llp), "%s/llp%s%s", tree, old ? ":" : "", old ? old : "");
            setenv("LD_LIBRARY_PATH", llp, 1);
        }
        if (uid >= 0 && (0 != setgroups(0, NULL) || 0 != setgid(uid) || 0 != setuid(uid))) {
            printf("R: cannot become uid %d: %s\n", uid, strerror(errno));
            _exit(2);
        }
        test_execv(exe,
                   (char *[]){(char *) exe, "probe", (char *) c->name, hooks ? "1" : "0", NULL});
        printf("R: cannot run %s: %s\n", exe, strerror(errno));
        _exit(2);
    }
    close(fds[1]);
    size_t cap = 1 << 16, len = 0;
    char *out = malloc(cap);
    ssize_t n;
    while (out && (n = read(fds[0], out + len, cap - len - 1)) > 0) {
        len += (size_t) n;
        if (len + 1 == cap) {
            char *bigger = realloc(out, 2 * cap);
            if (NULL == bigger) {
                break;
            }
            out = bigger;
            cap *= 2;
        }
    }
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (out) {
        out[len] = '\0';
        if (!WIFEXITED(status) || 0 != WEXITSTATUS(status)) {
            CHECK_MSG(0, "%s (hooks %d): the probe ended with status %#x:\n%s", c->name, hooks,
                      status, out);
        }
    }
    return out;
}

/* The lines of out that begin with prefix, joined. */
static char *lines(const char *out, const char *prefix)
{
    char *r = calloc(1, strlen(out) + 1);
    for (const char *l = out; r && l && *l;) {
        const char *e = strchr(l, '\n');
        size_t n = e ? (size_t) (e - l) + 1 : strlen(l);
        if (0 == strncmp(l, prefix, strlen(prefix))) {
            strncat(r, l, n);
        }
        l += n;
    }
    return r;
}

/* A sanitizer's runtime is in the process (OPAL_TEST_SANITIZER). */
static bool sanitizer;

static void compare(const case_t *c, const char *exe, int uid)
{
    char *without = run_probe(c, false, exe, uid), *with = run_probe(c, true, exe, uid);
    if (NULL == without || NULL == with) {
        CHECK_MSG(0, "%s: cannot run the probe", c->name);
        return;
    }
    char *r0 = lines(without, "R: "), *r1 = lines(with, "R: "), *e1 = lines(with, "E: ");
    if (NULL == e1) {
        return;
    }
    char *s0 = lines(without, "S: "), *comp = lines(with, "C: ");
    const char *mode = uid >= 0 ? "secure mode" : "";
    CHECK_MSG(NULL != r0 && NULL != r1 && 0 == strcmp(r0, r1),
              "%s %s: outcome differs with our hooks (%s)\n--- without:\n%s--- with:\n%s", c->name,
              mode, comp ? comp : "", without, with);
    /* Secure mode changes outcomes (LD_LIBRARY_PATH, $ORIGIN), and so does a
     * sanitizer's dlopen interposer (the loader takes it for the caller):
     * compared only. */
    CHECK_MSG(uid >= 0 || sanitizer || NULL == c->expect ||
                  (NULL != r0 && NULL != strstr(r0, c->expect)),
              "%s %s: without hooks the outcome does not show \"%s\" (the case does not test what "
              "it says):\n%s",
              c->name, mode, c->expect, without);
    CHECK_MSG(NULL != s0 && (uid >= 0) == (NULL != strstr(s0, "S: secure")),
              "%s: the probe ran %s secure mode:\n%s", c->name, uid >= 0 ? "outside" : "in",
              without);
    /* Every target loaded with hooks: one munmap, one event; in other
     * namespaces (2 at once here) where the build has the variants for them. */
    const bool events = case_namespace != c->run || OPAL_MEM_HOOKS_NUM_VARIANTS >= 4;
    for (char *save = NULL, *l = strtok_r(e1, "\n", &save); events && l;
         l = strtok_r(NULL, "\n", &save)) {
        CHECK_MSG(NULL != strstr(l, "munmap done, 1 events"), "%s %s: %s", c->name, mode, l);
    }
    printf("%-64s %s\n%s", c->name, r0 && r1 && 0 == strcmp(r0, r1) ? "same" : "DIFFERENT",
           r1 ? r1 : "");
    free(without), free(with), free(r0), free(r1), free(e1), free(s0), free(comp);
}

/* A library of the loader's cache that nothing here has loaded: CACHED in the environment. */
static void choose_cached(void)
{
    static const char *const candidates[] = {
        "libz.so.1",   "libbz2.so.1.0", "liblzma.so.5", "libexpat.so.1",
        "libffi.so.8", "libzstd.so.1",  NULL,
    };
    FILE *p = popen("/sbin/ldconfig -p 2>/dev/null || ldconfig -p", "r");
    char line[2 * PATH_MAX], *all = calloc(1, 1 << 20);
    size_t len = 0;
    while (p && all && fgets(line, sizeof(line), p) && len + strlen(line) < (1 << 20) - 1) {
        strcpy(all + len, line);
        len += strlen(line);
    }
    if (p) {
        pclose(p);
    }
    for (int i = 0; candidates[i] && all; i++) {
        char key[64];
        snprintf(key, sizeof(key), "\t%s ", candidates[i]);
        void *loaded = dlopen(candidates[i], RTLD_LAZY | RTLD_NOLOAD);
        if (loaded) {
            dlclose(loaded);
        } else if (strstr(all, key)) {
            setenv("CACHED", candidates[i], 1);
            break;
        }
    }
    free(all);
    if (NULL == getenv("CACHED")) {
        TEST_SKIP(
            "none of the usual libraries is in the loader's cache and unloaded here (ldconfig -p)");
    }
}

static void remove_tree(void)
{
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tree);
    if (0 != system(cmd)) {
        fprintf(stderr, "cannot remove %s\n", tree);
    }
}

/* A setuid-root copy of this program in the tree, runnable by nobody: its path, or a reason. */
static const char *setuid_copy(char *path, size_t size)
{
    char cmd[4 * PATH_MAX];
    struct stat st;
    if (0 != geteuid()) {
        return "secure mode needs a setuid-root copy of the probe, and this test does not run as "
               "root";
    }
    snprintf(path, size, "%s/suid/dl_search_test", tree);
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s' && chmod 4755 '%s'", self, path, path);
    if (0 != system(cmd) || 0 != stat(path, &st) || !(st.st_mode & S_ISUID)) {
        return "cannot make a setuid copy of the probe";
    }
    return NULL;
}

int main(int argc, char **argv)
{
    const bool secure = argc > 1 && 0 == strcmp(argv[1], "secure");
    if (argc == 4 && 0 == strcmp(argv[1], "probe") && NULL != getenv("DL_SEARCH_TREE")) {
        snprintf(tree, sizeof(tree), "%s", getenv("DL_SEARCH_TREE"));
        return probe(argv[2], argv[3]);
    }
    /* The secure cases in a tree of their own: both tests may run at once. */
    snprintf(tree, sizeof(tree), "%s%s", TREE_DIR, secure ? "_secure" : "");
    setenv("DL_SEARCH_TREE", tree, 1);
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) {
        TEST_SKIP("cannot read /proc/self/exe");
    }
    self[n] = '\0';
    remove_tree();
    if (0 != mkdir(tree, 0755)) {
        TEST_SKIP("cannot create %s: %s", tree, strerror(errno));
    }
    build_tree();
    choose_cached();

    char copy[PATH_MAX];
    const char *exe = self;
    int uid = -1;
    if (secure) {
        const char *why = setuid_copy(copy, sizeof(copy));
        if (NULL != why) {
            remove_tree();
            TEST_SKIP("%s", why);
        }
        exe = copy;
        uid = 65534; /* nobody */
    }
    sanitizer = NULL != getenv("OPAL_TEST_SANITIZER");
    for (size_t i = 0; i < NUM_CASES; i++) {
        if (sanitizer && cases[i].run == case_deepbind) {
            printf("%-64s not run: the sanitizer's runtime refuses RTLD_DEEPBIND\n", cases[i].name);
        } else if (!secure || cases[i].secure) {
            compare(&cases[i], exe, uid);
        }
    }
    if (secure) {
        unlink(copy); /* no setuid-root program left behind, even for a failure's post-mortem */
    }
    if (0 == test_failures) {
        remove_tree();
    }
    return test_finish(secure ? "dl_search_test secure" : "dl_search_test");
}
