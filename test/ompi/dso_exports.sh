#!/bin/sh
# Each Open MPI component exports its component struct and nothing else
# (our copy of opal-patcher inside it is all local), binds immediately,
# and takes what it needs of Open MPI from the running libopen-pal.
. "$OPAL_TEST_SRCDIR/test/ompi/ompi_test_env.sh"
for c in memory_opatch patcher_opatch_overwrite patcher_opatch_linux; do
    so=$components/mca_$c.so
    [ -e "$so" ] || { fail "$so was not built"; continue; }
    exported=$(nm -D --defined-only "$so" | awk '{print $3}')
    [ "$exported" = "mca_${c}_component" ] || fail "$so exports more than its struct: $(echo $exported)"
    readelf -d "$so" | grep -q "FLAGS.*BIND_NOW" || fail "$so is not linked with immediate binding (-z now)"
    readelf -d "$so" | grep -q "NEEDED.*libopen-pal" || fail "$so does not name libopen-pal"
    # The glue's calls reach Open MPI's functions, not our functions of the same names.
    for sym in opal_output mca_base_component_var_register; do
        nm -D --undefined-only "$so" | grep -qw "$sym" || fail "$so does not take $sym from libopen-pal"
    done
    case $c in memory_*)
        for sym in opal_mem_hooks_release_hook opal_mem_hooks_set_support; do
            nm -D --undefined-only "$so" | grep -qw "$sym" || fail "$so does not take $sym from libopen-pal"
        done ;;
    esac
done
[ $status -eq 0 ] && echo "each component exports only its struct, binds now, and uses libopen-pal's functions"
exit $status
