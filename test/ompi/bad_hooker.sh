#!/bin/sh
# What memory/opatch finds in place when Open MPI starts (test/ompi/prior_hooker.c,
# LD_PRELOADed into the ranks):
#   wx    mprotect refuses writable+executable pages: ours with overwrite says
#         so and declines, with linux (GOT slots only) it works;
#   int3  another tool's breakpoint at munmap's entry, which cannot be moved:
#         ours says so and declines, and that tool still sees every munmap;
#         the same at shmdt's, the eighth of our eleven targets: what was
#         patched before it is undone;
#   jump  another hooker's jmp at munmap's entry: ours goes in front and
#         chains to it, both see each munmap.
# A decline leaves nothing patched: with Open MPI's own memory components
# out of the way (memory=opatch), the code and GOTs a patcher may write
# are the same after MPI_Init as before it (mpi_resend's snapshot), and the
# run succeeds without memory hooks (and so without leave_pinned, which
# needs them).  With them, memory/patcher takes over.
. "$OPAL_TEST_SRCDIR/test/ompi/ompi_test_env.sh"
hooker=$tests/libprior_hooker.so

# hooked MODE LEAVE_PINNED [VAR=VALUE...]: mpi_resend over btl/ofi with the
# prior hooker in MODE.
hooked() {
    mode=$1 leave_pinned=$2; shift 2
    launch "$hooker" OPATCH_TEST_HOOKER="$mode" OPATCH_TEST_SNAPSHOT=1 LD_BIND_NOW=1 "$@" -- \
        --mca mca_base_component_path "$(path_with "$components")" --mca memory_opatch_verbose 1 \
        $(echo $ofi_rcache_args | sed "s/mpi_leave_pinned 1/mpi_leave_pinned $leave_pinned/") \
        "$tests/mpi_resend"
    echo "=== $mode $*"
    echo "$out"
    [ $rc -eq 0 ] && [ "$(count 'data ok')" -eq 4 ] || fail "$mode: MPI_Init or the run failed (exit $rc)"
}
# declined MODE FUNCTION REASON: ours said that FUNCTION cannot be patched
# (REASON) and declined in each rank, nothing patched.
declined() {
    hooked "$1" 0 OMPI_MCA_memory=opatch OPATCH_TEST_HOOKER_AT="$2"
    [ "$(count "opal-patcher: patcher overwrite: cannot patch function at .*: $3")" -eq 2 ] &&
        [ "$(count "opal-patcher: cannot intercept $2 at .* with patcher overwrite")" -eq 2 ] ||
        fail "$1: each rank must say that $2 cannot be patched ($3)"
    [ "$(count 'memory opatch: the hooks cannot be installed here.*declining')" -eq 2 ] ||
        fail "$1: each rank must say that memory/opatch declines"
    [ "$(count 'nothing patched')" -eq 2 ] || fail "$1: a patch was left behind (above)"
}

declined wx munmap 'mprotect refused to make the page writable'
[ "$(count 'prior hooker: wx refused [1-9]')" -eq 2 ] || fail "wx: mprotect was not refused"
# Under W^X Open MPI 4.1.4's memory/patcher crashes (README); our linux
# mechanism writes no code and works.
hooked wx 1 OMPI_MCA_memory_opatch_patcher=linux
[ "$(count "memory opatch: active.*opal-patcher's linux component")" -eq 2 ] &&
    [ "$(count 'grdma: stats (hit/miss/found/not found/evicted/tree size): 0/2/')" -eq 2 ] ||
    fail "wx: memory/opatch with linux must be active and deliver the release"

declined int3 munmap 'function too short: ret/int3/hlt/ud2'
[ "$(count 'prior hooker: int3 saw [1-9][0-9]* calls of munmap')" -eq 2 ] ||
    fail "int3: the other tool's hook no longer runs"
declined int3 shmdt 'function too short: ret/int3/hlt/ud2'
hooked int3 1
[ "$(count 'memory opatch: the hooks cannot be installed here.*declining')" -eq 2 ] ||
    fail "int3: each rank must say that memory/opatch declines"
stock_took_over

hooked jump 1
[ "$(count 'memory opatch: active')" -eq 2 ] || fail "jump: memory/opatch must stack on the other hooker"
[ "$(count 'grdma: stats (hit/miss/found/not found/evicted/tree size): 0/2/')" -eq 2 ] ||
    fail "jump: our release event did not reach Open MPI's rcache"
[ "$(count 'prior hooker: jump saw [1-9][0-9]* calls of munmap')" -eq 2 ] ||
    fail "jump: the other hooker no longer sees munmap"
exit $status
