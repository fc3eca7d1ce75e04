#!/bin/sh
# Debian's Open MPI mpirun launches 2 ranks of opal_patcher_info --selftest
# with --mca patcher overwrite, then linux: each rank must select the
# component asked for (the parameter reaches it as OMPI_MCA_patcher) and
# pass every event check.
[ -n "$OPAL_TEST_EMULATOR" ] && { echo "SKIP: a cross build: no Open MPI for $OPAL_TEST_HOST_CPU is installed (Debian has no cross package of it)"; exit 77; }
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (Debian package openmpi-bin)"; exit 77; }
info="$OPAL_TEST_BUILDDIR/opal_patcher_info"
path="$OMPI_MCA_mca_base_component_path"
root=""
[ "$(id -u)" -eq 0 ] && root="--allow-run-as-root"
. "$OPAL_TEST_SRCDIR/test/support/patchers.sh"
status=0
for component in $patchers; do
    # mpirun reads OMPI_MCA_* itself: Open MPI has a parameter named like
    # our component path, so it goes to the ranks only (-x).
    # Each rank's output to its own file: interleaved lines would blur the count.
    dir=$(mktemp -d)
    out=$(env -u OMPI_MCA_mca_base_component_path -u OMPI_MCA_patcher \
          timeout 120 mpirun $root --oversubscribe -np 2 -x OMPI_MCA_mca_base_component_path="$path" \
          --output-filename "$dir" --mca patcher $component "$info" --selftest 2>&1)
    out="$out
$(cat "$dir"/*/rank.*/stdout 2>/dev/null)"
    selected=$(cat "$dir"/*/rank.*/stdout 2>/dev/null | grep -c "^Selected: $component ")
    passed=$(cat "$dir"/*/rank.*/stdout 2>/dev/null | grep -c "^Self-test: passed")
    rm -rf "$dir"
    echo "patcher=$component: $selected ranks selected it, $passed ranks passed"
    if [ "$selected" -ne 2 ] || [ "$passed" -ne 2 ]; then
        echo "$out"
        status=1
    fi
done
exit $status
