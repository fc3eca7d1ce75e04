/*
 * Are we running under valgrind?  Code patched at run time and signals
 * that valgrind reserves make some mechanisms unusable there.
 */
#ifndef OPAL_UTIL_VALGRIND_H
#define OPAL_UTIL_VALGRIND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

bool opal_running_on_valgrind(void);

/* Does the valgrind tool we run under replace malloc (memcheck does, callgrind not)? */
bool opal_valgrind_replaces_malloc(void);

/* Tell valgrind that code in [addr, addr+len) changed (no-op natively). */
void opal_valgrind_discard_translations(uintptr_t addr, size_t len);

#endif
