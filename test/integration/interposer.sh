#!/bin/sh
# An interposer of munmap/mremap/mmap/ftruncate/fallocate that chains to libc's
# (interposer.c), loaded with LD_PRELOAD: the self-test passes with each
# component (every release reported exactly once, also mremap(MREMAP_FIXED)'s
# destination and a file's pages through two patched definitions), calls
# still reach the interposer's mmap, ftruncate and fallocate, and overwrite
# patches both.
# Under ASan the preloaded library comes before its runtime: allowed here
# (the interposer only forwards munmap and mremap).
[ -n "$OPAL_TEST_SANITIZER" ] && export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
. "$OPAL_TEST_SRCDIR/test/integration/preload_selftest.sh"
lib="$OPAL_TEST_BUILDDIR/test/integration/libinterposer.so"
. "$OPAL_TEST_SRCDIR/test/support/patchers.sh"
status=0
for component in $patchers; do
    run_preloaded "$lib" $component || status=1
    if [ $component = overwrite ] && ! echo "$out" | grep -q "^  mremap .*libinterposer"; then
        echo "the interposer's mremap was not patched:"; echo "$out" | grep "^  mremap"; status=1
    fi
    if ! echo "$out" | grep -q "^libinterposer: mmap reached"; then
        echo "patcher=$component: calls of mmap did not reach the interposer's"
        status=1
    fi
    if ! echo "$out" | grep -q "^libinterposer: ftruncate and fallocate reached"; then
        echo "patcher=$component: calls of ftruncate or fallocate did not reach the interposer's"
        status=1
    fi
    if [ $component = overwrite ] && ! echo "$out" | grep -q "^  fallocate .*libinterposer"; then
        echo "the interposer's fallocate was not patched:"; echo "$out" | grep "^  fallocate"; status=1
    fi
done
exit $status
