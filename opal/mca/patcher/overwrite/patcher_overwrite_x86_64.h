/*
 * x86-64 code write protocol (patcher_overwrite_x86_64_write.c), used by
 * the x86-64 architecture table.
 */
#ifndef MCA_PATCHER_OVERWRITE_X86_64_H
#define MCA_PATCHER_OVERWRITE_X86_64_H

#include "opal/mca/patcher/overwrite/patcher_overwrite_arch.h"

void mca_patcher_overwrite_x86_64_code_write(mca_patcher_overwrite_write_t *w);
void mca_patcher_overwrite_x86_64_write_fini(void);

#endif
