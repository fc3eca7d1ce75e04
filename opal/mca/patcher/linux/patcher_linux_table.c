/*
 * The table of redirected symbols (the hooks), its lock, and take_back:
 * objects loaded later receive the table too, and a slot that someone
 * reset to what we chain to is taken back.  Readers of the table (the dl
 * intercepts mapping a dlsym result) take no lock.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <string.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/mca/patcher/linux/patcher_linux.h"
#include "opal/util/output.h"
#include "opal/util/readers.h"

/* A static link must not need them (the component declines there). */
#pragma weak dladdr
#pragma weak dladdr1
#pragma weak dlinfo

static pthread_mutex_t lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static mca_patcher_linux_hook_t hooks[MCA_PATCHER_LINUX_MAX_HOOKS];
static int nhooks;
/* Threads in map_definition and definition_in, reading the entries below
 * nhooks without the lock. */
static int mapping;
/* The loader is followed (our dl intercepts are in place); the loader's
 * counts of objects added and removed (mca_patcher_linux_loader_counts)
 * when the table was last given to the added and taken from the removed. */
static bool following;
static mca_patcher_linux_counts_t seen;
/* A pass left an object that another thread's load had not relocated yet (got_patch). */
static bool left_behind;

/*
 * fork: the child has only the forking thread.  The lock may be held by
 * another one (a dlopen holds it across the loader's work, constructors
 * included) or by the forking thread under its parent id, and mapping may
 * count threads that are gone: both are made new in the child.  glibc too
 * re-creates its loader's lock in the child rather than waiting for it
 * before the fork (a library's constructor may wait for the very thread
 * that forks).
 */
static void table_atfork_child(void)
{
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&lock, &attr);
    pthread_mutexattr_destroy(&attr);
    __atomic_store_n(&mapping, 0, __ATOMIC_RELAXED);
}

