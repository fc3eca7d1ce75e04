#!/bin/sh
# An interposer of munmap/mremap that chains to libc's (interposer.c),
# loaded with LD_PRELOAD: the self-test passes with each component (every
# release reported exactly once, also mremap(MREMAP_FIXED)'s destination
# through two patched definitions), and overwrite patches both.
# Under ASan the preloaded library comes before its runtime: allowed here
# (the interposer only forwards munmap and mremap).
[ -n "$OPAL_TEST_SANITIZER" ] && export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
info="$OPAL_TEST_BUILDDIR/opal_patcher_info"
lib="$OPAL_TEST_BUILDDIR/test/integration/libinterposer.so"
status=0
for component in overwrite linux; do
    # Through the libtool wrapper the preload must reach only the program.
    out=$("$OPAL_TEST_BUILDDIR/libtool" --mode=execute \
          env LD_PRELOAD="$lib" "$info" --mca patcher $component --selftest 2>&1)
    if echo "$out" | grep -q "^Self-test: passed"; then
        echo "patcher=$component: self-test passed"
    else
        echo "patcher=$component: FAILED"; echo "$out"; status=1
    fi
    if [ $component = overwrite ] && ! echo "$out" | grep -q "^  mremap .*libinterposer"; then
        echo "the interposer's mremap was not patched:"; echo "$out" | grep "^  mremap"; status=1
    fi
done
exit $status
