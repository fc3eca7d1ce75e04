/*
 * Making patched pages writable for a moment, and putting every page's
 * protection back exactly as it was.
 */
#include "opal_config.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/util/proc_maps.h"

/* Serializes protection changes: two patches on one page must not race. */
static pthread_mutex_t protect_lock = PTHREAD_MUTEX_INITIALIZER;

#define MAX_PAGES 8

/*
 * PROT_BTI if the code page at addr is guarded by BTI (arm64): the loader
 * maps objects built for it so where the CPU has it, and /proc/self/maps
 * does not say so.  Restoring the protection read there would drop the
 * guard, so it is asked of smaps ("bt"), where the CPU has BTI.
 */
static int bti_bit(uintptr_t addr, int prot)
{
#if defined(PROT_BTI) && defined(HWCAP2_BTI)
    return (prot & PROT_EXEC) && (getauxval(AT_HWCAP2) & HWCAP2_BTI) &&
                   opal_proc_maps_vmflag(NULL, addr, "bt")
               ? PROT_BTI
               : 0;
#else
    (void) addr;
    (void) prot;
    return 0;
#endif
}

int mca_patcher_base_page_protection(uintptr_t addr, int *prot)
{
    opal_proc_maps_entry_t entry;
    int rc = opal_proc_maps_find(addr, &entry);
    if (OPAL_SUCCESS == rc) {
        *prot = entry.prot | bti_bit(addr, entry.prot);
    }
    return rc;
}

/* Pages get prot | always while written, then prot | always again. */
static int with_writable(uintptr_t addr, size_t len, int always, void (*write)(void *arg),
                         void *arg, const char **reason)
{
    const uintptr_t page = (uintptr_t) sysconf(_SC_PAGESIZE);
    const uintptr_t first = addr & ~(page - 1);
    const size_t npages = ((addr + len + page - 1) & ~(page - 1)) / page - first / page;
    int prot[MAX_PAGES];
    size_t changed = 0;
    int rc = OPAL_SUCCESS;

    if (0 == len || npages > MAX_PAGES) {
        *reason = "the range to write is empty or too large";
        return OPAL_ERR_BAD_PARAM;
    }
    pthread_mutex_lock(&protect_lock);
    for (size_t i = 0; i < npages; i++) {
        if (OPAL_SUCCESS != mca_patcher_base_page_protection(first + i * page, &prot[i])) {
            *reason = "cannot read the page protection from /proc/self/maps";
            rc = OPAL_ERR_NOT_SUPPORTED;
            goto out;
        }
    }
    for (changed = 0; changed < npages; changed++) {
        if (!(prot[changed] & PROT_WRITE) && 0 != mprotect((void *) (first + changed * page), page,
                                                           prot[changed] | always | PROT_WRITE)) {
            *reason = (errno == EACCES || errno == EPERM)
                          ? "mprotect refused to make the page writable (a W^X policy?)"
                          : "mprotect failed to make the page writable";
            rc = OPAL_ERR_NOT_SUPPORTED;
            break;
        }
    }
    if (OPAL_SUCCESS == rc) {
        write(arg);
    }
out:
    /* Put back exactly what was there, also after a partial failure. */
    for (size_t i = 0; i < changed; i++) {
        if (!(prot[i] & PROT_WRITE)) {
            mprotect((void *) (first + i * page), page, prot[i] | always);
        }
    }
    pthread_mutex_unlock(&protect_lock);
    return rc;
}

int mca_patcher_base_with_writable(uintptr_t addr, size_t len, void (*write)(void *arg), void *arg,
                                   const char **reason)
{
    return with_writable(addr, len, 0, write, arg, reason);
}

/*
 * A writer waits for no lock and for no thread but the answers of a round,
 * which a thread waiting here for the lock gives (its signals are not
 * blocked by fork yet): it ends within the round's 2 s.
 */
void mca_patcher_base_atfork_prepare(void)
{
    pthread_mutex_lock(&protect_lock);
}

void mca_patcher_base_atfork_parent(void)
{
    pthread_mutex_unlock(&protect_lock);
}

void mca_patcher_base_atfork_child(void)
{
    pthread_mutex_init(&protect_lock, NULL);
    mca_patcher_base_patch_list_atfork_child();
}

int mca_patcher_base_with_code_writable(uintptr_t addr, size_t len, void (*write)(void *arg),
                                        void *arg, const char **reason)
{
    return with_writable(addr, len, PROT_EXEC, write, arg, reason);
}
