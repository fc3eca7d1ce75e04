/*
 * The overwrite patcher module, architecture independent: trampoline
 * memory near each target, the patch records and their restore, page
 * protection through the base.
 *
 * Each patched function gets one page within the entry jump's reach of it
 * (the architecture's: +-2 GiB on x86-64, +-128 MiB for aarch64's b):
 *     [header][hop: on to the intercept][trampoline: displaced code, jump back]
 * and the function's first bytes become a jump to the hop.  The page is
 * written while private (read-write), then made read-execute before anything
 * can jump to it, and never written again: threads may be running it.
 *
 * Pages are never unmapped: a thread that entered the intercept before a
 * restore (even before the framework closed and this component was
 * unloaded) may still call the trampoline.  Instead each page starts with
 * a magic header and its patch point, and a later patch of the same point,
 * with the same intercept and original bytes, adopts the page it finds in
 * /proc/self/maps whose content is exactly what it would build.  So the
 * pages stay bounded by the distinct patches made over the process's life.
 * The header also names the page of ours whose jump the trampoline
 * relocated, if any: a patch that would chain back to its own intercept
 * through our jumps is declined (loop_below).
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_arch.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_icache.h"
#if MCA_PATCHER_OVERWRITE_HAVE_ARCH
#    include "opal/mca/patcher/overwrite/patcher_overwrite_threads.h"
#endif
#include "opal/util/output.h"
#include "opal/util/proc_maps.h"
#include "opal/util/valgrind.h"

/* Static executables may be linked without libdl: then there is no dlsym. */
#pragma weak dlsym

/*
 * A page's header: 8 bytes of magic, the patch point, and the page of ours
 * whose entry jump this page's trampoline relocated (0 if none: see
 * loop_below).
 */
#define MAGIC        "opal-ow2"
#define BELOW_OFFSET 16
#define HOP_OFFSET   32 /* the hop, after the header */
/* The trampoline, after the hop, 16-aligned. */
#define TRAMP_OFFSET (HOP_OFFSET + ((arch()->hop_size + 15) & ~(size_t) 15))

typedef struct overwrite_tramp_t {
    struct overwrite_tramp_t *next;
    unsigned char *page;  /* hop + trampoline, read-execute */
    uintptr_t at;         /* the patch point */
    uintptr_t intercept;
    unsigned char orig[MCA_PATCHER_PATCH_MAX_BYTES]; /* the displaced bytes it relocates */
    mca_patcher_overwrite_reloc_t reloc;
    bool in_use;
    bool abandoned;       /* someone patched over us: never reuse */
    bool stuck;           /* its restore failed: its jump may still be at 'at' */
} overwrite_tramp_t;

static pthread_mutex_t overwrite_lock = PTHREAD_MUTEX_INITIALIZER;
static overwrite_tramp_t *tramps;

static const mca_patcher_overwrite_arch_t *arch(void)
{
    return MCA_PATCHER_OVERWRITE_ARCH;
}

/* Whether a page at a is within the entry jump's reach of b, with slack to spare. */
static bool near(uintptr_t a, uintptr_t b, size_t slack)
{
    uintptr_t d = a > b ? a - b : b - a;
    return d + slack < arch()->reach;
}

/* A private page at hint if the kernel puts it within reach of target, or NULL. */
static unsigned char *map_near(uintptr_t hint, uintptr_t target, size_t page)
{
    void *p = mmap((void *) hint, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        return NULL;
    }
    if (near((uintptr_t) p, target, 2 * page)) {
        return p;
    }
    munmap(p, page);
    return NULL;
}

/* Free gaps within reach of a target (/proc/self/maps): the page of each nearest to it. */
#define GAP_HINTS 64
typedef struct gap_ctx_t {
    uintptr_t target, page, prev_end;
    uintptr_t hint[GAP_HINTS];
    int n;
} gap_ctx_t;

static bool gap_visit(const opal_proc_maps_entry_t *e, void *arg)
{
    gap_ctx_t *c = arg;
    if (e->start >= c->prev_end + c->page) {
        const uintptr_t lo = c->prev_end, hi = e->start - c->page;
        const uintptr_t h = c->target < lo ? lo : c->target > hi ? hi : c->target & ~(c->page - 1);
        if (near(h, c->target, 2 * c->page)) {
            c->hint[c->n++] = h;
        }
    }
    c->prev_end = e->end > c->prev_end ? e->end : c->prev_end;
    return c->n < GAP_HINTS && e->end < c->target + arch()->reach;
}

