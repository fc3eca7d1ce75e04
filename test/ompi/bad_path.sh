#!/bin/sh
# Broken entries on the component path.  A directory that cannot be read:
# Open MPI 4.1 stops there and loads nothing from the directories after
# it, silently; ours, loaded before it, says which ones are lost, and is
# active.  A file of our component's name that cannot be loaded (it needs
# a symbol libopen-pal lacks; immediate binding): Open MPI's own message,
# and being the first of that name it keeps ours out: Open MPI's
# memory/patcher takes over.  MPI_Init and the run succeed in both.
. "$OPAL_TEST_SRCDIR/test/ompi/ompi_test_env.sh"
run "SYS_DEFAULT:$components:/nonexistent/opal-patcher:$tests"
[ "$(count "mca_base_component_path: /nonexistent/opal-patcher cannot be read.*$tests is ignored")" -eq 2 ] ||
    fail "each rank must say which directories Open MPI ignores after the one it cannot read"
[ "$(count 'memory opatch: active')" -eq 2 ] || fail "memory/opatch is not active"
run "$(path_with "$tests/broken/.libs:$components")"
[ "$(count 'unable to open mca_memory_opatch: .*undefined symbol: opal_symbol_of_another_release')" -ge 1 ] ||
    fail "Open MPI did not say why the broken component cannot be loaded"
stock_took_over
exit $status
