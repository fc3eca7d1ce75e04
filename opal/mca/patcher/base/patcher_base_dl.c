/*
 * For intercepts of dlopen and dlmopen (a GOT slot's, or the function's
 * own entry): the loader judges a dlopen by its return address (the
 * calling object's namespace, DT_RPATH/DT_RUNPATH and $ORIGIN), and an
 * intercept calling the real dlopen would be judged as the caller.  So for
 * a name without '/' the intercept does the caller's part of the search
 * itself and hands the loader a path, into the caller's namespace; the
 * loader's own part (its cache, the default directories) is the same for
 * everyone.  The caller's part, reproduced here:
 *
 *   1. an object of the namespace already loaded under that name or soname;
 *   2. unless the caller has DT_RUNPATH: the caller's DT_RPATH, then the
 *      executable's DT_RPATH;
 *   3. LD_LIBRARY_PATH as the program started with it (not in secure mode);
 *   4. the caller's DT_RUNPATH;
 *   5. (the loader's cache and default directories: left to the loader).
 *
 * Dynamic string tokens $ORIGIN, $LIB and $PLATFORM are expanded.  Known
 * gaps (each rare): the DT_RPATH of the objects between the caller and the
 * executable in the loading chain (private to the loader), names an object
 * was earlier opened under other than its path and soname, and the
 * glibc-hwcaps subdirectories of the search directories.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "opal/mca/patcher/base/base.h"
#include "opal/mca/patcher/base/base_dl.h"
#include "opal/util/output.h"

#pragma weak dladdr
#pragma weak dladdr1
#pragma weak dlinfo
#pragma weak _r_debug

/*
 * LD_LIBRARY_PATH as the program started with it ("" when unset).  Read
 * once and kept for the life of the process: the dlopen intercepts walk it
 * without a lock, in any thread, also while the patcher is finalized, and
 * it never changes.
 */
static char *ld_library_path;

/*
 * The base's r_debug heads a chain of r_debug_extended, one per namespace,
 * from version 2 on (link.h).  The declared type is the short struct: the
 * pointer's origin is hidden from the compiler, which would otherwise
 * judge r_next out of bounds.
 */
const struct r_debug_extended *mca_patcher_base_dl_namespaces(void)
{
    if (NULL == &_r_debug) {
        return NULL;
    }
    uintptr_t p = (uintptr_t) &_r_debug;
    __asm__("" : "+r"(p));
    return (const struct r_debug_extended *) p;
}

const struct r_debug_extended *mca_patcher_base_dl_next_namespace(const struct r_debug_extended *ns)
{
    /* The chain exists when the base namespace's r_debug says version 2. */
    return _r_debug.r_version >= 2 ? ns->r_next : NULL;
}

bool mca_patcher_base_dyn_get(const ElfW(Dyn) *dyn, ElfW(Sxword) tag, uintptr_t *value)
{
    for (; dyn->d_tag != DT_NULL; dyn++) {
        if (dyn->d_tag == tag) {
            *value = dyn->d_un.d_val;
            return true;
        }
    }
    return false;
}

struct link_map *mca_patcher_base_dl_caller(const void *addr, Lmid_t *lmid)
{
    Dl_info info;
    struct link_map *map = NULL;
    *lmid = LM_ID_BASE;
    if (NULL == dladdr1 || 0 == dladdr1(addr, &info, (void **) &map, RTLD_DL_LINKMAP) ||
        NULL == map) {
        /* As the loader does for code it cannot place: the program. */
        return &_r_debug ? _r_debug.r_map : NULL;
    }
    if (NULL != dlinfo) {
        dlinfo(map, RTLD_DI_LMID, lmid);
    }
    return map;
}

/* A d_ptr of a link_map's dynamic section: adjusted in place by glibc, or not. */
static uintptr_t map_ptr(const struct link_map *map, uintptr_t v)
{
    return v >= map->l_addr ? v : map->l_addr + v;
}

/* The string of a DT_RPATH/DT_RUNPATH/DT_SONAME entry, or NULL. */
static const char *dyn_string(const struct link_map *map, ElfW(Sxword) tag)
{
    uintptr_t strtab, off;
    if (NULL == map->l_ld || !mca_patcher_base_dyn_get(map->l_ld, DT_STRTAB, &strtab) ||
        !mca_patcher_base_dyn_get(map->l_ld, tag, &off)) {
        return NULL;
    }
    return (const char *) map_ptr(map, strtab) + off;
}