/*
 * A private page within reach of target.  First two pages after the last
 * one made (one page apart, so that each stays a mapping of its own, which
 * adoption reads): the hints below give at most a few hundred distinct
 * pages where the kernel puts a taken hint out of reach (qemu-user does; so
 * does a kernel for a target far from its mmap area, with aarch64's +-128
 * MiB).  Then hints at growing distances below and above it (the kernel
 * takes a free hint as is), in steps of a 128th of the reach (16 MiB for
 * +-2 GiB), sparser beyond half of it.
 * Those are some 130 places: where the reach is short (+-32 MiB for
 * ppc64le's b) they may all be taken by earlier trampolines while pages
 * are free between them, so then each free gap in reach is tried, at its
 * page nearest to target.
 */
static unsigned char *alloc_near(uintptr_t target, size_t page)
{
    static uintptr_t last; /* under overwrite_lock */
    const uintptr_t reach = arch()->reach;
    const uintptr_t step = (reach >> 7) > page ? (reach >> 7) & ~(uintptr_t) (page - 1) : page;
    unsigned char *p = last ? map_near(last + 2 * page, target, page) : NULL;
    for (uintptr_t d = step; NULL == p && d < reach; d += d < 64 * step ? step : 16 * step) {
        for (int dir = -1; NULL == p && dir <= 1; dir += 2) {
            uintptr_t hint = (dir < 0 ? target - d : target + d) & ~(page - 1);
            if ((dir < 0 && target < d) || hint == 0) {
                continue;
            }
            p = map_near(hint, target, page);
        }
    }
    gap_ctx_t gaps = {.target = target, .page = page, .prev_end = page};
    if (NULL == p) {
        opal_proc_maps_foreach(gap_visit, &gaps);
    }
    for (int i = 0; i < gaps.n && NULL == p; i++) {
        p = map_near(gaps.hint[i], target, page);
    }
    if (p) {
        last = (uintptr_t) p;
    }
    return p;
}

static int decline(const char *symbol, uintptr_t func, const char *why)
{
    opal_output("patcher overwrite: cannot patch %s at %p: %s", symbol ? symbol : "function",
                (void *) func, why);
    return OPAL_ERR_NOT_SUPPORTED;
}

/* Header, hop and trampoline for the patch point 'at' as they would be at 'mem'. */
static int build_page(unsigned char *buf, uintptr_t mem, uintptr_t at, uintptr_t intercept,
                      uintptr_t below, mca_patcher_overwrite_reloc_t *reloc, char *why,
                      size_t why_size)
{
    /* Zeros between the hop and the trampoline: a page to adopt is compared byte for byte. */
    memset(buf, 0, TRAMP_OFFSET);
    memcpy(buf, MAGIC, 8);
    memcpy(buf + 8, &at, sizeof(at));
    memcpy(buf + BELOW_OFFSET, &below, sizeof(below));
    arch()->hop(buf + HOP_OFFSET, mem + HOP_OFFSET, intercept, at);
    return arch()->relocate(at, buf + TRAMP_OFFSET, mem + TRAMP_OFFSET, reloc, why, why_size);
}

typedef struct adopt_ctx_t {
    uintptr_t at, intercept, below;
    size_t page;
    unsigned char *buf;  /* scratch, one page */
    uintptr_t found;
    mca_patcher_overwrite_reloc_t reloc;
} adopt_ctx_t;

/* Whether the page at mem is one of ours for the patch point 'at' (its header). */
static bool page_for(uintptr_t mem, uintptr_t at)
{
    return 0 == memcmp((void *) mem, MAGIC, 8) && 0 == memcmp((void *) (mem + 8), &at, sizeof(at));
}

/* Whether a mapping may hold pages of ours near 'at': private, read-execute, small. */
static bool may_hold_ours(const opal_proc_maps_entry_t *e, uintptr_t at, size_t page)
{
    return e->prot == (PROT_READ | PROT_EXEC) && 0 == e->inode && '\0' == e->path_start[0] &&
           e->end - e->start <= 64 * page && near(e->start, at, 2 * page);
}

