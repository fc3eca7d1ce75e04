#!/bin/sh
# memory_opatch_priority below 0: Open MPI's memory base never selects a
# component whose priority is negative (it keeps the highest from 0 up),
# so ours must install nothing, even where no other memory component
# outranks it (memory/patcher excluded); its hooks would stay in the
# process, unused, after Open MPI unloaded it without closing it.  At 0 it
# is selected as usual.  OPAL only (test/ompi/opal_hooks), glibc's malloc.
. "$OPAL_TEST_SRCDIR/test/ompi/ompi_test_env.sh"
# hooks PRIORITY: one opal_hooks run, ours alone, verbose (our copy names the
# component that installs the hooks); sets out.
hooks() {
    out=$(env OMPI_MCA_memory=^patcher OMPI_MCA_memory_opatch_priority="$1" \
              OMPI_MCA_memory_opatch_verbose=1 \
              OMPI_MCA_mca_base_component_path="$(path_with "$components")" \
              "$tests/opal_hooks" "$tests/libunmapper.so" 2>&1)
}
hooks -1
echo "$out"
echo "$out" | grep -q "^selected opatch," && fail "Open MPI selected memory/opatch at priority -1"
echo "$out" | grep -q "opal-patcher: patcher: selected component" &&
    fail "memory/opatch installed its hooks at priority -1, where Open MPI never keeps it"
hooks 0
echo "$out"
echo "$out" | grep -q "^selected opatch, support 0x7$" && echo "$out" | grep -q "^restored yes" ||
    fail "memory/opatch at priority 0, alone: not selected, or not restored at close"
exit $status
