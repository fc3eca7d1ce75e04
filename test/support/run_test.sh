#!/bin/sh
# Runs PROGRAM [ARG...]: each test (automake's LOG_COMPILER) and, in the
# shell tests, each program they start ($OPAL_TEST_RUN).
#
# - A test run for the overwrite component (OMPI_MCA_patcher=overwrite) on
#   an architecture it has no instructions for (configure's
#   OPAL_TEST_OVERWRITE_ARCH is "none") is skipped, saying so: the component
#   declines there (test/mca/patcher/overwrite/overwrite_decline_test checks
#   that it does, cleanly).
# - A cross build runs the host's programs under $OPAL_TEST_EMULATOR
#   (qemu-user; no binfmt registration needed): a program directly, a
#   libtool wrapper through libtool (which runs the real program with its
#   libraries' path), a script as it is (it starts its programs through
#   $OPAL_TEST_RUN).
# - A test (not the programs it starts) is killed after $OPAL_TEST_TIMEOUT
#   seconds (default 300; qemu-user runs are slower, 600): a hang is a
#   failure that names the test, never a stalled suite.
prog=$1
if [ "$OPAL_TEST_RUN_TEST" != started ] && [ "$OMPI_MCA_patcher" = overwrite ] &&
   [ "$OPAL_TEST_OVERWRITE_ARCH" = none ] && [ "${prog%overwrite_decline_test}" = "$prog" ]; then
    echo "SKIP: OMPI_MCA_patcher=overwrite: the overwrite component has no instructions for" \
         "$OPAL_TEST_HOST_CPU and declines (a writer for it is not written yet)"
    exit 77
fi
limit=
if [ "$OPAL_TEST_RUN_TEST" != started ]; then
    [ -n "$OPAL_TEST_EMULATOR" ] && limit=600 || limit=300
    limit="timeout -k 10 ${OPAL_TEST_TIMEOUT:-$limit}"
fi
OPAL_TEST_RUN_TEST=started
export OPAL_TEST_RUN_TEST
if [ -z "$OPAL_TEST_EMULATOR" ]; then
    exec $limit "$@"
fi
case $(head -c 4 "$prog" 2>/dev/null | od -An -c | tr -d ' ') in
'177ELF')
    exec $limit $OPAL_TEST_EMULATOR "$@" ;;
esac
if sed -n 3p "$prog" 2>/dev/null | grep -q 'temporary wrapper script for'; then
    exec $limit "$OPAL_TEST_BUILDDIR/libtool" --mode=execute $OPAL_TEST_EMULATOR "$@"
fi
exec $limit "$@"