static bool page_in_list(uintptr_t mem)
{
    for (overwrite_tramp_t *t = tramps; t; t = t->next) {
        if ((uintptr_t) t->page == mem) {
            return true;
        }
    }
    return false;
}

/* A page of ours (magic, same patch point) whose content is exactly what we would build. */
static bool adopt_visit(const opal_proc_maps_entry_t *e, void *arg)
{
    adopt_ctx_t *c = arg;
    if (!may_hold_ours(e, c->at, c->page)) {
        return true;
    }
    for (uintptr_t mem = e->start; mem < e->end; mem += c->page) {
        if (!page_for(mem, c->at) || page_in_list(mem)) {
            continue;
        }
        char why[160];
        if (OPAL_SUCCESS == build_page(c->buf, mem, c->at, c->intercept, c->below, &c->reloc, why,
                                       sizeof(why)) &&
            0 == memcmp((void *) mem, c->buf, TRAMP_OFFSET + c->reloc.tramp_len)) {
            c->found = mem;
            return false;
        }
    }
    return true;
}

typedef struct jump_ctx_t {
    uintptr_t at;
    size_t page;
    uintptr_t found;
} jump_ctx_t;

/* Whether the entry jump to the hop of our page at mem is what lies at 'at'. */
static bool jump_to_page_at(uintptr_t at, uintptr_t mem)
{
    unsigned char jump[MCA_PATCHER_PATCH_MAX_BYTES];
    return arch()->entry_jump(jump, at, mem + HOP_OFFSET) &&
           0 == memcmp(jump, (const void *) at, arch()->jump_size);
}

/* A page of ours for the patch point whose entry jump is what lies there. */
static bool jump_visit(const opal_proc_maps_entry_t *e, void *arg)
{
    jump_ctx_t *c = arg;
    for (uintptr_t mem = e->start; may_hold_ours(e, c->at, c->page) && mem < e->end;
         mem += c->page) {
        if (page_for(mem, c->at) && jump_to_page_at(c->at, mem)) {
            c->found = mem;
            return false;
        }
    }
    return true;
}

/* Whether the hop of our page at mem leads to intercept. */
static bool hop_leads_to(uintptr_t mem, uintptr_t at, uintptr_t intercept)
{
    unsigned char hop[256];
    if (arch()->hop_size > sizeof(hop)) {
        return false;
    }
    arch()->hop(hop, mem + HOP_OFFSET, intercept, at);
    return 0 == memcmp(hop, (const void *) (mem + HOP_OFFSET), arch()->hop_size);
}

/*
 * The page of ours whose entry jump lies at 'at' (a live patch, or one a
 * failed restore left, perhaps by an earlier instance of this component:
 * its list is gone), or 0; in *loops whether that jump leads to
 * 'intercept', itself or through the pages its trampoline and theirs
 * relocated (each header says which).  A trampoline relocating such a jump
 * would make the intercept, chaining to it, call itself forever.
 */
static uintptr_t loop_below(uintptr_t at, uintptr_t intercept, size_t page, bool *loops)
{
    jump_ctx_t c = {.at = at, .page = page};
    opal_proc_maps_foreach(jump_visit, &c);
    *loops = false;
    for (uintptr_t mem = c.found, n = 0; mem && page_for(mem, at) && !*loops && n < 64; n++) {
        *loops = hop_leads_to(mem, at, intercept);
        memcpy(&mem, (const void *) (mem + BELOW_OFFSET), sizeof(mem));
    }
    return c.found;
}

