#!/bin/sh
# Static musl code releasing memory our cache holds (uffd_foreign_test.c):
# uffd_musl_releaser.c compiled with musl-gcc and linked with musl's libc.a
# into a shared library that imports nothing (its munmap and madvise are
# musl's, bound inside it), loaded into this glibc process.  SKIP without
# musl-gcc (Debian: musl-tools), or on a cross build (musl-gcc builds for
# the build machine only).
b="$OPAL_TEST_BUILDDIR/test/integration/uffd_musl"
command -v musl-gcc >/dev/null 2>&1 || { echo "SKIP: no musl-gcc (Debian: musl-tools)"; exit 77; }
[ -z "$OPAL_TEST_FOREIGN" ] || { echo "SKIP: musl-gcc builds for this machine, not for $OPAL_TEST_HOST_CPU"; exit 77; }
mkdir -p "$b"
# -Bstatic -lc: musl's libc.a, from the directory musl-gcc's specs add.
musl-gcc -O2 -fPIC -c -o "$b/releaser.o" "$OPAL_TEST_SRCDIR/test/integration/uffd_musl_releaser.c" &&
    musl-gcc -shared -nostdlib -Wl,-z,defs -Wl,-Bsymbolic -Wl,--exclude-libs,ALL \
        -o "$b/libmuslreleaser.so" "$b/releaser.o" -Wl,-Bstatic -lc -lgcc ||
    { echo "FAIL: building the musl library"; exit 1; }
# The point of the test: libc is musl's (__vm_wait is musl's own, called by
# its munmap), linked in, and nothing is imported.
nm "$b/libmuslreleaser.so" | grep -q ' __vm_wait$' || { echo "FAIL: the library holds no musl munmap"; exit 1; }
undefined=$(nm -D --undefined-only "$b/libmuslreleaser.so" | awk '{print $NF}' | tr '\n' ' ')
[ -z "$undefined" ] || { echo "FAIL: the musl library imports $undefined"; exit 1; }
t="$OPAL_TEST_BUILDDIR/test/integration/uffd_foreign_test"
export OMPI_MCA_mpi_leave_pinned=1
OMPI_MCA_rcache_base_uffd=on timeout -k 5 120 $OPAL_TEST_RUN "$t" "$b/libmuslreleaser.so" musl || exit $?
OMPI_MCA_rcache_base_uffd=off timeout -k 5 120 $OPAL_TEST_RUN "$t" "$b/libmuslreleaser.so" musl --expect-stale
