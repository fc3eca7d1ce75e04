/*
 * The linux patcher module: patch_symbol, patch_definition, patch_retire,
 * patch_watch_loader and patch_fini, each under the table's lock.
 */
#include "opal_config.h"

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/mca/patcher/linux/patcher_linux.h"
#include "opal/util/output.h"

static int linux_fini(void)
{
    mca_patcher_linux_lock();
    /* A dlopen in another thread may have patched a new object while the
     * base was restoring: undo that too before forgetting the table. */
    mca_patcher_base_restore_patches(&mca_patcher_linux_module, NULL, NULL);
    mca_patcher_linux_table_clear();
    mca_patcher_linux_dl_forget();
    mca_patcher_linux_got_free_strings();
    mca_patcher_linux_unlock();
    return OPAL_SUCCESS;
}

static int linux_patch_symbol(const char *symbol, uintptr_t new_addr, uintptr_t *old_addr)
{
    mca_patcher_linux_lock();
    /* Watch dlopen first: objects loaded from now on get this symbol too. */
    int rc = mca_patcher_linux_dl_install();
    if (OPAL_SUCCESS == rc) {
        rc = mca_patcher_linux_hook_symbol(symbol, new_addr, 0, old_addr, NULL);
    }
    /* Our users may have called a dlopen that re-patches (see take_back)
     * since the previous redirection. */
    if (OPAL_SUCCESS == rc) {
        mca_patcher_linux_take_back();
    }
    mca_patcher_linux_unlock();
    return rc;
}

static int linux_patch_definition(const char *symbol, uintptr_t def, uintptr_t new_addr)
{
    if (0 == def) {
        opal_output("patcher linux: patch_definition: no definition given for %s",
                    symbol ? symbol : "(null)");
        return OPAL_ERR_BAD_PARAM;
    }
    mca_patcher_linux_lock();
    int rc = mca_patcher_linux_dl_install();
    if (OPAL_SUCCESS == rc) {
        rc = mca_patcher_linux_hook_symbol(symbol, new_addr, def, NULL, NULL);
    }
    if (OPAL_SUCCESS == rc) {
        mca_patcher_linux_take_back();
    }
    mca_patcher_linux_unlock();
    return rc;
}

/* Our dl intercepts: patch_symbol installs them too, before its first slot. */
static int linux_watch_loader(struct mca_patcher_base_loader_t *unwatched)
{
    mca_patcher_linux_lock();
    int rc = mca_patcher_linux_dl_install();
    if (OPAL_SUCCESS == rc) {
        rc = mca_patcher_linux_dl_unwatched(unwatched);
    }
    mca_patcher_linux_unlock();
    return rc;
}

static void linux_patch_retire(uintptr_t new_addr)
{
    mca_patcher_linux_lock();
    mca_patcher_linux_retire(new_addr);
    mca_patcher_linux_unlock();
}

mca_patcher_base_module_t mca_patcher_linux_module = {
    .super = {.module_component = &mca_patcher_linux_component.patcherc_version},
    .patch_fini = linux_fini,
    .patch_symbol = linux_patch_symbol,
    /* A GOT names symbols; a bare address has no slot to rewrite: this
     * module patches by symbol (mca_patcher_base_style). */
    .patch_address = NULL,
    .patch_definition = linux_patch_definition,
    .patch_retire = linux_patch_retire,
    .patch_watch_loader = linux_watch_loader,
    /* The table's lock: our dl intercepts hold it across the loader's work. */
    .patch_loader_trylock = mca_patcher_linux_trylock,
    .patch_loader_unlock = mca_patcher_linux_unlock,
    .patch_limits = "sees only calls made through a GOT slot: not calls inside a library that "
                    "bypass its own PLT (libc's free calling munmap), not the constructors of "
                    "an object run by dlopen before it returns, not raw syscalls, and not calls "
                    "through a function pointer taken before our setup (a variable, a vtable, a "
                    "callback table holding munmap's address): GOT patching cannot redirect those",
};
