#!/bin/sh
# A function our hooks need that cannot be patched (shmat made to start
# with a ret, which the overwrite relocator declines): ours says why and
# declines with nothing left patched, Open MPI's memory/patcher takes over,
# MPI_Init and the run succeed.  (shmem mmap: Open MPI's sysv shmem would
# call the broken shmat.)
. "$OPAL_TEST_SRCDIR/test/ompi/ompi_test_env.sh"
run "$(path_with "$components")" OPATCH_TEST_UNPATCHABLE=shmat OMPI_MCA_shmem=mmap
[ "$(count 'opal-patcher: .*shmat')" -ge 2 ] || fail "no rank said which function could not be patched"
[ "$(count 'memory opatch: the hooks cannot be installed here.*declining')" -eq 2 ] ||
    fail "each rank must say that memory/opatch declines"
stock_took_over
exit $status
