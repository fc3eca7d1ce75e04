#!/bin/sh
# Every intercepted call, through opal_patcher_info --selftest, with the
# component the environment selects (CI runs it with each), and with the
# claim "ucx" (UCX's events where the build and UCX allow, else a patcher).
info="$OPAL_TEST_BUILDDIR/opal_patcher_info"
status=0
for claim in "" "--claim ucx"; do
    out=$("$info" --selftest $claim 2>&1)
    rc=$?
    echo "== opal_patcher_info --selftest $claim"
    echo "$out"
    [ $rc -eq 0 ] && echo "$out" | grep -q "^Self-test: passed" || status=1
done
exit $status
