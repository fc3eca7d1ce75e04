/*
 * Module creation and destruction, and the release callback.
 *
 * Locks, in order: base_lock (create/destroy/atfork; may be held while the
 * hooks are installed and while a module allocates) before each module's
 * own lock.  The release callback takes neither: it walks the hooked
 * modules' slots (below), so a hook inside free() waits for nobody but the
 * module it calls.
 */
#include "opal_config.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "opal/constants.h"
#include "opal/mca/rcache/base/base.h"
#include "opal/memoryhooks/memory_hooks.h"
#include "opal/memoryhooks/memory_uffd.h"
#include "opal/util/output.h"
#include "opal/util/readers.h"

volatile uint32_t mca_rcache_base_fork_gen;

static pthread_mutex_t base_lock = PTHREAD_MUTEX_INITIALIZER;
static opal_list_t live_modules = OPAL_LIST_STATIC_INIT(live_modules); /* base_lock */
static int hooked_modules; /* modules holding the release callback */
static int uffd_modules;   /* modules using the userfaultfd source (base_lock) */
static bool atfork_installed;

#define MODULE_OF(item) \
    ((mca_rcache_base_module_t *) ((char *) (item) - offsetof(mca_rcache_base_module_t, rcache_live)))

/*
 * What the release callback walks, without a lock: one slot per hooked
 * module (a line each: threads in different modules share nothing).  A
 * slot counts the threads inside its module's release, readers that destroy
 * drains after clearing the slot (opal/util/readers.h).
 */
#define MAX_HOOKED_MODULES 64
typedef struct {
    mca_rcache_base_module_t *module;
    int users;
} __attribute__((aligned(64))) hooked_slot_t;
static hooked_slot_t hooked_slots[MAX_HOOKED_MODULES];
static int hooked_slots_used; /* no slot at or above it was ever taken */

void mca_rcache_base_release_cb(void *buf, size_t length, void *cbdata, bool from_alloc)
{
    (void) cbdata;
    const int n = __atomic_load_n(&hooked_slots_used, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++) {
        hooked_slot_t *slot = &hooked_slots[i];
        if (NULL == __atomic_load_n(&slot->module, __ATOMIC_RELAXED)) {
            continue;
        }
        opal_readers_enter(&slot->users);
        mca_rcache_base_module_t *m = __atomic_load_n(&slot->module, __ATOMIC_SEQ_CST);
        if (NULL != m) {
            m->rcache_release(m, buf, length, from_alloc);
        }
        opal_readers_leave(&slot->users);
    }
    /* Before the real call (a patch's event): the kernel need not tell us again. */
    if (__atomic_load_n(&uffd_modules, __ATOMIC_RELAXED)) {
        opal_mem_uffd_source.unsubscribe(buf, length);
    }
}

/* Make a hooked module reachable from the release callback (base_lock held). */
static bool slot_add(mca_rcache_base_module_t *module)
{
    for (int i = 0; i < MAX_HOOKED_MODULES; i++) {
        hooked_slot_t *slot = &hooked_slots[i];
        if (NULL == slot->module && 0 == __atomic_load_n(&slot->users, __ATOMIC_SEQ_CST)) {
            __atomic_store_n(&slot->module, module, __ATOMIC_SEQ_CST);
            if (i >= hooked_slots_used) {
                __atomic_store_n(&hooked_slots_used, i + 1, __ATOMIC_RELEASE);
            }
            return true;
        }
    }
    opal_output("rcache: more than %d registration caches with memory release hooks",
                MAX_HOOKED_MODULES);
    return false;
}

/* When it returns, no release callback is inside the module or will enter it (base_lock held). */
static void slot_remove(mca_rcache_base_module_t *module)
{
    for (int i = 0; i < hooked_slots_used; i++) {
        hooked_slot_t *slot = &hooked_slots[i];
        if (slot->module == module) {
            __atomic_store_n(&slot->module, NULL, __ATOMIC_SEQ_CST);
            opal_readers_drain(&slot->users, 0);
        }
    }
}

/*
 * fork(): no rcache lock may be held across it, or the child would inherit
 * it locked.  Prepare takes them all (in lock order), parent and child let
 * go (the child by re-creating them); the child also starts a new generation, which makes every module drop
 * the parent's registrations (their pins did not come along).
 */
static void atfork_each(mca_rcache_base_atfork_phase_t phase)
{
    for (opal_list_item_t *it = opal_list_get_first(&live_modules);
         it != opal_list_get_end(&live_modules); it = it->opal_list_next) {
        MODULE_OF(it)->rcache_atfork(MODULE_OF(it), phase);
    }
}

static void atfork_prepare(void)
{
    pthread_mutex_lock(&base_lock);
    atfork_each(MCA_RCACHE_ATFORK_PREPARE);
}

