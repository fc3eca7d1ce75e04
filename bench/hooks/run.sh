#!/bin/bash
# bench/hooks: the cost of the hooks per operation, bare versus each
# component with one empty callback.
#  (a) ns per operation, interleaved in one run, as ratios;
#  (b) user-space instructions per operation from callgrind: the difference
#      between two loop lengths, so that setup cost cancels out.
# Usage: bench/hooks/run.sh BUILDDIR
set -euo pipefail
build=${1:?usage: run.sh BUILDDIR}
bench="$build/bench/hooks/hooks_bench"
export OMPI_MCA_mca_base_component_path="$build/.libs"
# Under callgrind the overwrite patcher must be told to patch anyway (the
# benchmark is single-threaded).
export OMPI_MCA_patcher_overwrite_valgrind=1
run() { "$build/libtool" --mode=execute "$@"; }

echo "== (a) time, interleaved"
run "$bench" time 15

echo
echo "== (b) instructions per operation (callgrind, N=4000 vs 8000)"
ops="munmap_einval mmap_munmap_4k mmap_munmap_1m malloc_free_256k malloc_free_64"
targets=(40 50 50 60 10)
count() { # config op n -> total Ir
    local out; out=$(mktemp)
    run valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        "$bench" count "$1" "$2" "$3" >"$out" 2>&1 || { cat "$out" >&2; rm -f "$out"; return 1; }
    grep -oE 'Collected : [0-9]+' "$out" | awk '{print $3}'
    rm -f "$out"
}
printf "%-18s %8s %8s %8s %8s %8s %8s\n" op bare linux +linux overwrite +overw target
i=0
status=0
for op in $ops; do
    declare -A per
    for config in bare linux overwrite; do
        a=$(count $config $op 4000); b=$(count $config $op 8000)
        per[$config]=$(( (b - a) / 4000 ))
    done
    dl=$(( per[linux] - per[bare] )); dow=$(( per[overwrite] - per[bare] ))
    t=${targets[$i]}
    printf "%-18s %8d %8d %8d %8d %8d %8s\n" "$op" "${per[bare]}" "${per[linux]}" "$dl" "${per[overwrite]}" "$dow" "<= $t"
    i=$((i + 1))
done
