/*
 * Diagnostics to stderr, prefixed "opal-patcher: ".  Formatting uses a
 * stack buffer and a single write(2): safe in a signal handler or inside
 * the allocator (no malloc, no stdio lock).
 */
#ifndef OPAL_UTIL_OUTPUT_H
#define OPAL_UTIL_OUTPUT_H

void opal_output(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Print when verbosity >= level. */
#define opal_output_verbose(verbosity, level, ...)                                 \
    do {                                                                           \
        if ((verbosity) >= (level)) {                                              \
            opal_output(__VA_ARGS__);                                              \
        }                                                                          \
    } while (0)

#endif
