#!/bin/sh
# Every intercepted call, through opal_patcher_info --selftest, with the
# component the environment selects (CI runs it with each).
info="$OPAL_TEST_BUILDDIR/opal_patcher_info"
out=$("$info" --selftest 2>&1)
status=$?
echo "$out"
[ $status -eq 0 ] && echo "$out" | grep -q "^Self-test: passed"
