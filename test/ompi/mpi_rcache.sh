#!/bin/sh
# Real MPI, 2 ranks under Debian's mpirun, ob1 over btl/ofi, which
# registers memory through Open MPI's rcache (grdma): a buffer sent,
# unmapped, mapped again at the same address with new data and sent again
# (test/ompi/mpi_resend).  The second round must miss the cache in both
# ranks (the release invalidated the registration): grdma's statistics
# "hit/miss" 0/2.  Under tcmalloc, Open MPI's own memory/patcher loses the
# release (1/1: the stale registration is used again); with ours it does
# not, and neither do the stock memory/patcher with our patcher components.
. "$OPAL_TEST_SRCDIR/test/ompi/ompi_test_env.sh"
need_allocators

# expect WHAT HITS/MISSES PRELOAD ENV...: one run, the ranks under
# LD_PRELOAD=PRELOAD; each rank's grdma hit/miss.
expect() {
    what=$1 want=$2 preload=$3; shift 3
    launch "$preload" "$@" -- --mca mca_base_component_path "$(path_with "$components")" \
        --mca memory_opatch_verbose 1 $ofi_rcache_args "$tests/mpi_resend"
    stats=$(echo "$out" | sed -n 's/.*grdma: stats (hit\/miss\/found\/not found\/evicted\/tree size): \([0-9]*\)\/\([0-9]*\)\/.*/\1\/\2/p' | sort -u)
    echo "$what: exit $rc, grdma hit/miss per rank: $(echo $stats)"
    if [ $rc -ne 0 ] || [ "$(echo "$out" | grep -c 'data ok')" -ne 4 ]; then
        fail "$what: the run failed or a rank got stale data:"; echo "$out"
    elif case "$*" in *memory=patcher*) false ;; *) true ;; esac &&
         [ "$(echo "$out" | grep -c 'memory opatch: active')" -ne 2 ]; then
        fail "$what: memory/opatch is not active in both ranks:"; echo "$out"
    elif [ "$stats" != "$want" ]; then
        fail "$what: grdma hit/miss $(echo $stats), expected $want in both ranks:"; echo "$out"
    fi
}

expect "stock memory/patcher, glibc" 0/2 "" OMPI_MCA_memory=patcher
expect "stock memory/patcher, tcmalloc (the control: the event is lost)" 1/1 "$tcmalloc" OMPI_MCA_memory=patcher
expect "memory/opatch, glibc" 0/2 ""
expect "memory/opatch, tcmalloc" 0/2 "$tcmalloc"
expect "memory/opatch (linux), tcmalloc" 0/2 "$tcmalloc" OMPI_MCA_memory_opatch_patcher=linux
# Debian's mpirun crashes on --mca memory X --mca patcher Y together: environment instead.
expect "stock memory/patcher + patcher/opatch_overwrite, tcmalloc" 0/2 "$tcmalloc" \
    OMPI_MCA_memory=patcher OMPI_MCA_patcher=opatch_overwrite
expect "stock memory/patcher + patcher/opatch_linux, tcmalloc" 0/2 "$tcmalloc" \
    OMPI_MCA_memory=patcher OMPI_MCA_patcher=opatch_linux
exit $status
