/*
 * The GOT mechanism: walk the loaded objects, find the slots (PLT
 * relocations and GLOB_DAT entries) that name a symbol, rewrite them.
 *
 * Two phases, because of the loader's locks: dl_iterate_phdr holds the
 * loader's write lock while it calls us, and dladdr/dlsym take the loader's
 * main lock, which a concurrent dlopen holds while it waits for the write
 * lock.  So the callback only reads memory and collects slots; deciding
 * (which needs dladdr/dlsym), writing and recording happen afterwards.  An
 * object cannot vanish in between, nor be listed but not yet relocated, by
 * a dlclose, dlopen or dlmopen of the program: each goes through our
 * intercept, which holds the table's lock across the loader's work (so it
 * waits for whoever patches).  An object that a load passing none of them
 * (glibc's own) has listed but not relocated is left to the next pass
 * (relocated()).
 *
 * Calls only the loader floor below it (patcher_linux.h): what a restore
 * means to the table above it is said by the hook's restore function,
 * which calls mca_patcher_linux_got_restore().
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>

#include "opal/constants.h"
#include "opal/mca/patcher/base/base.h"
#include "opal/mca/patcher/linux/patcher_linux.h"
#include "opal/mca/patcher/linux/patcher_linux_reloc.h"
#include "opal/util/output.h"

/* A static executable may be linked without them: then they are NULL. */
#pragma weak dladdr
#pragma weak dladdr1
#pragma weak dlinfo
#pragma weak dlsym

#define VERBOSE opal_patcher_base_framework.framework_verbose

typedef struct got_object_t {
    uintptr_t start, end;   /* extent of the PT_LOAD segments */
    uintptr_t dynamic;      /* its dynamic section: an address inside it */
    const char *how;        /* "GOT slot in <name>", interned */
} got_object_t;

typedef struct got_slot_t {
    uintptr_t addr;
    int name;               /* index into the names scanned for */
    int object;
    uintptr_t own_def;      /* the object's own definition of the symbol, or 0 */
} got_slot_t;

typedef struct got_scan_t {
    const char *const *names;
    int nnames;
    bool skip_own;
    got_object_t *objects;
    int nobjects, objects_cap;
    got_slot_t *slots;
    int nslots, slots_cap;
    /* Canonical PLT entries: an executable's PLT stub standing for a
     * function whose address it takes.  Never a chain target. */
    uintptr_t *stubs;
    int nstubs, stubs_cap;
    int rc;
} got_scan_t;

/* Strings for patch_how, kept until patch_fini (records point at them). */
typedef struct got_string_t {
    struct got_string_t *next;
    char text[];
} got_string_t;
static got_string_t *got_strings;

static bool grow(void **array, int *cap, int n, size_t elem)
{
    if (n < *cap) {
        return true;
    }
    int ncap = *cap ? 2 * *cap : 64;
    void *p = realloc(*array, (size_t) ncap * elem);
    if (NULL == p) {
        return false;
    }
    *array = p;
    *cap = ncap;
    return true;
}

static const char *intern_how(const char *name)
{
    static const char prefix[] = "GOT slot in ";
    for (got_string_t *s = got_strings; s; s = s->next) {
        if (0 == strcmp(s->text + sizeof(prefix) - 1, name)) {
            return s->text;
        }
    }
    got_string_t *s = malloc(sizeof(*s) + sizeof(prefix) + strlen(name));
    if (NULL == s) {
        return "GOT slot";
    }
    strcpy(s->text, prefix);
    strcat(s->text, name);
    s->next = got_strings;
    got_strings = s;
    return s->text;
}

void mca_patcher_linux_got_free_strings(void)
{
    while (got_strings) {
        got_string_t *next = got_strings->next;
        free(got_strings);
        got_strings = next;
    }
}

/*
 * glibc adds the load address to some d_ptr entries in place (where the
 * dynamic section is writable); elsewhere (the vDSO, a read-only dynamic
 * section, other libcs) they are still link-time addresses.  A value that
 * already lies inside the object is absolute.
 */
static uintptr_t dyn_ptr(uintptr_t base, uintptr_t d_ptr, const ElfW(Phdr) *phdr, int phnum)
{
    for (int i = 0; i < phnum; i++) {
        if (PT_LOAD == phdr[i].p_type && d_ptr >= base + phdr[i].p_vaddr &&
            d_ptr < base + phdr[i].p_vaddr + phdr[i].p_memsz) {
            return d_ptr;
        }
    }
    return base + d_ptr;
}

static bool is_vdso(const struct dl_phdr_info *info)
{
    /* The loader reports the vDSO with the program headers of its image,
     * which the kernel maps at AT_SYSINFO_EHDR. */
    const ElfW(Ehdr) *ehdr = (const ElfW(Ehdr) *) getauxval(AT_SYSINFO_EHDR);
    return NULL != ehdr && (const void *) info->dlpi_phdr == (const char *) ehdr + ehdr->e_phoff;
}

