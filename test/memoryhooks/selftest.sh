#!/bin/sh
# Every intercepted call, through opal_patcher_info --selftest, with the
# component the environment selects (CI runs it with each), and with the
# claim "ucx" (UCX's events where the build and UCX allow, else a patcher).
# The tool must also say who owns the hooks: the patches it applied, or
# UCX's libucm with nothing patched by us.
info="$OPAL_TEST_BUILDDIR/opal_patcher_info"
status=0
for claim in "" "--claim ucx"; do
    out=$($OPAL_TEST_RUN "$info" --selftest $claim 2>&1)
    rc=$?
    echo "== opal_patcher_info --selftest $claim"
    echo "$out"
    [ $rc -eq 0 ] && echo "$out" | grep -q "^Self-test: passed" || status=1
    owner=$(echo "$out" | sed -n 's/^Events from: \([a-z]*\).*/\1/p')
    case "$owner" in
    ucx) echo "$out" | grep -q "nothing patched by us" && ! echo "$out" | grep -q "^Patches applied" ||
             { echo "FAIL: UCX owns the hooks, yet patches of ours are listed"; status=1; } ;;
    linux|overwrite) echo "$out" | grep -q "^  munmap " ||
             { echo "FAIL: $owner owns the hooks, yet no patch of munmap is listed"; status=1; } ;;
    *) echo "FAIL: no 'Events from:' line naming the owner of the hooks"; status=1 ;;
    esac
    # GOT patching cannot redirect a pointer stored before setup: the limits say so.
    if [ "$owner" = linux ] && ! echo "$out" | grep -q "^Limits of linux: .*function pointer taken before our setup"; then
        echo "FAIL: the limits of linux do not name function pointers taken before our setup"; status=1
    fi
done
exit $status