static void table_atfork(void)
{
    (void) pthread_atfork(NULL, NULL, table_atfork_child);
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

void mca_patcher_linux_lock(void)
{
    pthread_once(&atfork_once, table_atfork);
    pthread_mutex_lock(&lock);
}

bool mca_patcher_linux_trylock(void)
{
    pthread_once(&atfork_once, table_atfork);
    return 0 == pthread_mutex_trylock(&lock);
}

void mca_patcher_linux_unlock(void)
{
    pthread_mutex_unlock(&lock);
}

/* Entry points whose state (the heap) belongs to one copy of libc. */
static const char *const per_copy_state_symbols[] = {
    "malloc",         "free",          "calloc", "realloc", "reallocarray", "memalign",
    "posix_memalign", "aligned_alloc", "valloc", "pvalloc", "malloc_trim",  "malloc_usable_size",
    "mallopt",        "cfree",         NULL,
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
    __atomic_store_n(&nhooks, n, __ATOMIC_SEQ_CST);
    opal_readers_drain(&mapping, 0);
}

int mca_patcher_linux_hook_symbol(const char *symbol, uintptr_t new_addr, uintptr_t only_def,
                                  uintptr_t *old_addr, mca_patcher_base_restore_fn_t restore)
{
    if (NULL == symbol || '\0' == symbol[0] || strlen(symbol) >= MCA_PATCHER_LINUX_MAX_SYMBOL ||
        0 == new_addr || (NULL == old_addr && 0 == only_def)) {
        opal_output("patcher linux: patch_symbol: bad argument (symbol '%s', intercept %p)",
                    symbol ? symbol : "(null)", (void *) new_addr);
        return OPAL_ERR_BAD_PARAM;
    }
    /* The same redirection again (after a restore): refresh it in place. */
    int h;
    for (h = 0; h < nhooks; h++) {
        if (hooks[h].value == new_addr && 0 == strcmp(hooks[h].symbol, symbol)) {
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
    mca_patcher_linux_hook_t *hook = &hooks[h];
    /* Readers (the dl intercepts) look at entries below nhooks without the
     * lock: fill the entry before publishing it.  A retired entry taken
     * again has the same symbol and intercept; only its chain changes. */
    strcpy(hook->symbol, symbol);
    hook->value = new_addr;
    hook->defs[0] = chain;
    hook->ndefs = 1;
    mca_patcher_linux_got_object_extent(chain, &hook->chain_start, &hook->chain_end);
    hook->per_copy_state = has_per_copy_state(symbol);
    hook->only_def = only_def;
    hook->restore = restore;
    __atomic_store_n(&hook->retired, false, __ATOMIC_RELEASE);
    const bool added = h == nhooks;
    if (added) {
        __atomic_store_n(&nhooks, h + 1, __ATOMIC_RELEASE);
    }
    /* The caller's chain must be set before the first slot points to the
     * intercept: a call may arrive at once (even from our own code, when we
     * are linked into the executable whose GOT this is). */
    if (NULL != old_addr) {
        __atomic_store_n(old_addr, chain, __ATOMIC_RELEASE);
    }
    rc = mca_patcher_linux_got_patch(hooks, nhooks, h, 1);
    left_behind |= mca_patcher_linux_got_left_unrelocated();
    if (OPAL_SUCCESS != rc && added) {
        /* What was patched stays recorded (the base undoes it); objects
         * loaded later must not get a redirection that failed. */
        unpublish_hooks(h);
    }
    return rc;
}

uintptr_t mca_patcher_linux_map_definition(uintptr_t addr, uintptr_t next_from)
{
    if (0 == addr) {
        return addr;
    }
    opal_readers_enter(&mapping); /* see unpublish_hooks */
    const int n = __atomic_load_n(&nhooks, __ATOMIC_SEQ_CST);
    /* Hooks in order: a second hook of a symbol chains to the first one's
     * intercept, so mapping through all of them ends at the newest. */
    for (int h = 0; h < n; h++) {
        const mca_patcher_linux_hook_t *hook = &hooks[h];
        if (__atomic_load_n(&hook->retired, __ATOMIC_ACQUIRE)) {
            continue;
        }
        for (int d = 0; d < hook->ndefs && d < MCA_PATCHER_LINUX_MAX_DEFS; d++) {
            if (hook->defs[d] == addr) {
                /* Not for an interposer asking for the definition after
                 * its own (dlsym(RTLD_NEXT) from the chain's object): the
                 * intercept would call it again, and it the intercept. */
                if (!mca_patcher_linux_in_chain_object(hook, next_from)) {
                    addr = hook->value;
                }
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
    const int n = __atomic_load_n(&nhooks, __ATOMIC_SEQ_CST);
    for (int h = 0; h < n && 0 == found; h++) {
        const mca_patcher_linux_hook_t *hook = &hooks[h];
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

void mca_patcher_linux_retire(uintptr_t new_addr)
{
    for (int h = 0; h < nhooks; h++) {
        if (hooks[h].value == new_addr) {
            __atomic_store_n(&hooks[h].retired, true, __ATOMIC_RELEASE);
        }
    }
}

void mca_patcher_linux_table_clear(void)
{
    unpublish_hooks(0);
    memset(hooks, 0, sizeof(hooks));
}

static int read_counts(struct dl_phdr_info *info, size_t size, void *arg)
{
    mca_patcher_linux_counts_t *c = arg;
    (void) size;
    c->adds = info->dlpi_adds;
    c->subs = info->dlpi_subs;
    return 1;
}

mca_patcher_linux_counts_t mca_patcher_linux_loader_counts(void)
{
    mca_patcher_linux_counts_t c = {0, 0};
    dl_iterate_phdr(read_counts, &c);
    return c;
}

void mca_patcher_linux_follow(mca_patcher_linux_counts_t counts)
{
    seen = counts;
    __atomic_store_n(&following, true, __ATOMIC_RELAXED);
}

void mca_patcher_linux_unfollow(void)
{
    __atomic_store_n(&following, false, __ATOMIC_RELAXED);
}

bool mca_patcher_linux_following(void)
{
    return __atomic_load_n(&following, __ATOMIC_RELAXED);
}

/*
 * After a successful open: give the redirections to the new objects, and
 * take back the slots that the dlopen we chain to may have reset (UCX's
 * libucm re-applies its patches to every object after each dlopen, ours
 * included): so even when no object was added, and after our own calls of
 * that dlopen.
 */
void mca_patcher_linux_take_back(void)
{
    pthread_mutex_lock(&lock);
    if (mca_patcher_linux_following()) {
        const unsigned long long adds = mca_patcher_linux_loader_counts().adds;
        /* Only another hooker's dlopen behind ours can have reset slots. */
        const bool pass = adds != seen.adds || left_behind ||
                          mca_patcher_linux_loader_foreign_dlopen();
        int rc = pass ? mca_patcher_linux_got_patch(hooks, nhooks, 0, nhooks) : OPAL_SUCCESS;
        left_behind = pass ? mca_patcher_linux_got_left_unrelocated() : left_behind;
        if (OPAL_SUCCESS != rc) {
            opal_output("patcher linux: could not patch the objects just loaded: %s",
                        opal_strerror(rc));
        }
        seen.adds = adds;
    }
    pthread_mutex_unlock(&lock);
}

/*
 * The object that held the hook's chain is gone (its extent is no longer
 * one object's): retire the hook (lock held).  Its intercept would call
 * unmapped memory, or whatever was loaded there since.  Objects loaded
 * from now on keep their slots, dlsym hands out the definitions, and the
 * slots given to it that remain (in objects bound to another definition)
 * get their old values back: every call reaches a live definition, past
 * the intercept.
 */
static void retire_if_chain_unloaded(mca_patcher_linux_hook_t *hook)
{
    uintptr_t start, end;
    if (0 == hook->chain_end || hook->retired) {
        return;
    }
    mca_patcher_linux_got_object_extent(hook->defs[0], &start, &end);
    if (start == hook->chain_start && end == hook->chain_end) {
        return;
    }
    /* A hook of one definition (patch_definition: a dlmopen namespace's copy)
     * ends with its copy, as its owner expects; the hook of a symbol does not. */
    opal_output_verbose(opal_patcher_base_framework.framework_verbose,
                        0 != hook->only_def ? 10 : INT_MIN,
                        "patcher linux: %s: the object of its chain (%p) was unloaded: calls to "
                        "%s are no longer intercepted",
                        hook->symbol, (void *) hook->defs[0], hook->symbol);
    __atomic_store_n(&hook->retired, true, __ATOMIC_RELEASE);
    mca_patcher_linux_got_restore_hook(hook);
}

/* Forget the records and definitions of what was unloaded (lock held). */
static void drop_unloaded(void)
{
    mca_patcher_linux_got_drop_unloaded();
    /* Definitions in unloaded objects: their addresses may hold another
     * object's code later, which dlsym must not map to an intercept.
     * Cleared, not removed: lock-free readers compare with nonzero
     * addresses only. */
    for (int h = 0; h < nhooks; h++) {
        mca_patcher_linux_hook_t *hook = &hooks[h];
        retire_if_chain_unloaded(hook);
        for (int d = 1; d < hook->ndefs && d < MCA_PATCHER_LINUX_MAX_DEFS; d++) {
            Dl_info info;
            if (0 != hook->defs[d] && 0 == dladdr((void *) hook->defs[d], &info)) {
                __atomic_store_n(&hook->defs[d], 0, __ATOMIC_RELEASE);
            }
        }
    }
}

void mca_patcher_linux_after_close(void)
{
    const unsigned long long subs = mca_patcher_linux_loader_counts().subs;
    if (subs != seen.subs && mca_patcher_linux_following()) {
        drop_unloaded();
        seen.subs = subs;
    }
}
