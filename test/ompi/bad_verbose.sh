#!/bin/sh
# The verbose parameters of our components take what Open MPI's take, any
# integer (its own verbose levels run to 100 and beyond), and only make
# them say more: 101 or -1 must neither make memory/opatch decline nor
# leave memory/patcher without opatch_overwrite's hooks.  Our copy's
# patcher_base_verbose, which they set, is 0..100.  OPAL only
# (test/ompi/opal_hooks), glibc's malloc.
. "$OPAL_TEST_SRCDIR/test/ompi/ompi_test_env.sh"
# hooks VAR=VALUE...: one opal_hooks run with our components; sets out.
hooks() {
    out=$(env "$@" OMPI_MCA_mca_base_component_path="$(path_with "$components")" \
              "$tests/opal_hooks" "$tests/libunmapper.so" 2>&1)
}
for v in 101 -1; do
    hooks OMPI_MCA_memory_opatch_verbose=$v
    echo "$out"
    echo "$out" | grep -q "^selected opatch, support 0x7$" && echo "$out" | grep -q "^case munmap caught" ||
        fail "memory_opatch_verbose=$v: memory/opatch not active"
    hooks OMPI_MCA_memory=patcher OMPI_MCA_patcher=opatch_overwrite OMPI_MCA_patcher_opatch_overwrite_verbose=$v
    echo "$out"
    echo "$out" | grep -q "^selected patcher, support 0x3$" && echo "$out" | grep -q "^case munmap caught" ||
        fail "patcher_opatch_overwrite_verbose=$v: memory/patcher without hooks"
done
exit $status
