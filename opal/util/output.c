#include "opal_config.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "opal/util/output.h"

void opal_output(const char *fmt, ...)
{
    /* Stack buffer and one write(2): no allocation, no stdio lock, so this
     * is usable from a hook inside the allocator or a signal handler. */
    static const char prefix[] = "opal-patcher: ";
    char buf[1024];
    va_list ap;

    va_start(ap, fmt);
    int n = vsnprintf(buf + sizeof(prefix) - 1, sizeof(buf) - sizeof(prefix), fmt, ap);
    va_end(ap);
    if (n < 0) {
        return;
    }
    size_t len = sizeof(prefix) - 1 + (size_t) n;
    if (len > sizeof(buf) - 2) {
        len = sizeof(buf) - 2;
    }
    for (size_t i = 0; i < sizeof(prefix) - 1; i++) {
        buf[i] = prefix[i];
    }
    buf[len++] = '\n';
    ssize_t rc = write(STDERR_FILENO, buf, len);
    (void) rc;
}
