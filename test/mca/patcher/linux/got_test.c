/*
 * The linux (GOT) patcher through the framework: slot rewriting in an
 * object loaded before and one loaded after, lazily bound slots, RELRO,
 * dlopen with the caller's DT_RPATH / DT_RUNPATH, dlopen(NULL),
 * RTLD_NOLOAD, dlmopen into a new namespace, dlclose of a patched object,
 * dlsym, and restore (slot bytes and page protections as before).
 *
 * The helper libraries are compiled by the test into a private directory,
 * so that their DT_RPATH/DT_RUNPATH can name a directory of its own.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/runtime/opal.h"
#include "test/support/helper_libs.h"
#include "test/support/snapshot.h"
#include "test/support/test_util.h"

static void build_libraries(void)
{
    char flags[2 * PATH_MAX];
    test_write_file(test_helper_dir, "target.c",
                    "int got_target(int x) { return x + 1; }\n"
                    "int got_target2(int x) { return x + 2; }\n");
    test_write_file(test_helper_dir, "caller.c",
                    "extern int got_target(int);\n"
                    "int call(int x) { return got_target(x); }\n"
                    "void *address(void) { return (void *) got_target; }\n");
    test_write_file(test_helper_dir, "lazy.c",
                    "extern int got_target2(int);\n"
                    "int call2(int x) { return got_target2(x); }\n");
    test_write_file(test_helper_dir, "hidden.c", "int hidden_value(void) { return 42; }\n");
    test_write_file(test_helper_dir, "opener.c",
                    "#include <dlfcn.h>\n"
                    "void *open_hidden(int mode) { return dlopen(\"libhidden.so\", mode); }\n");
    test_helper_compile("libtarget.so", "target.c", "-Wl,-soname,libtarget.so");
    /* Bound at load, GOT read-only after relocation (RELRO). */
    test_helper_compile("libearly.so", "caller.c",
                        "-Wl,-z,relro,-z,now -L. -ltarget -Wl,-rpath,'$ORIGIN'");
    test_helper_compile("liblate.so", "caller.c", "-Wl,-z,lazy -L. -ltarget -Wl,-rpath,'$ORIGIN'");
    test_helper_compile("liblazy.so", "lazy.c", "-Wl,-z,lazy -L. -ltarget -Wl,-rpath,'$ORIGIN'");
    test_helper_compile("libns.so", "caller.c", "-Wl,-z,now -L. -ltarget -Wl,-rpath,'$ORIGIN'");
    if (0 != mkdir(strcat(strcpy(flags, test_helper_dir), "/private"), 0700)) {
        TEST_SKIP("cannot create %s", flags);
    }
    test_helper_compile("private/libhidden.so", "hidden.c", "");
    snprintf(flags, sizeof(flags), "-Wl,--disable-new-dtags -Wl,-rpath,%s/private",
             test_helper_dir);
    test_helper_compile("librpath.so", "opener.c", flags);
    snprintf(flags, sizeof(flags), "-Wl,--enable-new-dtags -Wl,-rpath,%s/private", test_helper_dir);
    test_helper_compile("librunpath.so", "opener.c", flags);
}

static void *open_lib(const char *name, int mode)
{
    void *h = test_helper_open(name, mode);
    if (NULL == h) {
        exit(test_finish("got_test"));
    }
    return h;
}

/* --- the intercepts --- */

static int (*target_chain)(int);
static int (*target2_chain)(int);
static int intercepted;

static int target_intercept(int x)
{
    intercepted++;
    return target_chain(x) + 1000;
}

static int target2_intercept(int x)
{
    intercepted++;
    return target2_chain(x) + 1000;
}

/* --- page protections of a snapshot's regions --- */

static int protection(uintptr_t addr)
{
    int prot = -1;
    CHECK(OPAL_SUCCESS == mca_patcher_base_page_protection(addr, &prot));
    return prot;
}

static int snapshot_early(struct dl_phdr_info *info, size_t size, void *arg)
{
    return strstr(info->dlpi_name, "libearly.so") ? snapshot_object(info, size, arg) : 0;
}

typedef struct {
    const char *object;
    int n;
} records_t;

static void count_record(const mca_patcher_base_patch_t *patch, bool intact, void *arg)
{
    records_t *r = arg;
    (void) intact;
    r->n += NULL != patch->patch_how && NULL != strstr(patch->patch_how, r->object);
}

static int records_in(const char *object)
{
    records_t r = {object, 0};
    mca_patcher_base_foreach_patch(opal_patcher, count_record, &r);
    return r.n;
}