static void atfork_parent(void)
{
    atfork_each(MCA_RCACHE_ATFORK_PARENT);
    pthread_mutex_unlock(&base_lock);
}

/*
 * The child's thread has a new id: unlocking would not be recognized,
 * re-create instead.  The parent's other threads are not in the child: a
 * slot they were counted in (inside a release) would never drain there, and
 * the forking thread is in none (a release calls no code that forks).
 */
static void atfork_child(void)
{
    __atomic_add_fetch(&mca_rcache_base_fork_gen, 1, __ATOMIC_RELEASE);
    atfork_each(MCA_RCACHE_ATFORK_CHILD);
    for (int i = 0; i < MAX_HOOKED_MODULES; i++) {
        __atomic_store_n(&hooked_slots[i].users, 0, __ATOMIC_RELAXED);
    }
    pthread_mutex_init(&base_lock, NULL);
}

static bool resources_ok(const mca_rcache_base_resources_t *res)
{
    const char *why = NULL;
    if (NULL == res) {
        why = "resources is NULL";
    } else if (NULL == res->register_mem || NULL == res->deregister_mem) {
        why = "register_mem and deregister_mem are required";
    } else if (res->sizeof_reg < sizeof(mca_rcache_base_registration_t)) {
        why = "sizeof_reg is smaller than mca_rcache_base_registration_t";
    } else if (res->sizeof_reg > PTRDIFF_MAX) {
        why = "sizeof_reg is larger than any object can be"; /* a component's sums would wrap */
    }
    if (why) {
        opal_output("rcache: mca_rcache_base_module_create: bad resources: %s", why);
    }
    return NULL == why;
}

static const mca_rcache_base_component_t *find_component(const char *name)
{
    const mca_base_component_t *found = NULL;
    if (NULL == name) {
        mca_base_module_t *placeholder;
        const char *reason;
        if (OPAL_SUCCESS != mca_base_select(&opal_rcache_base_framework, &placeholder, &found,
                                            &reason)) {
            opal_output("rcache: no registration cache component can work: %s", reason);
        }
        return (const mca_rcache_base_component_t *) found;
    }
    mca_base_component_list_item_t *item;
    OPAL_LIST_FOREACH (item, &opal_rcache_base_framework.framework_components,
                       mca_base_component_list_item_t) {
        if (0 == strcmp(item->cli_component->mca_component_name, name)) {
            found = item->cli_component;
        }
    }
    if (NULL == found) {
        opal_output("rcache: no registration cache component named \"%s\" is available", name);
    }
    return (const mca_rcache_base_component_t *) found;
}

/* Decide leave_pinned for a new module and take a callback reference if needed. */
static int hooks_for_new_module(bool *leave_pinned, bool *hooked)
{
    *leave_pinned = 0 != mca_rcache_base_leave_pinned;
    *hooked = false;
    if (!*leave_pinned || !mca_rcache_base_release_hooks) {
        return OPAL_SUCCESS;
    }
    /* The first module registers the callback; a later one checks that our
     * intercepts are still in front (support_level puts them back in front
     * of a hooker loaded since, such as UCX in bistro mode, or says 0). */
    int rc = 0 == hooked_modules ? opal_mem_hooks_register_release(mca_rcache_base_release_cb, NULL)
             : 0 != opal_mem_hooks_support_level() ? OPAL_SUCCESS : OPAL_ERR_NOT_AVAILABLE;
    if (OPAL_SUCCESS != rc) {
        if (1 == mca_rcache_base_leave_pinned) {
            opal_output("rcache: mpi_leave_pinned is 1 but the memory release hooks cannot "
                        "be installed here (%s); set mpi_leave_pinned to -1 or 0",
                        opal_strerror(rc));
            return rc;
        }
        opal_output_verbose(opal_rcache_base_framework.framework_verbose, 1,
                            "rcache: no memory release hooks (%s): leave_pinned off",
                            opal_strerror(rc));
        *leave_pinned = false;
        return OPAL_SUCCESS;
    }
    hooked_modules++;
    *hooked = true;
    return OPAL_SUCCESS;
}

/*
 * rcache_base_uffd on or strict, for a hooked module: a reference on the
 * source, which the memory hooks start with the first one (base_lock
 * held).  Asked for explicitly, so a refusal fails the creation, saying why.
 */
