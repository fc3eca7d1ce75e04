/*
 * The code write of the architectures whose rules let no other processor
 * run an instruction while it changes (all but x86): every other thread
 * is held while the bytes change (patcher_overwrite_stopped_write.c).
 */
#ifndef MCA_PATCHER_OVERWRITE_STOPPED_WRITE_H
#define MCA_PATCHER_OVERWRITE_STOPPED_WRITE_H

#include "opal/mca/patcher/overwrite/patcher_overwrite_arch.h"

void mca_patcher_overwrite_stopped_code_write(mca_patcher_overwrite_write_t *w);

#endif
