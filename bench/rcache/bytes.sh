#!/bin/sh
# Bytes grdma holds per registration beyond the caller's struct (the B/reg column), each
# N in a fresh process and a fresh cache of N one-page registrations:
#   bench/rcache/bytes.sh [BUILDDIR] [N...]
# The N default to the sizes where the cache's memory steps: past each doubling of the page
# index's table (3/4 of its slots used) and past the small slabs (2.5 MiB, 40 320
# registrations of 64 bytes, then a 2 MiB huge-page slab), and the decades between.
builddir=${1:-.}
[ $# -gt 0 ] && shift
ns=${*:-"10000 12289 24577 30000 40321 45000 49153 70000 98305 100000 196609 300000 393217 1000000"}
export OMPI_MCA_mca_base_component_path="$builddir/.libs"
printf "%9s %6s\n" N B/reg
worst=0
for n in $ns; do
    out=$("$builddir/bench/rcache/rcache_bench" --bytes "$n") || exit 1
    printf "%9s %6s\n" $out
    worst=$(echo "$out $worst" | awk '{print ($2 > $3) ? $2 : $3}')
done
echo "most: $worst"