bool mca_patcher_base_dl_loaded(struct link_map *caller, const char *name)
{
    struct link_map *map = caller;
    while (map->l_prev) {
        map = map->l_prev;
    }
    for (; map; map = map->l_next) {
        const char *soname = dyn_string(map, DT_SONAME);
        if ((map->l_name && 0 == strcmp(map->l_name, name)) || (soname && 0 == strcmp(soname, name))) {
            return true;
        }
    }
    return false;
}

static bool dirname_of(const char *file, char *out, size_t size)
{
    char real[PATH_MAX];
    if ('/' != file[0]) {
        if (NULL == realpath(file, real)) {
            return false;
        }
        file = real;
    }
    const char *slash = strrchr(file, '/');
    size_t len = slash == file ? 1 : (size_t) (slash - file);
    if (len >= size) {
        return false;
    }
    memcpy(out, file, len);
    out[len] = '\0';
    return true;
}

static bool origin_of(const struct link_map *map, char *out, size_t size)
{
    if (NULL == map->l_name || '\0' == map->l_name[0]) {
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        if (n <= 0) {
            return false;
        }
        exe[n] = '\0';
        return dirname_of(exe, out, size);
    }
    return dirname_of(map->l_name, out, size);
}

/* $LIB: where this system keeps libc, relative to '/' (lib/x86_64-linux-gnu, lib64 …). */
static bool lib_dir(char *out, size_t size)
{
    Dl_info info;
    char dir[PATH_MAX];
    if (NULL == dladdr || 0 == dladdr((void *) abort, &info) || NULL == info.dli_fname ||
        !dirname_of(info.dli_fname, dir, sizeof(dir)) || strlen(dir) >= size) {
        return false;
    }
    strcpy(out, dir + ('/' == dir[0]));
    return true;
}

/* Length of a token name at s ($NAME or ${NAME}) if it is name, else 0. */
static size_t token(const char *s, const char *name)
{
    size_t n = strlen(name);
    if ('{' == s[0]) {
        return 0 == strncmp(s + 1, name, n) && '}' == s[n + 1] ? n + 2 : 0;
    }
    if (0 != strncmp(s, name, n)) {
        return 0;
    }
    char c = s[n];
    bool ident = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || '_' == c;
    return ident ? 0 : n;
}

bool mca_patcher_base_dl_expand(struct link_map *caller, const char *in, char *out, size_t size)
{
    size_t o = 0;
    while (*in) {
        char value[PATH_MAX];
        size_t len = 0;
        if ('$' != *in) {
            if (o + 1 >= size) {
                return false;
            }
            out[o++] = *in++;
            continue;
        }
        /* In a setuid program the loader trusts no token here. */
        if (getauxval(AT_SECURE)) {
            return false;
        }
        in++;
        if ((len = token(in, "ORIGIN"))) {
            if (!origin_of(caller, value, sizeof(value))) {
                return false;
            }
        } else if ((len = token(in, "LIB"))) {
            if (!lib_dir(value, sizeof(value))) {
                return false;
            }
        } else if ((len = token(in, "PLATFORM"))) {
            const char *platform = (const char *) getauxval(AT_PLATFORM);
            if (NULL == platform || strlen(platform) >= sizeof(value)) {
                return false;
            }
            strcpy(value, platform);
        } else {
            return false; /* an unknown token: the loader drops the entry too */
        }
        in += len;
        size_t vlen = strlen(value);
        if (o + vlen >= size) {
            return false;
        }
        memcpy(out + o, value, vlen);
        o += vlen;
    }
    out[o] = '\0';
    return true;
}

/* Whether path is a file the loader would take: an ELF object of our kind. */
static bool loadable(const char *path)
{
    static const unsigned char native_class = sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32;
    ElfW(Ehdr) ehdr;
    const ElfW(Ehdr) *own = NULL;
    Dl_info info;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return false;
    }
    ssize_t n = read(fd, &ehdr, sizeof(ehdr));
    close(fd);
    if (NULL != dladdr && 0 != dladdr((void *) &mca_patcher_base_dl_search, &info)) {
        own = info.dli_fbase;
    }
    return n == (ssize_t) sizeof(ehdr) && 0 == memcmp(ehdr.e_ident, ELFMAG, SELFMAG) &&
           native_class == ehdr.e_ident[EI_CLASS] &&
           (NULL == own || own->e_machine == ehdr.e_machine);
}

/* Try name in each directory of a colon-separated list (tokens expanded for owner). */
static bool search_list(const char *list, struct link_map *owner, const char *name, char *path,
                        size_t size)
{
    char dir[PATH_MAX];
    while (list && *list) {
        size_t len = strcspn(list, ":;");
        char raw[PATH_MAX];
        if (len < sizeof(raw)) {
            memcpy(raw, list, len);
            raw[len] = '\0';
            /* An empty entry is the current directory. */
            if (mca_patcher_base_dl_expand(owner, len ? raw : ".", dir, sizeof(dir)) &&
                strlen(dir) + 1 + strlen(name) < size) {
                strcpy(path, dir);
                strcat(path, "/");
                strcat(path, name);
                if (loadable(path)) {
                    return true;
                }
            }
        }
        list += len;
        if (*list) {
            list++;
        }
    }
    return false;
}

