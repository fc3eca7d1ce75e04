/*
 * The linux patcher module: patch_symbol and the table of redirected
 * symbols that objects loaded later receive too.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <link.h>
#include <string.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/mca/patcher/linux/patcher_linux.h"
#include "opal/util/output.h"
#include "opal/util/readers.h"

/* A static link must not need them (the component declines there). */
#pragma weak dladdr1
#pragma weak dlinfo

pthread_mutex_t mca_patcher_linux_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
mca_patcher_linux_hook_t mca_patcher_linux_hooks[MCA_PATCHER_LINUX_MAX_HOOKS];
int mca_patcher_linux_nhooks;
int mca_patcher_linux_verbose;
bool mca_patcher_linux_watcher_captured;
/* Threads in map_definition, reading the entries below nhooks without the lock. */
static int mapping;

/* Entry points whose state (the heap) belongs to one copy of libc. */
static const char *const per_copy_state_symbols[] = {
    "malloc",        "free",           "calloc",     "realloc",     "reallocarray",
    "memalign",      "posix_memalign", "aligned_alloc", "valloc",   "pvalloc",
    "malloc_trim",   "malloc_usable_size", "mallopt", "cfree",      NULL,
};

static bool has_per_copy_state(const char *symbol)
{
    for (int i = 0; per_copy_state_symbols[i]; i++) {
        if (0 == strcmp(symbol, per_copy_state_symbols[i])) {
            return true;
        }
    }
    return false;
}

/*
 * Make nhooks n (smaller), lock held: the entries from n on may be cleared
 * or refilled with another symbol when it returns, no map_definition (a
 * reader of nhooks, opal/util/readers.h) still looking at them.
 */
static void unpublish_hooks(int n)
{
    __atomic_store_n(&mca_patcher_linux_nhooks, n, __ATOMIC_SEQ_CST);
    opal_readers_drain(&mapping, 0);
}