/* Our own objects: the component (a DSO, or inside the library) and libopal-patcher. */
static bool is_own(const struct dl_phdr_info *info, uintptr_t start, uintptr_t end)
{
    const uintptr_t own[] = {(uintptr_t) &mca_patcher_linux_component,
                             (uintptr_t) &mca_patcher_base_patch_new};
    /* Linked statically into the program, we share its GOT with the
     * application's own calls: those must be patched. */
    if ('\0' == info->dlpi_name[0]) {
        return false;
    }
    for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++) {
        if (own[i] >= start && own[i] < end) {
            return true;
        }
    }
    return false;
}

static void scan_table(got_scan_t *scan, int object, uintptr_t base, uintptr_t table, size_t size,
                       size_t entsize, const ElfW(Sym) *symtab, const char *strtab)
{
#if MCA_PATCHER_LINUX_HAVE_RELOC
    if (0 == table || 0 == entsize) {
        return;
    }
    for (size_t off = 0; off + entsize <= size; off += entsize) {
        /* Rel and Rela begin alike: r_offset, r_info. */
        const ElfW(Rel) *rel = (const ElfW(Rel) *) (table + off);
        if (!mca_patcher_linux_reloc_is_slot(rel, entsize)) {
            continue;
        }
        const ElfW(Sym) *sym = &symtab[MCA_PATCHER_LINUX_R_SYM(rel->r_info)];
        const char *name = strtab + sym->st_name;
        for (int n = 0; n < scan->nnames; n++) {
            if (0 != strcmp(name, scan->names[n])) {
                continue;
            }
            if (SHN_UNDEF == sym->st_shndx && 0 != sym->st_value) {
                if (!grow((void **) &scan->stubs, &scan->stubs_cap, scan->nstubs, sizeof(uintptr_t))) {
                    scan->rc = OPAL_ERR_OUT_OF_RESOURCE;
                    return;
                }
                scan->stubs[scan->nstubs++] = base + sym->st_value;
            }
            if (!grow((void **) &scan->slots, &scan->slots_cap, scan->nslots, sizeof(got_slot_t))) {
                scan->rc = OPAL_ERR_OUT_OF_RESOURCE;
                return;
            }
            scan->slots[scan->nslots++] = (got_slot_t) {
                .addr = base + rel->r_offset,
                .name = n,
                .object = object,
                .own_def = SHN_UNDEF != sym->st_shndx ? base + sym->st_value : 0,
            };
        }
    }
#endif
}

/*
 * Whether the loader has finished relocating the object mapped at addr.
 * glibc lists a new object (dl_iterate_phdr, the debugger's list) once it
 * is mapped, and makes it known to _dl_find_object only after relocating
 * it (glibc 2.35 and later).  The loads that pass our dlopen, dlmopen and
 * dlclose wait for our passes (the table's lock); one that does not
 * (glibc's own for NSS, iconv or libgcc_s, a dlopen whose address was
 * taken before our setup) may be half done: a slot we wrote then would
 * get the load address added (lazy binding: a crash at the first call)
 * or the definition written over it.  Such an object is left to the next
 * pass (the next dlopen or dlclose).
 */
static bool relocated(uintptr_t addr)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (2 == __GLIBC__ && __GLIBC_MINOR__ >= 35))
    struct dl_find_object found;
    return 0 == _dl_find_object((void *) addr, &found);
#else
    (void) addr;
    return true; /* not known before glibc 2.35 */
#endif
}

/* A pass left an object that was not relocated yet (table lock held): the next pass must run. */
static bool left_unrelocated;

bool mca_patcher_linux_got_left_unrelocated(void)
{
    return left_unrelocated;
}

/* The extent [start, end) of an object's PT_LOAD segments; start >= end: none. */
static void load_extent(const struct dl_phdr_info *info, uintptr_t *start, uintptr_t *end)
{
    *start = UINTPTR_MAX;
    *end = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (PT_LOAD == ph->p_type) {
            const uintptr_t seg = info->dlpi_addr + ph->p_vaddr;
            *start = seg < *start ? seg : *start;
            *end = seg + ph->p_memsz > *end ? seg + ph->p_memsz : *end;
        }
    }
}

void mca_patcher_linux_got_object_extent(uintptr_t addr, uintptr_t *start, uintptr_t *end)
{
    Dl_info info;
    struct link_map *map = NULL;
    *start = *end = 0;
    if (NULL == dladdr1 || 0 == dladdr1((void *) addr, &info, (void **) &map, RTLD_DL_LINKMAP) ||
        NULL == map || NULL == info.dli_fbase) {
        return;
    }
    /* Mapped at the start of the object, as foreach_object reads it. */
    const ElfW(Ehdr) *ehdr = info.dli_fbase;
    if (0 != memcmp(ehdr->e_ident, ELFMAG, SELFMAG)) {
        return;
    }
    const struct dl_phdr_info pi = {
        .dlpi_addr = map->l_addr,
        .dlpi_phdr = (const ElfW(Phdr) *) ((uintptr_t) ehdr + ehdr->e_phoff),
        .dlpi_phnum = ehdr->e_phnum,
    };
    load_extent(&pi, start, end);
    if (*start >= *end) {
        *start = *end = 0;
    }
}

