#!/bin/sh
# Under valgrind's memcheck the self-test passes with each component (or
# the component declines cleanly, saying it is because of valgrind), and
# valgrind finds no error either way.
command -v valgrind >/dev/null || { echo "SKIP: valgrind not found (Debian package valgrind)"; exit 77; }
[ -n "$OPAL_TEST_SANITIZER" ] && { echo "SKIP: a sanitizer build cannot run under valgrind"; exit 77; }
[ -n "$OPAL_TEST_FOREIGN" ] && { echo "SKIP: a build for $OPAL_TEST_HOST_CPU: valgrind cannot run a program under qemu-user, and for i686 on x86_64 it needs the i386 loader's symbols (libc6-dbg:i386, a multiarch package)"; exit 77; }
info="$OPAL_TEST_BUILDDIR/opal_patcher_info"
libtool="$OPAL_TEST_BUILDDIR/libtool"
. "$OPAL_TEST_SRCDIR/test/support/patchers.sh"
status=0
for component in $patchers; do
    out=$("$libtool" --mode=execute valgrind -q --error-exitcode=3 \
          "$info" --mca patcher $component --selftest 2>&1)
    rc=$?
    if [ $rc -eq 3 ]; then
        echo "patcher=$component: valgrind reported errors:"; echo "$out"; status=1
    elif echo "$out" | grep -q "^Self-test: passed"; then
        echo "patcher=$component: self-test passed under valgrind"
    elif echo "$out" | grep -qi "valgrind" && echo "$out" | grep -q "could not be set up"; then
        echo "patcher=$component: declined under valgrind: $(echo "$out" | grep -i valgrind | head -1)"
    else
        echo "patcher=$component: failed under valgrind (exit $rc):"; echo "$out"; status=1
    fi
done
exit $status