int mca_patcher_linux_hook_symbol(const char *symbol, uintptr_t new_addr, uintptr_t only_def,
                                  uintptr_t *old_addr)
{
    if (NULL == symbol || '\0' == symbol[0] || strlen(symbol) >= MCA_PATCHER_LINUX_MAX_SYMBOL ||
        0 == new_addr || (NULL == old_addr && 0 == only_def)) {
        opal_output("patcher linux: patch_symbol: bad argument (symbol '%s', intercept %p)",
                    symbol ? symbol : "(null)", (void *) new_addr);
        return OPAL_ERR_BAD_PARAM;
    }
    /* The same redirection again (after a restore): refresh it in place. */
    int h;
    for (h = 0; h < mca_patcher_linux_nhooks; h++) {
        if (mca_patcher_linux_hooks[h].value == new_addr &&
            0 == strcmp(mca_patcher_linux_hooks[h].symbol, symbol)) {
            break;
        }
    }
    if (h == MCA_PATCHER_LINUX_MAX_HOOKS) {
        opal_output("patcher linux: cannot redirect %s: more than %d redirections", symbol,
                    MCA_PATCHER_LINUX_MAX_HOOKS);
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    uintptr_t chain = only_def;
    int rc = 0 != only_def ? OPAL_SUCCESS : mca_patcher_linux_got_chain(symbol, new_addr, &chain);
    if (OPAL_SUCCESS != rc) {
        return rc;
    }
    mca_patcher_linux_hook_t *hook = &mca_patcher_linux_hooks[h];
    /* Readers (the dl intercepts) look at entries below nhooks without the
     * lock: fill the entry before publishing it.  A retired entry taken
     * again has the same symbol and intercept; only its chain changes. */
    strcpy(hook->symbol, symbol);
    hook->value = new_addr;
    hook->defs[0] = chain;
    hook->ndefs = 1;
    hook->per_copy_state = has_per_copy_state(symbol);
    hook->only_def = only_def;
    __atomic_store_n(&hook->chain, chain, __ATOMIC_RELEASE);
    __atomic_store_n(&hook->retired, false, __ATOMIC_RELEASE);
    const bool added = h == mca_patcher_linux_nhooks;
    if (added) {
        __atomic_store_n(&mca_patcher_linux_nhooks, h + 1, __ATOMIC_RELEASE);
    }
    /* The caller's chain must be set before the first slot points to the
     * intercept: a call may arrive at once (even from our own code, when we
     * are linked into the executable whose GOT this is). */
    if (NULL != old_addr) {
        __atomic_store_n(old_addr, chain, __ATOMIC_RELEASE);
    }
    rc = mca_patcher_linux_got_patch(hook, 1);
    if (OPAL_SUCCESS != rc && added) {
        /* What was patched stays recorded (the base undoes it); objects
         * loaded later must not get a redirection that failed. */
        unpublish_hooks(h);
    }
    return rc;
}

/* The hook of every slot of symbol (patch_symbol's, not patch_definition's), or NULL. */
static const mca_patcher_linux_hook_t *every_slot_hook(const char *symbol)
{
    const int n = __atomic_load_n(&mca_patcher_linux_nhooks, __ATOMIC_ACQUIRE);
    for (int h = 0; h < n; h++) {
        if (0 == mca_patcher_linux_hooks[h].only_def && 0 == strcmp(mca_patcher_linux_hooks[h].symbol, symbol)) {
            return &mca_patcher_linux_hooks[h];
        }
    }
    return NULL;
}

uintptr_t mca_patcher_linux_chain_of(const char *symbol)
{
    const mca_patcher_linux_hook_t *hook = every_slot_hook(symbol);
    return NULL != hook ? __atomic_load_n(&hook->chain, __ATOMIC_ACQUIRE) : 0;
}

uintptr_t mca_patcher_linux_chain_value(const char *symbol)
{
    const mca_patcher_linux_hook_t *hook = every_slot_hook(symbol);
    return NULL != hook ? hook->value : 0;
}

uintptr_t mca_patcher_linux_map_definition(uintptr_t addr)
{
    if (0 == addr) {
        return addr;
    }
    opal_readers_enter(&mapping); /* see unpublish_hooks */
    const int n = __atomic_load_n(&mca_patcher_linux_nhooks, __ATOMIC_SEQ_CST);
    /* Hooks in order: a second hook of a symbol chains to the first one's
     * intercept, so mapping through all of them ends at the newest. */
    for (int h = 0; h < n; h++) {
        const mca_patcher_linux_hook_t *hook = &mca_patcher_linux_hooks[h];
        if (__atomic_load_n(&hook->retired, __ATOMIC_ACQUIRE)) {
            continue;
        }
        for (int d = 0; d < hook->ndefs && d < MCA_PATCHER_LINUX_MAX_DEFS; d++) {
            if (hook->defs[d] == addr) {
                addr = hook->value;
                break;
            }
        }
    }
    opal_readers_leave(&mapping);
    return addr;
}

/* The namespace of the object defining addr, or -1. */
static Lmid_t namespace_of(uintptr_t addr)
{
    Dl_info info;
    struct link_map *map = NULL;
    Lmid_t lmid = -1;
    if (NULL == dladdr1 || NULL == dlinfo ||
        0 == dladdr1((void *) addr, &info, (void **) &map, RTLD_DL_LINKMAP) || NULL == map ||
        0 != dlinfo(map, RTLD_DI_LMID, &lmid)) {
        return -1;
    }
    return lmid;
}

uintptr_t mca_patcher_linux_definition_in(const char *symbol, uintptr_t intercept, Lmid_t lmid)
{
    uintptr_t found = 0;
    opal_readers_enter(&mapping); /* see unpublish_hooks */
    const int n = __atomic_load_n(&mca_patcher_linux_nhooks, __ATOMIC_SEQ_CST);
    for (int h = 0; h < n && 0 == found; h++) {
        const mca_patcher_linux_hook_t *hook = &mca_patcher_linux_hooks[h];
        if (hook->value != intercept || 0 != strcmp(hook->symbol, symbol)) {
            continue;
        }
        for (int d = 0; d < hook->ndefs && d < MCA_PATCHER_LINUX_MAX_DEFS && 0 == found; d++) {
            if (namespace_of(hook->defs[d]) == lmid) {
                found = hook->defs[d];
            }
        }
    }
    opal_readers_leave(&mapping);
    return found;
}

static int linux_init(void)
{
    mca_patcher_linux_verbose = opal_patcher_base_framework.framework_verbose;
    return OPAL_SUCCESS;
}

static int linux_fini(void)
{
    pthread_mutex_lock(&mca_patcher_linux_lock);
    /* A dlopen in another thread may have patched a new object while the
     * base was restoring: undo that too before forgetting the table. */
    mca_patcher_base_restore_patches(&mca_patcher_linux_module, NULL, NULL);
    if (__atomic_exchange_n(&mca_patcher_linux_watcher_captured, false, __ATOMIC_RELAXED)) {
        mca_patcher_linux_pin_self("a GOT slot left to another hooker leads to a dl intercept");
    }
    unpublish_hooks(0);
    memset(mca_patcher_linux_hooks, 0, sizeof(mca_patcher_linux_hooks));
    mca_patcher_linux_dl_forget();
    mca_patcher_linux_got_free_strings();
    pthread_mutex_unlock(&mca_patcher_linux_lock);
    return OPAL_SUCCESS;
}

static int linux_patch_symbol(const char *symbol, uintptr_t new_addr, uintptr_t *old_addr)
{
    pthread_mutex_lock(&mca_patcher_linux_lock);
    /* Watch dlopen first: objects loaded from now on get this symbol too. */
    int rc = mca_patcher_linux_dl_install();
    if (OPAL_SUCCESS == rc) {
        rc = mca_patcher_linux_hook_symbol(symbol, new_addr, 0, old_addr);
    }
    /* Our users may have called a dlopen that re-patches (see take_back)
     * since the previous redirection. */
    if (OPAL_SUCCESS == rc) {
        mca_patcher_linux_take_back();
    }
    pthread_mutex_unlock(&mca_patcher_linux_lock);
    return rc;
}

static int linux_patch_definition(const char *symbol, uintptr_t def, uintptr_t new_addr)
{
    if (0 == def) {
        opal_output("patcher linux: patch_definition: no definition given for %s",
                    symbol ? symbol : "(null)");
        return OPAL_ERR_BAD_PARAM;
    }
    pthread_mutex_lock(&mca_patcher_linux_lock);
    int rc = mca_patcher_linux_dl_install();
    if (OPAL_SUCCESS == rc) {
        rc = mca_patcher_linux_hook_symbol(symbol, new_addr, def, NULL);
    }
    if (OPAL_SUCCESS == rc) {
        mca_patcher_linux_take_back();
    }
    pthread_mutex_unlock(&mca_patcher_linux_lock);
    return rc;
}

/* Our dl intercepts: patch_symbol installs them too, before its first slot. */
static int linux_watch_loader(struct mca_patcher_base_loader_t *unwatched)
{
    pthread_mutex_lock(&mca_patcher_linux_lock);
    int rc = mca_patcher_linux_dl_install();
    if (OPAL_SUCCESS == rc) {
        rc = mca_patcher_linux_dl_unwatched(unwatched);
    }
    pthread_mutex_unlock(&mca_patcher_linux_lock);
    return rc;
}

static void linux_patch_retire(uintptr_t new_addr)
{
    pthread_mutex_lock(&mca_patcher_linux_lock);
    for (int h = 0; h < mca_patcher_linux_nhooks; h++) {
        if (mca_patcher_linux_hooks[h].value == new_addr) {
            __atomic_store_n(&mca_patcher_linux_hooks[h].retired, true, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&mca_patcher_linux_lock);
}

mca_patcher_base_module_t mca_patcher_linux_module = {
    .super = {.module_component = &mca_patcher_linux_component.patcherc_version},
    .patch_init = linux_init,
    .patch_fini = linux_fini,
    .patch_symbol = linux_patch_symbol,
    /* A GOT names symbols; a bare address has no slot to rewrite.  NULL
     * tells the memory hooks to patch by symbol. */
    .patch_address = NULL,
    .patch_definition = linux_patch_definition,
    .patch_retire = linux_patch_retire,
    .patch_watch_loader = linux_watch_loader,
    .patch_limits = "sees only calls made through a GOT slot: not calls inside a library that "
                    "bypass its own PLT (libc's free calling munmap), not the constructors of "
                    "an object run by dlopen before it returns, not raw syscalls, and not calls "
                    "through a function pointer taken before our setup (a variable, a vtable, a "
                    "callback table holding munmap's address): GOT patching cannot redirect those",
};