static int scan_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    got_scan_t *scan = arg;
    const uintptr_t base = info->dlpi_addr;
    const ElfW(Phdr) *dynph = NULL;
    uintptr_t start, end;

    if (OPAL_SUCCESS != scan->rc || is_vdso(info)) {
        return 0;
    }
    load_extent(info, &start, &end);
    for (int i = 0; i < info->dlpi_phnum; i++) {
        if (PT_DYNAMIC == info->dlpi_phdr[i].p_type) {
            dynph = &info->dlpi_phdr[i];
        }
    }
    if (NULL == dynph || start >= end || (scan->skip_own && is_own(info, start, end))) {
        return 0;
    }
    if (!relocated(start)) {
        left_unrelocated = true;
        return 0;
    }
    const ElfW(Dyn) *dyn = (const ElfW(Dyn) *) (base + dynph->p_vaddr);
    uintptr_t symtab, strtab;
    if (!mca_patcher_base_dyn_get(dyn, DT_SYMTAB, &symtab) ||
        !mca_patcher_base_dyn_get(dyn, DT_STRTAB, &strtab)) {
        return 0;
    }
#define PTR(v) dyn_ptr(base, (v), info->dlpi_phdr, info->dlpi_phnum)
    const ElfW(Sym) *syms = (const ElfW(Sym) *) PTR(symtab);
    const char *strs = (const char *) PTR(strtab);

    if (!grow((void **) &scan->objects, &scan->objects_cap, scan->nobjects, sizeof(got_object_t))) {
        scan->rc = OPAL_ERR_OUT_OF_RESOURCE;
        return 0;
    }
    const int object = scan->nobjects++;
    scan->objects[object] = (got_object_t) {
        .start = start,
        .end = end,
        .dynamic = (uintptr_t) dyn,
        .how = NULL,
    };
    const char *name = info->dlpi_name[0] ? info->dlpi_name : "the executable";
    scan->objects[object].how = name; /* interned in phase two, outside the loader lock */

    /* PLT relocations: Rel or Rela as DT_PLTREL says. */
    uintptr_t jmprel, pltrelsz, pltrel = DT_RELA;
    if (mca_patcher_base_dyn_get(dyn, DT_JMPREL, &jmprel) &&
        mca_patcher_base_dyn_get(dyn, DT_PLTRELSZ, &pltrelsz)) {
        mca_patcher_base_dyn_get(dyn, DT_PLTREL, &pltrel);
        scan_table(scan, object, base, PTR(jmprel), pltrelsz,
                   DT_REL == pltrel ? sizeof(ElfW(Rel)) : sizeof(ElfW(Rela)), syms, strs);
    }
    /* The other relocations, where the GLOB_DAT entries are. */
    uintptr_t table, tsize, entsize;
    if (mca_patcher_base_dyn_get(dyn, DT_RELA, &table) &&
        mca_patcher_base_dyn_get(dyn, DT_RELASZ, &tsize)) {
        if (!mca_patcher_base_dyn_get(dyn, DT_RELAENT, &entsize)) {
            entsize = sizeof(ElfW(Rela));
        }
        scan_table(scan, object, base, PTR(table), tsize, entsize, syms, strs);
    }
    if (mca_patcher_base_dyn_get(dyn, DT_REL, &table) &&
        mca_patcher_base_dyn_get(dyn, DT_RELSZ, &tsize)) {
        if (!mca_patcher_base_dyn_get(dyn, DT_RELENT, &entsize)) {
            entsize = sizeof(ElfW(Rel));
        }
        scan_table(scan, object, base, PTR(table), tsize, entsize, syms, strs);
    }
#undef PTR
    return 0;
}

/*
 * Every loaded object of every namespace.  dl_iterate_phdr shows only the
 * caller's namespace (the base one, for us); the others (dlmopen) are found
 * through the loader's debugger interface, one r_debug per namespace, and
 * their program headers in their mapped ELF header.
 */
static void foreach_object(int (*fn)(struct dl_phdr_info *, size_t, void *), void *arg)
{
    dl_iterate_phdr(fn, arg);
    const struct r_debug_extended *ns = mca_patcher_base_dl_namespaces();
    if (NULL == ns || NULL == dladdr) {
        return;
    }
    while (NULL != (ns = mca_patcher_base_dl_next_namespace(ns))) {
        for (const struct link_map *map = ns->base.r_map; NULL != map; map = map->l_next) {
            Dl_info info;
            if (0 == dladdr(map->l_ld, &info) || NULL == info.dli_fbase) {
                continue;
            }
            const ElfW(Ehdr) *ehdr = info.dli_fbase;
            struct dl_phdr_info pi = {
                .dlpi_addr = map->l_addr,
                .dlpi_name = map->l_name ? map->l_name : "",
                .dlpi_phdr = (const ElfW(Phdr) *) ((uintptr_t) ehdr + ehdr->e_phoff),
                .dlpi_phnum = ehdr->e_phnum,
            };
            if (0 != fn(&pi, sizeof(pi), arg)) {
                return;
            }
        }
    }
}