/* LD_LIBRARY_PATH from the initial environment: the loader read it at startup. */
static const char *initial_ld_library_path(void)
{
    char *known = __atomic_load_n(&ld_library_path, __ATOMIC_ACQUIRE);
    if (NULL != known) {
        return known;
    }
    static const char key[] = "LD_LIBRARY_PATH=";
    char *found = NULL;
    int fd = open("/proc/self/environ", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        size_t cap = 1 << 16, len = 0;
        char *buf = malloc(cap + 1);
        ssize_t n;
        while (buf && (n = read(fd, buf + len, cap - len)) > 0) {
            len += (size_t) n;
            if (len == cap) {
                char *bigger = realloc(buf, 2 * cap + 1);
                if (NULL == bigger) {
                    break;
                }
                buf = bigger;
                cap *= 2;
            }
        }
        close(fd);
        if (buf) {
            buf[len] = '\0';
            for (size_t i = 0; i < len; i += strlen(buf + i) + 1) {
                if (0 == strncmp(buf + i, key, sizeof(key) - 1)) {
                    found = strdup(buf + i + sizeof(key) - 1);
                    break;
                }
            }
            free(buf);
        }
    } else if (getenv("LD_LIBRARY_PATH")) {
        found = strdup(getenv("LD_LIBRARY_PATH"));
    }
    found = found ? found : strdup("");
    if (NULL == found) {
        return "";
    }
    /* Threads that read it at once: the first copy published stays, the others go. */
    if (!__atomic_compare_exchange_n(&ld_library_path, &known, found, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        free(found);
        return known;
    }
    return found;
}

bool mca_patcher_base_dl_search(struct link_map *caller, const char *name, char *path, size_t size)
{
    if (NULL == dyn_string(caller, DT_RUNPATH)) {
        if (search_list(dyn_string(caller, DT_RPATH), caller, name, path, size)) {
            return true;
        }
        struct link_map *program = &_r_debug ? _r_debug.r_map : NULL;
        if (NULL != program && program != caller &&
            search_list(dyn_string(program, DT_RPATH), program, name, path, size)) {
            return true;
        }
    }
    if (!getauxval(AT_SECURE) && NULL != &_r_debug &&
        search_list(initial_ld_library_path(), _r_debug.r_map, name, path, size)) {
        return true;
    }
    return search_list(dyn_string(caller, DT_RUNPATH), caller, name, path, size);
}

void *mca_patcher_base_dl_open_for(const void *caller_addr, bool explicit_ns, Lmid_t lmid,
                                   const char *file, int mode, mca_patcher_base_dlopen_fn_t real_dlopen,
                                   mca_patcher_base_dlmopen_fn_t real_dlmopen)
{
    char expanded[PATH_MAX], path[PATH_MAX];
    Lmid_t caller_ns = LM_ID_BASE;
    struct link_map *caller = NULL;
    const char *name = file;

    if (NULL != file) {
        caller = mca_patcher_base_dl_caller(caller_addr, &caller_ns);
    }
    if (!explicit_ns) {
        lmid = caller_ns;
    }
    if (NULL != caller && strchr(file, '$') &&
        mca_patcher_base_dl_expand(caller, file, expanded, sizeof(expanded))) {
        name = expanded;
    }
    if (NULL != caller && NULL == strchr(name, '/') &&
        !(lmid == caller_ns && mca_patcher_base_dl_loaded(caller, name)) &&
        mca_patcher_base_dl_search(caller, name, path, sizeof(path))) {
        name = path;
    }
    if (explicit_ns || LM_ID_BASE != lmid) {
        return real_dlmopen(lmid, name, mode);
    }
    return real_dlopen(name, mode);
}

void mca_patcher_base_dl_keep_loaded(const void *code, mca_patcher_base_dlopen_fn_t real_dlopen,
                                     const char *why)
{
    Dl_info info;
    void *map;
    if (NULL == dladdr1 || NULL == real_dlopen || 0 == dladdr1(code, &info, &map, RTLD_DL_LINKMAP) ||
        NULL == info.dli_fname || NULL == ((struct link_map *) map)->l_prev) {
        return;
    }
    (void) real_dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
    opal_output_verbose(opal_patcher_base_framework.framework_verbose, 10, "patcher: %s: %s stays loaded",
                        why, info.dli_fname);
}
