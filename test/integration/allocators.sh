#!/bin/sh
# Real allocators loaded with LD_PRELOAD: the self-test passes with each
# component.  tcmalloc exports its own munmap/mmap/mremap/sbrk (raw system
# calls): events must come from the definition callers reach, so the
# overwrite component patches tcmalloc's munmap as well as libc's.
[ -n "$OPAL_TEST_SANITIZER" ] && { echo "SKIP: a sanitizer runtime cannot run under a preloaded allocator"; exit 77; }
[ -n "$OPAL_TEST_FOREIGN" ] && { echo "SKIP: a build for $OPAL_TEST_HOST_CPU: the allocator packages installed (jemalloc, tcmalloc) are this machine's"; exit 77; }
. "$OPAL_TEST_SRCDIR/test/integration/preload_selftest.sh"
libdir=/usr/lib/x86_64-linux-gnu
. "$OPAL_TEST_SRCDIR/test/support/patchers.sh"
status=0
for lib in libtcmalloc.so.4 libtcmalloc_minimal.so.4 libjemalloc.so.2; do
    [ -e "$libdir/$lib" ] || { echo "SKIP: $libdir/$lib missing (Debian packages libgoogle-perftools4, libjemalloc2)"; exit 77; }
    for component in $patchers; do
        run_preloaded "$libdir/$lib" $component || status=1
        if [ $lib = libtcmalloc.so.4 ] && [ $component = overwrite ] &&
           ! echo "$out" | grep -q "^  munmap .*libtcmalloc"; then
            echo "tcmalloc's own munmap was not patched:"; echo "$out" | grep "^  munmap"; status=1
        fi
    done
done
exit $status