/*
 * Whether the object whose dynamic section is at 'dynamic' is still loaded,
 * by the loader's debugger interface: readable without any loader lock
 * (debuggers read it from outside), so safe under the base's patch list
 * mutex.  An object can be unloaded behind our back by a dlclose that is
 * not watched: our own library closing a DSO component it had loaded.
 */
static bool object_loaded(uintptr_t dynamic)
{
    const struct r_debug_extended *ns = mca_patcher_base_dl_namespaces();
    for (; NULL != ns; ns = mca_patcher_base_dl_next_namespace(ns)) {
        for (const struct link_map *map = ns->base.r_map; NULL != map; map = map->l_next) {
            if ((uintptr_t) map->l_ld == dynamic) {
                return true;
            }
        }
    }
    return false;
}

static void scan_free(got_scan_t *scan)
{
    free(scan->objects);
    free(scan->slots);
    free(scan->stubs);
}

static int scan_run(got_scan_t *scan)
{
    foreach_object(scan_object, scan);
    if (OPAL_SUCCESS != scan->rc) {
        opal_output("patcher linux: out of memory while scanning the loaded objects");
        return scan->rc;
    }
    /* Object names may be freed by a later dlclose: copy them now. */
    for (int i = 0; i < scan->nobjects; i++) {
        scan->objects[i].how = intern_how(scan->objects[i].how);
    }
    return OPAL_SUCCESS;
}

static bool is_stub(const got_scan_t *scan, uintptr_t value)
{
    for (int i = 0; i < scan->nstubs; i++) {
        if (scan->stubs[i] == value) {
            return true;
        }
    }
    return false;
}

/* The namespace of an object, and its handle; false without the dl functions. */
static bool object_namespace(const got_object_t *obj, struct link_map **map, Lmid_t *lmid)
{
    Dl_info info;
    if (NULL == dladdr1 || NULL == dlinfo ||
        0 == dladdr1((void *) obj->dynamic, &info, (void **) map, RTLD_DL_LINKMAP) || NULL == *map ||
        0 != dlinfo(*map, RTLD_DI_LMID, lmid)) {
        return false;
    }
    return true;
}

/*
 * What a slot's calls reach: its value once bound; while still lazily
 * bound (it points at its own object's PLT) the definition the loader
 * would bind, found in the object's own scope.  Where the loader cannot
 * be asked as the object: the global scope of the object's namespace
 * first, then the object's own dependencies (it may have been loaded
 * RTLD_LOCAL; this misses RTLD_DEEPBIND, which puts them first).
 */
static uintptr_t slot_definition(const got_scan_t *scan, const got_slot_t *slot, uintptr_t value,
                                 const char *symbol)
{
    const got_object_t *obj = &scan->objects[slot->object];
    if (value < obj->start || value >= obj->end || value == slot->own_def) {
        return value;
    }
    uintptr_t def = 0;
    struct link_map *map;
    Lmid_t lmid;
    if (!mca_patcher_linux_loader_dlsym_as((const void *) obj->dynamic, RTLD_DEFAULT, symbol,
                                           &def)) {
        if (!object_namespace(obj, &map, &lmid)) {
            return 0;
        }
        def = LM_ID_BASE == lmid ? (uintptr_t) mca_patcher_linux_loader_dlsym(RTLD_DEFAULT, symbol)
                                 : 0;
        if (0 == def) {
            def = (uintptr_t) mca_patcher_linux_dlsym_in(map, lmid, symbol);
        }
    }
    /* dlsym finds a program's canonical PLT entry, which the binding of a
     * PLT slot passes over. */
    return is_stub(scan, def) ? mca_patcher_linux_loader_past_plt_entry(def, symbol) : def;
}

static bool in_base_namespace(const got_object_t *obj)
{
    struct link_map *map;
    Lmid_t lmid;
    return object_namespace(obj, &map, &lmid) && LM_ID_BASE == lmid;
}

/*
 * The object holding def if def is a variable's definition (its GOT slots
 * hold the address that loads and stores use: writing an intercept there
 * makes them read and write our code), else NULL.
 */
static const char *variable_in(uintptr_t def)
{
    Dl_info info;
    const ElfW(Sym) *sym = NULL;
    if (NULL == dladdr1 || 0 == dladdr1((void *) def, &info, (void **) &sym, RTLD_DL_SYMENT) ||
        NULL == sym || info.dli_saddr != (void *) def) {
        return NULL;
    }
    /* st_info is laid out alike in both classes. */
    switch (ELF32_ST_TYPE(sym->st_info)) {
    case STT_OBJECT:
    case STT_COMMON:
    case STT_TLS:
        return info.dli_fname && info.dli_fname[0] ? info.dli_fname : "the program";
    default:
        return NULL;
    }
}

