/*
 * The overwrite patcher: rewrites the first instructions of a function with
 * a jump to the intercept, and gives the intercept a trampoline that runs
 * the displaced instructions and continues in the original.  The
 * instruction work is per architecture (patcher_overwrite_arch.h).
 *
 * Its floors, each file calling only those below it:
 *   patcher_overwrite_component.c  parameters and the query
 *   patcher_overwrite_module.c     trampolines, patch records, restore
 *   patcher_overwrite_dl.c         the loader watch, patching with the
 *                                  module's patch function it is given
 *   the architecture table         (patcher_overwrite_arch.h) each
 *                                  architecture's decode, relocate and
 *                                  code write (patcher_overwrite_<arch>*.c)
 *   patcher_overwrite_threads.c,   what the code writes share: asking
 *   _stopped_write.c               the other threads, holding them
 *   patcher_overwrite_relocate.c   what the relocations share: declines
 *                                  that name an instruction
 */
#ifndef MCA_PATCHER_OVERWRITE_H
#define MCA_PATCHER_OVERWRITE_H

#include <stdint.h>

#include "opal/mca/patcher/patcher.h"

extern mca_patcher_base_component_t mca_patcher_overwrite_component;
extern mca_patcher_base_module_t mca_patcher_overwrite_module;

/* Patch the function at func (named symbol) to jump to intercept; *chain
 * is set before the jump goes live. */
typedef int (*mca_patcher_overwrite_patch_fn_t)(const char *symbol, uintptr_t func,
                                                uintptr_t intercept, uintptr_t *chain);

/* patch_watch_loader, patching libc's dlopen, dlmopen and dlclose with patch. */
int mca_patcher_overwrite_dl_watch(mca_patcher_overwrite_patch_fn_t patch,
                                   struct mca_patcher_base_loader_t *unwatched);
/* patch_fini: forget the watch (its patches were restored). */
void mca_patcher_overwrite_dl_fini(void);
/* The watch's lock, held across the loader's work (patch_loader_trylock/unlock). */
bool mca_patcher_overwrite_dl_trylock(void);
void mca_patcher_overwrite_dl_unlock(void);
/* In a forked child: the watch's lock made new. */
void mca_patcher_overwrite_dl_atfork_child(void);

#endif
