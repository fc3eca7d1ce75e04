#!/bin/sh
# Two copies of memory/opatch on the component path: Open MPI keeps the
# first of each name and says nothing; ours says, in each rank, which file
# was loaded and which one is ignored.  MPI_Init and the run succeed.
. "$OPAL_TEST_SRCDIR/test/ompi/ompi_test_env.sh"
dup=$tests/duplicate
rm -rf "$dup" && mkdir -p "$dup/first" "$dup/second" || exit 1
cp "$components/mca_memory_opatch.so" "$dup/first/" && cp "$components/mca_memory_opatch.so" "$dup/second/" || exit 1
run "$(path_with "$dup/first:$dup/second")"
[ "$(count "memory opatch: Open MPI loaded $dup/first/mca_memory_opatch.so.*it ignores $dup/second/mca_memory_opatch.so")" -eq 2 ] ||
    fail "each rank must name the copy loaded and the one ignored"
[ "$(count 'memory opatch: active')" -eq 2 ] || fail "memory/opatch is not active"
rm -rf "$dup"
exit $status
