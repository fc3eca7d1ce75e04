/*
 * What the architectures' relocate functions share (patcher_overwrite_arch.h):
 * the text of a decline that names an instruction, and the check that no
 * displaced branch lands inside the patched window.  Below the module: it
 * calls nothing of this component.
 */
#include "opal_config.h"

#include <stdio.h>

#include "opal/constants.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_arch.h"

int mca_patcher_overwrite_decline_insn(char *reason, size_t size, const unsigned char *code,
                                       size_t off, size_t len, const char *why)
{
    int n = snprintf(reason, size, "%s: instruction at +%zu (", why, off);
    for (size_t k = 0; k < len && n > 0 && (size_t) n < size; k++) {
        n += snprintf(reason + n, size - n, k ? " %02x" : "%02x", code[off + k]);
    }
    if (n > 0 && (size_t) n < size) {
        snprintf(reason + n, size - n, ")");
    }
    return OPAL_ERR_NOT_SUPPORTED;
}

int mca_patcher_overwrite_check_targets(uintptr_t code, size_t window, const uint8_t *insn_offset,
                                        unsigned n, const uintptr_t *targets, char *reason,
                                        size_t size)
{
    for (unsigned k = 0; k < n; k++) {
        if (targets[k] > code && targets[k] < code + window) {
            size_t end = k + 1 < n ? insn_offset[k + 1] : window;
            return mca_patcher_overwrite_decline_insn(
                reason, size, (const unsigned char *) code, insn_offset[k], end - insn_offset[k],
                "a branch targets the middle of the bytes to patch");
        }
    }
    return OPAL_SUCCESS;
}
