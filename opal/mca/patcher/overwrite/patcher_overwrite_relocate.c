/*
 * What the architectures' relocate functions share (patcher_overwrite_arch.h):
 * the text of a decline that names an instruction, whether a word near the
 * code can be read, and the check that no displaced branch lands inside the
 * patched window.  Below the module: it calls nothing of this component.
 */
#include "opal_config.h"

#include <stdio.h>
#include <sys/mman.h>

#include "opal/constants.h"
#include "opal/mca/patcher/overwrite/patcher_overwrite_arch.h"
#include "opal/util/proc_maps.h"

/* "why: instruction at +off (n units in hex)", the units bytes or 4-byte words. */
static int decline_hex(char *reason, size_t size, const char *why, uintptr_t code, size_t off,
                       size_t n, bool words)
{
    int len = snprintf(reason, size, "%s: instruction at +%zu (", why, off);
    for (size_t k = 0; k < n && len > 0 && (size_t) len < size; k++) {
        const uintptr_t at = code + off + (words ? 4 * k : k);
        len += words ? snprintf(reason + len, size - len, k ? " %08x" : "%08x",
                                mca_patcher_overwrite_word(at))
                     : snprintf(reason + len, size - len, k ? " %02x" : "%02x",
                                *(const unsigned char *) at);
    }
    if (len > 0 && (size_t) len < size) {
        snprintf(reason + len, size - len, ")");
    }
    return OPAL_ERR_NOT_SUPPORTED;
}

int mca_patcher_overwrite_decline_insn(char *reason, size_t size, const unsigned char *code,
                                       size_t off, size_t len, const char *why)
{
    return decline_hex(reason, size, why, (uintptr_t) code, off, len, false);
}

int mca_patcher_overwrite_decline_words(char *reason, size_t size, uintptr_t code, unsigned words,
                                        const char *why)
{
    return decline_hex(reason, size, why, code, 0, words, true);
}

size_t mca_patcher_overwrite_readable_bytes(uintptr_t addr, size_t max)
{
    opal_proc_maps_entry_t e;
    if (OPAL_SUCCESS != opal_proc_maps_find(addr, &e) || !(e.prot & PROT_READ)) {
        return 0;
    }
    return e.end - addr < max ? (size_t) (e.end - addr) : max;
}

bool mca_patcher_overwrite_readable(uintptr_t addr, size_t len)
{
    return mca_patcher_overwrite_readable_bytes(addr, len) == len;
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