int main(void)
{
    test_helper_mkdir("opal_got_test");
    build_libraries();

    /* Loaded before setup; libtarget global, so that RTLD_DEFAULT sees it. */
    void *target = open_lib("libtarget.so", RTLD_NOW | RTLD_GLOBAL);
    void *early = open_lib("libearly.so", RTLD_NOW);
    void *lazy = open_lib("liblazy.so", RTLD_LAZY);
    int (*early_call)(int) = (int (*)(int)) dlsym(early, "call");
    void *(*early_address)(void) = (void *(*) (void)) dlsym(early, "address");
    int (*lazy_call)(int) = (int (*)(int)) dlsym(lazy, "call2");
    uintptr_t real_target = (uintptr_t) dlsym(target, "got_target");
    uintptr_t real_target2 = (uintptr_t) dlsym(target, "got_target2");
    CHECK(3 == early_call(2) && real_target == (uintptr_t) early_address());
    /* Control: the program itself cannot find libhidden.so; its openers can. */
    CHECK(NULL == dlopen("libhidden.so", RTLD_NOW));
    const char *openers[] = {"librpath.so", "librunpath.so"};
    bool found_before[2];
    for (int i = 0; i < 2; i++) {
        void *opener = open_lib(openers[i], RTLD_NOW);
        void *(*open_hidden)(int) = (void *(*) (int)) dlsym(opener, "open_hidden");
        void *hidden = open_hidden(RTLD_NOW | RTLD_LOCAL);
        found_before[i] = NULL != hidden;
        CHECK_MSG(found_before[i] || NULL != getenv("OPAL_TEST_SANITIZER"),
                  "%s: dlopen(\"libhidden.so\") failed without our hooks", openers[i]);
        if (hidden) {
            dlclose(hidden);
        }
        dlclose(opener);
    }

    snapshot_t before;
    snapshot_take(&before); /* libc and friends, but we compare libearly's GOT only */
    snapshot_free(&before);
    dl_iterate_phdr(snapshot_early, &before);
    CHECK_MSG(before.count > 0, "no GOT region found in libearly.so");
    int prot_before[SNAPSHOT_MAX_REGIONS];
    for (int i = 0; i < before.count; i++) {
        prot_before[i] = protection(before.regions[i].addr);
    }

    /* Setup: the linux component, whatever the environment says. */
    setenv("OMPI_MCA_patcher", "linux", 1);
    CHECK(OPAL_SUCCESS == opal_init_util(NULL, NULL));
    int rc = mca_patcher_base_select();
    if (OPAL_SUCCESS != rc || NULL == opal_patcher) {
        CHECK_MSG(0, "the linux component was not selected (%d)", rc);
        return test_finish("got_test");
    }
    uintptr_t chain = 0;
    CHECK(OPAL_SUCCESS == opal_patcher->patch_symbol("got_target", (uintptr_t) target_intercept, &chain));
    target_chain = (int (*)(int)) chain;
    CHECK_MSG(chain == real_target, "chain %p, definition %p", (void *) chain,
              (void *) real_target);
    /* A slot still lazily bound: the chain is the definition, never the PLT stub. */
    CHECK(OPAL_SUCCESS == opal_patcher->patch_symbol("got_target2", (uintptr_t) target2_intercept, &chain));
    target2_chain = (int (*)(int)) chain;
    CHECK_MSG(chain == real_target2, "lazy: chain %p, definition %p", (void *) chain,
              (void *) real_target2);

    /* Object loaded before: PLT slot and GLOB_DAT slot; RELRO still read-only. */
    intercepted = 0;
    CHECK(1003 == early_call(2) && 1 == intercepted);
    CHECK((uintptr_t) target_intercept == (uintptr_t) early_address());
    CHECK(1004 == lazy_call(2) && 2 == intercepted);
    CHECK(snapshot_diff(&before, "patched (expected)") > 0);
    for (int i = 0; i < before.count; i++) {
        CHECK_MSG(protection(before.regions[i].addr) == prot_before[i],
                  "protection of %#lx changed while patched", (unsigned long) before.regions[i].addr);
    }

    /* Object loaded after setup. */
    void *late = open_lib("liblate.so", RTLD_LAZY);
    int (*late_call)(int) = (int (*)(int)) dlsym(late, "call");
    void *(*late_address)(void) = (void *(*) (void)) dlsym(late, "address");
    intercepted = 0;
    CHECK(1003 == late_call(2) && 1 == intercepted);
    CHECK((uintptr_t) target_intercept == (uintptr_t) late_address());
    CHECK(records_in("liblate.so") >= 1);

    /* dlsym hands out the intercept, not a way around it. */
    CHECK((uintptr_t) target_intercept == (uintptr_t) dlsym(RTLD_DEFAULT, "got_target"));
    CHECK((uintptr_t) target_intercept == (uintptr_t) dlsym(RTLD_NEXT, "got_target"));
    CHECK((uintptr_t) target_intercept == (uintptr_t) dlsym(target, "got_target"));
    CHECK(NULL == dlsym(RTLD_NEXT, "no_such_symbol_anywhere") && NULL != dlerror());

    /* The caller's DT_RPATH and DT_RUNPATH are searched, not ours: found as
     * before our setup.  A sanitizer's dlopen interposer is taken for the
     * caller, with or without us: then neither finds it. */
    for (int i = 0; i < 2; i++) {
        void *opener = open_lib(openers[i], RTLD_NOW);
        void *(*open_hidden)(int) = (void *(*) (int)) dlsym(opener, "open_hidden");
        void *hidden = open_hidden(RTLD_NOW | RTLD_LOCAL);
        CHECK_MSG((NULL != hidden) == found_before[i], "%s: dlopen(\"libhidden.so\") %s, before setup %s: %s",
                  openers[i], hidden ? "found it" : "failed", found_before[i] ? "found it" : "failed",
                  hidden ? "" : dlerror());
        if (hidden) {
            int (*value)(void) = (int (*)(void)) dlsym(hidden, "hidden_value");
            CHECK(NULL != value && 42 == value());
            /* Loaded already: found by name again, the same object. */
            void *again = open_hidden(RTLD_NOW | RTLD_NOLOAD);
            CHECK(again == hidden);
            dlclose(again);
            dlclose(hidden);
        }
        dlclose(opener);
    }

    /* dlopen(NULL), RTLD_NOLOAD, RTLD_GLOBAL. */
    void *self = dlopen(NULL, RTLD_NOW);
    CHECK(NULL != self && (uintptr_t) target_intercept == (uintptr_t) dlsym(self, "got_target"));
    dlclose(self);
    void *soname = dlopen("libtarget.so", RTLD_NOW | RTLD_NOLOAD);
    CHECK(soname == target);
    dlclose(soname);
    CHECK(NULL == dlopen("libnot_loaded_anywhere.so", RTLD_NOW | RTLD_NOLOAD));
    void *global = open_lib("liblate.so", RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
    CHECK(global == late);
    dlclose(global);

    /* A new namespace, with its own copies of libtarget and libc: patched too. */
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/libns.so", test_helper_dir);
    void *ns = dlmopen(LM_ID_NEWLM, path, RTLD_NOW);
    CHECK_MSG(NULL != ns, "dlmopen: %s", dlerror());
    if (ns) {
        Lmid_t lmid = LM_ID_BASE;
        CHECK(0 == dlinfo(ns, RTLD_DI_LMID, &lmid) && LM_ID_BASE != lmid);
        int (*ns_call)(int) = (int (*)(int)) dlsym(ns, "call");
        intercepted = 0;
        CHECK(NULL != ns_call && 1003 == ns_call(2) && 1 == intercepted);
        CHECK(records_in("libns.so") >= 1);
        dlclose(ns);
        CHECK(0 == records_in("libns.so"));
    }

    /* dlclose of a patched object: its records go, nothing is written there later. */
    dlclose(late);
    snprintf(path, sizeof(path), "%s/liblate.so", test_helper_dir);
    CHECK(NULL == dlopen(path, RTLD_NOW | RTLD_NOLOAD));
    CHECK_MSG(0 == records_in("liblate.so"), "%d records of an unloaded object", records_in("liblate.so"));

    /* Restore: bytes and protections as before; the lazy slot binds again. */
    mca_patcher_base_restore_patches(opal_patcher, NULL, NULL);
    CHECK(0 == snapshot_diff(&before, "restored"));
    for (int i = 0; i < before.count; i++) {
        CHECK_MSG(protection(before.regions[i].addr) == prot_before[i],
                  "protection of %#lx differs after restore", (unsigned long) before.regions[i].addr);
    }
    intercepted = 0;
    CHECK(3 == early_call(2) && 4 == lazy_call(2) && 0 == intercepted);
    CHECK(real_target == (uintptr_t) dlsym(RTLD_DEFAULT, "got_target"));
    snapshot_free(&before);
    CHECK(OPAL_SUCCESS == opal_finalize_util());
    test_helper_cleanup();
    return test_finish("got_test");
}