int mca_patcher_linux_got_chain(const char *symbol, uintptr_t new_addr, uintptr_t *chain)
{
    const char *names[] = {symbol};
    got_scan_t scan = {.names = names, .nnames = 1, .skip_own = false};
    int rc = scan_run(&scan);
    *chain = 0;
    /* What the program's own calls reach: the first bound slot of the base
     * namespace in load order (the executable first); failing that, what
     * the first lazily bound one will bind to. */
    for (int lazy = 0; lazy < 2 && 0 == *chain; lazy++) {
        for (int i = 0; OPAL_SUCCESS == rc && i < scan.nslots && 0 == *chain; i++) {
            const got_slot_t *slot = &scan.slots[i];
            const got_object_t *obj = &scan.objects[slot->object];
            uintptr_t value = __atomic_load_n((uintptr_t *) slot->addr, __ATOMIC_ACQUIRE);
            bool bound = value < obj->start || value >= obj->end || value == slot->own_def;
            if (value == new_addr || 0 == value || bound == (bool) lazy || !in_base_namespace(obj)) {
                continue;
            }
            uintptr_t def = lazy ? slot_definition(&scan, slot, value, symbol) : value;
            if (!is_stub(&scan, def) && def != new_addr) {
                *chain = def;
            }
        }
    }
    if (OPAL_SUCCESS == rc && 0 == *chain) {
        *chain = (uintptr_t) mca_patcher_linux_loader_dlsym(RTLD_DEFAULT, symbol);
        if (0 == *chain) {
            opal_output_verbose(VERBOSE, 1, "patcher linux: no loaded object defines %s", symbol);
            rc = OPAL_ERR_NOT_FOUND;
        } else if (is_stub(&scan, *chain)) {
            opal_output("patcher linux: %s resolves to the executable's PLT stub only "
                        "(a non-PIE program taking its address): no definition to chain to",
                        symbol);
            rc = OPAL_ERR_NOT_SUPPORTED;
        }
    }
    const char *variable = OPAL_SUCCESS == rc ? variable_in(*chain) : NULL;
    if (NULL != variable) {
        opal_output("patcher linux: cannot redirect %s: it is a variable (in %s), not a function",
                    symbol, variable);
        rc = OPAL_ERR_NOT_SUPPORTED;
    }
    scan_free(&scan);
    return rc;
}

typedef struct got_write_t {
    uintptr_t slot;
    uintptr_t value;
} got_write_t;

/* One aligned 8-byte store: a thread calling through the slot sees old or new. */
static void got_store(void *arg)
{
    const got_write_t *w = arg;
    __atomic_store_n((uintptr_t *) w->slot, w->value, __ATOMIC_SEQ_CST);
}

static int got_write(uintptr_t slot, uintptr_t value, const char *symbol)
{
    got_write_t w = {.slot = slot, .value = value};
    const char *reason = NULL;
    int rc = mca_patcher_base_with_writable(slot, sizeof(uintptr_t), got_store, &w, &reason);
    if (OPAL_SUCCESS != rc) {
        opal_output("patcher linux: cannot write the GOT slot of %s at %p: %s", symbol,
                    (void *) slot, reason ? reason : "unknown reason");
    }
    return rc;
}

mca_patcher_linux_slot_restore_t mca_patcher_linux_got_restore(mca_patcher_base_patch_t *patch)
{
    if (!object_loaded((uintptr_t) patch->patch_component_data)) {
        opal_output_verbose(VERBOSE, 20,
                            "patcher linux: %s: not restoring the slot at %p (%s): unloaded",
                            patch->patch_symbol, (void *) patch->patch_orig, patch->patch_how);
        return MCA_PATCHER_LINUX_SLOT_UNLOADED;
    }
    uintptr_t now = __atomic_load_n((uintptr_t *) patch->patch_orig, __ATOMIC_ACQUIRE);
    if (now != patch->patch_value) {
        /* Another hooker patched over us and chains to our intercept (it
         * found it where we had put it, or through our dlsym): writing the
         * old value back would cut it out.  Our intercepts stay loaded
         * (the core library, or this component pinned when handed out). */
        opal_output_verbose(VERBOSE, 10,
                            "patcher linux: the GOT slot of %s at %p (%s) was patched over by "
                            "another hooker; leaving its value",
                            patch->patch_symbol, (void *) patch->patch_orig, patch->patch_how);
        return MCA_PATCHER_LINUX_SLOT_LEFT;
    }
    uintptr_t orig;
    memcpy(&orig, patch->patch_orig_data, sizeof(orig));
    got_write(patch->patch_orig, orig, patch->patch_symbol);
    return MCA_PATCHER_LINUX_SLOT_RESTORED;
}

