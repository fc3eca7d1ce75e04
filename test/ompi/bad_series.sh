#!/bin/sh
# A memory component built for another series (this one claims Open MPI
# 4.0: test/ompi/series): one line naming both versions in each rank, the
# component declines, Open MPI's memory/patcher takes over, MPI_Init and
# the run succeed.
. "$OPAL_TEST_SRCDIR/test/ompi/ompi_test_env.sh"
run "$(path_with "$tests/series/.libs")"
[ "$(count 'memory opatch (.*) was built for Open MPI 4.0 (.*), but this process runs Open MPI 4\.1\..*another series.*declining')" -eq 2 ] ||
    fail "each rank must say, in one line, that the component was built for 4.0 and this is 4.1"
stock_took_over
exit $status
