#!/bin/sh
# A memory component built for another Open MPI (test/ompi/Makefile.include:
# one that claims the series 4.0, one built as against a debug build, one
# as against a CUDA build): in each rank one line names what it was built
# for and what runs, the component declines, Open MPI's memory/patcher
# takes over, MPI_Init and the run succeed.
. "$OPAL_TEST_SRCDIR/test/ompi/ompi_test_env.sh"
# declines VARIANT BUILT-FOR WHY: the component of test/ompi/VARIANT says
# that it was built for BUILT-FOR and why this Open MPI is not that one.
declines() {
    echo "=== $1"
    run "$(path_with "$tests/$1/.libs")"
    [ "$(count "memory opatch (.*) was built for Open MPI $2, but this process runs Open MPI 4\.1\.[0-9]* (.*; $3): declining")" -eq 2 ] ||
        fail "$1: each rank must say, in one line, that the component was built for $2 and that this Open MPI is not ($3)"
    stock_took_over
}
declines series '4\.0 (non-debug, without CUDA)' 'another series'
declines debug '4\.1 (debug, without CUDA)' 'its opal_[a-z_]*_t is [0-9]* bytes, not [0-9]*: a non-debug build'
declines cuda '4\.1 (non-debug, with CUDA)' 'it is built without CUDA support'
exit $status
