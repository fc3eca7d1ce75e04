# Sourced by the Open MPI tests (test/ompi/*.sh): where our components and
# the real allocators are, and Open MPI's mpirun as CI runs it.
[ -n "$OPAL_TEST_MPIRUN" ] && [ -x "$OPAL_TEST_MPIRUN" ] ||
    { echo "SKIP: no Open MPI mpirun (Debian package openmpi-bin; configure --with-ompi)"; exit 77; }
[ -n "$OPAL_TEST_SANITIZER" ] && { echo "SKIP: Open MPI's processes cannot load a sanitizer runtime"; exit 77; }

tests=$OPAL_TEST_BUILDDIR/test/ompi
# Installed as `make install` lays them out ($libdir/opal-patcher/ompi).
components=$tests/components
# The one way to add them that keeps Open MPI's own directories (README):
# after SYS_DEFAULT, since Open MPI 4.1 loads nothing after a directory it
# cannot read.
path_with() {
    echo "SYS_DEFAULT:$1:USER_DEFAULT"
}
# Our library's test settings are not Open MPI's: its patcher framework
# would load our own DSO plugins from there, and take patcher=linux as its own.
unset OMPI_MCA_mca_base_component_path OMPI_MCA_patcher OMPI_MCA_memory

multiarch=$(${OPAL_TEST_CC:-cc} -print-multiarch 2>/dev/null)
syslib=/usr/lib/${multiarch:-x86_64-linux-gnu}
glibc=""
jemalloc=$syslib/libjemalloc.so.2
tcmalloc=$syslib/libtcmalloc.so.4
mimalloc=$syslib/libmimalloc.so.2
need_allocators() {
    for lib in "$jemalloc" "$tcmalloc" "$mimalloc"; do
        [ -e "$lib" ] || { echo "SKIP: $lib missing (Debian packages libjemalloc2, libgoogle-perftools4, libmimalloc2.0)"; exit 77; }
    done
}

# launch PRELOAD [VAR=VALUE...] -- MPIRUN-ARGS...: 2 ranks under Debian's
# mpirun (as root if we are), the ranks under LD_PRELOAD=PRELOAD; sets out
# (both ranks' output) and rc.
launch() {
    preload=$1 vars=""
    shift
    while [ "$1" != -- ]; do vars="$vars $1"; shift; done
    shift
    out=$(env $vars timeout 120 "$OPAL_TEST_MPIRUN" --allow-run-as-root --oversubscribe -np 2 \
              -x LD_PRELOAD="$preload" "$@" 2>&1)
    rc=$?
}

# A transport that registers memory through Open MPI's rcache (grdma) on a
# machine without RDMA devices: ob1 over btl/ofi, two-sided and one-sided
# (btl_ofi_mode 2), on libfabric's sockets provider (which Open MPI
# excludes by default), with leave_pinned and the rcache's statistics.
ofi_rcache_args="--mca pml ob1 --mca btl ofi,self --mca btl_ofi_mode 2 \
 --mca btl_ofi_provider_include sockets --mca btl_ofi_provider_exclude none \
 --mca mpi_leave_pinned 1 --mca rcache_grdma_print_stats 1"

fail() {
    echo "FAIL: $*" >&2
    status=1
}
status=0

# run PATH [VAR=VALUE...]: mpi_resend over btl/ofi, PATH the whole component path.
run() {
    path=$1; shift
    launch "" "$@" -- --mca mca_base_component_path "$path" --mca memory_opatch_verbose 1 \
        $ofi_rcache_args "$tests/mpi_resend"
    echo "$out"
    [ $rc -eq 0 ] && [ "$(echo "$out" | grep -c 'data ok')" -eq 4 ] ||
        fail "MPI_Init or the run failed (exit $rc)"
}
# count TEXT: how many lines of the last run hold TEXT.
count() {
    echo "$out" | grep -c -- "$1"
}
# stock_took_over: Open MPI's memory/patcher delivered the release (glibc).
stock_took_over() {
    [ "$(count 'memory opatch: active')" -eq 0 ] || fail "memory/opatch is active all the same"
    [ "$(echo "$out" | grep -c 'grdma: stats (hit/miss/found/not found/evicted/tree size): 0/2/')" -eq 2 ] ||
        fail "the stock component did not take over (grdma statistics above)"
}
