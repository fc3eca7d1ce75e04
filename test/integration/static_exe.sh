#!/bin/sh
# A fully static executable: events arrive through the overwrite
# component; the linux component declines with its reason.
exe="$OPAL_TEST_BUILDDIR/test/integration/opal_patcher_info_static"
if ! file "$exe" 2>/dev/null | grep -q "statically linked"; then
    ldd "$exe" 2>&1 | grep -q "not a dynamic executable" || { echo "$exe is not fully static"; exit 1; }
fi
status=0
out=$($OPAL_TEST_RUN "$exe" --mca patcher overwrite --selftest 2>&1)
echo "$out" | tail -3
echo "$out" | grep -q "^Self-test: passed" || { echo "$out"; status=1; }
out=$($OPAL_TEST_RUN "$exe" --mca patcher linux --selftest 2>&1)
if echo "$out" | grep -q "linux declined: .*" || echo "$out" | grep -qi "no dynamic linking\|static"; then
    echo "linux declined as it should: $(echo "$out" | grep -i "declin\|static" | head -2)"
else
    echo "linux did not decline in a static executable:"; echo "$out"; status=1
fi
echo "$out" | grep -q "could not be set up" || { echo "setup did not fail with patcher=linux"; status=1; }
exit $status
