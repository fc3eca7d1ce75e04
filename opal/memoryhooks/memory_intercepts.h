#ifndef OPAL_MEMORYHOOKS_MEMORY_INTERCEPTS_H
#define OPAL_MEMORYHOOKS_MEMORY_INTERCEPTS_H

#include <stddef.h>

/* The names of the intercepted functions (for opal_patcher_info). */
size_t opal_mem_hooks_intercept_names(const char **names, size_t max);

#endif
