#!/bin/sh
# With pml/ucx and opal_common_ucx_opal_mem_hooks=1, Open MPI forwards the
# releases its memory hooks report to UCX (opal_common_ucx: ucm_vm_munmap).
# UCX's own hooks off (UCX_MEM_MMAP_HOOK_MODE=none), a UCX handler counts
# what UCX receives for a buffer unmapped after MPI_Init
# (test/ompi/mpi_ucx_events): exactly one event, from our hooks, under
# glibc and tcmalloc; under tcmalloc the stock memory/patcher forwards
# nothing (the control).  With UCX's own hooks on (bistro, installed when
# libucs loads, before Open MPI declares the event external), where each
# event comes from: with ours, which chain to UCX's munmap hook, one
# forwarded by Open MPI and one from that hook; with the stock component,
# which writes its jump over UCX's, the forwarded one only (README, "For
# Open MPI users").
. "$OPAL_TEST_SRCDIR/test/ompi/ompi_test_env.sh"
need_allocators

# expect WHAT 'N (forwarded F, ucx hook H)' MODE PRELOAD ENV...: with
# UCX_MEM_MMAP_HOOK_MODE=MODE, what UCX's handler saw in each rank.
expect() {
    what=$1 want=$2 mode=$3 preload=$4; shift 4
    launch "$preload" "$@" -- --mca mca_base_component_path "$(path_with "$components")" \
        --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any \
        --mca opal_common_ucx_opal_mem_hooks 1 -x UCX_MEM_MMAP_HOOK_MODE="$mode" "$tests/mpi_ucx_events"
    counts=$(echo "$out" | sed -n 's/^rank [01]: ucx events \(.*\)$/\1/p' | sort -u)
    echo "$what: exit $rc, UCX's handler saw per rank: $(echo $counts)"
    if [ $rc -ne 0 ] || [ "$(echo "$out" | grep -c 'ucx events')" -ne 2 ]; then
        fail "$what: the run failed:"; echo "$out"
    elif [ "$counts" != "$want" ]; then
        fail "$what: UCX saw $(echo $counts) events, expected $want in both ranks:"; echo "$out"
    fi
}

expect "memory/opatch, glibc" "1 (forwarded 1, ucx hook 0)" none ""
expect "memory/opatch, tcmalloc" "1 (forwarded 1, ucx hook 0)" none "$tcmalloc"
expect "stock memory/patcher, tcmalloc (the control)" "0 (forwarded 0, ucx hook 0)" none "$tcmalloc" \
    OMPI_MCA_memory=patcher
expect "memory/opatch, glibc, UCX's hooks on" "2 (forwarded 1, ucx hook 1)" bistro ""
expect "stock memory/patcher, glibc, UCX's hooks on" "1 (forwarded 1, ucx hook 0)" bistro "" \
    OMPI_MCA_memory=patcher
exit $status
