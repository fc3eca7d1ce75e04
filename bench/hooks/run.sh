#!/bin/bash
# bench/hooks: the cost of the hooks per operation, bare versus each
# component with one empty callback.
#  (a) ns per operation, interleaved in one run, as ratios;
#  (b) user-space instructions per operation from callgrind: the difference
#      between two loop lengths, so that setup cost cancels out.
# In a cross build (configure found an emulator, OPAL_TEST_EMULATOR) there is
# no callgrind and qemu-user's clock says nothing of the target: (a) is left
# out, and (b) counts the guest instructions qemu executes instead (one
# instruction per translation block, every block logged: -singlestep
# -d exec,nochain), the same difference of two loop lengths.
# Usage: bench/hooks/run.sh BUILDDIR
set -euo pipefail
build=${1:?usage: run.sh BUILDDIR}
bench="$build/bench/hooks/hooks_bench"
export OMPI_MCA_mca_base_component_path="$build/.libs"
# Under callgrind the overwrite patcher must be told to patch anyway (the
# benchmark is single-threaded).
export OMPI_MCA_patcher_overwrite_valgrind=1
run() { "$build/libtool" --mode=execute "$@"; }
emulator=$(sed -n 's/^OPAL_TEST_EMULATOR = //p' "$build/Makefile")

if [ -z "$emulator" ]; then
    echo "== (a) time, interleaved"
    run "$bench" time 15
    echo
    echo "== (b) instructions per operation (callgrind, N=4000 vs 8000)"
else
    echo "== (b) guest instructions per operation ($emulator, N=4000 vs 8000)"
fi
ops="munmap_einval mmap_munmap_4k mmap_munmap_1m malloc_free_256k malloc_free_64"
targets=(40 50 50 60 10)
count() { # config op n -> total Ir
    local out; out=$(mktemp)
    if [ -n "$emulator" ]; then
        # shellcheck disable=SC2086 # the emulator's words
        run $emulator -singlestep -d exec,nochain -D "$out" "$bench" count "$1" "$2" "$3" ||
            { rm -f "$out"; return 1; }
        grep -c '^Trace' "$out"
        rm -f "$out"
        return
    fi
    run valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        "$bench" count "$1" "$2" "$3" >"$out" 2>&1 || { cat "$out" >&2; rm -f "$out"; return 1; }
    grep -oE 'Collected : [0-9]+' "$out" | awk '{print $3}'
    rm -f "$out"
}
printf "%-18s %8s %8s %8s %8s %8s %8s\n" op bare linux +linux overwrite +overw target
i=0
# A component that cannot set up here (one that declines on this
# architecture, say) is shown as "-".
for op in $ops; do
    declare -A per
    for config in bare linux overwrite; do
        if a=$(count $config $op 4000 2>/dev/null) && b=$(count $config $op 8000 2>/dev/null); then
            per[$config]=$(( (b - a) / 4000 ))
        else
            per[$config]=-
        fi
    done
    added() { [ "${per[$1]}" = - ] && echo - || echo $(( per[$1] - per[bare] )); }
    printf "%-18s %8s %8s %8s %8s %8s %8s\n" "$op" "${per[bare]}" "${per[linux]}" "$(added linux)" \
        "${per[overwrite]}" "$(added overwrite)" "<= ${targets[$i]}"
    i=$((i + 1))
done
