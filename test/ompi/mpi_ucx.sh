#!/bin/sh
# With pml/ucx and opal_common_ucx_opal_mem_hooks=1, Open MPI forwards the
# releases its memory hooks report to UCX (opal_common_ucx: ucm_vm_munmap).
# UCX's own hooks off (UCX_MEM_MMAP_HOOK_MODE=none), a UCX handler counts
# what UCX receives for a buffer unmapped after MPI_Init
# (test/ompi/mpi_ucx_events): exactly one event, from our hooks, under
# glibc and tcmalloc; under tcmalloc the stock memory/patcher forwards
# nothing (the control).
. "$OPAL_TEST_SRCDIR/test/ompi/ompi_test_env.sh"
need_allocators

# expect WHAT COUNT PRELOAD ENV...
expect() {
    what=$1 want=$2 preload=$3; shift 3
    launch "$preload" "$@" -- --mca mca_base_component_path "$(path_with "$components")" \
        --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any \
        --mca opal_common_ucx_opal_mem_hooks 1 -x UCX_MEM_MMAP_HOOK_MODE=none "$tests/mpi_ucx_events"
    counts=$(echo "$out" | sed -n 's/^rank [01]: ucx events \([0-9]*\)$/\1/p' | sort -u)
    echo "$what: exit $rc, UCX's handler saw per rank: $(echo $counts)"
    if [ $rc -ne 0 ] || [ "$(echo "$out" | grep -c 'ucx events')" -ne 2 ]; then
        fail "$what: the run failed:"; echo "$out"
    elif [ "$counts" != "$want" ]; then
        fail "$what: UCX saw $(echo $counts) events, expected $want in both ranks:"; echo "$out"
    fi
}

expect "memory/opatch, glibc" 1 ""
expect "memory/opatch, tcmalloc" 1 "$tcmalloc"
expect "stock memory/patcher, tcmalloc (the control)" 0 "$tcmalloc" OMPI_MCA_memory=patcher
exit $status
