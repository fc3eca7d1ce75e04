#!/bin/sh
# The io_uring integrity test in every configuration: glibc malloc, jemalloc
# and tcmalloc (LD_PRELOAD, where installed), the frame sanitizer, and the
# negative control (leave_pinned forced on, no release hooks) which must see
# the corruption.  The patcher component is whatever the environment selects
# (CI runs it with OMPI_MCA_patcher=linux and =overwrite).
t="$OPAL_TEST_BUILDDIR/test/mca/rcache/rcache_uring_integrity_test"
status=0
ran=0

# run NAME PRELOAD ARGS... ; environment from the caller
run() {
    name=$1
    preload=$2
    shift 2
    echo "=== $name"
    if [ -n "$OPAL_TEST_EMULATOR" ]; then  # the preload for the program, not for qemu
        out=$(QEMU_SET_ENV=LD_PRELOAD="$preload" $OPAL_TEST_RUN "$t" "$@" 2>&1)
    else
        out=$(LD_PRELOAD="$preload" "$t" "$@" 2>&1)
    fi
    rc=$?
    echo "$out"
    case "$out" in
    *"runtime does not come first"*)
        echo "SKIP $name: a sanitizer runtime must be preloaded first"
        return ;;
    esac
    case $rc in
    0) ran=$((ran + 1)) ;;
    77) echo "SKIP $name" ;;
    *) echo "FAIL $name (exit $rc)"; status=1 ;;
    esac
}

find_lib() {
    for d in /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64 /usr/lib; do
        [ -e "$d/$1" ] && { echo "$d/$1"; return; }
    done
}

export OMPI_MCA_mpi_leave_pinned=1
run "glibc" ""
OMPI_MCA_rcache_base_verify_frames=1 run "glibc, frame sanitizer" ""
for lib in libjemalloc.so.2 libtcmalloc_minimal.so.4 libtcmalloc.so.4; do
    path=$(find_lib $lib)
    if [ -n "$path" ]; then
        run "$lib" "$path"
    else
        echo "SKIP $lib: not installed (Debian: libjemalloc2, libtcmalloc-minimal4, libgoogle-perftools4)"
    fi
done
OMPI_MCA_rcache_base_release_hooks=0 OMPI_MCA_rcache_base_verify_frames=1 \
    run "negative control: no release hooks" "" --expect-stale
# Releases no patch sees: the userfaultfd source keeps them intact; without
# it they corrupt (the negative control of the source).
OMPI_MCA_rcache_base_uffd=on run "raw system calls, rcache_base_uffd=on" "" --raw
OMPI_MCA_rcache_base_uffd=strict run "raw system calls, rcache_base_uffd=strict" "" --raw
OMPI_MCA_rcache_base_uffd=off OMPI_MCA_rcache_base_verify_frames=1 \
    run "negative control: raw system calls, rcache_base_uffd=off" "" --raw --expect-stale

[ $status -ne 0 ] && exit 1
[ $ran -eq 0 ] && { echo "SKIP: no configuration could run"; exit 77; }
exit 0
