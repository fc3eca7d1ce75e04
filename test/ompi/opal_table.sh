#!/bin/sh
# OPAL only (test/ompi/opal_hooks): under glibc's malloc, jemalloc,
# tcmalloc and mimalloc (LD_PRELOAD), with Open MPI's memory/patcher (the
# control) and with ours, memory/opatch, in each of its mechanisms.  Ours
# must give exactly one callback with the exact range, before the release,
# for every case, and leave everything as it was at close; the stock
# component must at least catch a plain munmap under glibc (else the
# harness is broken).  The table of what each one catches is written to
# test/ompi/opal_table.md and must be the one in README.md.
. "$OPAL_TEST_SRCDIR/test/ompi/ompi_test_env.sh"
need_allocators
table=$tests/opal_table.md
runs=$tests/opal_table.runs
: >"$runs"

# run ALLOC CONFIG: one opal_hooks run; its lines, prefixed, into $runs.
run() {
    alloc=$1 config=$2
    eval lib=\$$alloc
    case $config in
    stock) memory=patcher mechanism="" ;;
    overwrite | linux) memory=opatch mechanism=$config ;;
    esac
    out=$(env LD_PRELOAD="$lib" OMPI_MCA_memory=$memory OMPI_MCA_memory_opatch_patcher="$mechanism" \
              OMPI_MCA_mca_base_component_path="$(path_with "$components")" \
              "$tests/opal_hooks" "$tests/libunmapper.so" 2>&1)
    rc=$?
    echo "$out" | sed "s/^/$alloc $config: /" >>"$runs"
    [ $rc -eq 0 ] || fail "$alloc $config: the harness failed (exit $rc): $out"
    echo "$out" | grep -q "^selected $memory," || fail "$alloc $config: Open MPI did not select memory/$memory"
    # The support level Open MPI sees is what ours delivers: free, munmap and chunk events.
    [ $memory = patcher ] || echo "$out" | grep -q "^selected opatch, support 0x7$" ||
        fail "$alloc $config: memory/opatch did not set support level 0x7"
}

for alloc in glibc jemalloc tcmalloc mimalloc; do
    for config in stock overwrite linux; do
        run $alloc $config
    done
done
# Ours installs only what Open MPI will keep: under tcmalloc, outranked by
# memory/patcher, munmap is missed as the stock component alone misses it.
out=$(env LD_PRELOAD="$tcmalloc" OMPI_MCA_memory_patcher_priority=95 \
          OMPI_MCA_mca_base_component_path="$(path_with "$components")" \
          "$tests/opal_hooks" "$tests/libunmapper.so" 2>&1)
echo "$out" | grep -q "^selected patcher," && echo "$out" | grep -q "^case munmap MISSED" &&
    echo "$out" | grep -q "^restored yes" ||
    fail "memory/opatch outranked by memory/patcher (priority 95) left hooks behind or broke the run: $out"

# verdict ALLOC CONFIG CASE: caught, MISSED, WRONG; or yes/NO for "restored".
verdict() {
    if [ "$3" = restored ]; then
        sed -n "s/^$1 $2: restored \([a-zA-Z]*\) .*/\1/p" "$runs"
    else
        sed -n "s/^$1 $2: case $3 \([a-zA-Z]*\) .*/\1/p" "$runs"
    fi
}
cell() {
    case "$1" in
    caught) echo caught ;;
    yes) echo yes ;;
    MISSED) echo "**missed**" ;;
    NO) echo "**no**" ;;
    WRONG) if grep -q "^$2 $3: case $4 WRONG .*after the release" "$runs"; then echo "**late**"; else echo "**wrong range**"; fi ;;
    *) echo "?" ;;
    esac
}

cases="munmap mremap mmap_fixed madvise_dontneed shmdt sbrk_shrink thread_munmap dlopen_munmap dlmopen_munmap restored"
{
    echo "| release (stock / ours) | glibc | jemalloc | tcmalloc | mimalloc |"
    echo "| --- | --- | --- | --- | --- |"
    for c in $cases; do
        case $c in
        restored) label="all as before after close" ;;
        *) label=$(echo "$c" | sed 's/_/ /g; s/^mmap fixed$/mmap(MAP_FIXED) over pages/; s/^madvise dontneed$/madvise(MADV_DONTNEED)/;
                                  s/^sbrk shrink$/sbrk shrinking the heap/; s/^thread munmap$/munmap in another thread/;
                                  s/^dlopen munmap$/munmap by a dlopened library/; s/^dlmopen munmap$/munmap in a dlmopen namespace/') ;;
        esac
        line="| $label |"
        for alloc in glibc jemalloc tcmalloc mimalloc; do
            stock=$(cell "$(verdict $alloc stock $c)" $alloc stock $c)
            ours=$(cell "$(verdict $alloc overwrite $c)" $alloc overwrite $c)
            linux=$(cell "$(verdict $alloc linux $c)" $alloc linux $c)
            [ "$linux" = "$ours" ] || ours="$ours (linux: $linux)"
            line="$line $stock / $ours |"
            for config in overwrite linux; do
                v=$(verdict $alloc $config $c)
                [ "$v" = caught ] || [ "$v" = yes ] || fail "$alloc, memory/opatch ($config): $c: ${v:-no result}"
            done
        done
        echo "$line"
    done
} >"$table"
[ "$(verdict glibc stock munmap)" = caught ] ||
    fail "the control, Open MPI's memory/patcher, missed a plain munmap under glibc: the harness is broken"

cat "$table"
# The README shows this table, between these two lines.
readme=$OPAL_TEST_SRCDIR/README.md
sed -n '/^<!-- begin: test\/ompi\/opal_table.sh -->$/,/^<!-- end: test\/ompi\/opal_table.sh -->$/p' "$readme" |
    sed '1d;$d' >"$tests/opal_table.readme"
if ! cmp -s "$table" "$tests/opal_table.readme"; then
    fail "README.md does not show the table this run produced (diff README run):"
    diff "$tests/opal_table.readme" "$table"
fi
[ $status -ne 0 ] && { echo "--- the runs:"; cat "$runs"; }
exit $status
