#!/bin/sh
# A Go library releasing memory our cache holds (uffd_go_test.c).  The Go
# library is built here with Debian's golang-go (-buildmode=c-shared, no
# network, cached in the build tree); SKIP without go.
#
# Run with the linux patcher only: with overwrite, a Go c-shared library in
# the process dies of SIGTRAP once our patches are in (seen on this branch,
# not investigated: the Go runtime's signal handlers against the patching).
b="$OPAL_TEST_BUILDDIR/test/integration/uffd_go"  # the Go build and its cache
command -v go >/dev/null 2>&1 || { echo "SKIP: no go (Debian: golang-go)"; exit 77; }
mkdir -p "$b"
if [ ! -e "$b/libreleaser.so" ]; then
    HOME="$b" GOCACHE="$b/cache" GO111MODULE=off timeout 600 \
        go build -buildmode=c-shared -o "$b/libreleaser.so" "$OPAL_TEST_SRCDIR/test/integration/uffd_go_releaser.go" ||
        { echo "FAIL: go build"; exit 1; }
fi
t="$OPAL_TEST_BUILDDIR/test/integration/uffd_go_test"
export OMPI_MCA_patcher=linux OMPI_MCA_mpi_leave_pinned=1
OMPI_MCA_rcache_base_uffd=on timeout -k 5 60 "$t" "$b/libreleaser.so" || exit $?
OMPI_MCA_rcache_base_uffd=off timeout -k 5 60 "$t" "$b/libreleaser.so" --expect-stale