static int uffd_for_new_module(bool hooked, const opal_mem_source_t **source)
{
    *source = NULL;
    const char *mode = mca_rcache_base_uffd_names[mca_rcache_base_uffd];
    if (MCA_RCACHE_BASE_UFFD_OFF == mca_rcache_base_uffd || !hooked) {
        return OPAL_SUCCESS; /* without hooks (leave_pinned off) the cache keeps nothing */
    }
    if (MCA_RCACHE_BASE_UFFD_STRICT == mca_rcache_base_uffd) {
        uint64_t pfn;
        if (OPAL_SUCCESS != mca_rcache_base_frames_read(&pfn, 1, &pfn)) {
            opal_output(
                "rcache: rcache_base_uffd=strict confirms each hit's page frames, which "
                "/proc/self/pagemap does not show here (needs CAP_SYS_ADMIN); use on or off");
            return OPAL_ERR_NOT_AVAILABLE;
        }
    }
    const char *reason = NULL;
    int rc = opal_mem_hooks_source_get(&opal_mem_uffd_source, &reason);
    if (OPAL_SUCCESS != rc) {
        opal_output("rcache: rcache_base_uffd=%s but the userfaultfd source cannot start here: "
                    "%s; set rcache_base_uffd=off",
                    mode, reason ? reason : opal_strerror(rc));
        return rc;
    }
    __atomic_add_fetch(&uffd_modules, 1, __ATOMIC_RELAXED);
    *source = &opal_mem_uffd_source;
    return OPAL_SUCCESS;
}

static void drop_uffd_reference(void)
{
    __atomic_sub_fetch(&uffd_modules, 1, __ATOMIC_RELAXED);
    opal_mem_hooks_source_put(&opal_mem_uffd_source);
}

static void drop_hook_reference(void)
{
    if (0 == --hooked_modules) {
        opal_mem_hooks_unregister_release(mca_rcache_base_release_cb);
    }
}

mca_rcache_base_module_t *mca_rcache_base_module_create(const char *name, void *user_data,
                                                         mca_rcache_base_resources_t *resources)
{
    if (!resources_ok(resources)) {
        return NULL;
    }
    pthread_mutex_lock(&base_lock);
    mca_rcache_base_module_t *module = NULL;
    bool leave_pinned, hooked;
    int rc = OPAL_SUCCESS;
    if (!mca_base_framework_is_open(&opal_rcache_base_framework)) {
        rc = mca_base_framework_open(&opal_rcache_base_framework);
    }
    const mca_rcache_base_component_t *comp = OPAL_SUCCESS == rc ? find_component(name) : NULL;
    if (NULL == comp || OPAL_SUCCESS != hooks_for_new_module(&leave_pinned, &hooked)) {
        pthread_mutex_unlock(&base_lock);
        return NULL;
    }
    if (!atfork_installed && 0 == pthread_atfork(atfork_prepare, atfork_parent, atfork_child)) {
        atfork_installed = true;
    }
    const opal_mem_source_t *uffd = NULL;
    if (OPAL_SUCCESS == uffd_for_new_module(hooked, &uffd)) {
        module = comp->rcache_create(user_data, resources, leave_pinned);
    }
    if (NULL != module) {
        /* Before it is reachable: the release callback and the caller see it whole. */
        module->rcache_uffd = uffd;
        module->rcache_uffd_strict = MCA_RCACHE_BASE_UFFD_STRICT == mca_rcache_base_uffd;
    }
    if (NULL != module && hooked && !slot_add(module)) {
        module->rcache_finalize(module);
        module = NULL;
    }
    if (NULL == module) {
        if (uffd) {
            drop_uffd_reference();
        }
        if (hooked) {
            drop_hook_reference();
        }
        pthread_mutex_unlock(&base_lock);
        return NULL;
    }
    module->super.module_component = &comp->rcache_version;
    module->rcache_hooked = hooked;
    opal_list_append(&live_modules, &module->rcache_live);
    pthread_mutex_unlock(&base_lock);
    return module;
}

/* base_lock held. */
static void destroy_locked(mca_rcache_base_module_t *module)
{
    opal_list_remove_item(&live_modules, &module->rcache_live);
    bool hooked = module->rcache_hooked;
    if (hooked) {
        slot_remove(module);
    }
    /* No release callback can reach the module any more. */
    const bool uffd = NULL != module->rcache_uffd;
    module->rcache_finalize(module);
    if (uffd) {
        drop_uffd_reference();
    }
    if (hooked) {
        drop_hook_reference();
    }
}

int mca_rcache_base_module_destroy(mca_rcache_base_module_t *module)
{
    if (NULL == module) {
        return OPAL_ERR_BAD_PARAM;
    }
    pthread_mutex_lock(&base_lock);
    bool live = false;
    for (opal_list_item_t *it = opal_list_get_first(&live_modules);
         it != opal_list_get_end(&live_modules); it = it->opal_list_next) {
        live = live || it == &module->rcache_live;
    }
    if (live) {
        destroy_locked(module);
    }
    pthread_mutex_unlock(&base_lock);
    return live ? OPAL_SUCCESS : OPAL_ERR_NOT_FOUND;
}

void mca_rcache_base_destroy_all(void)
{
    pthread_mutex_lock(&base_lock);
    while (!opal_list_is_empty(&live_modules)) {
        destroy_locked(MODULE_OF(opal_list_get_last(&live_modules)));
    }
    pthread_mutex_unlock(&base_lock);
}