/* The restore function of a hook without one of its own. */
static void got_restore(mca_patcher_base_patch_t *patch)
{
    (void) mca_patcher_linux_got_restore(patch);
}

static void hook_note_definition(mca_patcher_linux_hook_t *hook, uintptr_t def)
{
    for (int i = 0; i < hook->ndefs; i++) {
        if (hook->defs[i] == def) {
            return;
        }
    }
    /* A place cleared by an unload first (mca_patcher_linux_after_close). */
    for (int i = 1; i < hook->ndefs; i++) {
        if (0 == hook->defs[i]) {
            __atomic_store_n(&hook->defs[i], def, __ATOMIC_RELEASE);
            return;
        }
    }
    if (hook->ndefs < MCA_PATCHER_LINUX_MAX_DEFS) {
        __atomic_store_n(&hook->defs[hook->ndefs], def, __ATOMIC_RELEASE);
        __atomic_store_n(&hook->ndefs, hook->ndefs + 1, __ATOMIC_RELEASE);
    }
}

/* The table of redirections, as the table floor hands it down. */
typedef struct got_table_t {
    mca_patcher_linux_hook_t *hooks;
    int n;
} got_table_t;

/* The intercept of the hook of every slot of symbol (patch_symbol's), or 0. */
static uintptr_t every_slot_value(const got_table_t *table, const char *symbol)
{
    for (int h = 0; h < table->n; h++) {
        if (0 == table->hooks[h].only_def && 0 == strcmp(table->hooks[h].symbol, symbol)) {
            return table->hooks[h].value;
        }
    }
    return 0;
}

/*
 * What a pass reads of our record of a slot, copied under the list's lock:
 * the base's restore at finalize (mca_patcher_base_fini) runs without the
 * table's lock that a pass holds, and frees a record once it is undone.
 */
typedef struct slot_record_t {
    const char *symbol, *how;
    uintptr_t value, orig;
} slot_record_t;

/* Our record of the slot at addr (the list's lock held), or NULL. */
static mca_patcher_base_patch_t *listed_record(uintptr_t addr)
{
    mca_patcher_base_patch_t *patch, *found = NULL;
    OPAL_LIST_FOREACH (patch, &mca_patcher_linux_module.patch_list, mca_patcher_base_patch_t) {
        if (patch->patch_orig == addr) {
            found = patch;
        }
    }
    return found;
}

/* A copy of our record of the slot at addr into *copy; false if there is none. */
static bool find_record(uintptr_t addr, slot_record_t *copy)
{
    mca_patcher_base_module_t *module = &mca_patcher_linux_module;
    pthread_mutex_lock(&module->patch_list_mutex);
    const mca_patcher_base_patch_t *record = listed_record(addr);
    if (NULL != record) {
        *copy = (slot_record_t){.symbol = record->patch_symbol,
                                .how = record->patch_how,
                                .value = record->patch_value};
        memcpy(&copy->orig, record->patch_orig_data, sizeof(copy->orig));
    }
    pthread_mutex_unlock(&module->patch_list_mutex);
    return NULL != record;
}

static bool known_definition(const mca_patcher_linux_hook_t *hook, uintptr_t def)
{
    for (int i = 0; i < hook->ndefs && i < MCA_PATCHER_LINUX_MAX_DEFS; i++) {
        if (hook->defs[i] == def) {
            return true;
        }
    }
    return false;
}

/*
 * Whether def is redirected by a hook of its own (patch_definition: one
 * copy of the function, with a chain of its own), which the hook of every
 * slot of the symbol leaves it to.
 */
static bool claimed(const got_table_t *table, const mca_patcher_linux_hook_t *hook, uintptr_t def)
{
    for (int h = 0; h < table->n; h++) {
        const mca_patcher_linux_hook_t *other = &table->hooks[h];
        if (other->only_def == def && !other->retired && 0 == strcmp(other->symbol, hook->symbol)) {
            return true;
        }
    }
    return false;
}

/*
 * The hook's value into a slot we patched before, while our record of it
 * is still listed as copied: else a restore in another thread undid it
 * meanwhile (the slot holds its original again), and a write now would
 * leave a slot patched that no record restores.  The list's lock is held
 * across the write, as a restore holds it across its own.  take: the
 * record becomes the hook's (the hook of one definition takes it over).
 */
static int rewrite_recorded(const got_slot_t *slot, const mca_patcher_linux_hook_t *hook,
                            const slot_record_t *copy, bool take, bool *wrote)
{
    mca_patcher_base_module_t *module = &mca_patcher_linux_module;
    int rc = OPAL_SUCCESS;
    pthread_mutex_lock(&module->patch_list_mutex);
    mca_patcher_base_patch_t *record = listed_record(slot->addr);
    if (NULL != record && record->patch_value == copy->value) {
        rc = got_write(slot->addr, hook->value, hook->symbol);
        *wrote |= OPAL_SUCCESS == rc;
        if (OPAL_SUCCESS == rc && take) {
            record->patch_value = hook->value;
            record->patch_chain = hook->only_def;
            memcpy(record->patch_data, &hook->value, sizeof(hook->value));
        }
    }
    pthread_mutex_unlock(&module->patch_list_mutex);
    return rc;
}

