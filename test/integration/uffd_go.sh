#!/bin/sh
# A Go library releasing memory our cache holds (uffd_foreign_test.c).  The Go
# library is built here with Debian's golang-go (-buildmode=c-shared, no
# network, cached in the build tree); SKIP without go.
# With each patcher: the Go runtime calls mmap with every signal blocked
# (around pthread_create), which the overwrite component's code write
# must get past without a trap (overwrite_blocked_test).  A cross build builds the Go library for the host architecture with the
# same C compiler (cgo), and runs the test under the emulator.
b="$OPAL_TEST_BUILDDIR/test/integration/uffd_go"  # the Go build and its cache (make clean)
command -v go >/dev/null 2>&1 || { echo "SKIP: no go (Debian: golang-go)"; exit 77; }
case $OPAL_TEST_HOST_CPU in
x86_64) goarch=amd64 ;;
aarch64) goarch=arm64 ;;
powerpc64le) goarch=ppc64le ;;
riscv64) goarch=riscv64 ;;
i?86) goarch=386 ;;
*) echo "SKIP: no Go architecture known for $OPAL_TEST_HOST_CPU"; exit 77 ;;
esac
mkdir -p "$b"
if [ ! -e "$b/libreleaser.so" ]; then
    HOME="$b" GOCACHE="$b/cache" GO111MODULE=off GOARCH=$goarch CGO_ENABLED=1 CC="$OPAL_TEST_CC" \
        timeout 600 go build -buildmode=c-shared -o "$b/libreleaser.so" "$OPAL_TEST_SRCDIR/test/integration/uffd_go_releaser.go" ||
        { echo "FAIL: go build"; exit 1; }
fi
t="$OPAL_TEST_BUILDDIR/test/integration/uffd_foreign_test"
export OMPI_MCA_mpi_leave_pinned=1
. "$OPAL_TEST_SRCDIR/test/support/patchers.sh"
for patcher in $patchers; do
    echo "# patcher $patcher"
    OMPI_MCA_patcher=$patcher OMPI_MCA_rcache_base_uffd=on timeout -k 5 120 \
        $OPAL_TEST_RUN "$t" "$b/libreleaser.so" Go || exit $?
    OMPI_MCA_patcher=$patcher OMPI_MCA_rcache_base_uffd=off timeout -k 5 120 \
        $OPAL_TEST_RUN "$t" "$b/libreleaser.so" Go --expect-stale || exit $?
done
