/*
 * The bridge between the Open MPI glue (compiled against Open MPI's
 * headers) and the private copy of opal-patcher inside each component
 * (compiled against ours: opatch_inner.c).  The two sides share no other
 * header, so only plain C types cross it.
 *
 * These are the only names of the copy still global when the component is
 * linked (ompi/Makefile.include); the component's version script makes
 * them local too, so that the DSO exports nothing but its component struct.
 */
#ifndef OPATCH_INNER_H
#define OPATCH_INNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define OPATCH_INNER_API __attribute__((visibility("default")))

/* Open MPI's opal_mem_hooks_release_hook, as the copy sees it. */
typedef void(opatch_inner_deliver_fn_t)(void *buf, size_t length, bool from_alloc);

/*
 * Start the copy (opal_init_util) with the settings that matter inside
 * Open MPI, given on its command line, which beats every other source of
 * our parameters: patcher (our component(s): "overwrite", "linux", "" for
 * by priority) and verbose (patcher_base_verbose, brought into its 0..100).
 * Reference counted with opatch_inner_stop.
 */
OPATCH_INNER_API int opatch_inner_start(const char *patcher, int verbose);
OPATCH_INNER_API void opatch_inner_stop(void);

/*
 * Install the whole hook set (the delayed setup) and deliver each release
 * to deliver.  All or nothing: on failure nothing stays patched and the
 * copy has said why.  Returns 0 on success.
 */
OPATCH_INNER_API int opatch_inner_hooks_install(opatch_inner_deliver_fn_t *deliver);
/* What is delivered now: OPATCH_INNER_*_SUPPORT bits (our OPAL_MEMORY_*). */
#define OPATCH_INNER_FREE_SUPPORT   0x1
#define OPATCH_INNER_MUNMAP_SUPPORT 0x2
#define OPATCH_INNER_CHUNK_SUPPORT  0x4
OPATCH_INNER_API int opatch_inner_hooks_support(void);
/* The component that installed them ("overwrite", "linux"), or NULL. */
OPATCH_INNER_API const char *opatch_inner_hooks_selected(void);
/* Stop delivering; the patches go with the last opatch_inner_stop. */
OPATCH_INNER_API void opatch_inner_hooks_uninstall(void);

/*
 * For Open MPI's patcher framework: select our patcher (after
 * opatch_inner_start with that one component) and patch through it;
 * *old_addr receives the callable original (trampoline or previous
 * definition), set before the patch goes live.
 */
OPATCH_INNER_API int opatch_inner_patcher_select(void);
OPATCH_INNER_API int opatch_inner_patch_symbol(const char *symbol, uintptr_t new_addr, uintptr_t *old_addr);

/* opal-patcher's version, for messages and ompi_info. */
OPATCH_INNER_API const char *opatch_inner_version(void);

#endif
