/*
 * Calls made as the caller (base_call_as.h): finding a return gadget in
 * the object the loader would take the caller to be.
 *
 * That object is the one holding the caller's return address, or the
 * program when none does (the loader's own rule; dladdr1 applies the same
 * lookup).  Its gadget, in order of preference: the end of its _fini or
 * _init (crti/crtn code without unwind information, so a backtrace taken
 * inside the call ends there cleanly), else any return instruction of an
 * executable segment.  Read from the mapped code each time: the object
 * stays loaded while its code calls us, and dlopen is not a hot path.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <string.h>

#include "opal/mca/patcher/base/base_call_as.h"
#include "opal/mca/patcher/base/base_dl.h"

#pragma weak dladdr1
#pragma weak _r_debug

/* Bytes of _init/_fini searched for their epilogue. */
#define EPILOGUE_WINDOW 64

typedef struct object_t {
    const struct link_map *map;
    const ElfW(Phdr) *phdr;
    int phnum;
} object_t;

static bool object_of(const void *addr, object_t *obj)
{
    Dl_info info;
    struct link_map *map = NULL;
    if (NULL == dladdr1 || 0 == dladdr1(addr, &info, (void **) &map, RTLD_DL_LINKMAP) ||
        NULL == map) {
        /* Code in no object (another hooker's trampoline): the loader takes
         * the program for the caller. */
        map = &_r_debug ? _r_debug.r_map : NULL;
        if (NULL == map || NULL == dladdr1 ||
            0 == dladdr1(map->l_ld, &info, (void **) &map, RTLD_DL_LINKMAP)) {
            return false;
        }
    }
    const ElfW(Ehdr) *ehdr = info.dli_fbase;
    if (NULL == ehdr || 0 != memcmp(ehdr->e_ident, ELFMAG, SELFMAG)) {
        return false;
    }
    obj->map = map;
    obj->phdr = (const ElfW(Phdr) *) ((uintptr_t) ehdr + ehdr->e_phoff);
    obj->phnum = ehdr->e_phnum;
    return true;
}

/* The readable code segment of obj that holds addr: its end, or 0. */
static uintptr_t code_end(const object_t *obj, uintptr_t addr)
{
    for (int i = 0; i < obj->phnum; i++) {
        const ElfW(Phdr) *ph = &obj->phdr[i];
        const uintptr_t start = obj->map->l_addr + ph->p_vaddr;
        if (PT_LOAD == ph->p_type && (PF_X | PF_R) == (ph->p_flags & (PF_X | PF_R)) &&
            addr >= start && addr < start + ph->p_filesz) {
            return start + ph->p_filesz;
        }
    }
    return 0;
}

static uintptr_t find_gadget(const mca_patcher_base_call_as_arch_t *arch, const object_t *obj)
{
    static const ElfW(Sxword) ends[] = {DT_FINI, DT_INIT};
    for (size_t i = 0; i < sizeof(ends) / sizeof(ends[0]); i++) {
        uintptr_t v, end;
        if (NULL == obj->map->l_ld || !mca_patcher_base_dyn_get(obj->map->l_ld, ends[i], &v)) {
            continue;
        }
        v = mca_patcher_base_dyn_addr(obj->map, v);
        if (0 != (end = code_end(obj, v))) {
            const size_t len = end - v < EPILOGUE_WINDOW ? end - v : EPILOGUE_WINDOW;
            const unsigned char *g = arch->epilogue_gadget((const unsigned char *) v, len);
            if (NULL != g) {
                return (uintptr_t) g;
            }
        }
    }
    for (int i = 0; i < obj->phnum; i++) {
        const ElfW(Phdr) *ph = &obj->phdr[i];
        if (PT_LOAD == ph->p_type && (PF_X | PF_R) == (ph->p_flags & (PF_X | PF_R))) {
            const unsigned char *code = (const unsigned char *) (obj->map->l_addr + ph->p_vaddr);
            const unsigned char *g = arch->any_gadget(code, ph->p_filesz);
            if (NULL != g) {
                return (uintptr_t) g;
            }
        }
    }
    return 0;
}

#if defined(__aarch64__) || (defined(__riscv) && 64 == __riscv_xlen)
#    include <sys/prctl.h>

#    ifndef PR_GET_SHADOW_STACK_STATUS
#        define PR_GET_SHADOW_STACK_STATUS 74 /* linux/prctl.h, Linux 6.13 */
#        define PR_SHADOW_STACK_ENABLE     (1UL << 0)
#    endif

bool mca_patcher_base_call_as_shadow_stack(void)
{
    /* 0 unknown, 1 no shadow stack, 2 one (enabled at startup only). */
    static int state;
    int s = __atomic_load_n(&state, __ATOMIC_RELAXED);
    if (0 == s) {
        unsigned long status = 0;
        const bool on = 0 == prctl(PR_GET_SHADOW_STACK_STATUS, &status, 0, 0, 0) &&
                        (status & PR_SHADOW_STACK_ENABLE);
        s = on ? 2 : 1;
        __atomic_store_n(&state, s, __ATOMIC_RELAXED);
    }
    return 2 == s;
}
#endif

bool mca_patcher_base_call_as(const void *caller_ret, uintptr_t fn, uintptr_t a0, uintptr_t a1,
                              uintptr_t a2, uintptr_t *result, const char **why)
{
    const mca_patcher_base_call_as_arch_t *arch = MCA_PATCHER_BASE_CALL_AS_ARCH;
    object_t obj;
    uintptr_t gadget;
    if (NULL == arch) {
        *why = "calls made as the caller are not implemented for this architecture";
    } else if (NULL != (*why = arch->unavailable())) {
        /* said */
    } else if (!object_of(caller_ret, &obj)) {
        *why = "the loader does not say which object the caller is";
    } else if (0 == (gadget = find_gadget(arch, &obj))) {
        *why = "the caller's object has no readable return instruction";
    } else {
        *result = arch->call_via(gadget, fn, a0, a1, a2);
        return true;
    }
    return false;
}