/* Build (or adopt) the hop and trampoline for the patch point 'at' in a near page. */
static int make_tramp(const char *symbol, uintptr_t func, uintptr_t at, uintptr_t intercept,
                      overwrite_tramp_t **out)
{
    const size_t page = (size_t) sysconf(_SC_PAGESIZE);
    overwrite_tramp_t *t = calloc(1, sizeof(*t));
    unsigned char *scratch = malloc(page);
    if (NULL == t || NULL == scratch) {
        free(t);
        free(scratch);
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    bool loops;
    const uintptr_t below = loop_below(at, intercept, page, &loops);
    if (loops) {
        free(t);
        free(scratch);
        return decline(symbol, func,
                       "a jump of ours that leads to the same intercept is there already (a "
                       "live patch, or one a failed restore left): patching over it would make "
                       "the intercept call itself");
    }
    adopt_ctx_t ctx = {.at = at,
                       .intercept = intercept,
                       .below = below,
                       .page = page,
                       .buf = scratch};
    opal_proc_maps_foreach(adopt_visit, &ctx);
    free(scratch);
    unsigned char *mem = (unsigned char *) ctx.found;
    if (mem) {
        t->reloc = ctx.reloc;
    } else {
        mem = alloc_near(at, page);
        if (NULL == mem) {
            free(t);
            char why[96];
            snprintf(why, sizeof(why), "no free page within +-%lu MiB for the trampoline",
                     (unsigned long) (arch()->reach >> 20));
            return decline(symbol, func, why);
        }
        char why[160];
        int rc = build_page(mem, (uintptr_t) mem, at, intercept, below, &t->reloc, why,
                            sizeof(why));
        if (OPAL_SUCCESS != rc) {
            munmap(mem, page);
            free(t);
            return decline(symbol, func, why);
        }
        /* What the processors fetch must be what was written (Power, Arm). */
        mca_patcher_overwrite_icache_sync((uintptr_t) mem, TRAMP_OFFSET + t->reloc.tramp_len);
        if (0 != mprotect(mem, page, PROT_READ | PROT_EXEC)) {
            munmap(mem, page);
            free(t);
            return decline(symbol, func, "mprotect refused to make the trampoline executable "
                                         "(a W^X policy?)");
        }
    }
    t->page = mem;
    t->at = at;
    t->intercept = intercept;
    memcpy(t->orig, (const void *) at, t->reloc.window);
    *out = t;
    return OPAL_SUCCESS;
}

/* Whether t's entry jump is what lies at its patch point. */
static bool jump_in_place(const overwrite_tramp_t *t)
{
    return jump_to_page_at(t->at, (uintptr_t) t->page);
}

/*
 * A trampoline already built for this point and intercept: from the same
 * bytes, or the one whose jump a failed restore left there.  That jump is
 * taken back as it is: a new trampoline would relocate it, and the
 * intercept, chaining to the new one, would reach itself again (forever).
 */
static overwrite_tramp_t *find_tramp(uintptr_t at, uintptr_t intercept)
{
    for (overwrite_tramp_t *t = tramps; t; t = t->next) {
        if (!t->in_use && !t->abandoned && t->at == at && t->intercept == intercept &&
            (0 == memcmp(t->orig, (const void *) at, t->reloc.window) ||
             (t->stuck && jump_in_place(t)))) {
            return t;
        }
    }
    return NULL;
}

static void write_code(void *arg)
{
    mca_patcher_overwrite_write_t *w = arg;
    if (opal_running_on_valgrind()) {
        /* Allowed only with patcher_overwrite_valgrind: valgrind runs one
         * thread at a time and reserves our move signal, so a plain write,
         * then drop its translations of the old code. */
        memcpy((void *) w->addr, w->bytes, w->len);
        opal_valgrind_discard_translations(w->addr, w->len);
        w->rc = OPAL_SUCCESS;
        return;
    }
    arch()->code_write(w);
}

static int write_patch(uintptr_t at, const unsigned char *bytes, size_t len, overwrite_tramp_t *t,
                       bool patching, const char **reason)
{
    mca_patcher_overwrite_write_t w = {
        .addr = at,
        .bytes = bytes,
        .len = len,
        .tramp = (uintptr_t) t->page + TRAMP_OFFSET,
        .hop = (uintptr_t) t->page + HOP_OFFSET,
        .reloc = patching ? &t->reloc : NULL,
    };
    int rc = mca_patcher_base_with_code_writable(at, len, write_code, &w, reason);
    if (OPAL_SUCCESS == rc && OPAL_SUCCESS != w.rc) {
        *reason = w.reason;
        rc = w.rc;
    }
    return rc;
}

static void overwrite_restore(mca_patcher_base_patch_t *patch)
{
    overwrite_tramp_t *t = patch->patch_component_data;
    const char *reason = NULL;

    pthread_mutex_lock(&overwrite_lock);
    if (0 != memcmp((const void *) patch->patch_orig, patch->patch_data, patch->patch_data_size)) {
        /* Another patcher wrote over our jump and may chain to it: leave both. */
        opal_output("patcher overwrite: %s at %p was patched again by someone else; left as is",
                    patch->patch_symbol ? patch->patch_symbol : "function",
                    (void *) patch->patch_orig);
        t->abandoned = true;
    } else if (OPAL_SUCCESS != write_patch(patch->patch_orig, patch->patch_orig_data,
                                           patch->patch_data_size, t, false, &reason)) {
        opal_output("patcher overwrite: cannot restore %s at %p: %s; its jump stays, still "
                    "leading to the intercept",
                    patch->patch_symbol ? patch->patch_symbol : "function",
                    (void *) patch->patch_orig, reason);
        t->stuck = true;
    }
    t->in_use = false;
    pthread_mutex_unlock(&overwrite_lock);
}

/*
 * The patched function was unloaded.  Its trampoline may be taken again by
 * a patch of the same bytes at the same place (the object loaded there
 * again): it relocates exactly those bytes.
 */
static void overwrite_forget(mca_patcher_base_patch_t *patch)
{
    overwrite_tramp_t *t = patch->patch_component_data;
    pthread_mutex_lock(&overwrite_lock);
    t->in_use = false;
    pthread_mutex_unlock(&overwrite_lock);
}

/* Patch func to jump to intercept; *chain (if given) is set before the jump goes live. */
static int patch_function(const char *symbol, uintptr_t func, uintptr_t intercept, uintptr_t *chain)
{
    const mca_patcher_overwrite_arch_t *a = arch();
    mca_patcher_base_module_t *module = &mca_patcher_overwrite_module;
    if (NULL == a) {
        return OPAL_ERR_NOT_SUPPORTED;
    }
    if (0 == func || 0 == intercept) {
        return OPAL_ERR_BAD_PARAM;
    }
#if MCA_PATCHER_OVERWRITE_HAVE_ARCH
    /* An address from the API may be anything: its bytes are read next,
     * and a jump written there must be code's (not data that looks like it). */
    int prot;
    if (OPAL_SUCCESS != mca_patcher_base_page_protection(func, &prot) || !(prot & PROT_READ)) {
        return decline(symbol, func, "it is in no readable mapping (/proc/self/maps)");
    }
    if (!(prot & PROT_EXEC)) {
        return decline(symbol, func, "it is not in executable memory (/proc/self/maps): not code");
    }
#endif
    size_t skip = a->patch_offset(func);
    uintptr_t at = func + skip;

    pthread_mutex_lock(&overwrite_lock);
    overwrite_tramp_t *t = find_tramp(at, intercept);
    int rc = OPAL_SUCCESS;
    if (NULL == t) {
        rc = make_tramp(symbol, func, at, intercept, &t);
        if (OPAL_SUCCESS != rc) {
            pthread_mutex_unlock(&overwrite_lock);
            return rc;
        }
        t->next = tramps;
        tramps = t;
    }

    mca_patcher_base_patch_t *patch = mca_patcher_base_patch_new();
    if (NULL == patch) {
        pthread_mutex_unlock(&overwrite_lock);
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    patch->patch_symbol = symbol;
    patch->patch_value = intercept;
    patch->patch_func = func;
    patch->patch_orig = at;
    patch->patch_chain = (uintptr_t) t->page + TRAMP_OFFSET;
    patch->patch_data_size = (unsigned) a->jump_size;
    patch->patch_how = skip ? a->how_past_pad : a->how;
    patch->patch_restore = overwrite_restore;
    patch->patch_forget = overwrite_forget;
    patch->patch_component_data = t;
    memcpy(patch->patch_orig_data, t->orig, a->jump_size); /* the bytes at 'at' unless stuck */
    if (!a->entry_jump(patch->patch_data, at, (uintptr_t) t->page + HOP_OFFSET)) {
        rc = decline(symbol, func, "the trampoline is out of jump range");
    } else {
        const char *reason = NULL;
        uintptr_t old_chain = 0;
        if (chain) {
            /* Another thread may enter the intercept as soon as the jump is written. */
            old_chain = __atomic_exchange_n(chain, patch->patch_chain, __ATOMIC_SEQ_CST);
        }
        /* A stuck jump (find_tramp) is live already: nothing to write. */
        rc = t->stuck && jump_in_place(t)
                 ? OPAL_SUCCESS
                 : write_patch(at, patch->patch_data, a->jump_size, t, true, &reason);
        if (OPAL_SUCCESS != rc) {
            decline(symbol, func, reason);
            if (chain) {
                /* An earlier jump of ours left in place (its restore failed)
                 * still leads to the intercept: it must keep chaining to
                 * what that jump displaced, not to our new trampoline,
                 * which would jump back to it. */
                __atomic_store_n(chain, old_chain, __ATOMIC_SEQ_CST);
            }
        }
    }
    if (OPAL_SUCCESS != rc) {
        pthread_mutex_unlock(&overwrite_lock);
        free(patch);
        return rc;
    }
    t->in_use = true;
    t->stuck = false;
    pthread_mutex_unlock(&overwrite_lock);
    mca_patcher_base_patch_add(module, patch);
    return OPAL_SUCCESS;
}

static int overwrite_patch_address(uintptr_t func_addr, uintptr_t new_addr)
{
    return patch_function(NULL, func_addr, new_addr, NULL);
}

static int overwrite_patch_address_chain(uintptr_t func_addr, uintptr_t new_addr, uintptr_t *chain)
{
    return patch_function(NULL, func_addr, new_addr, chain);
}

static int overwrite_patch_symbol(const char *symbol, uintptr_t new_addr, uintptr_t *old_addr)
{
    if (NULL == symbol || NULL == old_addr) {
        return OPAL_ERR_BAD_PARAM;
    }
    uintptr_t func = dlsym ? (uintptr_t) dlsym(RTLD_DEFAULT, symbol) : 0;
    if (0 == func) {
        return OPAL_ERR_NOT_FOUND;
    }
    return patch_function(symbol, func, new_addr, old_addr);
}

static int overwrite_watch_loader(struct mca_patcher_base_loader_t *unwatched)
{
    return mca_patcher_overwrite_dl_watch(patch_function, unwatched);
}

/*
 * fork: the child has only the forking thread, and the lock may be held by
 * another one (a patch, restore or fini made through the patcher's API
 * rather than under the memory hooks' lock, which is held across fork): it
 * is made new in the child, and so is the rounds' state (the fini's round
 * runs outside the write lock below).  No code write is under way there:
 * the base holds its write lock across fork.  Taking this lock before the
 * fork instead would invert the order of the memory hooks' lock, whose
 * prepare handler, registered before ours, runs after it.
 */
static void overwrite_atfork_child(void)
{
    pthread_mutex_init(&overwrite_lock, NULL);
    mca_patcher_overwrite_dl_atfork_child();
#if MCA_PATCHER_OVERWRITE_HAVE_ARCH
    mca_patcher_overwrite_threads_atfork_child();
#endif
}

static void overwrite_atfork(void)
{
    (void) pthread_atfork(NULL, NULL, overwrite_atfork_child);
}

static int overwrite_patch_init(void)
{
    static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
    pthread_once(&atfork_once, overwrite_atfork);
    return OPAL_SUCCESS;
}

/*
 * Every patch is restored by now.  Forget the trampolines but keep their
 * pages (see the top of this file): a later patch adopts them.  A stuck
 * one stays listed: its jump is still in place, which adoption (from the
 * bytes at the patch point) cannot recognize, and find_tramp takes it back.
 */
static int overwrite_patch_fini(void)
{
    mca_patcher_overwrite_dl_fini();
    pthread_mutex_lock(&overwrite_lock);
    for (overwrite_tramp_t **link = &tramps; *link;) {
        overwrite_tramp_t *t = *link;
        if (t->stuck) {
            link = &t->next;
            continue;
        }
        *link = t->next;
        free(t);
    }
#if MCA_PATCHER_OVERWRITE_HAVE_ARCH
    mca_patcher_overwrite_threads_fini(); /* the code writes' signal handler */
#endif
    pthread_mutex_unlock(&overwrite_lock);
    return OPAL_SUCCESS;
}

mca_patcher_base_module_t mca_patcher_overwrite_module = {
    .patch_init = overwrite_patch_init,
    .patch_fini = overwrite_patch_fini,
    .patch_symbol = overwrite_patch_symbol,
    .patch_address = overwrite_patch_address,
    .patch_address_chain = overwrite_patch_address_chain,
    .patch_watch_loader = overwrite_watch_loader,
    .patch_loader_trylock = mca_patcher_overwrite_dl_trylock,
    .patch_loader_unlock = mca_patcher_overwrite_dl_unlock,
    .patch_limits = "sees every caller of a patched function, including libc's internal calls; "
                    "misses raw system calls made without calling it",
};
