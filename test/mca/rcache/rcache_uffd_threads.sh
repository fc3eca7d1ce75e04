#!/bin/sh
# rcache_uffd_threads_test with the source on and strict.  timeout: a
# deadlock fails (the program's own alarm covers its threads; this covers
# a process stuck in the kernel).
t="$OPAL_TEST_BUILDDIR/test/mca/rcache/rcache_uffd_threads_test"
status=0
ran=0
for mode in on strict; do
    echo "=== rcache_base_uffd=$mode"
    OMPI_MCA_mpi_leave_pinned=1 OMPI_MCA_rcache_base_uffd=$mode timeout -k 5 300 $OPAL_TEST_RUN "$t"
    rc=$?
    case $rc in
    0) ran=$((ran + 1)) ;;
    77) echo "SKIP rcache_base_uffd=$mode" ;;
    *) echo "FAIL rcache_base_uffd=$mode (exit $rc)"; status=1 ;;
    esac
done
# A bad value: a clear error naming it and the valid ones, no cache.
out=$(OMPI_MCA_mpi_leave_pinned=1 OMPI_MCA_rcache_base_uffd=maybe timeout 60 $OPAL_TEST_RUN "$t" 2>&1)
case "$out" in
*'rcache_base_uffd: invalid value "maybe"'*'valid values: off, on, strict'*) echo "bad value: clear error" ;;
*) echo "FAIL: rcache_base_uffd=maybe: $out"; status=1 ;;
esac
[ $status -ne 0 ] && exit 1
[ $ran -eq 0 ] && exit 77
exit 0
