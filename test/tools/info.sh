#!/bin/sh
# opal_patcher_info: its outputs, and clear failures for bad arguments.
info="$OPAL_TEST_BUILDDIR/opal_patcher_info"
version=$(cat "$OPAL_TEST_SRCDIR/VERSION")
status=0
# The checks below expect every component opened: CI's OMPI_MCA_patcher=X opens only X.
unset OMPI_MCA_patcher
fail() { echo "FAIL: $*"; status=1; }

out=$($OPAL_TEST_RUN "$info") || fail "plain run exited $?"
echo "$out" | grep -q "^opal-patcher $version" || fail "no version header"
echo "$out" | grep -q "overwrite" && echo "$out" | grep -q "linux" || fail "components not listed"

# Huge pages for large caches: as the kernel's policy says.
thp=/sys/kernel/mm/transparent_hugepage/enabled
if grep -qE '\[(always|madvise)\]' "$thp" 2>/dev/null; then
    echo "$out" | grep -q "^  Huge pages for large registration caches: available$" || fail "huge pages: not 'available' with $(cat "$thp")"
else
    echo "$out" | grep -q "^  Huge pages for large registration caches: not available: " || fail "huge pages: not 'not available' without them"
fi

[ "$($OPAL_TEST_RUN "$info" --version)" = "opal-patcher $version" ] || fail "--version"

out=$(OMPI_MCA_patcher_linux_priority=12 $OPAL_TEST_RUN "$info" --all) || fail "--all exited $?"
echo "$out" | grep -E "patcher_linux_priority +=  *12 +\(environment\)" >/dev/null || fail "--all: value and source of patcher_linux_priority"
echo "$out" | grep -E "patcher_overwrite_priority += +45 +\(default\)" >/dev/null || fail "--all: default source"
echo "$out" | grep -q "mpi_leave_pinned" || fail "--all: rcache parameters missing"

out=$($OPAL_TEST_RUN "$info" --mca patcher_base_verbose 5 --param patcher all) || fail "--param exited $?"
echo "$out" | grep -E "patcher_base_verbose += +5 +\(command line\)" >/dev/null || fail "--param: command-line source"
echo "$out" | grep -q "mpi_leave_pinned" && fail "--param patcher all lists rcache parameters"

$OPAL_TEST_RUN "$info" --param nosuch all >/dev/null 2>err.$$; [ $? -eq 2 ] && grep -q "unknown framework 'nosuch'" err.$$ || fail "--param nosuch"
$OPAL_TEST_RUN "$info" --bogus >/dev/null 2>err.$$; [ $? -eq 2 ] && grep -q "bad arguments" err.$$ || fail "--bogus"
$OPAL_TEST_RUN "$info" --mca patcher bogus >/dev/null 2>err.$$; [ $? -ne 0 ] && grep -q "'bogus' is not a patcher component" err.$$ || fail "--mca patcher bogus"
$OPAL_TEST_RUN "$info" --mca >/dev/null 2>err.$$; [ $? -ne 0 ] && grep -q "missing name and value" err.$$ || fail "--mca without a name"
rm -f err.$$
exit $status
