/*
 * The info tool in two floors: opal_patcher_info.c (the command line, what
 * is built, selected and set) calls selftest.c (the delayed setup, the
 * patches listed, every intercepted call exercised), which calls the
 * library: its API and what the memory hooks offer the tools.
 */
#ifndef OPAL_PATCHER_INFO_SELFTEST_H
#define OPAL_PATCHER_INFO_SELFTEST_H

/*
 * Perform the delayed setup as the parameters say, print what was patched,
 * exercise every intercepted call and print whether the right event
 * arrived.  Returns the number of failed checks (or -1 if setup failed).
 */
int opal_patcher_info_selftest(void);

/* Print the patches the selected module applied. */
void opal_patcher_info_print_patches(void);

#endif
