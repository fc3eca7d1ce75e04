#!/bin/sh
# ompi_info, with our directory on the component path the way the README
# says, lists our memory component and its parameters (and the patcher
# components); without it, it does not; from ~/.openmpi/components it does.
. "$OPAL_TEST_SRCDIR/test/ompi/ompi_test_env.sh"
[ -x "$OPAL_TEST_OMPI_INFO" ] || { echo "SKIP: no ompi_info (Debian package openmpi-bin)"; exit 77; }
with=$(OMPI_MCA_mca_base_component_path=$(path_with "$components") "$OPAL_TEST_OMPI_INFO" --param memory all 2>&1)
echo "$with"
echo "$with" | grep -q "MCA memory: opatch (MCA v2.1.0, API v2.0.0, Component v" || fail "memory/opatch is not listed"
echo "$with" | grep -q "MCA memory: patcher" || fail "the path lost Open MPI's own memory/patcher (SYS_DEFAULT)"
for p in priority patcher verbose built; do
    echo "$with" | grep -Eq "(parameter|informational) \"memory_opatch_$p\"" || fail "parameter memory_opatch_$p is not listed"
done
patchers=$(OMPI_MCA_mca_base_component_path=$(path_with "$components") "$OPAL_TEST_OMPI_INFO" --param patcher all 2>&1)
for c in opatch_overwrite opatch_linux; do
    echo "$patchers" | grep -q "MCA patcher: $c " || fail "patcher/$c is not listed"
done
"$OPAL_TEST_OMPI_INFO" --param memory all 2>&1 | grep -q "opatch" && fail "memory/opatch is listed without our directory on the path"
# The alternative without a parameter: ~/.openmpi/components, on Open MPI's default path.
home=$tests/home
rm -rf "$home" && mkdir -p "$home/.openmpi/components" && cp "$components"/mca_*.so "$home/.openmpi/components/" || exit 1
HOME=$home "$OPAL_TEST_OMPI_INFO" --param memory all 2>&1 | grep -q "MCA memory: opatch" ||
    fail "memory/opatch is not listed from ~/.openmpi/components"
rm -rf "$home"
exit $status
