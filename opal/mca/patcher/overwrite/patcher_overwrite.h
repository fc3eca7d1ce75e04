/*
 * The overwrite patcher: rewrites the first instructions of a function with
 * a jump to the intercept, and gives the intercept a trampoline that runs
 * the displaced instructions and continues in the original.  The
 * instruction work is per architecture (patcher_overwrite_arch.h).
 */
#ifndef MCA_PATCHER_OVERWRITE_H
#define MCA_PATCHER_OVERWRITE_H

#include "opal/mca/patcher/patcher.h"

extern mca_patcher_base_component_t mca_patcher_overwrite_component;
extern mca_patcher_base_module_t mca_patcher_overwrite_module;

#endif