/*
 * A slot we patched already, for a hook of one definition: if our hook of
 * every slot of the symbol holds it, and its original value reaches that
 * definition, it becomes this hook's (the same record: what is restored
 * stays the original value).  Anything else is left as it is.
 */
static int take_over(const got_scan_t *scan, const got_table_t *table, const got_slot_t *slot,
                     mca_patcher_linux_hook_t *hook, const slot_record_t *copy, bool *wrote)
{
    if (0 != strcmp(copy->symbol, hook->symbol) ||
        copy->value != every_slot_value(table, hook->symbol) ||
        slot_definition(scan, slot, copy->orig, hook->symbol) != hook->only_def) {
        return OPAL_SUCCESS;
    }
    opal_output_verbose(VERBOSE, 20, "patcher linux: %s: %s at %p -> %p (its own copy's)",
                        hook->symbol, copy->how, (void *) slot->addr, (void *) hook->value);
    return rewrite_recorded(slot, hook, copy, true, wrote);
}

/* Patch one slot; *wrote tells whether it was written. */
static int patch_slot(const got_scan_t *scan, const got_table_t *table, const got_slot_t *slot,
                      mca_patcher_linux_hook_t *hook, bool *wrote)
{
    uintptr_t value = __atomic_load_n((uintptr_t *) slot->addr, __ATOMIC_ACQUIRE);
    if (value == hook->value || hook->retired) {
        return OPAL_SUCCESS; /* patched already (or listed twice) */
    }
    slot_record_t record;
    const bool ours = find_record(slot->addr, &record);
    if (ours && 0 != hook->only_def) {
        return take_over(scan, table, slot, hook, &record, wrote);
    }
    if (ours) {
        /* We patched this slot and someone wrote it since.  Back to what we
         * chain to (a hooker re-applying its patches, UCX's libucm after
         * every dlopen): put ourselves in front again, the chain is the
         * same.  Anything else is a hooker stacked on top of us, that
         * chains to our intercept: leave it. */
        if (!known_definition(hook, value)) {
            opal_output_verbose(VERBOSE, 20,
                                "patcher linux: %s: %s at %p holds %p now, another hooker's: "
                                "left to it",
                                hook->symbol, record.how, (void *) slot->addr, (void *) value);
            return OPAL_SUCCESS;
        }
        opal_output_verbose(VERBOSE, 20,
                            "patcher linux: %s: %s at %p was reset to %p by someone else; "
                            "patched again",
                            hook->symbol, record.how, (void *) slot->addr, (void *) value);
        return rewrite_recorded(slot, hook, &record, false, wrote);
    }
    uintptr_t def = slot_definition(scan, slot, value, hook->symbol);
    if (0 == def) {
        return OPAL_SUCCESS; /* binds to nothing (weak undefined): never called */
    }
    if (0 != hook->only_def && def != hook->only_def) {
        return OPAL_SUCCESS; /* another copy's: another hook's, or nobody's */
    }
    if (0 == hook->only_def && claimed(table, hook, def)) {
        return OPAL_SUCCESS; /* a redirection of this very definition patches it */
    }
    /* Another definition in the very object of the chain is another
     * version of the symbol (foo@V1 beside foo@@V2): a function of its own,
     * which the intercept does not chain to. */
    if (def != hook->defs[0] &&
        (hook->per_copy_state || mca_patcher_linux_in_chain_object(hook, def))) {
        opal_output_verbose(VERBOSE, 10,
                            "patcher linux: leaving %s's slot at %p in %s alone: it reaches "
                            "another copy or version of the function (%p, not %p)",
                            hook->symbol, (void *) slot->addr, scan->objects[slot->object].how,
                            (void *) def, (void *) hook->defs[0]);
        return OPAL_SUCCESS;
    }
    mca_patcher_base_patch_t *patch = mca_patcher_base_patch_new();
    if (NULL == patch) {
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    patch->patch_symbol = hook->symbol;
    patch->patch_value = hook->value;
    patch->patch_orig = slot->addr;
    patch->patch_chain = hook->defs[0];
    memcpy(patch->patch_orig_data, &value, sizeof(value));
    memcpy(patch->patch_data, &hook->value, sizeof(hook->value));
    patch->patch_data_size = sizeof(uintptr_t);
    patch->patch_how = scan->objects[slot->object].how;
    patch->patch_restore = NULL != hook->restore ? hook->restore : got_restore;
    patch->patch_component_data = (void *) scan->objects[slot->object].dynamic;
    int rc = got_write(slot->addr, hook->value, hook->symbol);
    if (OPAL_SUCCESS != rc) {
        free(patch);
        return rc;
    }
    *wrote = true;
    hook_note_definition(hook, def);
    mca_patcher_base_patch_add(&mca_patcher_linux_module, patch);
    opal_output_verbose(VERBOSE, 20, "patcher linux: %s: %s at %p -> %p", hook->symbol,
                        patch->patch_how, (void *) slot->addr, (void *) hook->value);
    return OPAL_SUCCESS;
}

static int got_patch_pass(const got_table_t *table, int first, int count, bool *wrote)
{
    const char *names[MCA_PATCHER_LINUX_MAX_HOOKS];
    mca_patcher_linux_hook_t *hooks = table->hooks + first;
    for (int h = 0; h < count; h++) {
        names[h] = hooks[h].symbol;
    }
    got_scan_t scan = {.names = names, .nnames = count, .skip_own = true};
    int rc = scan_run(&scan);
    /* Hooks in the order they were made: a later hook of the same symbol
     * chains to an earlier one, so it must find that one in place. */
    for (int h = 0; OPAL_SUCCESS == rc && h < count; h++) {
        for (int i = 0; OPAL_SUCCESS == rc && i < scan.nslots; i++) {
            if (0 == strcmp(names[scan.slots[i].name], hooks[h].symbol)) {
                rc = patch_slot(&scan, table, &scan.slots[i], &hooks[h], wrote);
            }
        }
    }
    scan_free(&scan);
    return rc;
}

int mca_patcher_linux_got_patch(mca_patcher_linux_hook_t *hooks, int n, int first, int count)
{
    const got_table_t table = {.hooks = hooks, .n = n};
    /* The dlopen we chain to may be another hooker's that re-applies its
     * patches to every object after each call (UCX's libucm): our own
     * lookups during a pass (mca_patcher_linux_dlsym_in) can then undo
     * slots written earlier in it.  Repeat until a pass writes nothing. */
    int rc = OPAL_SUCCESS;
    left_unrelocated = false;
    for (int pass = 0; pass < 4 && OPAL_SUCCESS == rc; pass++) {
        bool wrote = false;
        rc = got_patch_pass(&table, first, count, &wrote);
        if (!wrote) {
            break;
        }
    }
    return rc;
}

/* --- forgetting what was unloaded --- */

/*
 * Filter for mca_patcher_base_restore_patches: a record whose object is
 * gone is dropped without being written (its restore function is cleared
 * before the base would call it).
 */
static bool slot_unloaded(mca_patcher_base_patch_t *patch, void *arg)
{
    if (object_loaded((uintptr_t) patch->patch_component_data)) {
        return false;
    }
    opal_output_verbose(VERBOSE, 20, "patcher linux: %s: forgetting the slot at %p (%s): unloaded",
                        patch->patch_symbol, (void *) patch->patch_orig, patch->patch_how);
    patch->patch_restore = NULL;
    return true;
}

void mca_patcher_linux_got_drop_unloaded(void)
{
    mca_patcher_base_restore_patches(&mca_patcher_linux_module, slot_unloaded, NULL);
}

/* Filter for mca_patcher_base_restore_patches: a record of a slot given to the hook arg. */
static bool slot_of_hook(mca_patcher_base_patch_t *patch, void *arg)
{
    const mca_patcher_linux_hook_t *hook = arg;
    return patch->patch_value == hook->value && NULL != patch->patch_symbol &&
           0 == strcmp(patch->patch_symbol, hook->symbol);
}

void mca_patcher_linux_got_restore_hook(const mca_patcher_linux_hook_t *hook)
{
    mca_patcher_base_restore_patches(&mca_patcher_linux_module, slot_of_hook, (void *) hook);
}

/* --- can this process be patched at all --- */

static int find_dynamic(struct dl_phdr_info *info, size_t size, void *arg)
{
    if (is_vdso(info)) {
        return 0;
    }
    for (int i = 0; i < info->dlpi_phnum; i++) {
        if (PT_DYNAMIC == info->dlpi_phdr[i].p_type) {
            *(bool *) arg = true;
            return 1;
        }
    }
    return 0;
}

bool mca_patcher_linux_have_dynamic(const char **reason)
{
#if !MCA_PATCHER_LINUX_HAVE_RELOC
    *reason = "the GOT relocation types of this architecture are not known to the linux patcher";
    return false;
#else
    bool found = false;
    dl_iterate_phdr(find_dynamic, &found);
    if (!found) {
        *reason = "the process has no dynamic linking (a static executable): no loaded object "
                  "has a dynamic section, so there is no GOT to patch";
        return false;
    }
    if (NULL == dlsym || NULL == dladdr1 || NULL == dlinfo) {
        *reason = "the dynamic loader's functions (dlsym, dladdr1, dlinfo) are not linked into "
                  "this program (a static executable)";
        return false;
    }
    return true;
#endif
}
